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

Bounded: at most ``--points`` points and ``--seconds`` of ingestion, ``2 x --plans`` plan requests,
``--clients x --rounds x 3`` requests under load. Figures vary with the machine and its load; nothing
here asserts a time.

    python benchmarks/bench_api.py [--clients 8] [--batch 100] [--points 200000] [--seconds 20] [--plans 60]
    python benchmarks/bench_api.py --phases load [--clients 8] [--rounds 5]    # only phase 3
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

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
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

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


def under_load(url: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Phase 3: ``--clients`` planning clients on the example snapshots, one client polling health and metrics."""
    bodies = [path.read_bytes() for path in sorted((REPO / "examples" / "snapshots").glob("*.json"))]
    lock = threading.Lock()
    plans: list[float] = []
    statuses: dict[int, int] = {}
    done = threading.Event()
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=url, timeout=300, headers=headers) as http:
        for body in bodies:  # warm-up, not counted: imports and solver start-up (in each worker, if any)
            http.post("/v1/plan", content=body).raise_for_status()

    def planner_client(k: int) -> None:
        with httpx.Client(base_url=url, timeout=300, headers=headers) as http:
            for i in range(args.rounds * len(bodies)):
                body = bodies[(k + i) % len(bodies)]
                t = time.perf_counter()
                resp = http.post("/v1/plan", content=body)
                dt = time.perf_counter() - t
                with lock:
                    statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1
                    if resp.status_code == 200:
                        plans.append(dt)
                if resp.status_code in (429, 503):
                    time.sleep(float(resp.headers.get("retry-after", "1")))
                elif resp.status_code != 200:
                    resp.raise_for_status()

    polls: dict[str, list[float]] = {"/healthz": [], "/metrics": []}

    def poller() -> None:
        with httpx.Client(base_url=url, timeout=300) as http:
            while not done.is_set():
                for path, seen in polls.items():
                    t = time.perf_counter()
                    http.get(path).raise_for_status()
                    seen.append(time.perf_counter() - t)
                done.wait(args.poll_ms / 1000)

    watcher = threading.Thread(target=poller)
    clients = [threading.Thread(target=planner_client, args=(k,)) for k in range(args.clients)]
    start = time.perf_counter()
    watcher.start()
    for th in clients:
        th.start()
    for th in clients:
        th.join()
    wall = time.perf_counter() - start
    done.set()
    watcher.join()
    return {
        "plan": {**_percentiles(plans), "wall_s": wall},
        "healthz": _percentiles(polls["/healthz"]),
        "metrics": _percentiles(polls["/metrics"]),
        "status": {str(k): float(v) for k, v in sorted(statuses.items())},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--batch", type=int, default=100, help="points per request at most (a curve is ~100 epochs)")
    p.add_argument("--points", type=int, default=200_000)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--plans", type=int, default=60, help="plan requests per mode")
    p.add_argument("--nodes", type=int, default=20, help="nodes in the 50-job snapshot")
    p.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL", help="SQLite synchronous mode of the store")
    p.add_argument("--phases", default="ingest,plan,load", help="which phases to run (default: ingest,plan,load)")
    p.add_argument("--rounds", type=int, default=5, help="load phase: times each client posts every example snapshot")
    p.add_argument("--poll-ms", type=float, default=50.0, help="load phase: pause between health/metrics polls")
    p.add_argument("--workers", type=int, help="FLOWPLAN_PLAN_WORKERS for the server (default: its own)")
    p.add_argument("--queue", type=int, help="FLOWPLAN_PLAN_QUEUE for the server (default: its own)")
    args = p.parse_args()
    phases = set(args.phases.split(","))
    if phases - {"ingest", "plan", "load"}:
        p.error(f"--phases: unknown phase(s) {sorted(phases - {'ingest', 'plan', 'load'})} (known: ingest, plan, load)")
    env_extra = {}
    if args.workers is not None:
        env_extra["FLOWPLAN_PLAN_WORKERS"] = str(args.workers)
    if args.queue is not None:
        env_extra["FLOWPLAN_PLAN_QUEUE"] = str(args.queue)
    curves = measured_curves(default_data_dir())
    print(f"cores: {os.cpu_count()}; {len(curves)} measured curves; store synchronous={args.synchronous}")
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "bench.db"
        server = Server(state, args.synchronous, env_extra)
        try:
            ing = ingest(server, curves, args) if "ingest" in phases else None
            plans = plan_latency(server.url, args) if "plan" in phases else {}
            load = under_load(server.url, args) if "load" in phases else None
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
        pl = load["plan"]
        print(
            f"under load: {args.clients} clients x {args.rounds} rounds of the example snapshots in {pl['wall_s']:.1f} s; "
            f"responses {', '.join(f'{k}: {v:.0f}' for k, v in load['status'].items())}"
        )
        for what in ("plan", "healthz", "metrics"):
            r = load[what]
            print(
                f"  {what:8s} p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms "
                f"({r['n']:.0f} answered)"
            )


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
