"""CPU work off the event loop: a pool of worker processes and the bounded queue in front of it.

Planning (and a job's live predictions, which fit its curves) runs in worker processes, so the event
loop that answers ``/healthz``, ``/metrics`` and ingestion is never held by a solve, and two cores plan
two snapshots at once (threads could not: the fits and the model build hold the GIL).

- **Workers.** ``workers`` single-process ``ProcessPoolExecutor`` s, started with the ``spawn`` method
  (the service runs threads and an SQLite connection, which a forked child must not inherit). Each
  imports the planner once at start-up, ignores Ctrl-C (the service stops it), runs ``nice`` steps
  below the service process (on a busy CPU the event loop comes first), and keeps the model fits of
  the jobs it planned, across clusters, up to ``fit_cache_jobs`` (:class:`api.work.FitCache`), as the
  warm start of later plans of the same job inputs. Warm fits never change a plan (``planner.plan``).
- **Routing by the jobs a worker planned.** The pool keeps, per worker, the job ids it planned, the
  most recent ``fit_cache_jobs`` of them (``jobs=`` of :meth:`WorkerPool.run`), as the worker's own
  fit cache keeps their fits. An arriving request takes the idle worker that planned most of its
  jobs (ties: the one that finished most recently, so a lone client, the daemon, keeps meeting its
  own warm fits); a freed worker goes to the waiting request that it planned most of (ties: the one
  waiting longest). A worker is never left idle while a request waits; the routing only chooses
  among what is free, so that under concurrent clients a cluster is fitted again in another worker
  less often (a plan that fits 50 jobs takes about twice a warm one, and the plans queued behind it
  wait for that). A cluster planned by both workers is warm in both, and either takes it.
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
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
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
        self._started = False
        self._idle: list[_Worker] = []  # the most recently freed last
        self._waiting: list[tuple[tuple[str, ...], asyncio.Future[_Worker]]] = []  # the longest waiting first
        # Per worker, the job ids it planned, least recently first (at most ``fit_cache_jobs``, as its fits).
        self._planned_by: list[OrderedDict[str, None]] = [OrderedDict() for _ in range(workers)]
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
        if self._started:
            return
        self._started = True
        for i in range(self.workers):
            worker = _Worker(i, self.fit_cache_jobs, self.nice)
            worker.executor.submit(int)  # starts the process: its initializer imports the planner
            self._all.append(worker)
            self._idle.append(worker)

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

    async def run(self, fn: Callable[..., T], *args: Any, jobs: Sequence[str] = ()) -> T:
        """``fn(*args)`` in a worker process, once one is free (call it inside :meth:`admit`); ``jobs``:
        the job ids it works on, which route it (see the module). ``fn`` and its arguments must pickle
        (``spawn``)."""
        self.start()
        if self.closing:
            raise self._shutting_down()
        wanted = tuple(jobs)
        worker = self._take(wanted)
        if worker is None:
            entry = (wanted, asyncio.get_running_loop().create_future())
            self._waiting.append(entry)
            self.metrics.waiting.set(len(self._waiting))
            try:
                worker = await entry[1]
            except asyncio.CancelledError:
                if entry in self._waiting:
                    self._waiting.remove(entry)
                    self.metrics.waiting.set(len(self._waiting))
                elif entry[1].done() and not entry[1].cancelled() and entry[1].exception() is None:
                    self._hand_on(entry[1].result())  # given a worker as it was cancelled: pass it on
                raise
            if self.closing:  # given a worker just before close(): the executors are shutting down
                raise self._shutting_down()
        planned = self._planned_by[worker.index]
        for job in wanted:
            planned[job] = None
            planned.move_to_end(job)
        while len(planned) > max(self.fit_cache_jobs, len(wanted)):
            planned.popitem(last=False)
        return await self._on(worker, fn, args)

    def _planned(self, worker: _Worker, jobs: tuple[str, ...]) -> int:
        """How many of ``jobs`` ``worker`` planned (among the ones its fit cache keeps)."""
        planned = self._planned_by[worker.index]
        return sum(1 for job in jobs if job in planned)

    def _take(self, jobs: tuple[str, ...]) -> _Worker | None:
        """The idle worker that planned most of ``jobs`` (ties: the most recently freed), taken; None: none is idle."""
        if not self._idle:
            return None
        best = max(range(len(self._idle)), key=lambda i: (self._planned(self._idle[i], jobs), i))
        return self._idle.pop(best)

    def _hand_on(self, worker: _Worker) -> None:
        """A free ``worker`` to the waiting request it planned most of (ties: the longest waiting), or idle."""
        self._waiting = [(jobs, f) for jobs, f in self._waiting if not f.done()]
        if not self._waiting:
            self.metrics.waiting.set(0)
            self._idle.append(worker)
            return
        best = max(range(len(self._waiting)), key=lambda i: (self._planned(worker, self._waiting[i][0]), -i))
        _, future = self._waiting.pop(best)
        self.metrics.waiting.set(len(self._waiting))
        future.set_result(worker)

    async def _on(self, worker: _Worker, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        loop = asyncio.get_running_loop()
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
        if not self.closing:
            self._hand_on(worker)

    def _restart(self, worker: _Worker, broken: ProcessPoolExecutor) -> None:
        if not self.closing and worker.executor is broken:  # not restarted already by another request
            worker.restart()
            self._planned_by[worker.index].clear()  # a fresh process: no fits
            worker.executor.submit(int)

    async def close(self) -> None:
        """Refuse new work, cancel what waits, let running work end, join the processes."""
        self.closing = True
        workers, self._all = self._all, []
        waiting, self._waiting = self._waiting, []
        self.metrics.waiting.set(0)
        for _, future in waiting:  # each request waiting for a worker answers 503
            if not future.done():
                future.set_exception(self._shutting_down())

        def shutdown() -> None:
            for worker in workers:
                worker.executor.shutdown(wait=True, cancel_futures=True)

        await asyncio.to_thread(shutdown)
