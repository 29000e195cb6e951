"""Observed speeds per job, with what the job trains (``task``) and runs (``image``), so that a new
job can borrow the speed of similar ones until its own is observed (``planner.snapshot.SpeedPrior``).

Writers (the Docker adapter) call :meth:`SpeedRecords.record_speeds` whenever a job's speed points,
progress or state change; readers ask :meth:`SpeedRecords.speed_prior` for a job without a speed of
its own. Tables: ``speeds`` and ``speed_jobs`` (migrations 4 and 5, :mod:`store.migrations`). A speed
keeps the replicas and nodes it was measured with (``SpeedPoint.replicas`` / ``.nodes``; replicas
not said: the job's own count), so a gang's speeds at several counts are kept apart and a borrower
scales each to its own count (:func:`planner.progress.job_speed`).

Who may lend (:func:`lends`): a job that finished, or that has done at least
:data:`PRIOR_MIN_EPOCHS` epochs (its speed has seen a whole epoch, evaluation included), with at
least one speed point. Which ones (:func:`prior_from`): the same task first; only when no job of the
task can lend (or the job has no task), the same image; the :data:`PRIOR_MAX_JOBS` most recently
updated lenders, all their points (at most ``MAX_PRIOR_POINTS``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from planner.snapshot import MAX_PRIOR_POINTS, SpeedPoint, SpeedPrior
from store.backend import Backend

#: A running job lends its speed once it has done this many epochs (a finished one always does).
PRIOR_MIN_EPOCHS = 1.0
#: The most jobs one prior borrows from (the newest ones).
PRIOR_MAX_JOBS = 5


@dataclass(frozen=True)
class SpeedRecord:
    """One job's observed speeds and what makes another job similar to it."""

    job: str
    task: str | None
    image: str | None
    epochs: float
    finished: bool
    updated: float
    points: tuple[SpeedPoint, ...]
    #: The learning-rate schedule it declared and its planned epochs (:func:`declared_json`), or ``None``.
    schedule: str | None = None


def declared_json(schedule: BaseModel | None, max_epochs: float | None) -> str | None:
    """How a job's declared schedule and planned epochs are kept (``None``: it declared none)."""
    if schedule is None:
        return None
    return json.dumps({"schedule": schedule.model_dump(mode="json"), "max_epochs": max_epochs}, sort_keys=True)


def lends(record: SpeedRecord, min_epochs: float = PRIOR_MIN_EPOCHS) -> bool:
    """Whether ``record``'s speed may be borrowed: it has points and finished or ran ``min_epochs``."""
    return bool(record.points) and (record.finished or record.epochs >= min_epochs)


def prior_from(
    records: Iterable[SpeedRecord],
    *,
    task: str | None,
    image: str | None,
    exclude: str,
    min_epochs: float = PRIOR_MIN_EPOCHS,
    max_jobs: int = PRIOR_MAX_JOBS,
) -> SpeedPrior | None:
    """The prior for a job of ``task`` / ``image`` (not ``exclude``, itself) from ``records``; see the module docstring."""
    usable = list({r.job: r for r in records if r.job != exclude and lends(r, min_epochs)}.values())  # each job once
    for basis, key in (("task", task), ("image", image)):
        if key is None:
            continue
        same = [r for r in usable if (r.task if basis == "task" else r.image) == key]
        if not same:
            continue
        same.sort(key=lambda r: (-r.updated, r.job))
        chosen = same[:max_jobs]
        points = [p for r in chosen for p in r.points][:MAX_PRIOR_POINTS]
        return SpeedPrior(basis=basis, key=key, jobs=[r.job for r in chosen], points=points)  # type: ignore[arg-type]
    return None


class SpeedRecords:
    """The speed part of :class:`store.state.StateStore` (a mixin: it uses the store's connection and lock)."""

    def _write(self) -> AbstractContextManager[Backend]:
        raise NotImplementedError  # StateStore's: one write transaction

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError  # StateStore's: one read under its lock

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
        """Replace ``job``'s speed points and what it trains / runs, its epochs done, whether it finished
        and the schedule it declared (:func:`declared_json`). Two writers of one job take turns: the
        upsert of its ``speed_jobs`` row locks the row."""
        now = time.time()
        with self._write() as db:
            db.execute(
                "INSERT INTO speed_jobs (job, task, image, epochs, finished, updated, schedule) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (job) DO UPDATE SET task = excluded.task, image = excluded.image, "
                "epochs = excluded.epochs, finished = excluded.finished, updated = excluded.updated, "
                "schedule = excluded.schedule",
                (job, task, image, float(epochs), int(finished), now, schedule),
            )
            db.execute("DELETE FROM speeds WHERE job = ?", (job,))
            if points:
                db.executemany(
                    "INSERT INTO speeds (job, cpu_millis, gpus, replicas, nodes, seconds_per_epoch) VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (job, cpu_millis, gpus, replicas, nodes) "
                    "DO UPDATE SET seconds_per_epoch = excluded.seconds_per_epoch",
                    [(job, p.cpu_millis, p.gpus, p.replicas or 0, p.nodes, p.seconds_per_epoch) for p in points],
                )

    def speed_record(self, job: str) -> SpeedRecord | None:
        """What :meth:`record_speeds` last stored for ``job``."""
        records = self._records("WHERE job = ?", (job,))
        return records[0] if records else None

    def speed_prior(self, *, task: str | None, image: str | None, exclude: str) -> SpeedPrior | None:
        """Speeds of jobs like this one (:func:`prior_from`), or ``None`` when no similar job can lend."""
        if task is None and image is None:
            return None
        lender = "(finished = 1 OR epochs >= ?) AND job != ? AND EXISTS (SELECT 1 FROM speeds s WHERE s.job = speed_jobs.job)"
        found: list[SpeedRecord] = []
        for column, key in (("task", task), ("image", image)):
            if key is not None:
                found += self._records(
                    f"WHERE {column} = ? AND {lender} ORDER BY updated DESC, job LIMIT ?",
                    (key, PRIOR_MIN_EPOCHS, exclude, PRIOR_MAX_JOBS),
                )
        return prior_from(found, task=task, image=image, exclude=exclude)

    def _records(self, where: str, params: Sequence[Any]) -> list[SpeedRecord]:
        rows = self._read(f"SELECT job, task, image, epochs, finished, updated, schedule FROM speed_jobs {where}", params)
        out = []
        for job, task, image, epochs, finished, updated, schedule in rows:
            pts = self._read(
                "SELECT cpu_millis, gpus, replicas, nodes, seconds_per_epoch FROM speeds WHERE job = ? "
                "ORDER BY cpu_millis, gpus, replicas, nodes",
                (job,),
            )
            points = tuple(
                SpeedPoint(cpu_millis=c, gpus=g, replicas=r or None, nodes=n, seconds_per_epoch=s) for c, g, r, n, s in pts
            )
            out.append(SpeedRecord(job, task, image, float(epochs), bool(finished), float(updated), points, schedule))
        return out
