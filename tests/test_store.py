"""The state store on both backends: idempotent ingestion, durability across reopen, migrations,
threads and processes, leases.

Every test that takes ``db`` or ``store_location`` runs twice: on a SQLite file and on a real
PostgreSQL server (a throwaway cluster from Debian's binaries, tests/pg_env.py; a fresh database per
test). Case matrix:

- ingestion: a batch, the same batch retried, a batch overlapping the stored one, duplicates inside
  one batch; histories come back ordered by epoch whatever the insertion order (real measured curve);
- restart: every table survives close + reopen of a file database;
- migrations: a fresh database reaches the newest version; a version-1 database with data is upgraded
  and keeps its data; a database from a newer FlowPlan is refused with a message naming both versions;
  a failing migration leaves the database at its old version;
- concurrency: threads sharing one store, and two stores on one database, write disjoint and overlapping
  points; every point is stored exactly once; three processes on one PostgreSQL database race for
  conflicting leases round after round (one winner each time) and see each other's writes;
- schema: both dialects get the same tables and columns (PostgreSQL's translated types);
- locations: bad PostgreSQL URLs, an unreachable server, a wrong password and a missing database
  each give one line naming the URL without its password;
- jobs, targets, plans, actions, key-value: round trips and the documented errors;
- speeds (migration 4): a job's points replace its earlier ones and survive a reopen; a version-3
  database is upgraded; who lends to a new job (table below, :data:`PRIOR_CASES`).
"""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import random_snapshot, real_curve

from planner import PlannerConfig, plan
from planner.snapshot import Job, MetricPoint, QoETarget, SpeedPoint, Tier
from store import MIGRATIONS, ConnectError, MigrationError, SchemaTooNew, StateStore


def measured_points(model: str = "cifar10", bsz: int = 128, t0: float = 1000.0) -> list[MetricPoint]:
    """The measured validation curve as metric points, one per epoch, 60 s apart."""
    return [MetricPoint(time=t0 + 60.0 * i, epoch=float(i + 1), metric=float(v)) for i, v in enumerate(real_curve(model, bsz))]


@pytest.fixture()
def db(store_location: str) -> StateStore:
    with StateStore(store_location) as s:
        yield s  # type: ignore[misc]


def driver_error(store: StateStore, kind: str) -> type[Exception]:
    """The driver's exception for ``kind`` ("integrity": a broken constraint; "no table")."""
    if store.dialect == "sqlite":
        return sqlite3.IntegrityError if kind == "integrity" else sqlite3.OperationalError
    import psycopg

    return psycopg.IntegrityError if kind == "integrity" else psycopg.errors.UndefinedTable


def tables(store: StateStore) -> set[str]:
    if store.dialect == "sqlite":
        return {r[0] for r in store._read("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return {r[0] for r in store._read("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")}


def test_add_points_is_idempotent_by_job_and_epoch(db: StateStore, data_dir: Path) -> None:
    pts = measured_points()
    half = len(pts) // 2
    assert db.add_points("a", pts[:half]) == (half, 0)
    assert db.add_points("a", pts[:half]) == (0, half)  # a retried batch
    # Overlapping batch: only the new epochs count.
    assert db.add_points("a", pts[half - 3 :]) == (len(pts) - half, 3)
    assert db.point_count("a") == len(pts)
    # The same epoch twice inside one batch counts once; the first write wins.
    dup = [MetricPoint(time=1.0, epoch=1000.0, metric=0.1), MetricPoint(time=2.0, epoch=1000.0, metric=0.9)]
    assert db.add_points("a", dup) == (1, 1)
    assert db.history("a")[-1].metric == 0.1
    # Another job's identical epochs are its own.
    assert db.add_points("b", pts[:5]) == (5, 0)
    assert db.point_count() == len(pts) + 1 + 5
    assert db.job_ids() == ["a", "b"]


def test_history_is_ordered_by_epoch(db: StateStore, data_dir: Path) -> None:
    pts = measured_points("deepspeech2", 40)
    shuffled = pts[1::2] + pts[0::2]
    db.add_points("ds2", shuffled)
    got = db.history("ds2")
    assert [p.epoch for p in got] == sorted(p.epoch for p in pts)
    assert got == sorted(pts, key=lambda p: p.epoch)
    assert db.history("nobody") == []
    stats = db.point_stats()["ds2"]
    assert (stats.points, stats.first_epoch, stats.last_epoch) == (len(pts), 1.0, float(len(pts)))


def test_everything_survives_a_reopen(store_location: str, data_dir: Path) -> None:
    path = store_location
    snap = random_snapshot(3, n_nodes=2, n_jobs=4)
    made = plan(snap, PlannerConfig(solver="greedy")).plan
    target = QoETarget(metric="accuracy", direction="higher", tier1=Tier(value=0.8, deadline=5000.0), tier2=Tier(value=0.9))
    with StateStore(path) as s:
        s.add_points("a", measured_points())
        s.upsert_job("a", spec=snap.jobs[0], owner="team-x")
        s.set_target("a", target)
        pid = s.save_plan(made, snap)
        aid = s.record_actions(pid, [{"job": "a", "kind": "resize", "cpu_millis": 2000}])[0]
        s.set_kv("offset:a", "1234")
    with StateStore(path) as s:
        assert s.point_count("a") == len(measured_points())
        assert s.history("a") == measured_points()
        rec = s.job_record("a")
        assert rec is not None and rec.fields == {"owner": "team-x"}
        assert rec.spec is not None and "history" not in rec.spec and Job.model_validate(rec.spec).id == snap.jobs[0].id
        assert s.target("a") == target
        assert s.get_plan(pid) == made and s.latest_plan() == (pid, made) and s.plan_snapshot(pid) == snap
        assert s.pending_actions() == [(aid, pid, {"job": "a", "kind": "resize", "cpu_millis": 2000})]
        assert s.get_kv("offset:a") == "1234"
        assert s.schema_version == len(MIGRATIONS)


def test_wal_mode_on_file_databases(tmp_path: Path) -> None:
    with StateStore(tmp_path / "s.db") as s:
        assert s._read("PRAGMA journal_mode")[0][0] == "wal"
        assert s._read("PRAGMA synchronous")[0][0] == 2  # FULL
    with StateStore(":memory:") as s:
        assert s.point_count() == 0 and s.schema_version == len(MIGRATIONS)


def test_an_older_database_is_upgraded_and_keeps_its_data(store_location: str) -> None:
    path = store_location
    with StateStore(path, migrations=MIGRATIONS[:1]) as old:
        assert old.schema_version == 1
        old.add_points("a", [MetricPoint(time=1.0, epoch=1.0, loss=2.5)])
        with pytest.raises(driver_error(old, "no table")):  # version 1 has no key-value table yet
            old.set_kv("k", "v")
    with StateStore(path) as new:
        assert new.schema_version == len(MIGRATIONS) >= 2
        assert new.history("a") == [MetricPoint(time=1.0, epoch=1.0, loss=2.5)]
        new.set_kv("k", "v")
        assert new.get_kv("k") == "v"


def test_a_newer_database_is_refused_with_a_clear_message(store_location: str) -> None:
    path = store_location
    with StateStore(path, migrations=[*MIGRATIONS, "CREATE TABLE future (x INTEGER);"]) as future:
        assert future.schema_version == len(MIGRATIONS) + 1
    with pytest.raises(SchemaTooNew) as err:
        StateStore(path)
    msg = str(err.value)
    shown = path.replace(":s3cret-pw@", ":***@")  # a URL is named without its password
    assert f"schema version {len(MIGRATIONS) + 1}" in msg and f"({len(MIGRATIONS)})" in msg and shown in msg
    assert "s3cret" not in msg


def test_a_failing_migration_changes_nothing(store_location: str) -> None:
    path = store_location
    with StateStore(path) as s:
        s.set_kv("k", "v")
    broken = [*MIGRATIONS, "CREATE TABLE extra (x INTEGER); INSERT INTO no_such_table VALUES (1);"]
    with pytest.raises(MigrationError, match=f"migration {len(MIGRATIONS) + 1} failed"):
        StateStore(path, migrations=broken)
    with StateStore(path) as s:
        assert s.schema_version == len(MIGRATIONS)
        assert "extra" not in tables(s) and "kv" in tables(s)
        assert s.get_kv("k") == "v"


def test_threads_sharing_one_store_store_each_point_once(db: StateStore, data_dir: Path) -> None:
    pts = measured_points("imagenet", 1600)
    n_threads, jobs = 8, ["j0", "j1", "j2"]
    results: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for job in jobs:
                # Every thread sends every point of every job in small batches: heavy overlap.
                for i in range(0, len(pts), 7):
                    results.append(db.add_points(job, pts[(i + k) % len(pts) : (i + k) % len(pts) + 7]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(r[0] for r in results) == len(jobs) * len(pts)  # inserted exactly once overall
    for job in jobs:
        assert db.history(job) == pts


def test_two_stores_on_one_database(store_location: str, data_dir: Path) -> None:
    """Like the service and the daemon: two connections, concurrent writers, nothing lost."""
    path = store_location
    pts = measured_points()
    with StateStore(path) as a, StateStore(path) as b:

        def run(s: StateStore, job: str) -> None:
            for p in pts:
                s.add_points(job, [p])

        threads = [threading.Thread(target=run, args=(s, job)) for s, job in ((a, "x"), (b, "y"), (a, "z"), (b, "x"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert a.point_count() == b.point_count() == 3 * len(pts)
        assert b.history("x") == pts


def test_jobs_registry(db: StateStore) -> None:
    snap = random_snapshot(5, n_nodes=1, n_jobs=2)
    first = db.upsert_job("j", spec=snap.jobs[0], container="c1")
    assert first.fields == {"container": "c1"} and first.spec is not None and first.created <= first.updated
    second = db.upsert_job("j", state="running")  # fields merge; the spec stays
    assert second.fields == {"container": "c1", "state": "running"} and second.spec == first.spec
    assert second.created == first.created
    third = db.upsert_job("j", spec={"id": "j", "status": "pending", "history": [1, 2]})
    assert third.spec == {"id": "j", "status": "pending"}
    assert db.job_record("none") is None


def test_targets_round_trip_and_replace(db: StateStore) -> None:
    t1 = QoETarget(tier1=Tier(value=0.5))
    t2 = QoETarget(metric="accuracy", direction="higher", tier1=Tier(value=0.7, deadline=100.0))
    assert db.target("j") is None
    db.set_target("j", t1)
    db.set_target("j", t2)
    assert db.target("j") == t2
    assert "j" in db.job_ids()


def test_many_jobs_histories_and_targets_in_chunks(db: StateStore, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``histories`` and ``targets`` (what a plan request looks up for every job posted without them)
    give what ``history`` and ``target`` give job by job, over more ids than one query takes (the
    chunk made small here), with ids asked twice, unknown ids left out, and nothing for no ids."""
    import store.state

    monkeypatch.setattr(store.state, "IDS_PER_QUERY", 3)
    pts = measured_points("deepspeech2", 40)
    ids = [f"job/{k}" for k in range(8)]
    for k, job in enumerate(ids):
        db.add_points(job, pts[k::2][: 3 + k][::-1])  # shuffled: stored out of epoch order
        if k % 3:
            db.set_target(job, QoETarget(tier1=Tier(value=0.1 * k)))
    asked = [*ids, "nobody", ids[0]]
    assert db.histories(asked) == {job: db.history(job) for job in ids}
    assert all(h == sorted(h, key=lambda p: p.epoch) for h in db.histories(asked).values())
    assert db.targets(asked) == {job: db.target(job) for job in ids if db.target(job) is not None}
    assert len(db.targets(asked)) == 5
    assert db.histories([]) == {} and db.targets([]) == {}


def test_plans_latest_and_by_id(db: StateStore, data_dir: Path) -> None:
    assert db.latest_plan() is None and db.get_plan(1) is None
    p1 = plan(random_snapshot(1, n_nodes=1, n_jobs=2), PlannerConfig(solver="greedy")).plan
    p2 = plan(random_snapshot(2, n_nodes=2, n_jobs=3), PlannerConfig(solver="greedy")).plan
    i1, i2 = db.save_plan(p1), db.save_plan(p2)
    assert i2 > i1
    assert db.get_plan(i1) == p1 and db.latest_plan() == (i2, p2)
    assert db.plan_snapshot(i1) is None


def test_actions_lifecycle(db: StateStore) -> None:
    pid = db.save_plan(plan(random_snapshot(1, n_nodes=1, n_jobs=1), PlannerConfig(solver="greedy")).plan)
    ids = db.record_actions(pid, [{"job": "a", "kind": "start"}, {"job": "b", "kind": "migrate", "node": "n2"}])
    assert [a[0] for a in db.pending_actions()] == ids
    db.finish_action(ids[0], "done")
    db.finish_action(ids[1], "failed", "node n2 is gone")
    assert db.pending_actions() == []
    assert db.action_status(ids[1]) == ("failed", "node n2 is gone")
    with pytest.raises(KeyError):
        db.finish_action(10_000, "done")
    with pytest.raises(ValueError, match="status"):
        db.finish_action(ids[0], "pending")
    with pytest.raises(ValueError, match=r"actions\[1\]\.kind"):
        db.record_actions(pid, [{"job": "a", "kind": "keep"}, {"job": "a"}])
    assert db.pending_actions() == []  # the bad batch stored nothing
    with pytest.raises(driver_error(db, "integrity")):  # an action belongs to a stored plan
        db.record_actions(pid + 100, [{"job": "a", "kind": "keep"}])


def test_plans_beyond_the_bounds_are_dropped_as_new_ones_are_saved(store_location: str) -> None:
    """keep_plans / keep_snapshots (what the daemon's and the service's --keep-plans / --keep-snapshots
    set): each save drops the plans older than the newest keep_plans, with their actions, except a
    plan whose action is still pending (crash recovery replays it), and the snapshots of the plans
    older than the newest keep_snapshots (the plan stays). A store opened without bounds keeps all."""
    snap = random_snapshot(3, n_nodes=2, n_jobs=3)
    made = plan(snap, PlannerConfig(solver="greedy")).plan
    with pytest.raises(ValueError, match="keep_plans"):
        StateStore(store_location, keep_plans=0)
    with StateStore(store_location, keep_plans=5, keep_snapshots=2) as s:
        ids = []
        for i in range(12):
            ids.append(s.save_plan(made, snap))
            if i == 2:
                pending = s.record_actions(ids[-1], [{"job": "a", "kind": "start"}])
            if i == 3:
                s.finish_action(s.record_actions(ids[-1], [{"job": "b", "kind": "start"}])[0], "done")
        assert s.plan_ids(100) == [*reversed(ids[-5:]), ids[2]]  # the pending action's plan is kept
        assert [s.plan_snapshot(i) is not None for i in reversed(ids[-5:])] == [True, True, False, False, False]
        assert s.get_plan(ids[-5]) == made and s.plan_snapshot(ids[-1]) == snap
        assert s.get_plan(ids[3]) is None and [a.job for a in s.actions()] == ["a"]
        assert [a[1] for a in s.pending_actions()] == [ids[2]]
        s.finish_action(pending[0], "done")
        ids.append(s.save_plan(made))  # the next save drops it, with its action
        assert s.plan_ids(100) == list(reversed(ids[-5:])) and s.actions() == []
    with StateStore(store_location) as s:  # no bounds: nothing more is dropped
        more = [s.save_plan(made, snap) for _ in range(3)]
        assert s.plan_ids(100) == [*reversed(more), *reversed(ids[-5:])]
        assert s.plan_snapshot(ids[-5]) is None and s.plan_snapshot(more[0]) == snap


def test_key_value(db: StateStore) -> None:
    assert db.get_kv("x") is None
    db.set_kv("x", "1")
    db.set_kv("x", "2")
    assert db.get_kv("x") == "2"


def test_leases_exclude_other_holders_until_they_expire(store_location: str) -> None:
    """One holder at a time per lease; renewing keeps it; an expired lease is free; the whole
    adapter's '*' lease and a scope of it exclude each other; only the holder releases."""
    path = store_location
    with StateStore(path) as a, StateStore(path) as b:  # two daemons sharing one state store
        got = a.acquire_lease("docker/team=a", "A", 60)
        assert got.held and got.holder == "A"
        other = b.acquire_lease("docker/team=a", "B", 60)
        assert not other.held and other.holder == "A" and other.name == "docker/team=a"
        assert b.acquire_lease("docker/team=b", "B", 60).held  # another scope: both act
        everything = b.acquire_lease("docker/*", "C", 60, conflict_prefix="docker/")
        assert not everything.held and everything.holder in ("A", "B")
        assert a.acquire_lease("docker/team=a", "A", 60).held  # renewal by the holder
        b.release_lease("docker/team=a", "B")  # not the holder: nothing happens
        assert not b.acquire_lease("docker/team=a", "B", 60).held
        a.acquire_lease("docker/team=a", "A", -1)  # renewed into the past: expired
        assert b.acquire_lease("docker/team=a", "B", 60).held  # a dead daemon's lease is taken over
        a.release_lease("docker/team=b", "B")
        b.release_lease("docker/team=b", "B")
        b.release_lease("docker/team=a", "B")
        assert a.acquire_lease("docker/*", "A", 60, conflict_prefix="docker/").held
        assert not b.acquire_lease("docker/team=z", "B", 60, conflicts=["docker/*"]).held
        # A holder known to be dead (its process is gone) loses its live lease at once.
        assert b.acquire_lease("docker/*", "B", 60, conflict_prefix="docker/", dead=["A"]).held


# -- speeds (migration 4) ---------------------------------------------------------------------


def _pts(*seconds: float, cpu: int = 1000, gpus: int = 0) -> list[SpeedPoint]:
    return [SpeedPoint(cpu_millis=cpu + 50 * i, gpus=gpus, seconds_per_epoch=s) for i, s in enumerate(seconds)]


def test_speeds_replace_and_survive_a_reopen(store_location: str) -> None:
    path = store_location
    with StateStore(path) as s:
        s.record_speeds("a", _pts(2.0, 1.9), task="digits", image="img:1", epochs=0.4, finished=False)
        s.record_speeds("a", _pts(1.5), task="digits", image="img:1", epochs=3.0, finished=True)
    with StateStore(path) as s:
        rec = s.speed_record("a")
        assert rec is not None and rec.points == tuple(_pts(1.5))
        assert (rec.task, rec.image, rec.epochs, rec.finished) == ("digits", "img:1", 3.0, True)
        assert s.speed_record("nobody") is None


def test_a_version_3_database_gets_the_speed_tables(store_location: str) -> None:
    path = store_location
    with StateStore(path, migrations=MIGRATIONS[:3]) as old:
        old.add_points("a", [MetricPoint(time=1.0, epoch=1.0, loss=2.5)])
    with StateStore(path) as new:
        assert new.schema_version == len(MIGRATIONS) >= 4 and new.point_count("a") == 1
        new.record_speeds("a", _pts(1.5), task="t", image=None, epochs=1.0, finished=True)
        assert new.speed_prior(task="t", image=None, exclude="b") is not None


def test_a_gangs_speeds_keep_their_shapes(store_location: str) -> None:
    """Migration 5: a speed keeps the replicas and nodes it was measured with. A gang's epochs at 2
    replicas and at 4 over two nodes, at the same CPU and GPUs, overwrote each other before; now both
    are kept and lent with their shapes (a point that does not say its replicas stays so)."""
    shapes = [
        SpeedPoint(cpu_millis=2000, gpus=1, seconds_per_epoch=40.0, replicas=2),
        SpeedPoint(cpu_millis=2000, gpus=1, seconds_per_epoch=24.0, replicas=4, nodes=2),
        SpeedPoint(cpu_millis=2000, gpus=1, seconds_per_epoch=30.0),
    ]
    with StateStore(store_location) as s:
        s.record_speeds("g", shapes, task="bert", image=None, epochs=2.0, finished=True)
    with StateStore(store_location) as s:
        rec = s.speed_record("g")
        assert rec is not None and sorted(rec.points, key=lambda p: p.seconds_per_epoch) == sorted(
            shapes, key=lambda p: p.seconds_per_epoch
        )
        prior = s.speed_prior(task="bert", image=None, exclude="new")
        assert prior is not None and {(p.replicas, p.nodes, p.seconds_per_epoch) for p in prior.points} == {
            (2, 1, 40.0),
            (4, 2, 24.0),
            (None, 1, 30.0),
        }


def test_a_version_4_database_keeps_its_speeds(store_location: str) -> None:
    """Opening a version-4 store moves its speeds to the table with shapes: replicas not said."""
    with StateStore(store_location, migrations=MIGRATIONS[:4]) as old:
        old.add_points("a", [MetricPoint(time=1.0, epoch=1.0, loss=2.5)])
        with old._write() as db:  # the version-4 writer's rows, as its record_speeds wrote them
            db.execute("INSERT INTO speed_jobs (job, task, image, epochs, finished, updated) VALUES ('a', 't', NULL, 3, 1, 1.0)")
            db.execute("INSERT INTO speeds (job, cpu_millis, gpus, seconds_per_epoch) VALUES ('a', 1000, 0, 1.5)")
    with StateStore(store_location) as new:
        assert new.schema_version == len(MIGRATIONS) >= 5
        rec = new.speed_record("a")
        assert rec is not None and rec.points == (SpeedPoint(cpu_millis=1000, gpus=0, seconds_per_epoch=1.5),)
        assert rec.points[0].replicas is None and rec.points[0].nodes == 1


def test_a_version_5_database_keeps_its_runs_and_learns_their_schedules(store_location: str) -> None:
    """Migration 6: a job's declared schedule is kept with its run (``speed_jobs.schedule``); a run of
    version 5 stays, with none declared, and lends its curve (``store.curves``)."""
    from planner.snapshot import StepSchedule
    from store import declared_json

    with StateStore(store_location, migrations=MIGRATIONS[:5]) as old:
        old.add_points("a", [MetricPoint(time=float(e), epoch=float(e), loss=2.0 / e) for e in (1, 2, 3)])
        with old._write() as db:  # the version-5 writer's rows, as its record_speeds wrote them
            db.execute("INSERT INTO speed_jobs (job, task, image, epochs, finished, updated) VALUES ('a', 't', NULL, 3, 1, 1.0)")
            db.execute(
                "INSERT INTO speeds (job, cpu_millis, gpus, replicas, nodes, seconds_per_epoch) VALUES ('a', 1000, 0, 0, 1, 1.5)"
            )
    with StateStore(store_location) as new:
        assert new.schema_version == len(MIGRATIONS) >= 6
        rec = new.speed_record("a")
        assert rec is not None and rec.schedule is None and rec.points
        step = StepSchedule(kind="step", milestones=[2.0], gamma=0.1)
        new.add_points("b", [MetricPoint(time=float(e), epoch=float(e), loss=1.0 / e) for e in (1, 2, 3)])
        new.record_speeds("b", [], task="t", image=None, epochs=3.0, finished=True, schedule=declared_json(step, 3.0))
        got = new.task_curves("t")
        assert got is not None and {r.job: (r.schedule, r.max_epochs) for r in got.runs} == {"a": (None, None), "b": (step, 3.0)}


#: Lenders as (job, task, image, epochs, finished, seconds per epoch); the new job "new" has task "digits"
#: and image "img:1". Expected: (basis, jobs in order) or None.
PRIOR_CASES = {
    "a finished job of the task": ([("a", "digits", "img:9", 30.0, True, 1.46)], ("task", ["a"])),
    "a job of the task and the image, once": ([("a", "digits", "img:1", 30.0, True, 1.46)], ("task", ["a"])),
    "a long-running job of the task": ([("a", "digits", None, 2.0, False, 1.46)], ("task", ["a"])),
    "a job of the task not one epoch in yet does not lend": ([("a", "digits", None, 0.5, False, 1.46)], None),
    "the task before the image": (
        [("a", "digits", None, 5.0, True, 1.46), ("b", "other", "img:1", 5.0, True, 9.0)],
        ("task", ["a"]),
    ),
    "the image when no job of the task lends": (
        [("a", "digits", None, 0.2, False, 1.46), ("b", "other", "img:1", 5.0, True, 9.0)],
        ("image", ["b"]),
    ),
    "nothing similar": ([("a", "other", "img:2", 5.0, True, 1.46)], None),
    "never itself": ([("new", "digits", "img:1", 5.0, True, 1.46)], None),
    "the newest five": (
        [(f"j{i}", "digits", None, 5.0, True, 1.0 + i) for i in range(7)],
        ("task", ["j6", "j5", "j4", "j3", "j2"]),
    ),
}


@pytest.mark.parametrize("name", PRIOR_CASES)
def test_who_lends_a_new_job_its_speed(name: str, db: StateStore) -> None:
    lenders, expected = PRIOR_CASES[name]
    for job, task, image, epochs, finished, seconds in lenders:
        db.record_speeds(job, _pts(seconds), task=task, image=image, epochs=epochs, finished=finished)
    prior = db.speed_prior(task="digits", image="img:1", exclude="new")
    if expected is None:
        assert prior is None
        return
    assert prior is not None and (prior.basis, prior.jobs) == expected
    assert prior.key == ("digits" if expected[0] == "task" else "img:1")
    by_job = {job: seconds for job, _, _, _, _, seconds in lenders}
    assert [p.seconds_per_epoch for p in prior.points] == [by_job[j] for j in expected[1]]
    # what the store lends is a valid prior of the new job's snapshot
    Job(id="new", status="pending", task="digits", image="img:1", speed_prior=prior)


# -- PostgreSQL: the schema, bad locations, several processes ---------------------------------

#: SQLite's declared types and the PostgreSQL types store.postgres.ddl makes of them.
PG_TYPES = {"TEXT": "text", "REAL": "double precision", "INTEGER": "bigint"}


def test_both_dialects_get_the_same_schema(tmp_path: Path, postgres_cluster: Any) -> None:
    """Every table and column of every migration, with its type and nullability, on both engines."""
    with StateStore(tmp_path / "s.db") as lite, StateStore(postgres_cluster.new_database()) as pg:
        assert tables(lite) - {"sqlite_sequence"} == tables(pg)
        for table in sorted(tables(pg)):
            want = {
                name: (PG_TYPES[kind], bool(notnull) or bool(pk))
                for _, name, kind, notnull, _, pk in lite._read(f"PRAGMA table_info({table})")
            }
            got = {
                name: (kind, nullable == "NO")
                for name, kind, nullable in pg._read(
                    "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = ?",
                    (table,),
                )
            }
            if table == "schema_version":  # made outside the migrations, as written: INTEGER is 4 bytes there
                want = {"version": ("integer", True)}
            assert got == want, table


def test_bad_postgresql_locations_say_what_is_wrong_in_one_line(postgres_cluster: Any) -> None:
    """Case matrix: a malformed URL, a non-numeric port, an unreachable server, a wrong password, a
    database that does not exist. Each is a ConnectError of one line naming the URL without its password."""
    free = 1  # tcpmux: nothing listens there
    cases = {
        "malformed": ("postgresql://flowplan:s3cret-pw@[::1/db", "not a valid PostgreSQL URL"),
        "port not a number": ("postgresql://flowplan:s3cret-pw@127.0.0.1:fivefour/db", "port: not a number ('fivefour')"),
        "nothing listening": (postgres_cluster.url().replace(f":{postgres_cluster.port}/", f":{free}/"), "Connection refused"),
        "wrong password": (postgres_cluster.url(password="wrong-pw"), "password authentication failed"),
        "no such database": (postgres_cluster.url("nodb"), 'database "nodb" does not exist'),
        "password in the query": (
            f"postgresql://flowplan@127.0.0.1:{free}/db?password=s3cret-pw",
            "Connection refused",
        ),
    }
    for name, (url, reason) in cases.items():
        with pytest.raises(ConnectError) as err:
            StateStore(url)
        msg = str(err.value)
        assert reason in msg, (name, msg)
        assert "\n" not in msg and "s3cret" not in msg and "wrong-pw" not in msg, (name, msg)
        assert msg.startswith("state store postgresql://flowplan") and "***" in msg, (name, msg)


def test_a_broken_connection_is_opened_again(postgres_cluster: Any) -> None:
    """The server ends the store's session (as a restart or a failover does): the call that meets it
    fails, the next one works on a new connection, and nothing committed is lost."""
    import psycopg

    url = postgres_cluster.new_database()
    with StateStore(url) as s, StateStore(url) as admin:
        s.set_kv("k", "v")
        pid = s._read("SELECT pg_backend_pid()")[0][0]
        admin._read("SELECT pg_terminate_backend(?)", (pid,))
        with pytest.raises(psycopg.OperationalError):
            s.get_kv("k")
        assert s.get_kv("k") == "v"
        s.set_kv("k", "w")
        assert admin.get_kv("k") == "w"


def _contend(url: str, me: int, rounds: int, barrier: Any, results: Any) -> None:
    """One process of the test below (spawned: a fresh interpreter, its own connection). A failure
    is reported on ``results`` and breaks the barrier, so that the others stop too."""
    try:
        barrier.wait()  # the first open of the fresh database, at once
        with StateStore(url) as s:
            for r in range(rounds):
                barrier.wait()  # all at once, so the acquisitions race
                if me == 0:  # the whole adapter: excludes every scope
                    got = s.acquire_lease(f"r{r}/*", f"P{me}", 60, conflict_prefix=f"r{r}/")
                else:  # the same scope in every other process
                    got = s.acquire_lease(f"r{r}/team=a", f"P{me}", 60, conflicts=[f"r{r}/*"])
                results.put(("lease", r, me, got.held, got.name, got.holder))
                s.add_points(f"p{me}", [MetricPoint(time=float(r), epoch=float(r + 1), loss=1.0 / (r + 1))])
            barrier.wait()  # everyone has written: each sees the others' points
            results.put(("seen", me, {j: s.point_count(j) for j in s.job_ids()}))
    except BaseException as exc:
        barrier.abort()
        results.put(("error", me, f"{type(exc).__name__}: {exc}"))


def test_processes_sharing_postgresql_see_each_others_writes_and_one_holds_a_lease(postgres_cluster: Any) -> None:
    """Three processes open one fresh database at once (one migrates it, the others wait for it), then
    play ten rounds. Each round they ask at the same moment for leases
    that conflict (one wants 'r/*', two want 'r/team=a'): exactly one gets a lease, the others are
    told who holds it, and the leases table agrees. Each process then sees every other's points."""
    url = postgres_cluster.new_database()
    n, rounds = 3, 10
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(n, timeout=120), ctx.Queue()
    procs = [ctx.Process(target=_contend, args=(url, me, rounds, barrier, results)) for me in range(n)]
    for p in procs:
        p.start()
    got: list[Any] = []
    while len(got) < n * rounds + n and not any(g[0] == "error" for g in got):
        got.append(results.get(timeout=240))
    for p in procs:
        p.join(timeout=60)
    while not results.empty():  # after a failure: the cause, beside the processes it stopped
        got.append(results.get())
    assert [g for g in got if g[0] == "error"] == []
    assert [p.exitcode for p in procs] == [0] * n
    with StateStore(url) as s:
        table = {name: holder for name, holder in s._read("SELECT name, holder FROM leases")}
    for r in range(rounds):
        answers = [g for g in got if g[0] == "lease" and g[1] == r]
        winners = [(name, f"P{me}") for _, _, me, held, name, _ in answers if held]
        assert len(answers) == n and len(winners) == 1, answers
        assert {k: v for k, v in table.items() if k.startswith(f"r{r}/")} == dict(winners)
        for _, _, _, held, name, holder in answers:  # a loser is told the winner
            assert held or (name, holder) == winners[0]
    seen = [g[2] for g in got if g[0] == "seen"]
    assert seen == [{f"p{me}": rounds for me in range(n)}] * n


def test_finished_runs_of_a_posted_snapshot_are_kept_once(store_location: str) -> None:
    """``record_finished_runs`` (the service's, for snapshots posted without a daemon): a finished job
    with a task and 3 or more points is kept as a run of its task, with its declared schedule; one
    still training, without a task or with 2 points is not; one a daemon recorded already keeps its
    speeds and is not written again."""
    from planner.snapshot import Job

    def job(job_id: str, status: str = "finished", task: str | None = "t", n: int = 3, **over: Any) -> Job:
        history = [{"time": float(e), "epoch": float(e), "loss": 1.0 / e} for e in range(1, n + 1)]
        body = {"id": job_id, "status": status, "task": task, "min_cpu_millis": 500, "max_cpu_millis": 1000, "history": history}
        return Job.model_validate({**body, **over})

    with StateStore(store_location) as s:
        s.record_speeds("daemon", _pts(1.5), task="t", image="img:1", epochs=3.0, finished=True)
        step = {"kind": "step", "milestones": [2], "gamma": 0.1}
        posted = [
            job("a", schedule=step, target={"metric": "loss", "tier1": {"value": 0.1}, "max_epochs": 3}),
            job("running", status="pending"),
            job("untagged", task=None),
            job("short", n=2),
            job("daemon"),
        ]
        assert s.record_finished_runs(posted) == ["a"]
        assert s.record_finished_runs(posted) == []
        kept = s.speed_record("a")
        assert kept is not None and kept.finished and kept.task == "t" and json.loads(kept.schedule or "{}")["max_epochs"] == 3
        assert s.point_count("a") == 3 and s.speed_record("running") is None and s.speed_record("short") is None
        daemon = s.speed_record("daemon")
        assert daemon is not None and daemon.points and daemon.image == "img:1"
        got = s.task_curves("t")
        assert got is not None and sorted(r.job for r in got.runs) == ["a"]  # "daemon" has no points of its own here
