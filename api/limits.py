"""Request body size limit, as plain ASGI middleware (it must see the bytes before any parsing).

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
