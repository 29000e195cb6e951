"""Load benchmark of the HTTP service on loopback: metric ingestion throughput and plan latency.

Starts ``flowplan serve`` (one uvicorn process, a fresh state file), then:

1. **Ingestion**: ``--clients`` concurrent clients (threads, one keep-alive connection each) post the
   measured validation curves of the Pollux/AdaptDL artifact (``../shared/data/adaptdl-osdi21``, every
   model and batch size) as job histories, one batch per curve (``--batch`` points at most), many jobs
   per curve, until ``--points`` points are sent or ``--seconds`` pass. Prints points/s and the
   count sent, acknowledged and stored (read back from the state file after the server stopped).
2. **Plan latency**: ``POST /v1/plan`` with 50-job snapshots from :mod:`benchmarks.workload` (real
   node shapes, pod requests and curves), one client, ``--plans`` requests per mode: a *cold* mode
   (a different snapshot every request, so no job's fitted curve can be reused) and a *warm* mode
   (the same snapshot again: the service reuses the fits of jobs whose inputs did not change). Prints
   p50 / p99 / max of the client-side latency.
3. **Responsiveness under planning load**: ``--clients`` clients each post the example snapshots
   (``examples/snapshots/*.json``) ``--rounds`` times, back to back, while one more client polls
   ``/healthz`` and ``/metrics`` every ``--poll-ms``. A client told 429/503 counts a rejection and waits
   the ``Retry-After`` it was given before its next request. Prints p50 / p99 of the accepted plans,
   of ``/healthz`` and of ``/metrics``, and the rejections.

4. **Warm 50-job plans** (``--phases warm``): ``--clients`` clients each re-plan their own cluster (a
   50-job snapshot of :mod:`benchmarks.workload` on ``--nodes`` nodes) ``--rounds`` + 1 times, back to
   back, while one more client polls ``/healthz`` and ``/metrics`` (in its own process unless
   ``--poller thread``: a thread beside the clients times their GIL too). The plans are reported as each
   client's *first* and its *repeat* ones, and by ``FlowPlan-Fitted-Jobs``: *warm* (every fit was the
   worker's already) and *fitting* (some were fitted), each with the planner's own time
   (``solver.seconds``) beside the client's latency, which includes waiting for a worker; then the
   CPU per answered plan of the server process, its planning workers and the clients' threads (Linux
   ``/proc``; the poller's process is not counted): what a plan costs the machine in all, against how
   often one was answered.

Bounded: at most ``--points`` points and ``--seconds`` of ingestion, ``2 x --plans`` plan requests,
``--clients x --rounds x 3`` requests under load, ``--clients x (--rounds + 1)`` warm. Figures vary
with the machine and its load; nothing
here asserts a time.

    python benchmarks/bench_api.py [--clients 8] [--batch 100] [--points 200000] [--seconds 20] [--plans 60]
    python benchmarks/bench_api.py --phases load [--clients 8] [--rounds 5]    # only phase 3
    python benchmarks/bench_api.py --phases warm [--clients 8] [--rounds 5] [--queue 6]    # only phase 4
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import multiprocessing.process
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from workload import default_data_dir, make_snapshot  # noqa: E402

from store import StateStore  # noqa: E402


def measured_curves(data_dir: Path) -> list[tuple[str, list[float]]]:
    out = []
    for path in sorted((data_dir / "adaptdl-osdi21" / "traces").glob("*/validation-*.csv")):
        with path.open() as fh:
            values = [float(r["metric"]) for r in csv.DictReader(fh) if r.get("metric") not in (None, "", "nan")]
        if values:
            out.append((f"{path.parent.name}-bs{path.stem.split('-')[1]}", values))
    return out


def _proc_stat(proc: Path) -> tuple[int, float]:
    """A process's parent pid and the user + system CPU seconds it has used, from ``/proc/PID/stat``."""
    fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, state: Path, synchronous: str, env_extra: dict[str, str] | None = None) -> None:
        env = dict(os.environ)
        env.pop("FLOWPLAN_TOKEN", None)
        env.pop("FLOWPLAN_READ_TOKEN", None)
        env.update(env_extra or {})
        cmd = [sys.executable, "-m", "flowplan", "serve", "--port", "0", "--state", str(state), "--log-level", "warning"]
        cmd += ["--synchronous", synchronous.lower()]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                threading.Thread(target=self.proc.stderr.read, daemon=True).start()
                return
        raise SystemExit("flowplan serve did not start")

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used (Linux /proc)."""
        return _proc_stat(Path(f"/proc/{self.proc.pid}"))[1]

    def cpu_by_process(self) -> dict[int, float]:
        """User + system CPU seconds of the server and of every process below it (its planning
        workers), by pid (Linux /proc)."""
        parent: dict[int, int] = {}
        cpu: dict[int, float] = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                parent[int(d.name)], cpu[int(d.name)] = _proc_stat(d)
            except OSError:  # gone meanwhile
                continue
        tree, todo = {}, [self.proc.pid]
        while todo:
            pid = todo.pop()
            tree[pid] = cpu.get(pid, 0.0)
            todo.extend(child for child, up in parent.items() if up == pid)
        return tree

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def ingest(server: Server, curves: list[tuple[str, list[float]]], args: argparse.Namespace) -> dict[str, float]:
    # Bodies are encoded before the clock starts: the figure is the service's, not the client's JSON encoder's.
    tasks: queue.Queue[tuple[str, int, bytes]] = queue.Queue()
    sent = 0
    copy = 0
    t0 = 1_767_000_000.0
    while sent < args.points:
        for name, values in curves:
            job = f"{name}-{copy}"
            pts = [{"time": t0 + 30.0 * i, "epoch": i + 1, "metric": v} for i, v in enumerate(values)]
            for i in range(0, len(pts), args.batch):
                batch = pts[i : i + args.batch][: args.points - sent]
                if batch:
                    tasks.put((job, len(batch), json.dumps({"points": batch}).encode()))
                    sent += len(batch)
        copy += 1
    acked = 0
    posted = 0
    lock = threading.Lock()
    latencies: list[float] = []
    deadline = time.perf_counter() + args.seconds

    url = server.url

    def client() -> None:
        nonlocal acked, posted
        with httpx.Client(base_url=url, timeout=60, headers={"content-type": "application/json"}) as http:
            while time.perf_counter() < deadline:
                try:
                    job, n, body = tasks.get_nowait()
                except queue.Empty:
                    return
                t = time.perf_counter()
                resp = http.post(f"/v1/jobs/{job}/metrics", content=body)
                dt = time.perf_counter() - t
                resp.raise_for_status()
                with lock:
                    posted += n
                    acked += resp.json()["inserted"]
                    latencies.append(dt)

    cpu0 = server.cpu_seconds()
    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - start
    cpu = server.cpu_seconds() - cpu0
    lat = np.array(latencies) * 1000
    return {
        "points_posted": posted,
        "points_acknowledged": acked,
        "requests": len(latencies),
        "seconds": wall,
        "points_per_second": posted / wall,
        "server_cpu_seconds": cpu,
        "batch_p50_ms": float(np.percentile(lat, 50)),
        "batch_p99_ms": float(np.percentile(lat, 99)),
    }


def plan_latency(url: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    data = default_data_dir()
    cold = [make_snapshot(50, args.nodes, seed=1000 + i, data_dir=data).model_dump_json() for i in range(args.plans)]
    warm = cold[0]
    out: dict[str, dict[str, float]] = {}
    with httpx.Client(base_url=url, timeout=120, headers={"content-type": "application/json"}) as http:
        http.post("/v1/plan", content=warm).raise_for_status()  # first call: imports and solver start-up
        for mode, bodies in (("cold", cold), ("warm", [warm] * args.plans)):
            times, solver = [], []
            for body in bodies:
                t = time.perf_counter()
                resp = http.post("/v1/plan", content=body)
                times.append(time.perf_counter() - t)
                resp.raise_for_status()
                solver.append(resp.json()["solver"]["seconds"])
            ms = np.array(times) * 1000
            out[mode] = {
                "requests": len(times),
                "p50_ms": float(np.percentile(ms, 50)),
                "p99_ms": float(np.percentile(ms, 99)),
                "max_ms": float(ms.max()),
                "planner_p50_ms": float(np.percentile(np.array(solver) * 1000, 50)),
            }
    return out


def _percentiles(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    ms = np.array(seconds) * 1000
    return {
        "n": len(seconds),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
    }


@dataclass(frozen=True)
class Answer:
    """One plan request of a load phase, as its client saw it."""

    client: int
    index: int
    status: int
    seconds: float
    planner_seconds: float | None = None  # the plan's own ``solver.seconds`` (200 only)
    fitted: int | None = None  # ``FlowPlan-Fitted-Jobs``: jobs whose models this plan fitted (200 only)


def _clients_and_poller(
    url: str, args: argparse.Namespace, bodies: list[list[bytes]]
) -> tuple[list[Answer], dict[str, list[float]], float]:
    """Client ``k`` posts ``bodies[k]`` in order, back to back, while one more client polls ``/healthz``
    and ``/metrics`` every ``--poll-ms``. A client told 429/503 waits the ``Retry-After`` it was given
    before its next body (the refused one is not posted again). Returns every answer, the polls'
    latencies and the wall time."""
    lock = threading.Lock()
    answers: list[Answer] = []
    done = threading.Event()
    headers = {"content-type": "application/json"}

    def planner_client(k: int) -> None:
        with httpx.Client(base_url=url, timeout=300, headers=headers) as http:
            for i, body in enumerate(bodies[k]):
                t = time.perf_counter()
                resp = http.post("/v1/plan", content=body)
                dt = time.perf_counter() - t
                if resp.status_code == 200:
                    fitted = resp.headers.get("flowplan-fitted-jobs")  # absent from services before it
                    got = Answer(k, i, 200, dt, resp.json()["solver"]["seconds"], None if fitted is None else int(fitted))
                else:
                    got = Answer(k, i, resp.status_code, dt)
                with lock:
                    answers.append(got)
                if resp.status_code in (429, 503):
                    time.sleep(float(resp.headers.get("retry-after", "1")))
                elif resp.status_code != 200:
                    resp.raise_for_status()

    polls: dict[str, list[float]] = {"/healthz": [], "/metrics": []}
    if args.poller == "process":
        # Its own interpreter: the clients' threads (parsing 50-job plans) cannot hold its GIL, so
        # what it times is the service's answer, not the benchmark's own contention.
        ctx = multiprocessing.get_context("spawn")
        stop, results = ctx.Event(), ctx.Queue()
        watcher: threading.Thread | multiprocessing.process.BaseProcess = ctx.Process(
            target=_poll, args=(url, args.poll_ms, stop, results)
        )
    else:
        stop, results = done, queue.Queue()
        watcher = threading.Thread(target=_poll, args=(url, args.poll_ms, stop, results))
    clients = [threading.Thread(target=planner_client, args=(k,)) for k in range(len(bodies))]
    watcher.start()
    first = results.get(timeout=60)  # the poller's first answers: it is up
    start = time.perf_counter()
    for th in clients:
        th.start()
    for th in clients:
        th.join()
    wall = time.perf_counter() - start
    stop.set()
    for path, seen in results.get(timeout=60).items():
        polls[path].extend(seen)
    watcher.join()
    del first
    return answers, polls, wall


def _poll(url: str, poll_ms: float, stop: Any, results: Any) -> None:
    """Poll ``/healthz`` and ``/metrics`` every ``poll_ms`` until ``stop`` is set; put ``None`` once
    the first round answered, then the latencies (seconds) of every later round, by path."""
    seen: dict[str, list[float]] = {"/healthz": [], "/metrics": []}
    with httpx.Client(base_url=url, timeout=300) as http:
        for path in seen:
            http.get(path).raise_for_status()
        results.put(None)
        while not stop.is_set():
            for path, times in seen.items():
                t = time.perf_counter()
                http.get(path).raise_for_status()
                times.append(time.perf_counter() - t)
            stop.wait(poll_ms / 1000)
    results.put(seen)


def _load_report(answers: list[Answer], polls: dict[str, list[float]], wall: float) -> dict[str, dict[str, float]]:
    statuses: dict[str, float] = {}
    for a in answers:
        statuses[str(a.status)] = statuses.get(str(a.status), 0) + 1
    return {
        "plan": {**_percentiles([a.seconds for a in answers if a.status == 200]), "wall_s": wall},
        "healthz": _percentiles(polls["/healthz"]),
        "metrics": _percentiles(polls["/metrics"]),
        "status": dict(sorted(statuses.items())),
    }


def under_load(url: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Phase 3: ``--clients`` planning clients on the example snapshots, one client polling health and metrics."""
    examples = [path.read_bytes() for path in sorted((REPO / "examples" / "snapshots").glob("*.json"))]
    with httpx.Client(base_url=url, timeout=300, headers={"content-type": "application/json"}) as http:
        for body in examples:  # warm-up, not counted: imports and solver start-up (in each worker, if any)
            http.post("/v1/plan", content=body).raise_for_status()
    bodies = [[examples[(k + i) % len(examples)] for i in range(args.rounds * len(examples))] for k in range(args.clients)]
    return _load_report(*_clients_and_poller(url, args, bodies))


def warm_load(server: Server, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Phase ``warm``: ``--clients`` clients, each re-planning its own cluster (a 50-job snapshot of
    :mod:`benchmarks.workload` on ``--nodes`` nodes, seed 2000 + client) ``--rounds`` + 1 times back to
    back, one client polling health and metrics. Plans are reported as each client's *first* and the
    *repeat* ones, and by ``FlowPlan-Fitted-Jobs``: *warm* (every job's fits were the worker's
    already) and *fitting* (some job's models were fitted: the cold ones)."""
    data = default_data_dir()
    snapshots = [
        make_snapshot(50, args.nodes, seed=2000 + k, data_dir=data).model_dump_json().encode() for k in range(args.clients)
    ]
    url = server.url
    with httpx.Client(base_url=url, timeout=300, headers={"content-type": "application/json"}) as http:
        # Imports and solver start-up, not counted: a snapshot of no client's cluster.
        http.post(
            "/v1/plan", content=make_snapshot(50, args.nodes, seed=1999, data_dir=data).model_dump_json()
        ).raise_for_status()
    # CPU by process over the phase: the server, its planning workers, and this process (the clients'
    # threads; the poller runs in a process of its own and is not counted).
    before, mine = server.cpu_by_process(), time.process_time()
    answers, polls, wall = _clients_and_poller(url, args, [[body] * (args.rounds + 1) for body in snapshots])
    after, mine = server.cpu_by_process(), time.process_time() - mine
    used = {pid: t - before.get(pid, 0.0) for pid, t in after.items()}
    out = _load_report(answers, polls, wall)
    planned = [a for a in answers if a.status == 200]
    n = max(len(planned), 1)
    out["cpu"] = {
        "server_ms": 1000 * used.get(server.proc.pid, 0.0) / n,
        "workers_ms": 1000 * sum(t for pid, t in used.items() if pid != server.proc.pid) / n,
        "clients_ms": 1000 * mine / n,
        "wall_ms": 1000 * wall / n,
    }
    groups = {
        "first": [a for a in planned if a.index == 0],
        "repeat": [a for a in planned if a.index > 0],
        "warm": [a for a in planned if a.fitted == 0],
        "fitting": [a for a in planned if a.fitted],
    }
    for name, subset in groups.items():
        planner = _percentiles([a.planner_seconds for a in subset if a.planner_seconds is not None])
        out[name] = {**_percentiles([a.seconds for a in subset]), **{f"planner_{k}": v for k, v in planner.items() if k != "n"}}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--batch", type=int, default=100, help="points per request at most (a curve is ~100 epochs)")
    p.add_argument("--points", type=int, default=200_000)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--plans", type=int, default=60, help="plan requests per mode")
    p.add_argument("--nodes", type=int, default=20, help="nodes in the 50-job snapshot")
    p.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL", help="SQLite synchronous mode of the store")
    p.add_argument(
        "--phases", default="ingest,plan,load", help="which phases to run: ingest, plan, load, warm (default: ingest,plan,load)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="load: times each client posts every example snapshot; warm: re-plans after the first",
    )
    p.add_argument("--poll-ms", type=float, default=50.0, help="load phase: pause between health/metrics polls")
    p.add_argument(
        "--poller",
        choices=("process", "thread"),
        default="process",
        help="where the health/metrics poller runs: its own process (default; the clients' threads cannot delay "
        "it) or a thread beside the clients (as before)",
    )
    p.add_argument("--workers", type=int, help="FLOWPLAN_PLAN_WORKERS for the server (default: its own)")
    p.add_argument("--queue", type=int, help="FLOWPLAN_PLAN_QUEUE for the server (default: its own)")
    args = p.parse_args()
    phases = set(args.phases.split(","))
    known = {"ingest", "plan", "load", "warm"}
    if phases - known:
        p.error(f"--phases: unknown phase(s) {sorted(phases - known)} (known: ingest, plan, load, warm)")
    env_extra = {}
    if args.workers is not None:
        env_extra["FLOWPLAN_PLAN_WORKERS"] = str(args.workers)
    if args.queue is not None:
        env_extra["FLOWPLAN_PLAN_QUEUE"] = str(args.queue)
    curves = measured_curves(default_data_dir())
    print(f"cores: {os.cpu_count()}; {len(curves)} measured curves; store synchronous={args.synchronous}")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "bench.db"
        server = Server(state, args.synchronous, env_extra)
        try:
            ing = ingest(server, curves, args) if "ingest" in phases else None
            plans = plan_latency(server.url, args) if "plan" in phases else {}
            load = under_load(server.url, args) if "load" in phases else None
            warm = warm_load(server, args) if "warm" in phases else None
        finally:
            server.stop()
        with StateStore(state) as store:
            stored = store.point_count()
    if ing is not None:
        report_ingest(ing, stored, args)
    for mode, r in plans.items():
        print(
            f"POST /v1/plan, 50 jobs on {args.nodes} nodes, {mode}: p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, "
            f"max {r['max_ms']:.0f} ms over {r['requests']:.0f} requests (planner alone p50 {r['planner_p50_ms']:.0f} ms)"
        )
    if load is not None:
        print_load(f"under load: {args.clients} clients x {args.rounds} rounds of the example snapshots", load, ("plan",))
    if warm is not None:
        what = f"warm: {args.clients} clients x {args.rounds + 1} plans of their own 50-job, {args.nodes}-node cluster"
        print_load(what, warm, ("first", "repeat", "warm", "fitting"))
        c = warm["cpu"]
        total = c["server_ms"] + c["workers_ms"] + c["clients_ms"]
        print(
            f"  CPU per answered plan: server {c['server_ms']:.1f} ms, planning workers {c['workers_ms']:.1f} ms, "
            f"clients {c['clients_ms']:.1f} ms: {total:.1f} ms on {os.cpu_count()} cores, one plan answered every "
            f"{c['wall_ms']:.1f} ms (the poller's own process not counted)"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def print_load(what: str, load: dict[str, dict[str, float]], plans: tuple[str, ...]) -> None:
    print(f"{what} in {load['plan']['wall_s']:.1f} s; responses {', '.join(f'{k}: {v:.0f}' for k, v in load['status'].items())}")
    for name in (*plans, "healthz", "metrics"):
        r = load[name]
        line = f"  {name:8s} p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms ({r['n']:.0f} answered)"
        if "planner_p50_ms" in r:
            line += f"; planner alone p50 {r['planner_p50_ms']:.1f} ms, p99 {r['planner_p99_ms']:.1f} ms"
        print(line)


def report_ingest(ing: dict[str, float], stored: int, args: argparse.Namespace) -> None:
    lost = ing["points_acknowledged"] - stored
    print(
        f"ingestion: {ing['points_per_second']:,.0f} points/s with {args.clients} clients, batches of <= {args.batch} "
        f"({ing['requests']:.0f} requests in {ing['seconds']:.1f} s; request p50 {ing['batch_p50_ms']:.1f} ms, "
        f"p99 {ing['batch_p99_ms']:.1f} ms)"
    )
    print(
        f"  server process CPU: {ing['server_cpu_seconds']:.1f} s for {ing['points_posted']:.0f} points = "
        f"{ing['points_posted'] / max(ing['server_cpu_seconds'], 1e-9):,.0f} points per CPU-second "
        f"({1000 * ing['server_cpu_seconds'] / max(ing['requests'], 1):.2f} ms per request)"
    )
    print(
        f"  sent {ing['points_posted']:.0f}, acknowledged {ing['points_acknowledged']:.0f}, stored {stored} "
        f"-> {'nothing lost' if lost == 0 and stored == ing['points_posted'] else f'MISMATCH ({lost} lost)'}"
    )


if __name__ == "__main__":
    main()
