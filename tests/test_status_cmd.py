"""``flowplan status``, ``events`` and ``explain`` on a state store written by a real run of the
simulated cluster (``flowplan simulate --state``), as processes; and their one-line errors; and the
basis of a job's speed (observed, borrowed from similar jobs, assumed) in ``status -o wide`` and
``explain``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flowplan", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("status") / "sim.db"
    r = run("simulate", "--policy", "flowplan", "--state", str(path), "--quiet", "--no-live")
    assert r.returncode == 0, r.stderr
    return path


@pytest.fixture(scope="module")
def busiest(state: Path) -> tuple[int, dict[str, object]]:
    """The recorded plan with the most jobs (the last one has none: every job has finished), found
    in-process, then shown by the command."""
    from store import StateStore

    with StateStore(state) as store:
        ids = store.plan_ids(1000)
        plan_id = max(ids, key=lambda i: (len(store.get_plan(i).assignments), -i))  # type: ignore[union-attr]
    r = run("status", "--state", str(state), "--plan", str(plan_id), "-o", "json")
    assert r.returncode == 0, r.stderr
    return plan_id, json.loads(r.stdout)


def test_status_shows_every_job_with_a_reason(state: Path, busiest: tuple[int, dict[str, object]]) -> None:
    plan_id, got = busiest
    jobs = got["jobs"]
    assert isinstance(jobs, list) and len(jobs) == 6  # the demo's six jobs, all in the system at once
    for row in jobs:
        assert row["reason"] and row["state"] in {"Running", "Starting", "Waiting", "Resizing", "Migrating", "Pausing"}
    table = run("status", "--state", str(state), "--plan", str(plan_id))
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].startswith(f"plan {plan_id}: 6 job(s)") and "JOB" in lines[2] and "WHY" in lines[2]
    assert all(any(row["job"] in line for line in lines) for row in jobs)
    wide = run("status", "--state", str(state), "--plan", str(plan_id), "-o", "wide")
    assert "BASIS" in wide.stdout and "TIER 2" in wide.stdout


def test_the_urgent_job_deadline_and_its_delivery_show(state: Path, busiest: tuple[int, dict[str, object]]) -> None:
    _, got = busiest
    urgent = next(r for r in got["jobs"] if r["job"] == "cifar10-urgent")  # type: ignore[union-attr]
    assert urgent["tier1_deadline_s"] is not None
    events = run("events", "--state", str(state), "--job", "cifar10-urgent", "-o", "json")
    kinds = [e["kind"] for e in json.loads(events.stdout)]
    assert "deliver" in kinds, kinds
    story = run("explain", "cifar10-urgent", "--state", str(state), "--plans", "100")
    assert story.returncode == 0 and "cifar10-urgent, as of plan" in story.stdout and "deliver -> done" in story.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["status", "--state", "/no/such.db"], "no state store there"),
        (["events", "--state", "/no/such.db"], "no state store there"),
        (
            ["events", "--state", "postgresql://fp:s3cret@127.0.0.1:1/fp"],
            "--state postgresql://fp:***@127.0.0.1:1/fp: cannot connect",
        ),
        (["status", "--watch", "0"], "--watch"),
    ],
)
def test_one_line_errors(args: list[str], needle: str) -> None:
    r = run(*args)
    last = r.stderr.strip().splitlines()[-1]  # argparse's own errors come after its usage line
    assert r.returncode == 2 and needle in last and "Traceback" not in r.stderr, r.stderr


def _another_programs_database(path: Path) -> None:
    """A SQLite file with a table of its own and none of FlowPlan's."""
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    db.commit()
    db.close()


def _refused_as_it_was(command: list[str], path: Path, says: str) -> None:
    """``command --state path`` exits 2 with one line saying ``says``, the file byte for byte as it was."""
    before = path.read_bytes()
    r = run(*command, "--state", str(path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"--state {path}: {says}" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert path.read_bytes() == before


@pytest.mark.parametrize("command", [["status"], ["events"], ["explain", "j"]])
@pytest.mark.parametrize("kind", ["another program's database", "an empty file"])
def test_readers_refuse_a_file_that_is_not_a_store_and_leave_it_as_it_was(command: list[str], kind: str, tmp_path: Path) -> None:
    """They created FlowPlan's tables in whatever file --state named: another program's SQLite
    database grew ten tables, and an empty file became a store."""
    path = tmp_path / "other.db"
    if kind == "an empty file":
        path.write_bytes(b"")
    else:
        _another_programs_database(path)
    _refused_as_it_was(command, path, "not a FlowPlan state store")


@pytest.mark.parametrize("command", [["simulate", "--quiet", "--policy", "flowplan"], ["serve", "--port", "0"]])
def test_writers_refuse_another_programs_database_and_leave_it_as_it_was(command: list[str], tmp_path: Path) -> None:
    """Writers added FlowPlan's tables to whatever SQLite database --state named (the readers refused
    it already); an empty file still becomes a store (``simulate`` below)."""
    path = tmp_path / "other.db"
    _another_programs_database(path)
    _refused_as_it_was(command, path, "another program's SQLite database")
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    if command[0] == "simulate":
        assert run(*command, "--state", str(empty)).returncode == 0 and run("status", "--state", str(empty)).returncode == 0


def test_serve_on_a_port_in_use_creates_no_state_file(tmp_path: Path) -> None:
    """It opened (created) the state store, then failed to listen."""
    import socket

    path = tmp_path / "new.db"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        r = run("serve", "--port", str(held.getsockname()[1]), "--state", str(path))
    assert r.returncode == 2 and "cannot listen" in r.stderr, r.stderr
    assert not path.exists()


def test_explain_an_unknown_job(state: Path) -> None:
    r = run("explain", "nobody", "--state", str(state))
    assert r.returncode == 2 and "nobody: not in the last" in r.stderr


def test_explain_a_plan_that_is_not_there_or_a_store_without_plans(state: Path, tmp_path: Path) -> None:
    """``--plan`` past the newest plan was "not in the last 5 plan(s) up to plan 999", as if the job
    were the problem; a store with no plans said "not in the last 0 plan(s)"."""
    from store import StateStore

    r = run("explain", "ncf-0", "--state", str(state), "--plan", "999999")
    assert r.returncode == 2 and "--plan 999999: no such plan in" in r.stderr and "(the newest is plan " in r.stderr, r.stderr
    empty = tmp_path / "empty.db"
    StateStore(empty).close()
    r = run("explain", "ncf-0", "--state", str(empty))
    assert r.returncode == 2 and f"{empty}: no plans yet" in r.stderr, r.stderr


def test_tables_are_rich_on_a_terminal_and_plain_when_piped() -> None:
    import io

    from flowplan.tables import emit

    rows, header = [["a", "MISS (3 min left)"], ["bb", "met"]], ["JOB", "DEADLINE"]
    piped = io.StringIO()
    emit(rows, header, piped)
    assert piped.getvalue().splitlines() == ["JOB  DEADLINE", "---  -----------------", "a    MISS (3 min left)", "bb   met"]
    term = io.StringIO()
    emit(rows, header, term, force_terminal=True)
    text = term.getvalue()
    assert "\x1b[" in text and "MISS (3 min left)" in text and "─" in text  # coloured, drawn by rich


def test_rich_tables_fall_back_to_plain_when_the_terminal_is_too_narrow() -> None:
    from flowplan.tables import plain, rich_lines

    rows, header = [["a-long-job-name", "in 7 min", "yes"]], ["JOB", "TIER 1", "MET"]
    assert rich_lines(rows, header, width=20) == plain(rows, header)  # folding every cell reads worse
    wide = rich_lines(rows, header, width=100, right_from=1)
    assert any("\x1b[" in line for line in wide) and any("a-long-job-name" in line for line in wide)


def test_wide_status_and_explain_show_where_a_speed_comes_from(tmp_path: Path) -> None:
    """Issue 13: a job planned on speeds borrowed from a job of its task, one on its own observed
    speed, and one on the assumed default: ``status -o wide`` and ``explain`` say which."""
    from planner import PlannerConfig, Snapshot, plan
    from store import StateStore

    prior = {"basis": "task", "key": "digits", "jobs": ["old"], "points": [{"cpu_millis": 1000, "seconds_per_epoch": 1.46}]}
    snap = Snapshot.model_validate(
        {
            "time": 1000.0,
            "nodes": [{"name": "n", "cpu_millis": 4000}],
            "jobs": [
                {"id": "new", "status": "pending", "task": "digits", "speed_prior": prior},
                {"id": "seen", "status": "pending", "speed": [{"cpu_millis": 1000, "seconds_per_epoch": 3.0}]},
                {"id": "unknown", "status": "pending"},
            ],
        },
        strict=False,
    )
    path = tmp_path / "state.db"
    with StateStore(path) as store:
        store.save_plan(plan(snap, PlannerConfig(solver="greedy", time_limit=0.5)).plan, snap)
    wide = run("status", "--state", str(path), "-o", "wide")
    assert wide.returncode == 0, wide.stderr
    rows = {
        line.split()[0]: line
        for line in wide.stdout.splitlines()
        if line.split() and line.split()[0] in ("new", "seen", "unknown")
    }
    assert "speed borrowed from 1 job(s) of task digits (old): 1.46 s/epoch on 1 CPU" in rows["new"]
    assert "speed observed (1 obs" in rows["seen"]
    assert "speed assumed: 60 s/epoch on 1 CPU" in rows["unknown"]
    explain = run("explain", "new", "--state", str(path))
    assert explain.returncode == 0, explain.stderr
    assert "predictions: " in explain.stdout and "speed borrowed from 1 job(s) of task digits (old)" in explain.stdout
    assert "speed not yet observed: borrowed from 1 job(s) of task digits (old)" in explain.stdout


def test_status_gives_each_open_tier_its_band_around_the_plans_time(tmp_path: Path) -> None:
    """Issue 16: the ETA to each tier with its 80% band. On the qoe-deadlines snapshot (measured
    curves, real node shapes) planned and stored as the daemon does: every band brackets the plan's
    own time to that tier (an open upper end: the pessimistic curve never gets there), jobs whose
    curve is fitted have one, and the table shows it."""
    from planner import load_snapshot, plan
    from store import StateStore

    snap = load_snapshot(str(Path(__file__).resolve().parent.parent / "examples" / "snapshots" / "qoe-deadlines.json"))
    got = plan(snap).plan
    path = tmp_path / "state.db"
    with StateStore(path) as st:
        st.save_plan(got, snap)
    r = run("status", "--state", str(path), "-o", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["jobs"]
    banded = 0
    for row in rows:
        for tier in ("tier1", "tier2"):
            band, eta = row[f"eta_{tier}_band_s"], row[f"eta_{tier}_s"]
            if band is None:
                continue
            banded += 1
            lo, hi = band
            assert eta is not None and lo is not None and lo <= eta + 1e-6, row
            assert hi is None or hi >= eta - 1e-6, row
    assert banded >= 5
    table = run("status", "--state", str(path)).stdout
    shown = next(row for row in rows if row["eta_tier1_band_s"] is not None)
    line = next(x for x in table.splitlines() if x.startswith(shown["job"] + " "))
    assert re.search(r"in \d\S* \S+ \((now|\d\S* \S+)-(never|\d\S* \S+)\)", line), line


def test_status_shows_the_cpu_each_job_used(state: Path, busiest: tuple[int, dict[str, object]]) -> None:
    """Issue 16: CPU guaranteed *and in use*. The simulated cluster measures each running job's use
    under its node's water-fill: every running job shows one, above zero, none above its node's 8
    cores, and together not above them (capacity nobody uses flows to others, never beyond the node)."""
    plan_id, got = busiest
    rows = got["jobs"]
    assert isinstance(rows, list)
    running = [r for r in rows if r["state"] in ("Running", "Resizing")]
    assert running
    used = [r["cpu_used_millis"] for r in running]
    assert all(u is not None and 0 < u <= 8000 for u in used), used
    assert sum(used) <= 8000 * 1.001, used
    table = run("status", "--state", str(state), "--plan", str(plan_id)).stdout
    assert "USED" in table.splitlines()[2]


def test_measured_cpu_use_changes_neither_the_plan_nor_its_cached_fits() -> None:
    """``Job.cpu_used_millis`` is informational (status shows it): a snapshot that differs only in it
    gets the same assignments, and the previous call's model fits are reused for every job."""
    from planner import load_snapshot, plan

    snap = load_snapshot(str(Path(__file__).resolve().parent.parent / "examples" / "snapshots" / "qoe-deadlines.json"))
    first = plan(snap)
    used = [j.model_copy(update={"cpu_used_millis": 1234.5}) if j.status == "running" else j for j in snap.jobs]
    again = plan(snap.model_copy(update={"jobs": used}), previous=first)
    assert any(j.cpu_used_millis for j in used)
    for k, (_, fit) in first.outlooks.items():  # reused, not refitted; carrying this snapshot's job
        reused = again.outlooks[k][1]
        assert reused.curve is fit.curve and reused.speed is fit.speed
        assert reused.job == next(j for j in used if j.id == k)
    strip = [(a.job, a.node, a.cpu_millis, a.gpus, a.action) for a in first.plan.assignments]
    assert strip == [(a.job, a.node, a.cpu_millis, a.gpus, a.action) for a in again.plan.assignments]


def test_the_node_column_shows_a_gangs_spread_and_servers() -> None:
    """``flowplan status`` shows where a gang's replicas are and its servers on each node, as
    ``flowplan plan`` does; a single job just its node."""
    from flowplan.status_cmd import _where

    spread = {
        "node": "n0",
        "replicas": 8,
        "placement": [{"node": "n0", "replicas": 4}, {"node": "n1", "replicas": 4}],
        "servers": 2,
    }
    assert _where(spread) == "n0x4+n1x4 +2ps"
    assert _where({"node": "n0", "replicas": 2, "placement": None, "servers": 1}) == "n0x2 +1ps"
    assert _where({"node": "n0", "replicas": 1, "placement": None, "servers": None}) == "n0"
    assert _where({"node": None, "replicas": 4, "placement": None, "servers": None}) == "-"


def test_all_shows_the_finished_jobs_and_how_a_failed_one_failed(state: Path, tmp_path: Path) -> None:
    """``--all`` (like ``docker ps -a``): the finished jobs of the plan's snapshot after the planned
    ones, ``Succeeded``, or ``Failed`` with the cluster's reason (``Job.failure``: a Docker exit code,
    a pod's reason). Without it they are not shown. The simulated run ends with all six finished;
    a snapshot whose failed job is put into a store by hand shows it ``Failed``."""
    last = run("status", "--state", str(state), "-a", "-o", "json")
    assert last.returncode == 0, last.stderr
    rows = json.loads(last.stdout)["jobs"]
    assert sorted(r["job"] for r in rows) == sorted(["yolov3", "deepspeech2", "cifar10", "cifar10-urgent", "ncf-0", "ncf-1"])
    assert {r["state"] for r in rows} == {"Succeeded"} and all(r["failure"] is None for r in rows)
    assert "no active jobs" in run("status", "--state", str(state)).stdout  # without --all, as before

    from planner import load_snapshot, plan
    from store import StateStore

    snap = load_snapshot(str(Path(__file__).resolve().parent.parent / "examples" / "snapshots" / "qoe-deadlines.json"))
    ended = snap.jobs[0].model_copy(
        update={"status": "finished", "node": None, "allocation": None, "failure": "exit 137 (OOMKilled)"}
    )
    snap = snap.model_copy(update={"jobs": [ended, *snap.jobs[1:]]})
    path = tmp_path / "failed.db"
    with StateStore(path) as store:
        store.save_plan(plan(snap).plan, snap)
    table = run("status", "--state", str(path), "--all")
    assert table.returncode == 0, table.stderr
    line = next(x for x in table.stdout.splitlines() if x.startswith(ended.id + " "))
    assert "Failed" in line and "failed: exit 137 (OOMKilled)" in line, table.stdout
    assert ended.id not in run("status", "--state", str(path)).stdout


def test_a_failure_belongs_to_a_finished_job_only() -> None:
    from planner import SnapshotError, parse_snapshot

    doc = json.loads((Path(__file__).resolve().parent.parent / "examples" / "snapshots" / "qoe-deadlines.json").read_text())
    running = next(j for j in doc["jobs"] if j["status"] == "running")
    running["failure"] = "exit 3"
    with pytest.raises(SnapshotError, match=r"failure: set, but the job is running \(only a finished job has failed\)"):
        parse_snapshot(json.dumps(doc))
