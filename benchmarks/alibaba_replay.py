"""A window of the Alibaba GPU trace replayed in the simulator: GPU fractions over time, per policy.

``alibaba_fractions.py`` plans one snapshot of the trace; this replays a window of it end to end
through the simulator's control loop, so pods arrive, run and finish, and every policy re-plans as
they do. From ``../shared/data/alibaba-gpu-v2023`` (as there, nothing else invented):

- ``--nodes`` GPU nodes drawn at random (seeded) from ``openb_node_list_gpu_node.csv``, as they are
  (CPU, memory, GPU count, GPU model);
- ``--pods`` consecutive GPU pods (by creation time, from a seeded random start) of a pod list,
  each a job asking exactly its request (``min = max``): CPU, memory, ``num_gpu`` GPUs or its
  ``gpu_milli`` of one device; arrivals at their creation times, compressed so the window spans
  ``--span-hours``. Pods no sampled node of their GPU models (``gpu_spec``, below) holds, or
  asking more than 4 GPUs (where the measured speed-ups stop), are left out (counted).

What the trace does not say, and how it is filled in: how long a pod trains. As in the
philly-scale scenario, each pod is given a measured model from the Pollux traces (the same seeded
mix: cifar10, yolov3, deepspeech2, imagenet, ncf, bert) trained for at most ``--max-epochs``
epochs, so its run time is a measured one; a fraction trains at its 1-GPU speed (the simulator does
not model interference between the pods sharing a device).

``--lifetimes`` replays the trace as it ran instead: every node of ``openb_node_list_all_node.csv``
(the CPU-only ones too) and every pod of the window, CPU-only pods included, each arriving at its
creation time (with ``--span-hours``, the arrivals compressed into it as above: the same pods
and lifetimes, many more at once) and running for its own lifetime, from
its scheduled time to its deletion time (a pod the trace never scheduled: from creation to deletion,
the time its owner kept it; a lifetime of 0 s: 1 s), at its request, whatever its share (the
scenario's ``duration_seconds``); its model gives only the curve it reports. Pods of up to 8 GPUs
are kept (no measured speed-up is read). ``--nodes`` and ``--pods`` sample as above; above the
trace's they take all of it (1,523 nodes, 8,152 pods of the default list, over 149 days).

In both modes a pod's ``gpu_spec`` becomes its ``gpu_type``: one GPU model, or a choice of several
(``V100M16|V100M32``) as a list; only nodes of those models qualify.

Printed per policy: makespan, mean and p95 JCT, mean wait (first start minus arrival), GPU
utilisation (milli-GPUs held over capacity and time), planning time per interval (median, p99,
max), idle waits and checker failures. ``--nodes`` and ``--pods`` above the trace's take all of it
(1,213 GPU nodes, 7,064 GPU pods; with ``--lifetimes`` 1,523 nodes and 8,152 pods);
``--interval`` and ``--no-replan-on-events`` set the control loop (``docs/benchmarks.md``, "The
whole GPU trace" and "The whole trace with its own lifetimes").

Usage::

    python benchmarks/alibaba_replay.py [--nodes 32] [--pods 300] [--seed 0] [--pods-file gpushare40]
                                        [--span-hours 2] [--max-epochs 3] [--policies flowplan,kubernetes,tiresias]
                                        [--interval 60] [--no-replan-on-events] [--lifetimes]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from alibaba_fractions import POD_FILES, _rows, gpu_models, sample_nodes

from adapters.sim.run import RunResult, simulate
from adapters.sim.scenario import ScenarioError, parse_scenario
from adapters.sim.truth import TraceLibrary, history_priors
from flowplan.simprogress import SimProgress
from planner.policies import make_policy

REPO = Path(__file__).resolve().parent.parent
#: Most GPUs a simulated job may ask: the measured speed-ups (``scalability.csv``) stop at 4.
MAX_GPUS = 4
#: The philly-scale scenario's model mix (``adapters/sim/scenario.py``): a measured curve per pod.
MIX = (("cifar10", 128), ("yolov3", 64), ("deepspeech2", 40), ("imagenet", 800), ("ncf", 1024), ("bert", 96))


def scenario_doc(
    library: TraceLibrary,
    trace: Path,
    *,
    nodes: int,
    pods: int,
    seed: int,
    pods_file: str,
    span_hours: float | None,
    max_epochs: int,
    interval: float = 60.0,
    replan_on_events: bool = True,
    lifetimes: bool = False,
) -> tuple[dict[str, Any], dict[str, int]]:
    """The replay as a scenario document, and what of the window was not replayed as the trace
    says: ``left_out`` pods (no sampled node of their GPU models holds them; more than 4 GPUs without ``lifetimes``)."""
    rng = np.random.default_rng(seed)
    node_list = sample_nodes(rng, nodes, trace, "all_node" if lifetimes else "gpu_node")
    listed = _rows(trace / f"openb_pod_list_{pods_file}.csv")
    chosen = listed if lifetimes else [r for r in listed if int(r["num_gpu"]) >= 1]
    chosen.sort(key=lambda r: (int(r["creation_time"]), r["name"]))
    start = int(rng.integers(0, max(len(chosen) - pods, 1)))
    window = chosen[start : start + pods]
    t0 = int(window[0]["creation_time"]) if window else 0
    length = max((int(window[-1]["creation_time"]) - t0) if window else 0, 1)
    if span_hours is None:  # the window's own times (lifetimes), else two hours
        span_hours = length / 3600.0 if lifetimes else 2.0
    scale = span_hours * 3600.0 / length
    jobs: list[dict[str, Any]] = []
    counts = {"left_out": 0}
    for r in window:
        gpus, milli = int(r["num_gpu"]), int(r["gpu_milli"] or 0)
        cpu, mem = max(int(r["cpu_milli"]), 1), int(r["memory_mib"])
        models = gpu_models(r.get("gpu_spec")) if gpus >= 1 else None
        takes = None if models is None else {models} if isinstance(models, str) else set(models)
        fits = any(
            n["cpu_millis"] >= cpu and n["memory_mib"] >= mem and n["gpus"] >= gpus and (takes is None or n["gpu_type"] in takes)
            for n in node_list
        )
        if not fits or (gpus > MAX_GPUS and not lifetimes):
            counts["left_out"] += 1
            continue
        model, batch = MIX[int(rng.integers(len(MIX)))]
        epochs = min(max_epochs, library.curve(model, batch).epochs)
        job: dict[str, Any] = {
            "id": r["name"],
            "model": model,
            "batch_size": batch,
            "kind": "gpu" if gpus >= 1 else "cpu",
            "arrival": round((int(r["creation_time"]) - t0) * scale, 1),
            "epochs": epochs,
            "min_cpu_millis": cpu,
            "max_cpu_millis": cpu,
            "memory_mib": mem,
            "min_gpus": gpus,
            "max_gpus": gpus,
            "checkpoint_seconds": 30,
            "restart_seconds": 60,
        }
        if lifetimes:
            began = int(r["scheduled_time"] or r["creation_time"])
            job["duration_seconds"] = float(max(int(r["deletion_time"]) - began, 1))
            job["checkpoint_seconds"] = job["restart_seconds"] = 10  # the scenario's defaults
        if gpus == 1 and 0 < milli < 1000:
            job["gpu_milli"] = milli
        if models is not None:
            job["gpu_type"] = models
        jobs.append(job)
    what = "pods" if lifetimes else "GPU pods"
    over = f"over {span_hours:g} h" + (" with their own lifetimes" if lifetimes else "")
    doc = {
        "name": f"alibaba-{pods_file}-replay",
        "description": f"{len(node_list)} nodes, {len(jobs)} {what} of openb_pod_list_{pods_file} {over}",
        "metric": "makespan",
        "baseline": "kubernetes",
        "interval_seconds": interval,
        "replan_on_events": replan_on_events,
        "migration_budget": 8,
        "max_hours": 24 * 365 if lifetimes else 96,
        "stop_at_target": not lifetimes,  # a pod runs its lifetime, not until its curve's last value
        "nodes": node_list,
        "jobs": jobs,
    }
    return doc, counts


def _fmt(seconds: float | None) -> str:
    """h:mm:ss; from two days on, days first (``149d 08:09:30``)."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    clock = f"{s % 86400 // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{s // 86400}d {clock}" if s >= 2 * 86400 else f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=32, help="nodes sampled: GPU nodes, with --lifetimes any (default 32)")
    ap.add_argument("--pods", type=int, default=300, help="consecutive pods: GPU pods, with --lifetimes any (default 300)")
    ap.add_argument("--seed", type=int, default=0, help="sample seed: nodes, window, models (default 0)")
    ap.add_argument("--pods-file", choices=POD_FILES, default="gpushare40", help="pod list (default gpushare40)")
    ap.add_argument(
        "--span-hours",
        type=float,
        help="the window's arrivals compressed into this (default 2; with --lifetimes: their own times)",
    )
    ap.add_argument(
        "--max-epochs",
        type=int,
        default=3,
        help="epochs each pod trains at most; with --lifetimes, the epochs its lifetime is spread over (default 3)",
    )
    ap.add_argument("--interval", type=float, default=60.0, help="control interval in seconds (default 60)")
    ap.add_argument(
        "--replan-on-events",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also re-plan at every arrival and finish (default); --no-replan-on-events: at the interval only",
    )
    ap.add_argument(
        "--lifetimes",
        action="store_true",
        help="every node and pod (CPU-only too) at their creation times, each running its own lifetime (module docstring)",
    )
    ap.add_argument(
        "--policies", default="flowplan,kubernetes,tiresias", help="comma-separated (default flowplan,kubernetes,tiresias)"
    )
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"), help="measured data folder (default ../shared/data)")
    args = ap.parse_args(argv)
    for name, value in (("--nodes", args.nodes), ("--pods", args.pods), ("--max-epochs", args.max_epochs)):
        if value < 1:
            print(f"error: {name}: {value} (at least 1)", file=sys.stderr)
            return 2
    if not args.interval > 0:
        print(f"error: --interval: {args.interval} (must be > 0)", file=sys.stderr)
        return 2
    if args.span_hours is not None and not args.span_hours > 0:
        print(f"error: --span-hours: {args.span_hours} (must be > 0)", file=sys.stderr)
        return 2
    data = Path(args.data)
    trace = data / "alibaba-gpu-v2023"
    if not (trace / "openb_node_list_gpu_node.csv").is_file():
        print(f"error: --data: {data} has no alibaba-gpu-v2023/openb_node_list_gpu_node.csv", file=sys.stderr)
        return 2
    library = TraceLibrary.from_dir(data)
    doc, counts = scenario_doc(
        library, trace, nodes=args.nodes, pods=args.pods, seed=args.seed, pods_file=args.pods_file,
        span_hours=args.span_hours, max_epochs=args.max_epochs, interval=args.interval,
        replan_on_events=args.replan_on_events, lifetimes=args.lifetimes,
    )  # fmt: skip
    try:
        scenario = parse_scenario(doc)
    except ScenarioError as e:
        print(f"error: the sample is not a valid scenario: {e}", file=sys.stderr)
        return 1
    fractional = sum(1 for j in doc["jobs"] if "gpu_milli" in j)
    cpu_only = sum(1 for j in doc["jobs"] if j["kind"] == "cpu")
    gpus = sum(n["gpus"] for n in doc["nodes"])
    bound = "no sampled node of its GPU models holds it" + ("" if args.lifetimes else ", or more than 4 GPUs")
    typed = sum(1 for j in doc["jobs"] if isinstance(j.get("gpu_type"), str))
    choice = sum(1 for j in doc["jobs"] if isinstance(j.get("gpu_type"), list))
    if args.lifetimes:
        end = max((j["arrival"] + j["duration_seconds"] for j in doc["jobs"]), default=0.0)
        when = "at their creation times" if args.span_hours is None else f"arrivals over {args.span_hours:g} h"
        how = f"{when}, each for its own lifetime (the last ends at {end / 86400:.1f} days)"
    else:
        how = f"arrivals over {args.span_hours or 2.0:g} h, at most {args.max_epochs} epochs each"
    print(
        f"alibaba-gpu-v2023 ({args.pods_file}), seed {args.seed}: {len(doc['nodes'])} nodes ({gpus} GPUs), "
        f"{len(doc['jobs'])} pods ({len(doc['jobs']) - cpu_only} GPU: {fractional} fractional, {typed} asking one GPU model, "
        f"{choice} a choice of models; {cpu_only} CPU-only; {counts['left_out']} left out: {bound}), "
        f"{how}; re-planned every {args.interval:g} s" + (" and at every arrival and finish" if args.replan_on_events else "")
    )
    priors = history_priors(library)
    policies = []
    for name in [p.strip() for p in args.policies.split(",") if p.strip()]:
        options = {"curve_priors": priors} if name in ("flowplan", "oracle") else {}
        try:  # every name checked before the first (long) run
            policies.append((name, make_policy(name, **options)))
        except ValueError as e:
            print(f"error: --policies: {e}", file=sys.stderr)
            return 2
    results: list[tuple[str, RunResult, float]] = []
    progress = SimProgress([name for name, _ in policies], set())  # a bar per policy on a terminal, a line when piped
    try:
        for name, policy in policies:
            t = time.perf_counter()
            run = simulate(scenario, policy, name, 0, library, data=data, record_timeline=False, on_tick=progress.run(name))
            results.append((name, run, time.perf_counter() - t))
            progress.ended(name, f"  {name}: {results[-1][2]:.0f} s")
    finally:
        progress.close()
    head = f"{'policy':<11} {'makespan':>13} {'mean JCT':>9} {'p95 JCT':>9} {'mean wait':>9} {'GPU util':>8}"
    head += f" {'plan med/p99/max (s)':>22}"
    head += f" {'idle':>5} {'checker':>7}"
    print(head)
    print("-" * len(head))
    for name, r, _ in results:
        util = f"{r.gpu_utilisation:.1%}" if r.gpu_utilisation is not None else "-"
        plan_t = f"{r.plan_seconds_median:.2f}/{r.plan_seconds_p99:.2f}/{r.plan_seconds_max:.2f}"
        done = "" if r.finished else " (unfinished)"
        waits = [j.start - j.arrival for j in r.jobs if j.start is not None]
        wait = _fmt(sum(waits) / len(waits)) if waits else "-"
        print(
            f"{name:<11} {_fmt(r.makespan):>13} {_fmt(r.mean_jct):>9} {_fmt(r.p95_jct):>9} {wait:>9} {util:>8} {plan_t:>22} "
            f"{r.idle_waits:>5} {r.checker_failures:>7}{done}"
        )
    print("GPU util: milli-GPUs held over GPUs x 1000 x the run; idle: intervals x pods left waiting while a node had room")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
