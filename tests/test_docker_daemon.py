"""``flowplan daemon`` and ``flowplan snapshot`` as processes, against real engines.

Case matrix:

- snapshot → plan: the written snapshot is valid and ``flowplan plan`` accepts it; a bad ``--hosts``
  is one line and exit code 2;
- snapshot of containers printing recorded Keras, Lightning, HF Trainer and step logs: their
  histories are what ``flowplan logs`` reads from the same files; a bar line the engine cuts at
  16 KiB into stamped pieces (the cut inside a loss value) is read as the text it was;
- ``--dry-run`` prints the plan and "would" actions and changes nothing;
- crash recovery: the daemon is killed (SIGKILL) while actions are pending in the state store; a
  restarted daemon settles them, and converges to every job running exactly once (no duplicate,
  no lost container), with nothing left pending;
- event-driven re-plan: with a 60 s interval, a container created (pending) after the daemon's first
  interval is started within seconds (the engine's ``create`` event wakes the daemon), and the
  daemon's own ``start`` of it does not wake it again; ``--no-events`` waits for the interval.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
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
    # A user's --cpus 0.5 (CpuShares unset): guaranteed no more than its cap, and the cap shown.
    s1 = jobs["s1"]
    assert s1.status == "running" and (s1.allocation.cpu_millis, s1.allocation.cpu_limit_millis) == (500, 500)
    assert jobs["s2"].status == "pending"
    assert [n.cpu_millis for n in snap.nodes] == [2000, 2000]
    res = flowplan("plan", str(out), "--format", "json", "--time-limit", "0.3")
    assert res.returncode == 0, res.stderr
    assert '"s2"' in res.stdout
    # With the daemon's state: the finished runs of a pending job's task come along as its curves.
    from planner.snapshot import MetricPoint
    from store import StateStore

    with StateStore(tmp_path / "state.db") as store:
        store.add_points("old", [MetricPoint(time=float(e), epoch=float(e), loss=2.0 / e) for e in (1, 2, 3, 4)])
        store.record_speeds("old", [], task="digits", image=None, epochs=4.0, finished=True)
    create_job(
        main.url, "fp-s3", "s3", docker_engines.ckpt, args=JOB_ARGS, labels={**BOUNDS, "flowplan.task": "digits"}, start=False
    )
    with_state = tmp_path / "with-state.json"
    res = flowplan("snapshot", "--hosts", *hosts(docker_engines), "--state", str(tmp_path / "state.db"), "--out", str(with_state))
    assert res.returncode == 0, res.stderr
    assert "the curves of 1 finished run(s) of 1 task(s)" in res.stderr
    (curves,) = load_snapshot(with_state).curve_priors
    assert (curves.task, [r.job for r in curves.runs]) == ("digits", ["old"])
    bad = flowplan("snapshot", "--hosts", "main=http://nope")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--hosts" in bad.stderr and "http://nope" in bad.stderr
    # Every host unreachable: one line, exit 2, nothing written (was exit 0 with a 0-CPU node).
    gone = tmp_path / "gone.json"
    nowhere = [f"a=unix://{tmp_path}/none.sock", f"b=unix://{tmp_path}/none2.sock"]
    down = flowplan("snapshot", "--hosts", *nowhere, "--out", str(gone))
    assert down.returncode == 2 and down.stderr.count("\n") == 1, down.stderr
    assert "no Docker host answered: a:" in down.stderr and "(and 1 more)" in down.stderr and not gone.exists()


FRAMEWORK_LOGS = [
    "keras/keras-fit-pty.log",
    "lightning/lightning-tqdm-pipe.log",
    "transformers/hf-trainer-pipe.log",
    "pytorch/pytorch-steps.log",  # with flowplan.steps_per_epoch=23
]


STEPS = {"pytorch/pytorch-steps.log": {"flowplan.steps_per_epoch": "23"}}


def test_snapshot_shows_the_history_of_framework_logs(docker_engines: Any, tmp_path: Path) -> None:
    """Containers printing recorded Keras, Lightning, HF Trainer and step logs (``cat`` of the fixture):
    the snapshot's history is what ``flowplan logs`` reads from the same bytes, stamped by the engine."""
    from docker_env import api, create_job

    from adapters.logs import read_log

    fixtures = Path(__file__).resolve().parent / "fixtures" / "logs"
    main = docker_engines.engines[0]
    ids = {}
    for i, rel in enumerate(FRAMEWORK_LOGS):
        ids[f"log{i}"] = create_job(
            main.url, f"fp-log{i}", f"log{i}", docker_engines.ckpt, labels={**BOUNDS, **STEPS.get(rel, {})},
            command=["/bin/cat", f"/logs/{rel}"], extra_binds=[f"{fixtures}:/logs:ro"],
        )  # fmt: skip
    deadline = time.time() + 60
    while time.time() < deadline and any(api(main.url).inspect_container(c)["State"]["Running"] for c in ids.values()):
        time.sleep(0.3)
    out = tmp_path / "snap.json"
    res = flowplan("snapshot", "--hosts", *hosts(docker_engines), "--out", str(out))
    assert res.returncode == 0, res.stderr
    jobs = {j.id: j for j in load_snapshot(out).jobs}
    for i, rel in enumerate(FRAMEWORK_LOGS):
        want, _, _ = read_log((fixtures / rel).read_bytes(), steps_per_epoch=23 if rel in STEPS else None)
        job = jobs[f"log{i}"]
        assert job.status == "finished"
        assert [(p.epoch, p.loss, p.metric) for p in job.history] == [(p.epoch, p.loss, p.metric) for p in want], rel
        assert len(job.history) >= 6 and all(p.time > 1.7e9 for p in job.history)


def test_snapshot_reads_a_bar_line_the_engine_cut(docker_engines: Any, tmp_path: Path) -> None:
    """A bar redrawn 400 times on one line (39 kB, one newline at the end): the engine cuts it at
    16 KiB into pieces and writes each piece's timestamp (the line's first, for all of them) at the
    cut, here inside frame 169's loss, ``loss=169.12|3456789``. The history is what ``flowplan logs``
    reads from the same text: every frame, the one across the cut with its loss whole."""
    from docker_env import api, create_job

    from adapters.logs import read_log

    pad = " " * 27  # frames of 97 bytes: 16384 = 168 * 97 + 88, inside frame 169's loss digits
    fmt = f"Epoch 1/1:{pad} %3d%%|#| %3d/400 [00:00<00:00, 9.9it/s, loss=%3d.123456789]"
    script = f'i=0; while [ $i -lt 400 ]; do i=$((i+1)); printf "{fmt}\\r" $((i/4)) $i $i; done; echo'
    text = "".join(
        f"Epoch 1/1:{pad} {i // 4:3d}%|#| {i:3d}/400 [00:00<00:00, 9.9it/s, loss={i:3d}.123456789]\r" for i in range(1, 401)
    )
    main = docker_engines.engines[0]
    cid = create_job(main.url, "fp-cut", "cut", docker_engines.ckpt, labels=BOUNDS, command=["/bin/sh", "-c", script])
    deadline = time.time() + 30
    while time.time() < deadline and api(main.url).inspect_container(cid)["State"]["Running"]:
        time.sleep(0.2)
    raw = api(main.url).logs(cid, timestamps=True)
    assert raw.count(b"\n") == 1 and b"loss=169.12" + raw[:31] + b"3456789]" in raw, raw[:200]  # the cut, as planned
    out = tmp_path / "snap.json"
    res = flowplan("snapshot", "--hosts", *hosts(docker_engines), "--out", str(out))
    assert res.returncode == 0, res.stderr
    (job,) = [j for j in load_snapshot(out).jobs if j.id == "cut"]
    want, _, _ = read_log(text + "\n")
    assert [(p.epoch, p.loss) for p in job.history] == [(p.epoch, p.loss) for p in want]
    assert (169 / 400, 169.123456789) in [(p.epoch, p.loss) for p in job.history] or 169 not in [
        round(p.epoch * 400) for p in want
    ]


def test_dry_run_changes_nothing(docker_engines: Any, tmp_path: Path) -> None:
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    cid = create_job(main.url, "fp-dry", "dry", docker_engines.ckpt, args=JOB_ARGS, labels=BOUNDS, start=False)
    create_job(main.url, "fp-dry2", "dry2", docker_engines.ckpt, args=JOB_ARGS, labels=BOUNDS, start=False)
    res = flowplan(
        "daemon", "--hosts", *hosts(docker_engines), "--dry-run", "--max-ticks", "1", "--interval", "1",
        "--time-limit", "0.3", "--state", str(tmp_path / "s.db"),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    banner, *rest = res.stdout.splitlines()
    assert banner.startswith("flowplan daemon ") and "DRY RUN" in banner, banner
    assert "hosts main=unix:" in banner and "extra0=" in banner, banner
    # One line per change, stamped with the interval's time; no plan table.
    assert sorted(line.split(" ", 1)[1].split(" on ")[0] for line in rest) == ["would start dry", "would start dry2"], rest
    assert all(re.match(r"\d\d:\d\d:\d\d would start dry2? on \w+ \d+m$", line) for line in rest), rest
    assert api(main.url).inspect_container(cid)["State"]["Status"] == "created"
    # Issue 16: status on the Docker daemon's store shows every job with a reason; explain tells
    # what one was offered (worked out from the stored snapshot).
    status = flowplan("status", "--state", str(tmp_path / "s.db"), "-o", "json")
    assert status.returncode == 0, status.stderr
    rows = {r["job"]: r for r in json.loads(status.stdout)["jobs"]}
    assert set(rows) == {"dry", "dry2"} and all(r["reason"] and r["state"] == "Starting" for r in rows.values()), rows
    story = flowplan("explain", "dry", "--state", str(tmp_path / "s.db"))
    assert story.returncode == 0 and "option(s) weighed" in story.stdout and "main" in story.stdout, story.stdout
    verbose = flowplan(
        "daemon", "--hosts", *hosts(docker_engines), "--dry-run", "--max-ticks", "1", "--interval", "1",
        "--time-limit", "0.3", "--state", str(tmp_path / "s.db"), "--verbose",
    )  # fmt: skip
    assert "would start dry" in verbose.stdout and "dry" in verbose.stdout.split("would")[0]  # -v: the plan table first


def test_quiet_intervals_print_nothing_but_the_banner(docker_engines: Any, tmp_path: Path) -> None:
    """Issue 16: the dry run reprinted the whole plan every tick. Five intervals with nothing to change
    (a running job at its plan) now print the banner and nothing else."""
    from docker_env import create_job

    main = docker_engines.engines[0]
    create_job(main.url, "fp-calm", "calm", docker_engines.ckpt, args=JOB_ARGS, labels=BOUNDS, cpus=1.0)
    res = flowplan(
        "daemon", "--hosts", f"main={main.url},cpu=2000", "--dry-run", "--max-ticks", "5", "--interval", "0.3",
        "--time-limit", "0.3", "--no-events", "--state", str(tmp_path / "q.db"), "--keep-plans", "2", "--keep-snapshots", "1",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowplan daemon "), lines
    # Five plans saved, the newest two kept, the newest alone with its snapshot (--keep-plans, --keep-snapshots).
    with sqlite3.connect(tmp_path / "q.db") as conn:
        kept = conn.execute("SELECT id, snapshot IS NOT NULL FROM plans ORDER BY id").fetchall()
    assert [(i, bool(s)) for i, s in kept] == [(4, False), (5, True)], kept
    # Issue 16: status shows the CPU the running job used, as the engine's stats measured it.
    status = flowplan("status", "--state", str(tmp_path / "q.db"), "-o", "json")
    row = next(r for r in json.loads(status.stdout)["jobs"] if r["job"] == "calm")
    assert row["cpu_used_millis"] is not None and 0 < row["cpu_used_millis"] <= 1100, row  # it may use at most 1 CPU


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


class Lines:
    """A process's stdout, line by line, collected in the background (with the time each came)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        self._t = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._t.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def ticks(self) -> list[str]:
        return [line for _, line in self.lines if " jobs " in line and " plan " in line]


def _engine_time(text: str) -> float:
    from adapters.docker.progress import parse_timestamp

    sec, nano = parse_timestamp(text)
    return sec + nano / 1e9


def _start_latency(engines: Any, tmp_path: Path, name: str, *extra: str) -> tuple[float, list[str], list[str]]:
    """Run the daemon (60 s interval, one host), create a pending job after its first interval, time
    created -> started; also the interval lines (``--verbose``) and every line it printed."""
    from docker_env import api, create_job

    main = engines.engines[0]
    cmd = [sys.executable, "-m", "flowplan", "daemon", "--hosts", f"main={main.url},cpu=2000"]
    cmd += ["--state", str(tmp_path / f"{name}.db"), "--interval", "60", "--time-limit", "0.3", "--verbose", *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out = Lines(proc)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not out.ticks():
            time.sleep(0.05)
        assert out.ticks(), out.lines
        time.sleep(1.0)
        cid = create_job(main.url, f"fp-{name}", name, engines.ckpt, args=JOB_ARGS, labels=BOUNDS, start=False)
        client = api(main.url)
        deadline = time.time() + 20
        info = client.inspect_container(cid)
        while time.time() < deadline and info["State"]["Status"] == "created":
            time.sleep(0.05)
            info = client.inspect_container(cid)
        started = info["State"]["Status"] != "created"
        latency = _engine_time(info["State"]["StartedAt"]) - _engine_time(info["Created"]) if started else float("inf")
        if started:
            time.sleep(3.0)  # time for a spurious re-plan on the daemon's own start event to show
        return latency, out.ticks(), [line for _, line in out.lines]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_daemon_starts_a_created_job_at_once_on_its_event(docker_engines: Any, tmp_path: Path) -> None:
    latency, ticks, lines = _start_latency(docker_engines, tmp_path, "evt")
    print(f"created -> started under the daemon (interval 60 s): {latency:.2f} s; ticks: {ticks}")
    assert 0 < latency < 5.0, (latency, ticks)  # the interval is 60 s: only the create event explains it
    assert len(ticks) == 2, ticks  # the first interval, then the one the create woke; not its own start
    assert "woken: main: create fp-evt (job evt)" in ticks[1], ticks
    # The interval's own line, then one line per change: the start is said in the lines after it.
    after = lines[lines.index(ticks[1]) + 1 :]
    assert any("start evt" in line or "started evt" in line for line in after), lines


def test_daemon_without_events_waits_for_the_interval(docker_engines: Any, tmp_path: Path) -> None:
    from docker_env import api

    latency, ticks, _ = _start_latency(docker_engines, tmp_path, "noevt", "--no-events")
    assert latency > 10.0 and len(ticks) == 1, (latency, ticks)
    # SIGTERM cut the sleep short and stopped the daemon without another interval: still pending.
    (c,) = api(docker_engines.engines[0].url).containers(all=True, filters={"label": "flowplan.job=noevt"})
    assert c["State"] == "created", c


def _daemon(engines: Any, state: Path, *extra: str) -> subprocess.Popen[str]:
    main = engines.engines[0]
    cmd = [sys.executable, "-m", "flowplan", "daemon", "--hosts", f"main={main.url},cpu=2000", "--no-events"]
    cmd += ["--state", str(state), "--interval", "1", "--time-limit", "0.3", *extra]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )


def test_two_daemons_one_scope_one_acts_and_scopes_keep_them_apart(docker_engines: Any, tmp_path: Path) -> None:
    """Issue 15: two daemons on one engine fought over every flowplan.job container. Now a second
    daemon on the same scope (sharing the state store) exits 3 naming the holder; daemons on
    different scopes each start only their own jobs."""
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    state = tmp_path / "shared.db"
    a_job = create_job(
        main.url, "fp-team-a", "team-a", docker_engines.ckpt, args=JOB_ARGS, labels={**BOUNDS, "team": "a"}, start=False
    )
    b_job = create_job(
        main.url, "fp-team-b", "team-b", docker_engines.ckpt, args=JOB_ARGS, labels={**BOUNDS, "team": "b"}, start=False
    )
    client = api(main.url)

    def status(cid: str) -> str:
        return str(client.inspect_container(cid)["State"]["Status"])

    first = _daemon(docker_engines, state, "--scope", "team=a")
    out = Lines(first)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and status(a_job) == "created":
            time.sleep(0.1)
        assert status(a_job) == "running", out.lines
        assert status(b_job) == "created"  # not in its scope: left alone
        second = flowplan(
            "daemon", "--hosts", f"main={main.url},cpu=2000", "--no-events", "--state", str(state), "--scope", "team=a"
        )
        assert second.returncode == 3, second.stderr
        (line,) = second.stderr.strip().splitlines()
        assert "lease 'docker/team=a' is held by" in line and f"pid {first.pid}" in line, line
        everything = flowplan("daemon", "--hosts", f"main={main.url},cpu=2000", "--no-events", "--state", str(state))
        assert everything.returncode == 3 and "docker/team=a" in everything.stderr, everything.stderr
        assert status(b_job) == "created"
        other = _daemon(docker_engines, state, "--scope", "team=b", "--max-ticks", "3")
        assert other.wait(timeout=60) == 0
        assert status(b_job) == "running" and status(a_job) == "running"
        # The operator's view of the daemons' store: every job of the latest plan, with a reason.
        seen = flowplan("status", "--state", str(state), "-o", "json")
        assert seen.returncode == 0, seen.stderr
        rows = json.loads(seen.stdout)["jobs"]
        assert rows and all(r["reason"] and r["node"] == "main" for r in rows), rows
        assert {r["job"] for r in rows} <= {"team-a", "team-b"}
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    # Stopped cleanly, the first daemon gave its lease back: a new one on its scope starts at once.
    again = flowplan(
        "daemon",
        "--hosts",
        f"main={main.url},cpu=2000",
        "--no-events",
        "--state",
        str(state),
        "--scope",
        "team=a",
        "--max-ticks",
        "1",
    )
    assert again.returncode == 0, again.stderr


def test_daemon_metrics_and_the_dashboard_names(docker_engines: Any, tmp_path: Path) -> None:
    """The daemon's Prometheus metrics over real HTTP while it runs (a started job shows as an ok
    start and a running job), and every metric the Grafana dashboard (deploy/grafana) names is one
    the daemon or the service exports."""
    import json
    import re
    import urllib.request

    from docker_env import create_job
    from prometheus_client import generate_latest

    from api.metrics import ServiceMetrics

    main = docker_engines.engines[0]
    create_job(main.url, "fp-metered", "metered", docker_engines.ckpt, args=JOB_ARGS, labels=BOUNDS, start=False)
    proc = _daemon(docker_engines, tmp_path / "m.db", "--metrics-port", "0")
    out = Lines(proc)
    try:
        deadline = time.time() + 60
        url = None
        while time.time() < deadline and url is None:
            url = next((m.group(1) for _, line in out.lines if (m := re.search(r"metrics on (http://\S+)", line))), None)
            time.sleep(0.1)
        assert url is not None, out.lines

        def scrape() -> str:
            with urllib.request.urlopen(url, timeout=10) as r:
                return str(r.read().decode())

        text = ""
        while time.time() < deadline:
            text = scrape()
            if 'flowplan_daemon_actions_total{kind="start",result="ok"} 1.0' in text and re.search(
                r'flowplan_daemon_jobs\{state="running"\} 1\.0', text
            ):
                break
            time.sleep(0.5)
        assert 'flowplan_daemon_actions_total{kind="start",result="ok"} 1.0' in text, text
        assert re.search(r'flowplan_daemon_jobs\{state="running"\} 1\.0', text), text
        assert (
            re.search(r"flowplan_daemon_intervals_total [1-9]", text)
            and 'flowplan_daemon_cpu_millis{kind="capacity"} 2000.0' in text
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    service = ServiceMetrics()
    service.plans.labels(solver="cpsat", status="optimal").inc()  # labelled series show once used
    service.count_error(422)
    pattern = r"^(flowplan_\w+?)(?:_bucket|_count|_sum|_created)?[{ ]"
    exported = set(re.findall(pattern, text, re.M)) | set(re.findall(pattern, generate_latest(service.registry).decode(), re.M))
    dashboard = json.loads((Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "flowplan.json").read_text())
    named = {
        re.sub(r"_(bucket|count|sum)$", "", n)
        for p in dashboard["panels"]
        for t in p.get("targets", [])
        for n in re.findall(r"flowplan_\w+", t["expr"])
    }
    assert named and named <= exported, sorted(named - exported)


def test_status_live_plans_the_engine_now_and_changes_nothing(docker_engines: Any, tmp_path: Path) -> None:
    """`flowplan status --live` observes real engines and plans once, without a state store or a
    daemon: the pending job shows as Starting with its reason, and nothing is applied."""
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    cid = create_job(main.url, "fp-look", "look", docker_engines.ckpt, args=JOB_ARGS, labels=BOUNDS, start=False)
    res = flowplan("status", "--live", "--hosts", f"main={main.url},cpu=2000", "--state", str(tmp_path / "none.db"), "-o", "json")
    assert res.returncode == 0, res.stderr
    (row,) = [r for r in json.loads(res.stdout)["jobs"] if r["job"] == "look"]
    assert row["state"] == "Starting" and row["node"] == "main" and row["reason"].startswith("starts on main"), row
    assert api(main.url).inspect_container(cid)["State"]["Status"] == "created" and not (tmp_path / "none.db").exists()
    table = flowplan("status", "--live", "--hosts", f"main={main.url},cpu=2000", "--state", str(tmp_path / "none.db"))
    assert table.stdout.startswith("live plan (nothing applied): 1 job(s)"), table.stdout


#: A job that reports its three epochs at once, then spends 15 s after the last one (a test-set
#: evaluation, a save, an upload) before it exits 0; a SIGTERM there (the adapter's pause) is
#: answered as a checkpointing job answers it: "TERM" and exit 75.
EPILOGUE = (
    "trap 'echo TERM; exit 75' TERM; "
    'for e in 1 2 3; do echo "{\\"epoch\\": $e, \\"metric\\": 0.$((5 + e)), \\"time\\": $(date +%s)}"; done; '
    "i=0; while [ $i -lt 15 ]; do sleep 1 & wait $!; i=$((i + 1)); done; echo 'epilogue done'"
)


def test_a_job_past_its_last_epoch_ends_by_itself_before_a_waiting_one_starts(docker_engines: Any, tmp_path: Path) -> None:
    """One 1-CPU host; the daemon starts two jobs of 0.5 CPU at least (the host full). ``ending``
    reports its last epoch (``max_epochs`` 3) at once and is then busy for 15 s with what its script
    does after it; a third job is created meanwhile and waits for room. The daemon leaves ``ending``
    to exit by itself (no pause; exit 0 after its epilogue) and starts the waiting job once it has.
    Before session 43 the daemon paused it for the waiting job (nothing left to learn, its CPU worth
    more to a job still learning): its script was cut short (exit 75)."""
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    bounds = {"flowplan.min_cpu_millis": "500", "flowplan.max_cpu_millis": "1000"}
    target = {"flowplan.target.metric": "accuracy", "flowplan.target.direction": "higher", "flowplan.target.tier1": "0.99"}
    labels = {**bounds, **target, "flowplan.target.max_epochs": "3"}
    ending = create_job(
        main.url, "fp-ending", "ending", docker_engines.ckpt, labels=labels, command=["/bin/sh", "-c", EPILOGUE], start=False
    )
    busy = create_job(main.url, "fp-busy", "busy", docker_engines.ckpt, args=JOB_ARGS, labels=bounds, start=False)
    client = api(main.url)
    state = tmp_path / "epilogue.db"
    cmd = [sys.executable, "-m", "flowplan", "daemon", "--hosts", f"main={main.url},cpu=1000", "--state", str(state)]
    proc = subprocess.Popen(
        [*cmd, "--interval", "1", "--time-limit", "0.3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out = Lines(proc)
    waiting = None
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (
            client.inspect_container(busy)["State"]["Running"] and b'"epoch": 3' in client.logs(ending)
        ):
            time.sleep(0.2)
        assert b'"epoch": 3' in client.logs(ending), [line for _, line in out.lines]
        waiting = create_job(main.url, "fp-waiting", "waiting", docker_engines.ckpt, args=JOB_ARGS, labels=bounds, start=False)
        while time.time() < deadline and client.inspect_container(waiting)["State"]["Status"] == "created":
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    done, started = client.inspect_container(ending)["State"], client.inspect_container(waiting)["State"]
    logs = client.logs(ending).decode()
    printed = [line for _, line in out.lines]
    assert done["Status"] == "exited" and done["ExitCode"] == 0, (done, logs, printed)
    assert "epilogue done" in logs and "TERM" not in logs, (logs, printed)
    assert started["Status"] != "created", (started, printed)
    assert _engine_time(started["StartedAt"]) >= _engine_time(done["FinishedAt"]) - 0.5, (done, started)
    with sqlite3.connect(state) as db:
        kinds = {k for (k,) in db.execute("SELECT kind FROM actions WHERE job = 'ending'")}
    assert "pause" not in kinds, kinds
