"""The SQLite state store: idempotent ingestion, durability across reopen, migrations, threads.

Case matrix:

- ingestion: a batch, the same batch retried, a batch overlapping the stored one, duplicates inside
  one batch; histories come back ordered by epoch whatever the insertion order (real measured curve);
- restart: every table survives close + reopen of a file database;
- migrations: a fresh database reaches the newest version; a version-1 database with data is upgraded
  and keeps its data; a database from a newer FlowPlan is refused with a message naming both versions;
  a failing migration leaves the database at its old version;
- concurrency: threads sharing one store, and two stores on one file, write disjoint and overlapping
  points; every point is stored exactly once;
- jobs, targets, plans, actions, key-value: round trips and the documented errors;
- speeds (migration 4): a job's points replace its earlier ones and survive a reopen; a version-3
  database is upgraded; who lends to a new job (table below, :data:`PRIOR_CASES`).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from conftest import random_snapshot, real_curve

from planner import PlannerConfig, plan
from planner.snapshot import Job, MetricPoint, QoETarget, SpeedPoint, Tier
from store import MIGRATIONS, MigrationError, SchemaTooNew, StateStore


def measured_points(model: str = "cifar10", bsz: int = 128, t0: float = 1000.0) -> list[MetricPoint]:
    """The measured validation curve as metric points, one per epoch, 60 s apart."""
    return [MetricPoint(time=t0 + 60.0 * i, epoch=float(i + 1), metric=float(v)) for i, v in enumerate(real_curve(model, bsz))]


@pytest.fixture()
def db(tmp_path: Path) -> StateStore:
    with StateStore(tmp_path / "state.db") as s:
        yield s  # type: ignore[misc]


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


def test_everything_survives_a_reopen(tmp_path: Path, data_dir: Path) -> None:
    path = tmp_path / "state.db"
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


def test_an_older_database_is_upgraded_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with StateStore(path, migrations=MIGRATIONS[:1]) as old:
        assert old.schema_version == 1
        old.add_points("a", [MetricPoint(time=1.0, epoch=1.0, loss=2.5)])
        with pytest.raises(sqlite3.OperationalError):  # version 1 has no key-value table yet
            old.set_kv("k", "v")
    with StateStore(path) as new:
        assert new.schema_version == len(MIGRATIONS) >= 2
        assert new.history("a") == [MetricPoint(time=1.0, epoch=1.0, loss=2.5)]
        new.set_kv("k", "v")
        assert new.get_kv("k") == "v"


def test_a_newer_database_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    with StateStore(path, migrations=[*MIGRATIONS, "CREATE TABLE future (x INTEGER);"]) as future:
        assert future.schema_version == len(MIGRATIONS) + 1
    with pytest.raises(SchemaTooNew) as err:
        StateStore(path)
    msg = str(err.value)
    assert f"schema version {len(MIGRATIONS) + 1}" in msg and f"({len(MIGRATIONS)})" in msg and str(path) in msg


def test_a_failing_migration_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with StateStore(path) as s:
        s.set_kv("k", "v")
    broken = [*MIGRATIONS, "CREATE TABLE extra (x INTEGER); INSERT INTO no_such_table VALUES (1);"]
    with pytest.raises(MigrationError, match=f"migration {len(MIGRATIONS) + 1} failed"):
        StateStore(path, migrations=broken)
    with StateStore(path) as s:
        assert s.schema_version == len(MIGRATIONS)
        assert s._read("SELECT name FROM sqlite_master WHERE name = 'extra'") == []
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


def test_two_stores_on_one_file(tmp_path: Path, data_dir: Path) -> None:
    """Like the service and the daemon: two connections, concurrent writers, nothing lost."""
    path = tmp_path / "shared.db"
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
    with pytest.raises(sqlite3.IntegrityError):  # an action belongs to a stored plan
        db.record_actions(pid + 100, [{"job": "a", "kind": "keep"}])


def test_key_value(db: StateStore) -> None:
    assert db.get_kv("x") is None
    db.set_kv("x", "1")
    db.set_kv("x", "2")
    assert db.get_kv("x") == "2"


def test_leases_exclude_other_holders_until_they_expire(tmp_path: Path) -> None:
    """One holder at a time per lease; renewing keeps it; an expired lease is free; the whole
    adapter's '*' lease and a scope of it exclude each other; only the holder releases."""
    path = tmp_path / "leases.db"
    with StateStore(path) as a, StateStore(path) as b:  # two daemons sharing one state file
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


def test_speeds_replace_and_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with StateStore(path) as s:
        s.record_speeds("a", _pts(2.0, 1.9), task="digits", image="img:1", epochs=0.4, finished=False)
        s.record_speeds("a", _pts(1.5), task="digits", image="img:1", epochs=3.0, finished=True)
    with StateStore(path) as s:
        rec = s.speed_record("a")
        assert rec is not None and rec.points == tuple(_pts(1.5))
        assert (rec.task, rec.image, rec.epochs, rec.finished) == ("digits", "img:1", 3.0, True)
        assert s.speed_record("nobody") is None


def test_a_version_3_database_gets_the_speed_tables(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    with StateStore(path, migrations=MIGRATIONS[:3]) as old:
        old.add_points("a", [MetricPoint(time=1.0, epoch=1.0, loss=2.5)])
    with StateStore(path) as new:
        assert new.schema_version == len(MIGRATIONS) >= 4 and new.point_count("a") == 1
        new.record_speeds("a", _pts(1.5), task="t", image=None, epochs=1.0, finished=True)
        assert new.speed_prior(task="t", image=None, exclude="b") is not None


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
