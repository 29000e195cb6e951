"""CPU work off the event loop: a pool of worker processes and the bounded queue in front of it.

Planning (and a job's live predictions, which fit its curves) runs in worker processes, so the event
loop that answers ``/healthz``, ``/metrics`` and ingestion is never held by a solve, and two cores plan
two snapshots at once (threads could not: the fits and the model build hold the GIL).

- **Workers.** ``workers`` single-process ``ProcessPoolExecutor`` s, started with the ``spawn`` method
  (the service runs threads and an SQLite connection, which a forked child must not inherit). Each
  imports the planner once at start-up, ignores Ctrl-C (the service stops it), runs ``nice`` steps
  below the service process (on a busy CPU the event loop comes first), and keeps the model fits of
  the jobs it planned, across clusters, up to ``fit_cache_jobs`` (:class:`api.work.FitCache`), as the
  warm start of later plans of the same job inputs. A request takes the idle worker that finished
  most recently, so a lone client that plans one cluster again and again (the daemon) keeps meeting
  its own warm fits; under concurrent clients a cluster is fitted once in each worker that plans it.
  Warm fits never change a plan (``planner.plan``).
- **The bounded queue.** At most ``workers + queue`` requests are admitted at once (running, or
  waiting for a worker). One more is refused at once with **429** and ``Retry-After``: the service is
  healthy but busy, the client should back off (a load balancer must not take a 429 for a dead
  replica). While the service shuts down, or when a worker died under a request, the answer is
  **503** with ``Retry-After``: this replica cannot serve it now, another (or this one restarted) can.
  Both use the service's error body and are counted in ``flowplan_rejected_total{reason}``.
- **Retry-After** is the expected wait for a free worker: the mean duration of recent work times the
  admitted requests per worker, rounded up to whole seconds (at least 1).
- **Shutdown** (the app's lifespan): new work gets 503, the executors are shut down (queued work is
  cancelled, running work finishes) and their processes joined.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, TypeVar

from api.errors import ApiError
from api.metrics import ServiceMetrics
from api.work import FIT_CACHE_JOBS, warm_up

T = TypeVar("T")

#: Weight of the newest duration in the running mean behind ``Retry-After``.
_EWMA = 0.2


class Busy(ApiError):
    """429: every worker is busy and the queue is full."""

    status = 429


class Unavailable(ApiError):
    """503: shutting down, or a worker died under the request."""

    status = 503


class _Worker:
    """One worker process (a one-process executor): requests are sent to a chosen worker."""

    def __init__(self, index: int, fit_cache_jobs: int, nice: int) -> None:
        self.index = index
        self.initargs = (fit_cache_jobs, nice)
        self.executor = self._start()

    def _start(self) -> ProcessPoolExecutor:
        spawn = multiprocessing.get_context("spawn")
        return ProcessPoolExecutor(1, mp_context=spawn, initializer=warm_up, initargs=self.initargs)

    def restart(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.executor = self._start()


class WorkerPool:
    """``workers`` worker processes behind a queue of at most ``queue`` waiting requests; see the module."""

    def __init__(
        self, workers: int, queue: int, metrics: ServiceMetrics, fit_cache_jobs: int = FIT_CACHE_JOBS, nice: int = 0
    ) -> None:
        if workers < 1 or queue < 0:
            raise ValueError(f"workers must be >= 1 and queue >= 0 (got {workers}, {queue})")
        self.workers = workers
        self.queue = queue
        self.fit_cache_jobs = fit_cache_jobs
        self.nice = nice
        self.metrics = metrics
        self.admitted = 0
        self.closing = False
        self.mean_seconds = 1.0  # until something has run: a guess of one solve at the default limit
        self._all: list[_Worker] = []
        self._idle: asyncio.LifoQueue[_Worker] | None = None
        metrics.workers.set(workers)

    @property
    def limit(self) -> int:
        """Requests admitted at once: one per worker running, ``queue`` waiting."""
        return self.workers + self.queue

    def retry_after(self) -> int:
        per_worker = max(self.admitted, 1) / self.workers
        return max(1, math.ceil(self.mean_seconds * per_worker))

    def start(self) -> None:
        """Create the workers (idempotent; the first request calls it when no lifespan did) and let each
        import the planner now rather than at its first request."""
        if self._idle is not None:
            return
        self._idle = asyncio.LifoQueue()
        for i in range(self.workers):
            worker = _Worker(i, self.fit_cache_jobs, self.nice)
            worker.executor.submit(int)  # starts the process: its initializer imports the planner
            self._all.append(worker)
            self._idle.put_nowait(worker)

    def _shutting_down(self) -> ApiError:
        return self._refuse(Unavailable, "shutting_down", "the service is shutting down; retry on another replica or later")

    def _refuse(self, status: type[ApiError], reason: str, message: str) -> ApiError:
        self.metrics.rejected.labels(reason=reason).inc()
        return status(message, "", headers={"Retry-After": str(self.retry_after())})

    @contextmanager
    def admit(self) -> Iterator[None]:
        """Admit one request for the length of the block, or raise :class:`Busy` / :class:`Unavailable`
        at once. Taken before the body is parsed, so a refused request costs nothing more."""
        if self.closing:
            raise self._shutting_down()
        if self.admitted >= self.limit:
            raise self._refuse(
                Busy,
                "queue_full",
                f"all {self.workers} planning worker(s) are busy and {self.queue} request(s) wait; retry later",
            )
        self.admitted += 1
        self.metrics.in_flight.set(self.admitted)
        try:
            yield
        finally:
            self.admitted -= 1
            self.metrics.in_flight.set(self.admitted)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker process, once one is free (call it inside :meth:`admit`). ``fn`` and
        its arguments must pickle (``spawn``)."""
        self.start()
        assert self._idle is not None
        worker = await self._idle.get()
        if self.closing:  # woken by close(): pass the wake-up on to the next waiter
            self._idle.put_nowait(worker)
            raise self._shutting_down()
        return await self._on(worker, fn, args)

    async def _on(self, worker: _Worker, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        loop = asyncio.get_running_loop()
        idle = self._idle
        assert idle is not None
        t0 = time.perf_counter()
        try:
            future: Future[T] = worker.executor.submit(fn, *args)
        except BrokenProcessPool:  # it died after its last work: a fresh one takes this request
            self._restart(worker, worker.executor)
            future = worker.executor.submit(fn, *args)
        executor = worker.executor

        def done(_: Future[T]) -> None:
            # The worker is free when its work ends, even if the request was cancelled meanwhile.
            seconds = time.perf_counter() - t0
            loop.call_soon_threadsafe(self._free, worker, seconds)

        future.add_done_callback(done)
        try:
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:
            self._restart(worker, executor)
            raise self._refuse(Unavailable, "worker_lost", "a planning worker stopped under this request; retry it") from None

    def _free(self, worker: _Worker, seconds: float) -> None:
        self.mean_seconds += _EWMA * (seconds - self.mean_seconds)
        if self._idle is not None:
            self._idle.put_nowait(worker)

    def _restart(self, worker: _Worker, broken: ProcessPoolExecutor) -> None:
        if not self.closing and worker.executor is broken:  # not restarted already by another request
            worker.restart()
            worker.executor.submit(int)

    async def close(self) -> None:
        """Refuse new work, cancel what waits, let running work end, join the processes."""
        self.closing = True
        workers, self._all = self._all, []
        if self._idle is not None and workers:
            self._idle.put_nowait(workers[0])  # wakes a request waiting for a worker: it answers 503

        def shutdown() -> None:
            for worker in workers:
                worker.executor.shutdown(wait=True, cancel_futures=True)

        await asyncio.to_thread(shutdown)
