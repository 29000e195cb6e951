"""Learning curves of finished runs, so that a new job of the same task gets them as the prior of its
curve (``planner.snapshot.CurveReferences``, the job's ``curve_prior``).

Nothing is stored twice: a run's curve is its points (the ``points`` table, as the adapters record
them), and what it trained and whether it finished are in ``speed_jobs`` (:mod:`store.speeds`; the
Docker adapter records every job there that has speed points or finished).

Who lends (:func:`curve_prior_from`): the jobs of the same task that finished, not the job itself,
with at least ``MIN_REFERENCE_POINTS`` points of the metric the borrower is judged on (its loss, or
its quality metric: the ``points`` column); the :data:`CURVE_PRIOR_MAX_RUNS` most recently updated
ones. A run still training does not lend: the prior's curve stays at a reference's last value beyond
its end, so a run cut short would read as a plateau. A run longer than ``MAX_REFERENCE_POINTS`` is
thinned evenly (first and last point kept).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from planner.snapshot import MAX_REFERENCE_POINTS, MIN_REFERENCE_POINTS, CurvePoint, CurveReferences, ReferenceRun

#: The most finished runs one curve prior carries (the newest ones).
CURVE_PRIOR_MAX_RUNS = 8

#: Which column of a point a curve is read from: the loss, or the quality metric.
Column = Literal["loss", "metric"]


def curve_prior_from(
    runs: Iterable[tuple[str, Sequence[tuple[float, float]]]], *, task: str, exclude: str, max_runs: int = CURVE_PRIOR_MAX_RUNS
) -> CurveReferences | None:
    """The prior for a job of ``task`` (not ``exclude``, itself) from finished ``runs`` of that task,
    newest first, each ``(job, [(epoch, value), ...])``; ``None`` when none has enough points."""
    chosen: list[ReferenceRun] = []
    seen: set[str] = set()
    for job, points in runs:
        if job == exclude or job in seen or len(points) < MIN_REFERENCE_POINTS:
            continue
        seen.add(job)
        pts = sorted(points)
        if len(pts) > MAX_REFERENCE_POINTS:
            last = len(pts) - 1
            pts = [pts[round(k * last / (MAX_REFERENCE_POINTS - 1))] for k in range(MAX_REFERENCE_POINTS)]
        chosen.append(ReferenceRun(job=job, points=[CurvePoint(epoch=e, value=v) for e, v in pts]))
        if len(chosen) >= max_runs:
            break
    return CurveReferences(key=task, runs=chosen) if chosen else None


class CurveRecords:
    """The curve part of :class:`store.state.StateStore` (a mixin: it uses the store's connection and lock)."""

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError  # StateStore's: one read under its lock

    def curve_prior(self, *, task: str | None, column: Column, exclude: str) -> CurveReferences | None:
        """Curves of finished runs of ``task`` on ``column`` (:func:`curve_prior_from`), or ``None``."""
        if task is None:
            return None
        if column not in ("loss", "metric"):
            raise ValueError(f"column: expected 'loss' or 'metric', got {column!r}")
        # Twice the runs wanted: some may lack points on this column.
        jobs = [
            row[0]
            for row in self._read(
                "SELECT job FROM speed_jobs WHERE task = ? AND finished = 1 AND job != ? ORDER BY updated DESC, job LIMIT ?",
                (task, exclude, 2 * CURVE_PRIOR_MAX_RUNS),
            )
        ]
        runs = []
        for job in jobs:
            rows = self._read(f"SELECT epoch, {column} FROM points WHERE job = ? AND {column} IS NOT NULL ORDER BY epoch", (job,))
            runs.append((job, [(float(e), float(v)) for e, v in rows]))
        return curve_prior_from(runs, task=task, exclude=exclude)
