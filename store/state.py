"""The state store shared by the HTTP service and the daemon: a SQLite file, or a PostgreSQL database
that several service replicas and daemons share.

What it keeps: the jobs FlowPlan knows (with an optional spec), their metric history, their QoE
targets, the plans made, the actions the daemon set out to apply (for crash recovery), each job's
observed speeds with its task and image (:mod:`store.speeds`, for new jobs to borrow), the daemons'
leases and a small key-value table.

Where: ``StateStore("flowplan-state.db")`` opens (or creates) a SQLite file (:mod:`store.sqlite`);
``StateStore("postgresql://user@host/db")`` a PostgreSQL database (:mod:`store.postgres`). The API,
the SQL and the schema are the same; :mod:`store.backend` lists what differs.

Durability: a write is acknowledged (the method returns) only after its transaction committed; how
far a commit is synced is the backend's (SQLite: ``synchronous``; PostgreSQL: the server's).

Concurrency: one connection per :class:`StateStore`, guarded by a lock, so one instance may be shared
by threads. Several processes may open the same store. Every write is one transaction; a write that
reads before it writes is atomic with respect to every other writer (on SQLite all writers take
turns; on PostgreSQL the ones that could interfere do: see :mod:`store.backend`).

Idempotency: a metric point is keyed by (job, epoch); adding a point whose key is already stored
does nothing (the first write wins), so a client may retry a batch safely.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from planner.plan import Plan
from planner.snapshot import Job, MetricPoint, QoETarget, Snapshot
from store.backend import Backend, open_backend, redact
from store.curves import CurveRecords
from store.errors import MigrationError, SchemaTooNew
from store.migrations import MIGRATIONS
from store.speeds import SpeedRecords

ActionStatus = Literal["pending", "done", "failed"]

#: Job ids per ``IN (...)`` lookup (:meth:`StateStore.histories`, :meth:`StateStore.targets`): SQLite
#: before 3.32 allows 999 parameters in one statement.
IDS_PER_QUERY = 500

#: Registers a job by its id when it is not known yet (a metric point or a target names it).
_REGISTER_JOB = "INSERT INTO jobs (id, spec, fields, created, updated) VALUES (?, NULL, '{}', ?, ?) ON CONFLICT (id) DO NOTHING"


@dataclass(frozen=True)
class JobRecord:
    """A job the store knows: registered explicitly (``upsert_job``) or by its first metric point."""

    id: str
    spec: dict[str, Any] | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    updated: float = 0.0


@dataclass(frozen=True)
class ActionRecord:
    """One action the daemon set out to apply, and how it ended (``finished`` None: pending)."""

    id: int
    plan_id: int
    job: str
    kind: str
    payload: dict[str, Any]
    status: str
    message: str
    created: float  # wall clock (Unix time)
    finished: float | None
    plan_time: float  # the plan's own clock (the snapshot's time: Unix time live, simulated time in a simulation)


@dataclass(frozen=True)
class Lease:
    """A lease as :meth:`StateStore.acquire_lease` found it: ``held`` says whether the caller got it."""

    name: str
    holder: str
    expires: float
    held: bool


@dataclass(frozen=True)
class PointStats:
    """Summary of one job's stored history."""

    points: int
    first_epoch: float
    last_epoch: float
    last_time: float


def _statements(script: str) -> Iterator[str]:
    """Split a SQL script into complete statements (so they can run inside our own transaction;
    ``executescript`` would commit it). SQLite's lexer; the schema scripts use nothing it and
    PostgreSQL's would split differently."""
    buf = ""
    for piece in script.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \t\r\n;"):
                yield buf.strip()
            buf = ""
    if buf.strip(" \t\r\n;"):
        yield buf.strip()


class StateStore(SpeedRecords, CurveRecords):
    """The state store; see the module docstring. ``location`` is a SQLite file (``":memory:"`` for a
    private in-memory one) or a ``postgresql://`` URL.

    ``keep_plans`` / ``keep_snapshots`` bound what the plans take: each saved plan drops, in its own
    transaction, the plans older than the newest ``keep_plans`` (with their finished actions; a plan
    with a pending action is kept until the action ends, for crash recovery) and the snapshots of the
    plans older than the newest ``keep_snapshots`` (their plans stay, :meth:`plan_snapshot` answers
    None). ``None``: keep all (the default here; the daemon and the service bound both).

    ``synchronous`` is SQLite's durability (PostgreSQL's is the server's ``synchronous_commit``).
    ``busy_timeout`` is how long a writer waits for another's lock, in seconds. ``migrations``
    replaces :data:`store.migrations.MIGRATIONS` (tests). Raises :class:`store.errors.StoreError`
    for a database it cannot use (see :mod:`store.errors`) and ``OSError`` for a file it cannot create.
    """

    def __init__(
        self,
        location: str | Path,
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout: float = 10.0,
        migrations: Sequence[str] | None = None,
        keep_plans: int | None = None,
        keep_snapshots: int | None = None,
    ) -> None:
        for name, keep in (("keep_plans", keep_plans), ("keep_snapshots", keep_snapshots)):
            if keep is not None and keep < 1:
                raise ValueError(f"{name}: must be at least 1 (or None: keep all), got {keep}")
        #: The newest plans kept (older ones are deleted as new ones are saved); None: every plan.
        self.keep_plans = keep_plans
        #: The newest plans that keep their snapshot (older ones keep the plan only); None: every one.
        self.keep_snapshots = keep_snapshots
        self.path = str(location)
        #: The location as it may be printed (a URL's password hidden).
        self.location = redact(self.path)
        self._migrations = list(MIGRATIONS if migrations is None else migrations)
        self._lock = threading.RLock()
        self._db: Backend = open_backend(self.path, synchronous=synchronous, busy_timeout=busy_timeout)
        try:
            self._migrate()
        except BaseException:
            self._db.close()
            raise

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._db.dialect

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def ping(self) -> None:
        """Raise if the database does not answer (``/readyz``)."""
        self._read("SELECT 1")

    @contextmanager
    def _write(self) -> Iterator[Backend]:
        """One write transaction; committed when the block ends, rolled back if it raises."""
        with self._lock:
            self._db.begin()
            try:
                yield self._db
            except BaseException:
                self._db.rollback()
                raise
            self._db.commit()

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            return list(self._db.execute(sql, params).fetchall())

    # -- schema --------------------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        return int(self._read("SELECT version FROM schema_version")[0][0])

    def _migrate(self) -> None:
        known = len(self._migrations)
        with self._write() as db:
            db.serialize("schema")  # two processes opening a fresh database: one migrates, the other waits
            db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = db.execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                db.execute("INSERT INTO schema_version (version) VALUES (0)")
                version = 0
            else:
                version = int(row[0])
            if version > known:
                raise SchemaTooNew(self.location, version, known)
            for number in range(version, known):
                for statement in _statements(db.ddl(self._migrations[number])):
                    try:
                        db.execute(statement)
                    except db.error as exc:
                        reason = " ".join(str(exc).split())
                        raise MigrationError(
                            f"state store {self.location}: migration {number + 1} failed ({reason}); still at version {version}"
                        ) from exc
                db.execute("UPDATE schema_version SET version = ?", (number + 1,))

    # -- jobs ----------------------------------------------------------------------------------

    def upsert_job(self, job: str, *, spec: Job | Mapping[str, Any] | None = None, **fields: Any) -> JobRecord:
        """Register ``job`` or update it: ``spec`` (a :class:`Job`, stored without its history)
        replaces the stored one when given; ``fields`` (JSON values) are merged into the stored ones."""
        spec_json: str | None = None
        if isinstance(spec, Job):
            spec_json = spec.model_dump_json(exclude={"history"})
        elif spec is not None:
            spec_json = json.dumps({k: v for k, v in spec.items() if k != "history"}, allow_nan=False)
        extra = json.dumps(fields, allow_nan=False) if fields else None
        now = time.time()
        with self._write() as db:
            created = db.execute(
                "INSERT INTO jobs (id, spec, fields, created, updated) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (job, spec_json, extra or "{}", now, now),
            ).rowcount
            if not created:  # merge into the stored fields, which no other writer may change meanwhile
                row = db.execute(f"SELECT fields FROM jobs WHERE id = ?{db.row_lock}", (job,)).fetchone()
                merged = {**json.loads(row[0]), **fields} if fields else None
                db.execute(
                    "UPDATE jobs SET spec = COALESCE(?, spec), fields = COALESCE(?, fields), updated = ? WHERE id = ?",
                    (spec_json, json.dumps(merged) if merged is not None else None, now, job),
                )
            record = self._job_record(db, job)
        assert record is not None  # written just above, in the same transaction
        return record

    def job_record(self, job: str) -> JobRecord | None:
        with self._lock:
            return self._job_record(self._db, job)

    @staticmethod
    def _job_record(db: Backend, job: str) -> JobRecord | None:
        row = db.execute("SELECT id, spec, fields, created, updated FROM jobs WHERE id = ?", (job,)).fetchone()
        if row is None:
            return None
        id_, spec, fields, created, updated = row
        return JobRecord(id_, json.loads(spec) if spec is not None else None, json.loads(fields), created, updated)

    def job_ids(self) -> list[str]:
        return [r[0] for r in self._read("SELECT id FROM jobs ORDER BY id")]

    # -- metric history ------------------------------------------------------------------------

    def add_points(self, job: str, points: Sequence[MetricPoint]) -> tuple[int, int]:
        """Store a batch in one transaction; returns (inserted, duplicates). A point whose (job, epoch)
        is already stored, or repeated within the batch, is a duplicate and changes nothing."""
        # Ascending epochs (stable: the first of a repeated epoch stays first): writers of one job
        # that overlap lock its points in the same order, so two of them cannot deadlock.
        rows = sorted(((job, p.epoch, p.time, p.loss, p.metric) for p in points), key=lambda r: r[1])
        now = time.time()
        with self._write() as db:
            db.execute(_REGISTER_JOB, (job, now, now))
            inserted = (
                db.executemany(
                    "INSERT INTO points (job, epoch, time, loss, metric) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", rows
                )
                if rows
                else 0
            )
        return inserted, len(rows) - inserted

    def history(self, job: str) -> list[MetricPoint]:
        rows = self._read("SELECT time, epoch, loss, metric FROM points WHERE job = ? ORDER BY epoch", (job,))
        # Validated on the way in; rebuilding without validation keeps long histories cheap.
        return [MetricPoint.model_construct(time=t, epoch=e, loss=lo, metric=m) for t, e, lo, m in rows]

    def histories(self, jobs: Sequence[str]) -> dict[str, list[MetricPoint]]:
        """:meth:`history` of each of ``jobs`` that has points, in one query per
        :data:`IDS_PER_QUERY` ids (a plan request looks up every job posted without history)."""
        out: dict[str, list[MetricPoint]] = {}
        for rows in self._by_ids("SELECT job, time, epoch, loss, metric FROM points WHERE job IN ({}) ORDER BY job, epoch", jobs):
            for job, t, e, lo, m in rows:
                out.setdefault(job, []).append(MetricPoint.model_construct(time=t, epoch=e, loss=lo, metric=m))
        return out

    def _by_ids(self, sql: str, ids: Sequence[str]) -> Iterator[list[Any]]:
        """The rows of ``sql`` (its ``IN ({})`` filled with placeholders) for ``ids``, a chunk at a time."""
        unique = list(dict.fromkeys(ids))
        for k in range(0, len(unique), IDS_PER_QUERY):
            chunk = unique[k : k + IDS_PER_QUERY]
            yield self._read(sql.format(", ".join("?" * len(chunk))), chunk)

    def point_count(self, job: str | None = None) -> int:
        if job is None:
            return int(self._read("SELECT COUNT(*) FROM points")[0][0])
        return int(self._read("SELECT COUNT(*) FROM points WHERE job = ?", (job,))[0][0])

    def point_stats(self) -> dict[str, PointStats]:
        """Per job with at least one point: count, first and last epoch, latest time."""
        rows = self._read("SELECT job, COUNT(*), MIN(epoch), MAX(epoch), MAX(time) FROM points GROUP BY job")
        return {j: PointStats(int(n), float(lo), float(hi), float(t)) for j, n, lo, hi, t in rows}

    # -- targets -------------------------------------------------------------------------------

    def set_target(self, job: str, target: QoETarget) -> None:
        now = time.time()
        with self._write() as db:
            db.execute(_REGISTER_JOB, (job, now, now))
            db.execute(
                "INSERT INTO targets (job, target, updated) VALUES (?, ?, ?) "
                "ON CONFLICT (job) DO UPDATE SET target = excluded.target, updated = excluded.updated",
                (job, target.model_dump_json(), now),
            )

    def target(self, job: str) -> QoETarget | None:
        rows = self._read("SELECT target FROM targets WHERE job = ?", (job,))
        return QoETarget.model_validate_json(rows[0][0]) if rows else None

    def targets(self, jobs: Sequence[str]) -> dict[str, QoETarget]:
        """:meth:`target` of each of ``jobs`` that has one, in one query per :data:`IDS_PER_QUERY` ids."""
        return {
            job: QoETarget.model_validate_json(text)
            for rows in self._by_ids("SELECT job, target FROM targets WHERE job IN ({})", jobs)
            for job, text in rows
        }

    # -- plans ---------------------------------------------------------------------------------

    def save_plan(self, plan: Plan, snapshot: Snapshot | None = None) -> int:
        snap = snapshot.model_dump_json() if snapshot is not None else None
        return self.save_plan_json(plan.time, plan.snapshot_digest, plan.model_dump_json(), snap)

    def save_plan_json(self, plan_time: float, digest: str, plan_json: str, snapshot_json: str | None = None) -> int:
        """:meth:`save_plan` of a plan (and snapshot) already dumped: the service has both as JSON."""
        with self._write() as db:
            row = db.execute(
                "INSERT INTO plans (time, digest, plan, snapshot, created) VALUES (?, ?, ?, ?, ?) RETURNING id",
                (plan_time, digest, plan_json, snapshot_json, time.time()),
            ).fetchone()
            plan_id = int(row[0])
            self._prune_plans(db, plan_id)
            return plan_id

    def _prune_plans(self, db: Backend, newest: int) -> None:
        """Within the transaction that saved plan ``newest``: what :attr:`keep_plans` and
        :attr:`keep_snapshots` no longer keep. Ids only grow, so the newest ``n`` plans are those
        above ``newest - n`` (fewer when ids were skipped: another writer's rolled-back plan). Each
        statement reads only the rows it changes (``plans_with_snapshot``, ``actions_plan`` and the
        primary key, migration 7) and the plans kept for a pending action."""
        if self.keep_snapshots is not None:
            db.execute("UPDATE plans SET snapshot = NULL WHERE snapshot IS NOT NULL AND id <= ?", (newest - self.keep_snapshots,))
        if self.keep_plans is None:
            return
        cutoff = newest - self.keep_plans
        pending = "SELECT plan_id FROM actions WHERE status = 'pending'"
        db.execute(f"DELETE FROM actions WHERE plan_id <= ? AND plan_id NOT IN ({pending})", (cutoff,))
        db.execute(f"DELETE FROM plans WHERE id <= ? AND id NOT IN ({pending})", (cutoff,))

    def get_plan(self, plan_id: int) -> Plan | None:
        rows = self._read("SELECT plan FROM plans WHERE id = ?", (plan_id,))
        return Plan.model_validate_json(rows[0][0]) if rows else None

    def plan_snapshot(self, plan_id: int) -> Snapshot | None:
        """The snapshot saved with a plan (None: no such plan, or saved without one)."""
        rows = self._read("SELECT snapshot FROM plans WHERE id = ?", (plan_id,))
        return Snapshot.model_validate_json(rows[0][0]) if rows and rows[0][0] is not None else None

    def latest_plan(self) -> tuple[int, Plan] | None:
        rows = self._read("SELECT id, plan FROM plans ORDER BY id DESC LIMIT 1")
        return (int(rows[0][0]), Plan.model_validate_json(rows[0][1])) if rows else None

    # -- actions (the daemon's crash recovery) -------------------------------------------------

    def record_actions(self, plan_id: int, actions: Sequence[Mapping[str, Any]]) -> list[int]:
        """Store actions as ``pending``, in order; each needs string ``job`` and ``kind`` keys.
        Raises ``ValueError`` naming the bad entry (nothing is stored then)."""
        rows = []
        for i, action in enumerate(actions):
            for key in ("job", "kind"):
                if not isinstance(action.get(key), str):
                    raise ValueError(f"actions[{i}].{key}: required string, got {action.get(key)!r}")
            rows.append((plan_id, action["job"], action["kind"], json.dumps(dict(action), allow_nan=False)))
        now = time.time()
        with self._write() as db:
            ids = []
            for row in rows:
                got = db.execute(
                    "INSERT INTO actions (plan_id, job, kind, payload, status, created) "
                    "VALUES (?, ?, ?, ?, 'pending', ?) RETURNING id",
                    (*row, now),
                ).fetchone()
                ids.append(int(got[0]))
            return ids

    def finish_action(self, action_id: int, status: str, message: str = "") -> None:
        """Mark an action ``"done"`` or ``"failed"``. Raises ``KeyError`` for an unknown id, ``ValueError``
        for any other status (typed ``str`` so the store fits ``adapters.loop.Recorder``)."""
        if status not in ("done", "failed"):
            raise ValueError(f"status: must be 'done' or 'failed', got {status!r}")
        with self._write() as db:
            cur = db.execute(
                "UPDATE actions SET status = ?, message = ?, finished = ? WHERE id = ?", (status, message, time.time(), action_id)
            )
            if cur.rowcount == 0:
                raise KeyError(action_id)

    def pending_actions(self) -> list[tuple[int, int, dict[str, Any]]]:
        """(action id, plan id, payload) of every pending action, oldest first."""
        rows = self._read("SELECT id, plan_id, payload FROM actions WHERE status = 'pending' ORDER BY id")
        return [(int(i), int(p), json.loads(payload)) for i, p, payload in rows]

    def actions(self, *, job: str | None = None, limit: int = 50) -> list[ActionRecord]:
        """The newest ``limit`` actions (of ``job`` only, if given), oldest first."""
        where, params = ("WHERE a.job = ?", [job]) if job is not None else ("", [])
        rows = self._read(
            "SELECT a.id, a.plan_id, a.job, a.kind, a.payload, a.status, a.message, a.created, a.finished, p.time "
            f"FROM actions a JOIN plans p ON p.id = a.plan_id {where} ORDER BY a.id DESC LIMIT ?",
            (*params, int(limit)),
        )
        return [
            ActionRecord(int(i), int(p), j, k, json.loads(pl), st, msg, float(c), None if f is None else float(f), float(t))
            for i, p, j, k, pl, st, msg, c, f, t in reversed(rows)
        ]

    def plan_ids(self, limit: int = 10) -> list[int]:
        """Ids of the newest ``limit`` plans, newest first."""
        return [int(r[0]) for r in self._read("SELECT id FROM plans ORDER BY id DESC LIMIT ?", (int(limit),))]

    def action_status(self, action_id: int) -> tuple[ActionStatus, str] | None:
        rows = self._read("SELECT status, message FROM actions WHERE id = ?", (action_id,))
        return (rows[0][0], rows[0][1]) if rows else None

    # -- leases --------------------------------------------------------------------------------

    def acquire_lease(
        self,
        name: str,
        holder: str,
        ttl: float,
        *,
        conflicts: Sequence[str] = (),
        conflict_prefix: str | None = None,
        dead: Sequence[str] = (),
    ) -> Lease:
        """Take or renew the lease ``name`` for ``ttl`` seconds, unless another holder has it, or has a
        live lease named in ``conflicts`` or starting with ``conflict_prefix``: then the blocking lease
        is returned (``held`` False). Leases of the holders in ``dead`` (known to have died) count as
        expired. Atomic: two callers never both get it, in one process or in several (on PostgreSQL
        the lease writers serialise on an advisory lock, and time is the server's clock)."""
        with self._write() as db:
            db.serialize("leases")
            now = db.clock()
            for who in dead:
                db.execute("DELETE FROM leases WHERE holder = ?", (who,))
            live = "SELECT name, holder, expires FROM leases WHERE expires > ? AND holder != ?"
            rows = db.execute(live, (now, holder)).fetchall()
            for other, who, until in rows:
                if other == name or other in conflicts or (conflict_prefix is not None and other.startswith(conflict_prefix)):
                    return Lease(name=other, holder=who, expires=until, held=False)
            db.execute(
                "INSERT INTO leases (name, holder, expires, acquired) VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "holder = excluded.holder, expires = excluded.expires, "
                "acquired = CASE WHEN leases.holder = excluded.holder THEN leases.acquired ELSE excluded.acquired END",
                (name, holder, now + ttl, now),
            )
        return Lease(name=name, holder=holder, expires=now + ttl, held=True)

    def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up (only its holder can)."""
        with self._write() as db:
            db.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))

    # -- key-value -----------------------------------------------------------------------------

    def get_kv(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM kv WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def set_kv(self, key: str, value: str) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value)
            )
