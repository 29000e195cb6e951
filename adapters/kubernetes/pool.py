"""A bounded pool of threads for the Kubernetes adapter's API calls: changes and log reads at once.

Most of an interval's time at scale is waiting for the API server (a Binding, a resize, a log read
is one round trip each, milliseconds of work for the server). The adapter therefore runs them up to
``size`` at once on a ``concurrent.futures.ThreadPoolExecutor`` (the standard library's pool: no
hand-written queue), started on first use and shut down by :meth:`CallPool.close`. The
``kubernetes`` client's ``ApiClient`` is safe to call from several threads (urllib3's connection
pool hands each request its own connection); :func:`widen_connections` makes that pool as large as
this one, so that no connection is opened and thrown away per call.

Tasks must not raise (the adapter turns every error into an outcome first); one that does is
raised by :meth:`CallPool.map` after every task has ended. Tasks must not use the pool themselves
(a task waiting on the pool it runs in could wait for ever): only the adapter's top level does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: API calls at once, by default (``flowplan daemon --api-threads``).
DEFAULT_SIZE = 16
#: The most threads a pool may have.
MAX_SIZE = 256


class CallPool:
    """Runs a function over items, up to ``size`` at once; ``size`` 1 runs them in this thread, in order."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MAX_SIZE:
            raise ValueError(f"api threads: must be a whole number from 1 to {MAX_SIZE} ({size!r})")
        self.size = size
        self._executor: ThreadPoolExecutor | None = None

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``[fn(item) for item in items]``, up to ``size`` at once; the results in the items' order."""
        todo = list(items)
        if self.size == 1 or len(todo) <= 1:
            return [fn(item) for item in todo]
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="flowplan-k8s")
        futures = [self._executor.submit(fn, item) for item in todo]
        wait(futures)  # every task ends before any error is raised: none is left running unseen
        return [f.result() for f in futures]

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


def widen_connections(api_client: Any, size: int) -> None:
    """Let ``api_client`` keep ``size`` connections to the server open (the client's default is
    5 per CPU): more threads than kept connections would open a new TLS connection per call, and
    urllib3 would warn "Connection pool is full" for each. A client that has enough is left alone."""
    cfg = getattr(api_client, "configuration", None)
    if cfg is None or (cfg.connection_pool_maxsize or 0) >= size:
        return
    from kubernetes.client import rest

    cfg.connection_pool_maxsize = size
    old = api_client.rest_client
    api_client.rest_client = rest.RESTClientObject(cfg)
    old.close()
