"""GPU fractions on the real Alibaba GPU trace: a sample of its nodes and pods as a snapshot, planned.

Data: ``../shared/data/alibaba-gpu-v2023`` (openb, "Beware of Fragmentation", USENIX ATC 2023):
``openb_node_list_gpu_node.csv`` (CPU, memory, GPU count and model per node) and a pod list
(``openb_pod_list_default.csv`` by default; ``--pods gpushare40`` or ``gpuspec33`` for the others):
CPU, memory, ``num_gpu``, ``gpu_milli`` (a pod with one GPU and ``gpu_milli`` < 1000 shares a
device), ``gpu_spec`` and creation time.

What this loader makes of them (nothing else is invented):

- ``--nodes`` GPU nodes drawn at random (seeded) from the node list, as they are;
- ``--pods`` GPU pods: a window of consecutive pods (by creation time) from a random start, each a
  job that asks exactly its request (``min = max``: the trace has no elastic range) of CPU, memory
  and ``num_gpu`` GPUs, or its ``gpu_milli`` of one GPU; its ``gpu_spec`` becomes ``gpu_type``
  (one model, or a choice of several, ``V100M16|V100M32``, as a list);
  ``submitted`` is the creation time. As the paper's simulator replays the trace, pods arrive in
  creation order and none leaves (the trace's own concurrency is a few dozen pods on 1,213 nodes:
  a fraction of a sample would hold nothing). The jobs have no history (the trace has no learning curves),
  so the planner assumes their speed: what this shows is placement, not learning;
- "before": the earlier ``--running`` share of the window, bound by the Kubernetes default policy
  (which packs fractions onto devices by milli, as the trace's scheduler did), is running; the rest
  is pending.

Then one FlowPlan plan of that snapshot (and the Kubernetes default's, for reference) is printed with
the GPU-milli utilisation before and after: milli-GPUs held / (GPUs × 1000), and the jobs that wait
because no single device had room (fragmentation the aggregate capacity did not show).

Usage: ``python benchmarks/alibaba_fractions.py [--nodes 24] [--pods 200] [--running 0.5] [--seed 0]
[--pods-file default] [--time-limit 5]``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from planner import PlannerConfig, Snapshot, check_plan, plan
from planner.plan import Plan
from planner.policies import make_policy

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "alibaba-gpu-v2023"
POD_FILES = ("default", "gpushare40", "gpuspec33", "multigpu50", "cpu050")


def gpu_models(spec: str | None) -> str | list[str] | None:
    """A pod's ``gpu_spec`` as the contract's ``gpu_type``: ``T4``; ``V100M16|V100M32|V100M32`` is
    the choice ``["V100M16", "V100M32"]``; empty is ``None`` (any model)."""
    models = sorted({m for m in (spec or "").split("|") if m})
    return None if not models else models[0] if len(models) == 1 else models


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def sample_nodes(rng: np.random.Generator, n_nodes: int, data: Path = DATA, listing: str = "gpu_node") -> list[dict[str, Any]]:
    """``n_nodes`` nodes of the trace's ``openb_node_list_{listing}.csv`` (GPU nodes; ``all_node``:
    the CPU-only ones too) drawn with ``rng``, as they are (in the node list's order)."""
    nodes = _rows(data / f"openb_node_list_{listing}.csv")
    pick = sorted(rng.choice(len(nodes), size=min(n_nodes, len(nodes)), replace=False).tolist())
    return [
        {
            "name": nodes[i]["sn"],
            "cpu_millis": int(nodes[i]["cpu_milli"]),
            "memory_mib": int(nodes[i]["memory_mib"]),
            "gpus": int(nodes[i]["gpu"]),
            "gpu_type": nodes[i]["model"] or None,
        }
        for i in pick
    ]


def load_snapshot(n_nodes: int, n_pods: int, seed: int, pods_file: str = "default", data: Path = DATA) -> Snapshot:
    """The trace sample as a snapshot with every pod pending, in creation order (module docstring)."""
    rng = np.random.default_rng(seed)
    node_list = sample_nodes(rng, n_nodes, data)
    pods = [r for r in _rows(data / f"openb_pod_list_{pods_file}.csv") if int(r["num_gpu"]) >= 1]
    pods.sort(key=lambda r: (int(r["creation_time"]), r["name"]))
    start = int(rng.integers(0, max(len(pods) - n_pods, 1)))
    window = pods[start : start + n_pods]
    last = int(window[-1]["creation_time"]) if window else 0
    jobs: list[dict[str, Any]] = []
    for r in window:
        gpus, milli = int(r["num_gpu"]), int(r["gpu_milli"] or 0)
        cpu = max(int(r["cpu_milli"]), 1)
        job: dict[str, Any] = {
            "id": r["name"],
            "status": "pending",
            "min_cpu_millis": cpu,
            "max_cpu_millis": cpu,
            "memory_mib": int(r["memory_mib"]),
            "min_gpus": gpus,
            "max_gpus": gpus,
            "submitted": float(r["creation_time"]),
        }
        if gpus == 1 and 0 < milli < 1000:
            job["gpu_milli"] = milli
        models = gpu_models(r.get("gpu_spec"))
        if models is not None:
            job["gpu_type"] = models
        jobs.append(job)
    return Snapshot.model_validate({"time": float(last), "nodes": node_list, "jobs": jobs, "settings": {"migration_budget": 0}})


def before(snapshot: Snapshot, running: float) -> Snapshot:
    """``snapshot`` with its earliest ``running`` share of jobs bound by the Kubernetes default policy
    (running, with their devices); the rest stay pending."""
    k = int(round(running * len(snapshot.jobs)))
    early = snapshot.model_copy(update={"jobs": snapshot.jobs[:k]})
    bound = {a.job: a for a in make_policy("kubernetes")(early).assignments if a.node is not None}
    data = snapshot.model_dump(exclude_defaults=True)
    for j in data["jobs"]:
        a = bound.get(j["id"])
        if a is not None:
            alloc = {"cpu_millis": a.cpu_millis, "gpus": a.gpus, "gpu_device": a.gpu_device}
            j.update(status="running", node=a.node, allocation=alloc)
    return Snapshot.model_validate(data)


def milli_used(snapshot: Snapshot, p: Plan | None = None) -> tuple[int, int]:
    """Milli-GPUs held and the cluster's milli-GPUs: in the snapshot (``p`` None) or under plan ``p``."""
    jobs = {j.id: j for j in snapshot.jobs}
    held = 0
    if p is None:
        for j in snapshot.jobs:
            if j.status == "running" and j.allocation is not None:
                held += j.gpu_milli if j.gpu_milli is not None else j.allocation.gpus * 1000 * j.replicas
    else:
        for a in p.assignments:
            j = jobs[a.job]
            if a.node is not None:
                held += j.gpu_milli if j.gpu_milli is not None else a.gpus * 1000 * a.replicas
    return held, sum(n.gpus for n in snapshot.nodes) * 1000


def _line(name: str, snap: Snapshot, p: Plan, seconds: float) -> str:
    used, cap = milli_used(snap, p)
    frag = sum(1 for u in p.unserved if "fragmentation" in u.reason)
    bad = check_plan(snap, p)
    return (
        f"{name:<10} placed {p.summary.placed:>4} / {p.summary.active_jobs:<4} GPU-milli used {used:>7} / {cap} "
        f"({100 * used / max(cap, 1):5.1f} %)  waiting for fragmentation {frag:>3}  {seconds:6.2f} s  "
        f"checker: {'ok' if not bad else bad[0]}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--nodes", type=int, default=24)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--running", type=float, default=0.5, help="share of the window bound before the plan")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pods-file", choices=POD_FILES, default="default")
    ap.add_argument("--time-limit", type=float, default=5.0)
    args = ap.parse_args(argv)
    if args.nodes < 1 or args.pods < 1 or not 0 <= args.running <= 1:
        print("alibaba_fractions: --nodes and --pods must be >= 1, --running in [0, 1]", file=sys.stderr)
        return 2
    snap = before(load_snapshot(args.nodes, args.pods, args.seed, args.pods_file), args.running)
    fractional = sum(1 for j in snap.jobs if j.gpu_milli is not None)
    running = sum(1 for j in snap.jobs if j.status == "running")
    used, cap = milli_used(snap)
    gpus = cap // 1000
    print(
        f"alibaba-gpu-v2023 ({args.pods_file}), seed {args.seed}: {len(snap.nodes)} GPU nodes ({gpus} GPUs), "
        f"{len(snap.jobs)} GPU pods ({fractional} fractional), {running} running before"
    )
    share = f"{100 * used / max(cap, 1):5.1f} %"
    print(f"{'before':<10} running {running:>4} / {len(snap.jobs):<4} GPU-milli used {used:>7} / {cap} ({share})")
    for name in ("flowplan", "kubernetes"):
        t0 = time.perf_counter()
        if name == "flowplan":
            p = plan(snap, PlannerConfig(time_limit=args.time_limit)).plan
        else:
            p = make_policy(name)(snap)
        print(_line(name, snap, p, time.perf_counter() - t0))
        if name == "flowplan":
            frag = [u for u in p.unserved if "fragmentation" in u.reason]
            if frag:
                print(f"  e.g. {frag[0].job}: {frag[0].reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
