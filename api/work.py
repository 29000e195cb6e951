"""What the service's worker processes run (:mod:`api.pool` sends it there): plans and live predictions.

Every function here is module-level and takes and returns picklable values, as the ``spawn`` start
method needs. The planner stays a pure function: a worker lends it the model fits it kept from
earlier plans (:class:`FitCache`), which are used only for jobs whose inputs did not change and
never change a plan (``planner.plan``); ``plan`` checks every plan with the independent checker
before returning it, so a plan leaves the worker checked.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import threading
from collections import OrderedDict
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from api.forecast import live_predictions
from api.schemas import LivePredictions
from api.settings import DEFAULT_FIT_CACHE_JOBS
from planner import PlannerConfig, PlanResult, plan
from planner.outlook import JobOutlook
from planner.plan import SolverReport
from planner.snapshot import MetricPoint, QoETarget, Snapshot

#: Model fits a worker keeps by default, in jobs (``FLOWPLAN_FIT_CACHE_JOBS``).
FIT_CACHE_JOBS = DEFAULT_FIT_CACHE_JOBS


class FitCache:
    """One worker process's model fits, keyed by job input digest (``planner.plan``'s ``fits``), across
    every cluster it planned, least recently used first: the clients take turns on the workers, so a
    worker that kept only its last plan's fits would rarely meet the same cluster next."""

    def __init__(self, limit: int = FIT_CACHE_JOBS) -> None:
        #: Jobs kept at most (least recently used dropped first), but never fewer than the last plan's.
        self.limit = limit
        self.fits: OrderedDict[str, JobOutlook] = OrderedDict()

    def plan(self, snapshot: Snapshot, config: PlannerConfig) -> tuple[PlanResult, int, int]:
        """``planner.plan`` lent these fits; the result, and how many of its jobs' fits were found here
        (hits) and how many were fitted (misses). The plan's fits are kept, newest last."""
        result = plan(snapshot, config, fits=self.fits)
        hits = 0
        for digest, outlook in result.outlooks.values():
            hits += digest in self.fits
            self.fits[digest] = outlook
            self.fits.move_to_end(digest)
        while len(self.fits) > max(self.limit, len(result.outlooks)):
            self.fits.popitem(last=False)
        return result, hits, len(result.outlooks) - hits


_FITS = FitCache()


def warm_up(fit_cache_jobs: int = FIT_CACHE_JOBS, nice: int = 0) -> None:
    """A worker's initializer: the imports above are done by now (this module is loaded to call it);
    what they loaded is frozen out of the garbage collector's full collections (``gc.freeze``, as in
    ``flowplan serve``); its fit cache keeps ``fit_cache_jobs`` jobs, and it runs ``nice`` steps below the service process
    (``os.nice``), so that a CPU shared with plans serves health, metrics and ingestion first.

    Ctrl-C in a terminal reaches the whole process group: ignored here, the service shuts its workers
    down itself. A service killed outright (SIGKILL, the OOM killer) cannot: the worker then exits as
    soon as its parent is gone, instead of waiting forever on a queue whose writing end it holds too."""
    _FITS.limit = fit_cache_jobs
    gc.collect()
    gc.freeze()  # the imports live as long as the worker: kept out of every full collection (as the service)
    if nice > 0:
        os.nice(nice)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), name="parent-watch", daemon=True).start()


def _exit_with(parent_sentinel: int) -> None:
    wait([parent_sentinel])
    os._exit(0)


@dataclass(frozen=True)
class PlannedJson:
    """A checked plan as the service stores and answers it: its JSON, dumped once, here in the worker
    (the service process would otherwise unpickle the model, then dump it twice: once for the store and
    once for the answer), with the few fields the service reads."""

    plan_json: str
    time: float
    digest: str
    solver: SolverReport
    hits: int
    misses: int


def plan_snapshot(snapshot_json: str, config: PlannerConfig) -> PlannedJson:
    """``planner.plan`` of the (validated) snapshot, lent this worker's cached fits (:class:`FitCache`):
    the checked plan, and the jobs whose fits were reused and fitted.

    The snapshot comes as its JSON: dumping and re-validating it costs less than pickling the model
    both ways (50 jobs: 1 ms + 3-6 ms against 5 ms + 8 ms), and the dump is what the service process
    pays for. The contract holds finite floats only, so the round trip gives the same snapshot."""
    result, hits, misses = _FITS.plan(Snapshot.model_validate_json(snapshot_json), config)
    p = result.plan
    return PlannedJson(p.model_dump_json(), p.time, p.snapshot_digest, p.solver, hits, misses)


def predict_job(
    job_id: str, history: list[MetricPoint], target: QoETarget | None, spec: dict[str, Any] | None
) -> LivePredictions:
    """:func:`api.forecast.live_predictions` (it fits the job's curves)."""
    return live_predictions(job_id, history, target, spec)
