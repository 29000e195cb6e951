"""Errors of the Docker adapter, and how engine errors map to the adapter protocol's error kinds.

Error tree::

    DockerAdapterError          base; carries ``kind``, one of the protocol's ErrorKind values
    ├── kind "not_found"        the container (or its image) is gone: 404 from the engine
    ├── kind "conflict"         the engine refused a change that clashes with the container's state
    │                           (409; "Conflicting options" such as a CFS quota update on a ``--cpus``
    │                           container; a name already in use)
    ├── kind "transient"        a timeout, a 5xx, a job that did not checkpoint in time: try again later
    ├── kind "engine_down"      the engine cannot be reached at all (socket missing, connection refused)
    └── kind "invalid"          a request the adapter should never have made (400 other than conflicts)
    LabelError                  a container's ``flowplan.*`` labels cannot be parsed (the container is
                                left unmanaged; never raised out of ``observe``)

Every docker-py / requests exception is translated once, in :func:`translate`, with
``raise ... from exc`` so the engine's own message stays in the chain.
"""

from __future__ import annotations

from adapters.base import ErrorKind


class DockerAdapterError(Exception):
    """An engine operation failed; ``kind`` says how the control loop should treat it."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message


class LabelError(ValueError):
    """A ``flowplan.*`` label has a value that cannot be used (the message names the label and value)."""


def classify(exc: BaseException) -> tuple[ErrorKind, str]:
    """The protocol's error kind for an exception raised by docker-py or requests, and a one-line message."""
    import docker.errors
    import requests.exceptions

    if isinstance(exc, DockerAdapterError):
        return exc.kind, exc.message
    if isinstance(exc, docker.errors.NotFound):
        return "not_found", _explain(exc)
    if isinstance(exc, docker.errors.APIError):
        status = exc.status_code or 0
        text = _explain(exc)
        if status == 409 or "conflict" in text.lower():
            return "conflict", text
        if status >= 500 or status in (408, 429):
            return "transient", text
        return "invalid", text
    if isinstance(exc, requests.exceptions.ReadTimeout | requests.exceptions.Timeout):
        return "transient", f"engine timed out: {exc}"
    if isinstance(exc, requests.exceptions.ConnectionError | FileNotFoundError | ConnectionError):
        return "engine_down", f"engine unreachable: {_first_line(exc)}"
    if isinstance(exc, docker.errors.DockerException):
        text = _first_line(exc)
        if "connection" in text.lower() or "no such file" in text.lower():
            return "engine_down", f"engine unreachable: {text}"
        return "invalid", text
    return "transient", f"{type(exc).__name__}: {_first_line(exc)}"


def translate(exc: BaseException) -> DockerAdapterError:
    kind, message = classify(exc)
    return DockerAdapterError(kind, message)


def _explain(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    if explanation:
        text = explanation.decode() if isinstance(explanation, bytes) else str(explanation)
        return _first_line(text)
    return _first_line(exc)


def _first_line(obj: object) -> str:
    text = str(obj).strip()
    return text.splitlines()[0] if text else type(obj).__name__
