"""One daemon interval of the Kubernetes adapter at scale, against a real kube-apiserver with kwok nodes.

Starts a private sandbox (``flowplan sandbox``: etcd, kube-apiserver, kwok; the binaries of
``deploy/sandbox/build.sh``) with ``--nodes`` fake nodes of 32 cores, creates ``--pods`` FlowPlan
pods through a pool of ``--threads`` API clients (``--running`` of them bound at creation to the
nodes in turn, at 1 core each; the rest pending, waiting for FlowPlan), then runs one interval of
the daemon's loop by hand (observe → plan → check → diff → apply, as :class:`adapters.loop.ControlLoop`
does; the adapter applies up to ``--api-threads`` changes at once) and prints a table: each
stage's wall time and its API calls (counted by wrapping the adapter's ``ApiClient.call_api``: every
request the client sends), the changes by kind and their outcomes, the resizes by direction. A second observe after the apply
is timed too (`--no-observe-again`: not). Everything runs on this machine: the API server, etcd and kwok share its cores with
the benchmark, so the figures include their work.

    python benchmarks/k8s_scale.py [--nodes 1000] [--pods 10000] [--running 0.8] [--threads 16] [--api-threads 16]
                                   [--time-limit 10]

Prints figures; asserts nothing about time. Stops the sandbox (and removes its directory) at the end.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

NAMESPACE = "default"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pod(i: int, node: str | None) -> dict[str, Any]:
    name = f"scale-{i:05d}"
    spec: dict[str, Any] = {
        "schedulerName": "flowplan",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "train",
                "image": "flowplan/train:bench",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "2Gi"}},
            }
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"flowplan.io/job": name},
            "annotations": {"flowplan.io/min_cpu_millis": "500", "flowplan.io/max_cpu_millis": "4000"},
        },
        "spec": spec,
    }


def create_pods(info: Any, count: int, running: float, threads: int) -> float:
    """Create the pods through ``threads`` clients (one each); returns the wall seconds."""
    from kubernetes import client

    from adapters.kubernetes.sandbox import api_client

    local = threading.local()
    bound = round(count * running)

    def make(i: int) -> None:
        api = getattr(local, "api", None)
        if api is None:
            api = local.api = client.CoreV1Api(api_client(info))
        node = info.nodes[i % len(info.nodes)] if i < bound else None
        api.create_namespaced_pod(NAMESPACE, cast(Any, pod(i, node)), _preload_content=False)  # plain JSON is sent

    t0 = time.perf_counter()
    done = 0
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(make, range(count)):
            done += 1
            if done % 2000 == 0:
                log(f"  {done} pods created ({done / (time.perf_counter() - t0):.0f}/s)")
    return time.perf_counter() - t0


class CallCounter:
    """Wraps ``ApiClient.call_api``: counts every request by method and path template."""

    def __init__(self, api_client: Any) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        lock = threading.Lock()  # the adapter calls from its pool's threads
        real = api_client.call_api

        def call_api(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            path = re.sub(r"^https?://[^/]+", "", url)
            path = re.sub(r"/(pods|nodes)/[^/]+", r"/\1/{name}", path)
            with lock:
                self.counts[f"{method} {path}"] += 1
            return real(method, url, *args, **kwargs)

        api_client.call_api = call_api

    @contextmanager
    def stage(self, table: list[tuple[str, float, int, str]], name: str) -> Iterator[None]:
        before = collections.Counter(self.counts)
        t0 = time.perf_counter()
        yield
        wall = time.perf_counter() - t0
        calls = self.counts - before
        detail = ", ".join(f"{k} x{v}" for k, v in calls.most_common(4))
        table.append((name, wall, sum(calls.values()), detail))
        log(f"  {name}: {wall:.2f} s, {sum(calls.values())} API calls")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000, help="kwok nodes (default 1000)")
    p.add_argument("--pods", type=int, default=10000, help="FlowPlan pods (default 10000)")
    p.add_argument("--running", type=float, default=0.8, help="share of the pods bound at creation (default 0.8)")
    p.add_argument("--threads", type=int, default=16, help="API clients creating pods at once (default 16)")
    p.add_argument("--api-threads", type=int, default=16, help="changes the adapter applies at once (default 16)")
    p.add_argument(
        "--no-observe-again", dest="again", action="store_false", help="skip the second observe (time for the interval itself)"
    )
    p.add_argument("--time-limit", type=float, default=10.0, help="the planner's time limit, seconds (default 10)")
    args = p.parse_args()
    bounds = (
        ("nodes", args.nodes, 1, 5000),
        ("pods", args.pods, 1, 100000),
        ("threads", args.threads, 1, 64),
        ("api-threads", args.api_threads, 1, 256),
    )
    for name, value, lo, hi in bounds:
        if not lo <= value <= hi:
            p.error(f"--{name}: must be {lo}-{hi}, got {value}")
    if not 0 <= args.running <= 1:
        p.error(f"--running: must be between 0 and 1, got {args.running}")

    from adapters.base import WallClock
    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.sandbox import Sandbox, SandboxError, api_client, free_port, missing_binaries
    from adapters.loop import diff
    from planner.check import check_plan
    from planner.policies import make_policy

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still stops the sandbox (finally below)
    missing = missing_binaries()
    if missing:
        print(f"k8s_scale: {missing[0]} missing; build with: bash deploy/sandbox/build.sh", file=sys.stderr)
        return 2
    began = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fp-k8s-scale-") as tmp:
        sandbox = Sandbox(Path(tmp) / "sandbox", ports={"apiserver": free_port(), "etcd": free_port(), "etcd_peer": free_port()})
        try:
            t0 = time.perf_counter()
            log(f"sandbox up with {args.nodes} nodes ...")
            info = sandbox.up(args.nodes, 0, timeout=max(90.0, args.nodes * 0.2))
            up = time.perf_counter() - t0
            log(f"  up in {up:.1f} s; creating {args.pods} pods with {args.threads} threads ...")
            created = create_pods(info, args.pods, args.running, args.threads)
            log(f"  {args.pods} pods in {created:.1f} s ({args.pods / created:.0f}/s)")

            client = api_client(info)
            counter = CallCounter(client)
            adapter = KubernetesAdapter(client, namespaces=[NAMESPACE], clock=WallClock(), workers=args.api_threads)
            policy = make_policy("flowplan", time_limit=args.time_limit)
            table: list[tuple[str, float, int, str]] = []
            with counter.stage(table, "observe"):
                snapshot = adapter.observe()
            with counter.stage(table, "plan + check + diff"):
                plan = policy(snapshot)
                violations = check_plan(snapshot, plan)
                changes = [] if violations else diff(snapshot, plan)
            with counter.stage(table, "apply"):
                outcomes = adapter.apply(changes)
            with counter.stage(table, "reconcile"):
                adapter.reconcile()
            again = None
            if args.again:
                with counter.stage(table, "observe again"):
                    again = adapter.observe()
        except SandboxError as exc:
            print(f"k8s_scale: {exc}", file=sys.stderr)
            return 2
        finally:
            log("sandbox down ...")
            sandbox.down()

    load_after = os.getloadavg()
    kinds = collections.Counter(c.kind for c in changes)
    jobs = {j.id: j for j in snapshot.jobs}
    resizes = collections.Counter(_direction(c, jobs[c.job]) for c in changes if c.kind == "resize")
    said = collections.Counter(o.message.split(" ")[0] for o in outcomes if o.ok)
    failed = collections.Counter(o.error for o in outcomes if not o.ok)
    running = sum(1 for j in snapshot.jobs if j.status == "running")
    print(f"\n{began}; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after ({os.cpu_count()} CPUs, shared)")
    print(f"{args.nodes} kwok nodes, {args.pods} FlowPlan pods ({running} bound, {len(snapshot.jobs) - running} pending)")
    print(f"sandbox up {up:.1f} s; pods created in {created:.1f} s ({args.pods / created:.0f}/s, {args.threads} threads)")
    print(f"plan: {len(plan.assignments)} assignments, {len(plan.unserved)} unserved, solver {plan.solver.status}")
    print(f"changes: {dict(kinds)}; failed outcomes: {dict(failed) or 'none'}; check: {len(violations)} violations")
    print(f"resizes: {dict(resizes)}; outcomes by first word: {dict(said)}")
    if again is not None:
        print(f"after apply: {sum(1 for j in again.jobs if j.status == 'running')} jobs running")
    print()
    print(f"| {'stage':<20} | {'wall s':>8} | {'API calls':>9} | calls (most frequent) |")
    print(f"|{'-' * 22}|{'-' * 10}|{'-' * 11}|{'-' * 23}|")
    for name, wall, calls, detail in table:
        print(f"| {name:<20} | {wall:8.2f} | {calls:9d} | {detail} |")
    interval = sum(w for n, w, _, _ in table if n in ("observe", "plan + check + diff", "apply", "reconcile"))
    calls = sum(c for n, _, c, _ in table if n in ("observe", "plan + check + diff", "apply", "reconcile"))
    print(f"| {'one interval':<20} | {interval:8.2f} | {calls:9d} | observe + plan + apply + reconcile |")
    print(json.dumps({"nodes": args.nodes, "pods": args.pods, "interval_s": round(interval, 2), "api_calls": calls}))
    return 0


def _direction(change: Any, job: Any) -> str:
    """A resize against what the job held when observed: more CPU, less, or the same CPU (its cap changes)."""
    held = job.allocation.cpu_millis if job.allocation is not None else None
    if held is None or change.cpu_millis == held:
        return f"same CPU ({change.cpu_millis}m), cap {change.cpu_limit_millis}"
    return f"{held}m -> {change.cpu_millis}m" if held < change.cpu_millis else f"less ({held}m -> {change.cpu_millis}m)"


if __name__ == "__main__":
    sys.exit(main())
