"""Request limits, as plain ASGI middleware (they must act before any parsing): the body size
limit, and the guard against cross-site writes and DNS rebinding (:class:`RequestGuard`).

A declared ``Content-Length`` above the limit is refused at once; a chunked body is counted as it
arrives and refused when it crosses the limit (an ``HTTPException(413)`` raised from ``receive``, which
FastAPI passes through to the error handlers). Either way the answer is a 413 in the service's error
shape, and the body is never buffered beyond the limit.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, on_reject: Callable[[], None] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_reject = on_reject

    @property
    def message(self) -> str:
        return f"request body larger than the limit of {self.max_bytes} bytes"

    async def _reject(self, send: Send) -> None:
        if self.on_reject is not None:
            self.on_reject()
        body = json.dumps({"error": {"field": "", "message": self.message}}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._reject(send)
                    return
        seen = 0

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise HTTPException(413, self.message)
            return message

        await self.app(scope, counted_receive, send)


def _reply(status: int, field: str, message: str) -> list[Message]:
    body = json.dumps({"error": {"field": field, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return [{"type": "http.response.start", "status": status, "headers": headers}, {"type": "http.response.body", "body": body}]


class RequestGuard:
    """What keeps a browser from using the service on a user's behalf (plain ASGI middleware).

    - Every write with a body (POST, PUT, PATCH) must say ``Content-Type: application/json`` (415 if
      not). A page on another site can only send a cross-site "simple" request (``text/plain``,
      form encodings) without the browser asking first, and the service answers no CORS preflight,
      so a cross-site write never arrives.
    - With ``allowed_hosts`` set (``flowplan serve`` sets it in open mode: the loopback names and
      the bound address), a request whose ``Host`` is another name is refused (400): a DNS-rebinding
      page reaches the socket under its own name and is turned away.
    """

    WRITES = frozenset({"POST", "PUT", "PATCH"})

    def __init__(
        self, app: ASGIApp, allowed_hosts: tuple[str, ...] | None = None, on_reject: Callable[[int], None] | None = None
    ) -> None:
        self.app = app
        self.allowed = None if allowed_hosts is None else frozenset(h.lower().strip("[]") for h in allowed_hosts)
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for k, v in scope.get("headers", []):
            headers.setdefault(k.lower(), v)  # the first of a repeated header, as the app reads it (Starlette)
        refusal = self._refusal(scope["method"], headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        if self.on_reject is not None:
            self.on_reject(refusal[0])
        for message in _reply(*refusal):
            await send(message)

    def _refusal(self, method: str, headers: dict[bytes, bytes]) -> tuple[int, str, str] | None:
        if self.allowed is not None:
            host = headers.get(b"host", b"").decode("latin-1").lower()
            name = host[1 : host.index("]")] if host.startswith("[") and "]" in host else host.rsplit(":", 1)[0]
            if name not in self.allowed:
                names = ", ".join(sorted(self.allowed))
                return 400, "host", f"Host {host!r} is not this service's address (open mode answers only {names})"
        if method in self.WRITES:
            kind = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
            # What FastAPI parses as JSON: application/json and application/*+json.
            if kind != "application/json" and not (kind.startswith("application/") and kind.endswith("+json")):
                return 415, "content-type", f"writes need Content-Type: application/json (got {kind or 'none'!r})"
        return None
