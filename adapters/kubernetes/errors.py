"""Errors of the Kubernetes adapter, and how API errors map to the adapter protocol's error kinds.

Error tree::

    KubernetesAdapterError      base; carries ``kind``, one of the protocol's ErrorKind values
    ├── kind "forbidden"        401/403: the daemon's credentials may not do this (RBAC, a bad token)
    ├── kind "not_found"        404: the pod (or node) is gone
    ├── kind "conflict"         409: a stale resourceVersion, a pod already bound, a name taken
    ├── kind "invalid"          400/422: the server refused the request as invalid (a resize that would
    │                           change the QoS class, a field out of range)
    ├── kind "transient"        429, 5xx, a timeout, a resize the node reports Infeasible: try again later
    └── kind "engine_down"      the API server cannot be reached at all (connection refused, DNS)
    AnnotationError             a pod's ``flowplan.io/*`` annotations cannot be parsed (the pod is
                                left unmanaged; never raised out of ``observe``)

Every ``kubernetes`` / ``urllib3`` exception is translated once, in :func:`classify`, and raised
again with ``raise ... from exc`` so the server's own message stays in the chain.
"""

from __future__ import annotations

import json

from adapters.base import ErrorKind


class KubernetesAdapterError(Exception):
    """An API operation failed; ``kind`` says how the control loop should treat it."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message


def classify(exc: BaseException) -> tuple[ErrorKind, str]:
    """The protocol's error kind for an exception from the ``kubernetes`` client, and a one-line message."""
    import urllib3.exceptions
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, KubernetesAdapterError):
        return exc.kind, exc.message
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        text = f"{status} {_reason(exc)}"
        if status in (401, 403):
            return "forbidden", text
        if status == 404:
            return "not_found", text
        if status == 409:
            return "conflict", text
        if status in (400, 422):
            return "invalid", text
        if status == 0:
            return "engine_down", f"API server unreachable: {_first_line(exc)}"
        return "transient", text
    if isinstance(exc, urllib3.exceptions.MaxRetryError | urllib3.exceptions.NewConnectionError | ConnectionError):
        return "engine_down", f"API server unreachable: {_first_line(getattr(exc, 'reason', None) or exc)}"
    if isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError):
        return "transient", f"API server timed out: {_first_line(exc)}"
    if isinstance(exc, urllib3.exceptions.HTTPError):
        return "engine_down", f"API server unreachable: {_first_line(exc)}"
    return "transient", f"{type(exc).__name__}: {_first_line(exc)}"


def translate(exc: BaseException) -> KubernetesAdapterError:
    kind, message = classify(exc)
    return KubernetesAdapterError(kind, message)


def _reason(exc: object) -> str:
    """The server's ``Status.message`` when the body is one, else the HTTP reason."""
    body = getattr(exc, "body", None)
    if body:
        try:
            message = json.loads(body).get("message")
            if message:
                return _first_line(message)
        except (ValueError, AttributeError):
            pass
    return _first_line(getattr(exc, "reason", None) or exc)


def _first_line(obj: object) -> str:
    text = str(obj).strip()
    return text.splitlines()[0] if text else type(obj).__name__
