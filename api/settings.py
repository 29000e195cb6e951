"""Service settings: tokens, body limit, planner defaults. Read from the environment by ``from_env``.

Environment variables:

- ``FLOWPLAN_TOKEN``: bearer token that may read and write;
- ``FLOWPLAN_READ_TOKEN``: bearer token that may only read;
- ``FLOWPLAN_MAX_BODY_BYTES``: largest accepted request body (default 8 MiB).

With neither token set the service is open, and ``flowplan serve`` binds to a loopback address only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from planner.config import SolverName

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


class SettingsError(ValueError):
    """A setting with a bad value (the message names the variable and the value)."""


@dataclass(frozen=True)
class ApiSettings:
    write_token: str | None = None
    read_token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: Planner defaults for ``POST /v1/plan`` (a request may override them within the limits below).
    solver: SolverName = "cpsat"
    time_limit: float = 1.0
    max_time_limit: float = 30.0
    #: Largest batch of metric points per request.
    max_points_per_batch: int = 100_000
    #: Host names a request may address (``Host`` header, port ignored); None: any. ``flowplan serve``
    #: sets the loopback names and its bound address in open mode (no token), against DNS rebinding.
    allowed_hosts: tuple[str, ...] | None = None

    @property
    def open_access(self) -> bool:
        """No token configured: anyone who can connect may read and write."""
        return self.write_token is None and self.read_token is None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiSettings:
        env = os.environ if env is None else env
        write = env.get("FLOWPLAN_TOKEN") or None
        read = env.get("FLOWPLAN_READ_TOKEN") or None
        if write is not None and read is not None and write == read:
            raise SettingsError("FLOWPLAN_READ_TOKEN: must differ from FLOWPLAN_TOKEN (a read-only token that can write)")
        raw = env.get("FLOWPLAN_MAX_BODY_BYTES")
        limit = DEFAULT_MAX_BODY_BYTES
        if raw:
            try:
                limit = int(raw)
            except ValueError:
                raise SettingsError(f"FLOWPLAN_MAX_BODY_BYTES: not an integer ({raw!r})") from None
            if not 1024 <= limit <= 1024**3:
                raise SettingsError(f"FLOWPLAN_MAX_BODY_BYTES: must be between 1024 and 1073741824 (got {limit})")
        return cls(write_token=write, read_token=read, max_body_bytes=limit)
