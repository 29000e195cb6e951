"""Service settings: tokens, body limit, planner defaults. Read from the environment by ``from_env``.

Environment variables:

- ``FLOWPLAN_TOKEN``: bearer token that may read and write;
- ``FLOWPLAN_READ_TOKEN``: bearer token that may only read;
- ``FLOWPLAN_MAX_BODY_BYTES``: largest accepted request body (default 8 MiB);
- ``FLOWPLAN_PLAN_WORKERS``: worker processes that plan and predict (default: the CPUs this process
  may use);
- ``FLOWPLAN_PLAN_QUEUE``: requests that may wait for a busy worker before the service answers 429
  (default: as many as there are workers). See :mod:`api.pool`;
- ``FLOWPLAN_FIT_CACHE_JOBS``: jobs whose model fits each worker keeps for later plans (default
  10,000; 0 keeps only the last plan's). See :class:`api.work.FitCache`;
- ``FLOWPLAN_PLAN_NICE``: how many ``nice`` steps the workers run below the service process (0-19,
  default 10), so that on a busy CPU health, metrics and ingestion come before plans.

With neither token set the service is open, and ``flowplan serve`` binds to a loopback address only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from planner.config import SolverName

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
#: A fit with a short history is ~17 KiB (measured on 50-job workload snapshots): ~170 MiB a worker.
DEFAULT_FIT_CACHE_JOBS = 10_000
DEFAULT_PLAN_NICE = 10


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS and Windows have no affinity call
        return max(1, os.cpu_count() or 1)


def _whole(env: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    raw = env.get(name)
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}: not an integer ({raw!r})") from None
    if not low <= value <= high:
        raise SettingsError(f"{name}: must be between {low} and {high} (got {value})")
    return value


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


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
    #: Host names a request may address (``Host`` header, port ignored); None: any. ``flowplan serve``
    #: sets the loopback names and its bound address in open mode (no token), against DNS rebinding.
    allowed_hosts: tuple[str, ...] | None = None
    #: Worker processes for plans and predictions; None: one per usable CPU (:func:`usable_cpus`).
    plan_workers: int | None = None
    #: Requests that may wait for a busy worker; None: as many as there are workers. One more gets a 429.
    plan_queue: int | None = None
    #: Jobs whose model fits each worker keeps (least recently used dropped; never the last plan's).
    fit_cache_jobs: int = DEFAULT_FIT_CACHE_JOBS
    #: ``nice`` steps the workers run below the service process (the event loop first on a busy CPU).
    plan_nice: int = DEFAULT_PLAN_NICE

    @property
    def workers(self) -> int:
        return self.plan_workers if self.plan_workers is not None else usable_cpus()

    @property
    def queue(self) -> int:
        return self.plan_queue if self.plan_queue is not None else self.workers

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
        limit = _whole(env, "FLOWPLAN_MAX_BODY_BYTES", 1024, 1024**3)
        return cls(
            write_token=write,
            read_token=read,
            max_body_bytes=_or(limit, DEFAULT_MAX_BODY_BYTES),
            plan_workers=_whole(env, "FLOWPLAN_PLAN_WORKERS", 1, 256),
            plan_queue=_whole(env, "FLOWPLAN_PLAN_QUEUE", 0, 100_000),
            fit_cache_jobs=_or(_whole(env, "FLOWPLAN_FIT_CACHE_JOBS", 0, 10_000_000), DEFAULT_FIT_CACHE_JOBS),
            plan_nice=_or(_whole(env, "FLOWPLAN_PLAN_NICE", 0, 19), DEFAULT_PLAN_NICE),
        )
