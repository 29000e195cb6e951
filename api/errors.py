"""Errors of the HTTP service, and how every failure becomes a JSON error body.

Error tree::

    ApiError            a request the service refuses: HTTP status, the field at fault, a message
    ├── Unauthorized    401: no bearer token, or an unknown one
    ├── Forbidden       403: the read-only token on a write
    └── NotFound        404: no such job or plan

Every error response has one shape, ``{"error": {"field": "points[3].loss", "message": "..."}}``
(``field`` is ``""`` when no single field is at fault). FastAPI's validation errors (422), Starlette's
routing errors (404, 405) and the body-size limit (413) are rendered the same way. A user mistake is
always a 4xx; a 500 means a bug, and its body says no more than "internal error".
"""

from __future__ import annotations

import json
import logging
import re
import sys
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from planner.errors import field_path, first_error, unknown_field

log = logging.getLogger("flowplan.api")

_NAMED = re.compile(r"^([A-Za-z_][\w.\[\]]*): (.+)$", re.S)


class ErrorDetail(BaseModel):
    field: str = Field(description="Path of the offending field (e.g. 'points[3].loss'); empty when none applies.")
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class ApiError(Exception):
    status = 400

    def __init__(self, message: str, field: str = "", status: int | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.headers = headers
        if status is not None:
            self.status = status


class Unauthorized(ApiError):
    status = 401

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


def error_response(status: int, message: str, field: str = "", headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"field": field, "message": message}}, status_code=status, headers=headers)


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str, allow_nan=True)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_validation(errors: list[Any]) -> tuple[str, str]:
    """(field, message) of the first of pydantic/FastAPI's errors (an unknown field first), in the
    CLI's style."""
    err = first_error(errors)
    loc = tuple(err.get("loc", ()))
    kind = err.get("type", "")
    if loc and loc[0] in ("body", "query", "path", "header"):
        loc = loc[1:]
    if kind == "extra_forbidden" and loc:
        stripped = [{**e, "loc": tuple(e.get("loc", ()))[1:]} for e in errors]
        return field_path(loc), unknown_field(loc, stripped)
    msg = str(err.get("msg", "invalid"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind == "json_invalid":
        detail = (err.get("ctx") or {}).get("error", "")
        pos = f" at character {loc[0]}" if loc and isinstance(loc[0], int) else ""
        return "", f"not valid JSON{pos}: {detail or msg}"
    if kind == "missing" and not loc:
        return "", "a JSON body is required"
    # Cross-field checks (model validators) name their own field: "points[3].step: needs ...".
    named = _NAMED.match(msg)
    if named is not None:
        prefix = field_path(loc)
        inner = named.group(1)
        return (f"{prefix}.{inner}" if prefix and not inner.startswith("[") else prefix + inner), named.group(2)
    value = err.get("input")
    shown = "" if kind == "missing" or isinstance(value, dict | list) else f" (got {_short(value)})"
    more = f"; {len(errors) - 1} more error(s)" if len(errors) > 1 else ""
    return field_path(loc), f"{msg}{shown}{more}"


def _unparsable(cause: BaseException | None) -> str:
    """Why FastAPI's ``json.loads`` of a body failed (``cause``: what it raised), in the words
    ``planner.parse_snapshot`` uses for the same body posted to ``/v1/plan``."""
    if isinstance(cause, RecursionError):
        return "nested too deeply"
    if isinstance(cause, UnicodeDecodeError):
        return str(cause)
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return "the body could not be decoded"


def install_handlers(app: FastAPI, count_error: Any) -> None:
    """Render every failure as the one error shape; ``count_error(status)`` feeds the metrics."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        count_error(exc.status)
        return error_response(exc.status, exc.message, exc.field, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        count_error(422)
        field, message = describe_validation(list(exc.errors()))
        return error_response(422, message, field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            # FastAPI's answer to a body its json.loads failed on other than by a syntax error (bad
            # UTF-8, nested too deeply, a too long integer): a malformed body like any other.
            count_error(422)
            return error_response(422, f"not valid JSON: {_unparsable(exc.__cause__)}")
        count_error(exc.status_code)
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        if exc.status_code == 404 and message == "Not Found":
            message = f"no such endpoint: {request.method} {request.url.path}"
        return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        count_error(500)
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error (a bug: see the service log)")
