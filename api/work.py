"""What the service's worker processes run (:mod:`api.pool` sends it there): plans and live predictions.

Every function here is module-level and takes and returns picklable values, as the ``spawn`` start
method needs. The planner stays a pure function: a worker passes its last result as ``previous``,
which only lends the model fits of jobs whose inputs did not change and never changes a plan
(``planner.plan``); ``plan`` checks every plan with the independent checker before returning it, so
a plan leaves the worker checked.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from multiprocessing.connection import wait
from typing import Any

from api.forecast import live_predictions
from api.schemas import LivePredictions
from planner import PlannerConfig, PlanResult, plan
from planner.plan import Plan
from planner.snapshot import MetricPoint, QoETarget, Snapshot


class _WarmStart:
    """This process's last plan result: the fits the next plan may reuse (one per worker process)."""

    last: PlanResult | None = None


def warm_up() -> None:
    """A worker's initializer: the imports above are done by now (this module is loaded to call it).

    Ctrl-C in a terminal reaches the whole process group: ignored here, the service shuts its workers
    down itself. A service killed outright (SIGKILL, the OOM killer) cannot: the worker then exits as
    soon as its parent is gone, instead of waiting forever on a queue whose writing end it holds too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), name="parent-watch", daemon=True).start()


def _exit_with(parent_sentinel: int) -> None:
    wait([parent_sentinel])
    os._exit(0)


def plan_snapshot(snapshot: Snapshot, config: PlannerConfig) -> Plan:
    """``planner.plan`` with this worker's previous result as the warm start; the checked plan."""
    result = plan(snapshot, config, previous=_WarmStart.last)
    _WarmStart.last = result
    return result.plan


def predict_job(
    job_id: str, history: list[MetricPoint], target: QoETarget | None, spec: dict[str, Any] | None
) -> LivePredictions:
    """:func:`api.forecast.live_predictions` (it fits the job's curves)."""
    return live_predictions(job_id, history, target, spec)
