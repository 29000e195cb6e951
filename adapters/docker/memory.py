"""Where the adapter keeps metric histories and its own small state between intervals.

The daemon passes the state store (``store.StateStore``), so a restarted daemon keeps
every history and reads no log twice; without one, :class:`MemoryStore` keeps the same in memory.
Keys the adapter writes (values are JSON):

- ``docker.log.<container id>``: the log cursor (last consumed timestamp);
- ``docker.spec.<job>``: host, container id, state and the parts of ``inspect`` a re-create needs;
- ``docker.jobs``: every job id ever seen (to find the jobs of a host that is down);
- ``docker.speed.<job>``: observed seconds per epoch per CPU actually used (millicores, 50m grid);
- ``docker.delivered.<job>``: the job reported its tier-1 delivery;
- ``docker.declared.<job>``: what the job declared in its log (planned epochs, schedule).

The Kubernetes adapter keeps the same per-pod and per-job log state under ``k8s.log.<pod UID>``,
``k8s.delivered.<job>`` and ``k8s.declared.<job>`` (``adapters.docker.progress.LogProgress``).

Besides, the adapter records each job's speed points with its task and image
(:meth:`ProgressStore.record_speeds`, the store's ``speeds`` tables, not the key-value table), and
asks for the speeds of similar jobs for a job without one (:meth:`ProgressStore.speed_prior`) and for
the curves of the finished runs of a task (:meth:`ProgressStore.task_curves`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from planner.snapshot import MetricPoint, SpeedPoint, SpeedPrior, TaskCurves
from store import SpeedRecord, prior_from, task_curves_from


class ProgressStore(Protocol):
    def add_points(self, job: str, points: Sequence[MetricPoint]) -> tuple[int, int]: ...

    def history(self, job: str) -> list[MetricPoint]: ...

    def get_kv(self, key: str) -> str | None: ...

    def set_kv(self, key: str, value: str) -> None: ...

    def record_speeds(
        self,
        job: str,
        points: Sequence[SpeedPoint],
        *,
        task: str | None,
        image: str | None,
        epochs: float,
        finished: bool,
        schedule: str | None = None,
    ) -> None: ...

    def speed_prior(self, *, task: str | None, image: str | None, exclude: str) -> SpeedPrior | None: ...

    def task_curves(self, task: str) -> TaskCurves | None: ...


class MemoryStore:
    """A :class:`ProgressStore` in memory; points are idempotent by (job, epoch), like the SQLite store."""

    def __init__(self) -> None:
        self._points: dict[str, dict[float, MetricPoint]] = {}
        self._kv: dict[str, str] = {}
        self._speeds: dict[str, SpeedRecord] = {}

    def add_points(self, job: str, points: Sequence[MetricPoint]) -> tuple[int, int]:
        mine = self._points.setdefault(job, {})
        inserted = 0
        for p in points:
            if p.epoch not in mine:
                mine[p.epoch] = p
                inserted += 1
        return inserted, len(points) - inserted

    def history(self, job: str) -> list[MetricPoint]:
        mine = self._points.get(job, {})
        return [mine[e] for e in sorted(mine)]

    def get_kv(self, key: str) -> str | None:
        return self._kv.get(key)

    def set_kv(self, key: str, value: str) -> None:
        self._kv[key] = value

    def record_speeds(
        self,
        job: str,
        points: Sequence[SpeedPoint],
        *,
        task: str | None,
        image: str | None,
        epochs: float,
        finished: bool,
        schedule: str | None = None,
    ) -> None:
        self._speeds[job] = SpeedRecord(job, task, image, float(epochs), finished, time.time(), tuple(points), schedule)

    def speed_prior(self, *, task: str | None, image: str | None, exclude: str) -> SpeedPrior | None:
        return prior_from(self._speeds.values(), task=task, image=image, exclude=exclude)

    def task_curves(self, task: str) -> TaskCurves | None:
        finished = sorted((r for r in self._speeds.values() if r.task == task and r.finished), key=lambda r: (-r.updated, r.job))
        return task_curves_from(((r.job, self.history(r.job), r.schedule) for r in finished), task=task)
