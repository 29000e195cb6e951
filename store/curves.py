"""Learning curves of finished runs, so that the jobs of the same task get them as the prior of their
curves (``planner.snapshot.TaskCurves``, the snapshot's ``curve_priors``).

Nothing is stored twice: a run's curve is its points (the ``points`` table, as the adapters record
them), and what it trained and whether it finished are in ``speed_jobs`` (:mod:`store.speeds`; the
adapters record there every job that has speed points or finished with a task).

Who lends (:func:`task_curves_from`): the jobs of the task that finished, with at least
``MIN_REFERENCE_POINTS`` points; the :data:`CURVE_PRIOR_MAX_RUNS` most recently updated ones. A run
still training does not lend: the prior's curve stays at a reference's last value beyond its end,
so a run cut short would read as a plateau. A run of more than :data:`CURVE_PRIOR_MAX_POINTS`
points is thinned evenly (first and last point kept). The planner leaves out a job's own run and
reads the column the job is judged on; a job that declares a learning-rate schedule reads only the
runs that declared the same one (``speed_jobs.schedule``, migration 6).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from planner.snapshot import MAX_REFERENCE_POINTS, MIN_REFERENCE_POINTS, CurvePoint, Job, MetricPoint, ReferenceRun, TaskCurves
from store.backend import Backend
from store.speeds import declared_json

#: Tasks whose last answer a store keeps (:meth:`CurveRecords.task_curves`), the oldest dropped first.
CURVE_CACHE_TASKS = 256
#: The most finished runs one task's curves hold (the newest ones).
CURVE_PRIOR_MAX_RUNS = 8
#: The most points kept of a run: enough for the prior, which smooths over 5 epochs, and few enough
#: that the snapshot (stored with every plan) stays about the size of its jobs' own histories.
CURVE_PRIOR_MAX_POINTS = min(200, MAX_REFERENCE_POINTS)


def thinned(points: Sequence[Any], most: int = CURVE_PRIOR_MAX_POINTS) -> list[Any]:
    """``points`` evenly thinned to ``most``, the first and last kept."""
    if len(points) <= most:
        return list(points)
    last = len(points) - 1
    return [points[round(k * last / (most - 1))] for k in range(most)]


def task_curves_from(
    runs: Iterable[tuple[str, Sequence[MetricPoint], str | None]], *, task: str, max_runs: int = CURVE_PRIOR_MAX_RUNS
) -> TaskCurves | None:
    """The curves of ``task`` from its finished ``runs``, newest first, each ``(job, points, declared)``
    (``declared``: its schedule and planned epochs as :func:`store.speeds.declared_json` keeps them);
    ``None`` when none has enough points."""
    chosen: list[ReferenceRun] = []
    seen: set[str] = set()
    for job, points, declared in runs:
        if job in seen or len(points) < MIN_REFERENCE_POINTS:
            continue
        seen.add(job)
        ordered = thinned(sorted(points, key=lambda p: p.epoch))
        said = json.loads(declared) if declared else {}
        run = {
            "job": job,
            "points": [CurvePoint(epoch=p.epoch, loss=p.loss, metric=p.metric) for p in ordered],
            "schedule": said.get("schedule"),
            "max_epochs": said.get("max_epochs"),
        }
        chosen.append(ReferenceRun.model_validate(run))
        if len(chosen) >= max_runs:
            break
    return TaskCurves(task=task, runs=chosen) if chosen else None


class CurveRecords:
    """The curve part of :class:`store.state.StateStore` (a mixin: it uses the store's connection and lock)."""

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError  # StateStore's: one read under its lock

    def history(self, job: str) -> list[MetricPoint]:
        raise NotImplementedError  # StateStore's

    def _by_ids(self, sql: str, ids: Sequence[str]) -> Iterator[list[Any]]:
        raise NotImplementedError  # StateStore's: the rows for ids, a chunk at a time

    def _write(self) -> AbstractContextManager[Backend]:
        raise NotImplementedError  # StateStore's: one write transaction

    def add_points(self, job: str, points: Sequence[MetricPoint]) -> tuple[int, int]:
        raise NotImplementedError  # StateStore's

    def record_finished_runs(self, jobs: Sequence[Job]) -> list[str]:
        """Keep the finished ``jobs`` of a posted snapshot that have a task and at least
        ``MIN_REFERENCE_POINTS`` points as runs of their task, so that later jobs of it get their
        curves: their points (idempotent, as an ingest) and their ``speed_jobs`` row, finished, with
        the schedule they declared. Its speeds, if a daemon recorded any, are left as they are; a job
        already kept as finished is not written again. Returns the jobs newly kept."""
        runs = [j for j in jobs if j.status == "finished" and j.task is not None and len(j.history) >= MIN_REFERENCE_POINTS]
        if not runs:
            return []
        sql = "SELECT job FROM speed_jobs WHERE finished = 1 AND job IN ({})"
        known = {row[0] for rows in self._by_ids(sql, [j.id for j in runs]) for row in rows}
        kept = []
        for job in runs:
            if job.id in known:
                continue
            self.add_points(job.id, job.history)
            planned = job.target.max_epochs if job.target is not None else None
            with self._write() as db:
                db.execute(
                    "INSERT INTO speed_jobs (job, task, image, epochs, finished, updated, schedule) VALUES (?, ?, ?, ?, 1, ?, ?) "
                    "ON CONFLICT (job) DO UPDATE SET task = excluded.task, epochs = excluded.epochs, finished = 1, "
                    "updated = excluded.updated, schedule = excluded.schedule",
                    (
                        job.id,
                        job.task,
                        job.image,
                        max(p.epoch for p in job.history),
                        time.time(),
                        declared_json(job.schedule, planned),
                    ),
                )
            kept.append(job.id)
        return kept

    def task_curves(self, task: str) -> TaskCurves | None:
        """Curves of the finished runs of ``task`` (:func:`task_curves_from`), or ``None``.

        Asked for every task at every interval (and plan request), while the runs rarely change: one
        query lists them with what would change them (when recorded, the schedule, how many points),
        and their histories are read again only when that list differs from the last answer's."""
        # Twice the runs wanted: some may have too few points.
        rows = self._read(
            "SELECT s.job, s.schedule, s.updated, (SELECT COUNT(*) FROM points p WHERE p.job = s.job) FROM speed_jobs s "
            "WHERE s.task = ? AND s.finished = 1 ORDER BY s.updated DESC, s.job LIMIT ?",
            (task, 2 * CURVE_PRIOR_MAX_RUNS),
        )
        key = tuple((job, declared, float(updated), int(n)) for job, declared, updated, n in rows)
        cache: dict[str, tuple[Any, TaskCurves | None]] = self.__dict__.setdefault("_task_curves", {})
        hit = cache.get(task)
        if hit is not None and hit[0] == key:
            return hit[1]
        got = task_curves_from(((job, self.history(job), declared) for job, declared, _, _ in key), task=task)
        if len(cache) >= CURVE_CACHE_TASKS:
            cache.pop(next(iter(cache)))
        cache[task] = (key, got)
        return got
