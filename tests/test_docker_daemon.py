"""``flowplan daemon`` and ``flowplan snapshot`` as processes, against real engines.

Case matrix:

- snapshot → plan: the written snapshot is valid and ``flowplan plan`` accepts it; a bad ``--hosts``
  is one line and exit code 2;
- ``--dry-run`` prints the plan and "would" actions and changes nothing;
- crash recovery: the daemon is killed (SIGKILL) while actions are pending in the state store; a
  restarted daemon settles them, and converges to every job running exactly once (no duplicate,
  no lost container), with nothing left pending.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from planner.io import load_snapshot

pytestmark = pytest.mark.slow

JOB_ARGS = ["--work", "60", "--epochs", "400"]
BOUNDS = {"flowplan.min_cpu_millis": "250", "flowplan.max_cpu_millis": "1000"}


@pytest.fixture(autouse=True)
def _clean(docker_engines: Any) -> Any:
    from docker_env import remove_jobs

    for e in docker_engines.engines:
        remove_jobs(e.url)
    yield
    for e in docker_engines.engines:
        remove_jobs(e.url)


def hosts(engines: Any) -> list[str]:
    main, e0 = engines.engines[0], engines.engines[1]
    return [f"main={main.url},cpu=2000", f"extra0={e0.url},cpu=2000"]


def flowplan(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flowplan", *args], capture_output=True, text=True, timeout=timeout)


def all_containers(engines: Any, job_id: str) -> list[tuple[str, dict[str, Any]]]:
    from docker_env import api

    out = []
    for e in engines.engines[:2]:
        for c in api(e.url).containers(all=True, filters={"label": f"flowplan.job={job_id}"}):
            out.append((e.name, c))
    return out


def test_snapshot_feeds_plan_and_bad_hosts_exit_2(docker_engines: Any, tmp_path: Path) -> None:
    from docker_env import create_job

    main = docker_engines.engines[0]
    create_job(main.url, "fp-s1", "s1", docker_engines.ckpt, args=JOB_ARGS, cpus=0.5, labels=BOUNDS)
    create_job(main.url, "fp-s2", "s2", docker_engines.ckpt, args=JOB_ARGS, labels=BOUNDS, start=False)
    out = tmp_path / "snap.json"
    res = flowplan("snapshot", "--hosts", *hosts(docker_engines), "--out", str(out))
    assert res.returncode == 0, res.stderr
    snap = load_snapshot(out)
    jobs = {j.id: j for j in snap.jobs}
    assert jobs["s1"].status == "running" and jobs["s1"].allocation.cpu_millis == 500
    assert jobs["s2"].status == "pending"
    assert [n.cpu_millis for n in snap.nodes] == [2000, 2000]
    res = flowplan("plan", str(out), "--format", "json", "--time-limit", "0.3")
    assert res.returncode == 0, res.stderr
    assert '"s2"' in res.stdout
    bad = flowplan("snapshot", "--hosts", "main=http://nope")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--hosts" in bad.stderr and "http://nope" in bad.stderr


def test_dry_run_changes_nothing(docker_engines: Any, tmp_path: Path) -> None:
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    cid = create_job(main.url, "fp-dry", "dry", docker_engines.ckpt, args=JOB_ARGS, labels=BOUNDS, start=False)
    res = flowplan(
        "daemon", "--hosts", *hosts(docker_engines), "--dry-run", "--max-ticks", "1", "--interval", "1",
        "--time-limit", "0.3", "--state", str(tmp_path / "s.db"),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "would start dry" in res.stdout and "dry" in res.stdout.split("would")[0]  # the plan table, then the actions
    assert api(main.url).inspect_container(cid)["State"]["Status"] == "created"


def _pending(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.2) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM actions WHERE status = 'pending'").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_daemon_killed_mid_apply_converges_after_restart(docker_engines: Any, tmp_path: Path) -> None:
    from docker_env import create_job

    main = docker_engines.engines[0]
    ids = [f"crash{i}" for i in range(4)]
    for job_id in ids:
        create_job(main.url, f"fp-{job_id}", job_id, docker_engines.ckpt, args=JOB_ARGS, labels=BOUNDS, start=False)
    db = tmp_path / "state.db"
    cmd = [sys.executable, "-m", "flowplan", "daemon", "--hosts", *hosts(docker_engines), "--state", str(db)]
    cmd += ["--interval", "1", "--time-limit", "0.3", "--checkpoint-timeout", "20", "--down-grace", "5"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 90
    killed_with = 0
    while time.time() < deadline and proc.poll() is None:
        killed_with = _pending(db)
        if killed_with:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait(timeout=10)
    assert killed_with > 0, "the daemon never had a pending action (stdout: %s)" % (proc.stdout.read() if proc.stdout else "")
    assert _pending(db) > 0  # it really died mid-apply

    res = flowplan(*cmd[3:], "--max-ticks", "5", timeout=180)
    assert res.returncode == 0, res.stderr
    assert "recovered: action" in res.stdout, res.stdout
    assert _pending(db) == 0
    for job_id in ids:
        found = all_containers(docker_engines, job_id)
        assert len(found) == 1, (job_id, found)  # no duplicate, none lost
        assert found[0][1]["State"] == "running", (job_id, found)
