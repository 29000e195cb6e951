"""Bearer-token access: the write token may do everything, the read token may only read.

With no token configured every request is allowed (``flowplan serve`` then binds to loopback only).
With only a read token configured, reads need it and writes are refused. Tokens are compared in
constant time.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from api.errors import Forbidden, Unauthorized
from api.settings import ApiSettings


def _presented(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization header must be 'Bearer <token>'")
    return token.strip()


def _same(a: str, b: str | None) -> bool:
    return b is not None and hmac.compare_digest(a.encode(), b.encode())


def check_access(settings: ApiSettings, request: Request, *, write: bool) -> None:
    """Raise :class:`Unauthorized` (401) or :class:`Forbidden` (403) unless the request may proceed."""
    if settings.open_access:
        return
    token = _presented(request)
    if token is None:
        raise Unauthorized("a bearer token is required (Authorization: Bearer <token>)")
    if _same(token, settings.write_token):
        return
    if _same(token, settings.read_token):
        if write:
            raise Forbidden("the read-only token cannot write; use the read-write token (FLOWPLAN_TOKEN)")
        return
    raise Unauthorized("unknown bearer token")
