"""FlowPlan against Docker's default on random CPU workloads that no change was tuned on.

The six scenarios of ``examples/scenarios/`` are what every change so far was measured on, so a
change can win there by fitting them. This draws fresh workloads from the measured data instead:
random hosts (1-4 of 8-32 cores); 3-24 jobs of random models and batch sizes (every measured curve
of cifar10, yolov3, deepspeech2 and ncf in ``adaptdl-osdi21/traces``; epochs drawn per model), as
many as make their maximum shares add up to 1.5-4 times the cores; arrivals spread over 1-30
minutes; some workloads with TRADL's two-tier targets. The generator is seeded, so
``--generator-seed`` names a workload set, and a new set is a new held-out test.

Each workload is written as a scenario TOML under ``--out`` (``flowplan simulate FILE`` replays it)
and run with every policy of ``--policies`` over ``--seeds`` simulator seeds. Printed: per workload,
FlowPlan's (and the oracle's) mean JCT and makespan against Docker's default; then the mean and
median over workloads with a bootstrap 95 % interval (over workloads), and how many workloads
FlowPlan is no worse than Docker on each and on both.

Usage::

    python benchmarks/heldout.py [--count 12] [--generator-seed 0] [--seeds 2] [--jobs 2]
                                 [--policies flowplan,docker,oracle] [--data ../shared/data] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from results import Task, run_all

from adapters.sim.run import RunResult
from adapters.sim.scenario import ScenarioError, load_scenario

REPO = Path(__file__).resolve().parent.parent
#: Models drawn from, with the range of epochs a job of each trains for (None: to the measured end).
MODELS: dict[str, tuple[int, int] | None] = {"cifar10": (15, 40), "yolov3": (4, 12), "deepspeech2": (8, 20), "ncf": None}
CORES = (8_000, 16_000, 24_000, 32_000)  # millicores per host
WINDOWS = (60, 300, 900, 1800)
MAX_JOBS = 24
BASELINE = "docker"


def batch_sizes(data: Path, model: str) -> list[int]:
    """The batch sizes with a measured curve for ``model``."""
    found = (re.fullmatch(r"validation-(\d+)\.csv", p.name) for p in (data / "adaptdl-osdi21" / "traces" / model).glob("*.csv"))
    return sorted(int(m.group(1)) for m in found if m)


def workload(rng: np.random.Generator, index: int, sizes: dict[str, list[int]]) -> dict[str, Any]:
    """One random scenario, as the document ``load_scenario`` reads."""
    hosts = int(rng.choice([1, 1, 2, 3, 4]))
    cores = [int(rng.choice(CORES)) for _ in range(hosts)]
    # Contention: the jobs' maxima add up to 1.5-4 times the cores (an idle cluster plans itself).
    load = float(rng.uniform(1.5, 4.0))
    count = int(min(MAX_JOBS, max(3, round(load * sum(cores) / 8000))))
    window = int(rng.choice(WINDOWS))
    tiers = bool(rng.random() < 0.3)
    doc: dict[str, Any] = {
        "name": f"heldout-{index:02d}",
        "description": f"{hosts} host(s) of {'/'.join(str(c // 1000) for c in cores)} cores, {count} CPU jobs over {window} s"
        + (", two-tier targets" if tiers else ""),
        "metric": "mean_jct",
        "baseline": BASELINE,
        "interval_seconds": 30,
        "migration_budget": 4,
        "nodes": [{"name": f"host{i}", "cpu_millis": c, "memory_mib": 65536} for i, c in enumerate(cores)],
        "jobs": [],
    }
    models = list(MODELS)
    for j in range(count):
        model = models[int(rng.integers(len(models)))]
        batch = int(rng.choice(sizes[model]))
        top = 4000 if model == "ncf" else 8000
        job: dict[str, Any] = {
            "id": f"{model}-{batch}-{j}",
            "model": model,
            "batch_size": batch,
            "kind": "cpu",
            "arrival": [0, window],
            "min_cpu_millis": 500,
            "max_cpu_millis": min(top, min(cores)),
        }
        span = MODELS[model]
        if span is not None:
            job["epochs"] = int(rng.integers(span[0], span[1] + 1))
        if tiers:
            job["tier1"], job["tier2"] = 0.9, 0.98
        doc["jobs"].append(job)
    return doc


def to_toml(doc: dict[str, Any]) -> str:
    """The scenario document as TOML (flat keys, arrays of numbers, and tables of nodes and jobs)."""

    def value(v: Any) -> str:
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    lines = [f"{k} = {value(v)}" for k, v in doc.items() if k not in ("nodes", "jobs")]
    for table in ("nodes", "jobs"):
        for row in doc[table]:
            lines += ["", f"[[{table}]]", *(f"{k} = {value(v)}" for k, v in row.items())]
    return "\n".join(lines) + "\n"


def pct_longer(ours: float | None, base: float | None) -> float | None:
    """How much longer ``ours`` is than ``base``, in % (negative: shorter)."""
    if ours is None or base is None or base <= 0:
        return None
    return round(100.0 * (ours - base) / base, 2) + 0.0  # + 0.0: no "-0.0"


def bootstrap(values: list[float], draws: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of the mean, resampling the workloads."""
    x = np.asarray(values, dtype=float)
    means = np.random.default_rng(seed).choice(x, size=(draws, x.size), replace=True).mean(axis=1)
    return round(float(np.percentile(means, 2.5)), 1) + 0.0, round(float(np.percentile(means, 97.5)), 1) + 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=12, help="workloads to draw (default 12)")
    ap.add_argument("--generator-seed", type=int, default=0, help="seed of the workload generator (default 0)")
    ap.add_argument("--seeds", type=int, default=2, help="simulator seeds per workload (default 2)")
    ap.add_argument("--jobs", type=int, default=1, help="simulations at a time, in separate processes (default 1)")
    ap.add_argument("--policies", default="flowplan,docker,oracle", help="comma-separated; must include flowplan and docker")
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"), help="measured data folder (default ../shared/data)")
    ap.add_argument("--out", default=None, help="folder for the scenario files and results.json (default: a temporary one)")
    args = ap.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for name, v, lo in (("--count", args.count, 1), ("--seeds", args.seeds, 1), ("--jobs", args.jobs, 1)):
        if v < lo:
            print(f"error: {name}: {v} (at least {lo})", file=sys.stderr)
            return 2
    if "flowplan" not in policies or BASELINE not in policies:
        print(f"error: --policies: {args.policies!r} must include flowplan and {BASELINE}", file=sys.stderr)
        return 2
    data = Path(args.data)
    sizes = {m: batch_sizes(data, m) for m in MODELS}
    missing = [m for m, s in sizes.items() if not s]
    if missing:
        where = "adaptdl-osdi21/traces/<model>/validation-*.csv"
        print(f"error: --data: {data} has no measured curves for {', '.join(missing)} ({where})", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="flowplan-heldout-"))
    out.mkdir(parents=True, exist_ok=True)

    rng = np.random.default_rng(args.generator_seed)
    paths: list[Path] = []
    for i in range(args.count):
        path = out / f"heldout-{i:02d}.toml"
        path.write_text(to_toml(workload(rng, i, sizes)))
        try:
            load_scenario(path)
        except ScenarioError as e:  # the generator's own bug, not the user's: say which file
            print(f"error: generated {path}: {e}", file=sys.stderr)
            return 1
        paths.append(path)

    tasks = [Task(str(p), row, seed, str(data), True) for p in paths for row in policies for seed in range(args.seeds)]
    t0 = time.perf_counter()
    done = 0

    def progress(task: Task, result: RunResult, wall: float) -> None:
        nonlocal done
        done += 1
        what = f"{Path(task.scenario).stem} {task.row} seed {task.seed}"
        print(f"  [{done}/{len(tasks)}] {what}: {wall:.0f} s", file=sys.stderr, flush=True)

    runs = run_all(tasks, args.jobs, progress)
    wall = time.perf_counter() - t0

    by: dict[tuple[str, str], list[RunResult]] = {}
    for task, run in zip(tasks, runs, strict=True):
        by.setdefault((Path(task.scenario).stem, task.row), []).append(run)

    def mean_of(name: str, row: str, field: str) -> float | None:
        xs = [getattr(r, field) for r in by[(name, row)]]
        return statistics.fmean(xs) if xs and all(x is not None for x in xs) else None

    others = [p for p in policies if p != BASELINE]
    runs_text = f"{args.seeds} seed(s) each, {wall:.0f} s; files in {out}"
    print(f"\n{args.count} random CPU workloads (generator seed {args.generator_seed}), {runs_text}")
    print("each policy's mean JCT and makespan against Docker's default, % longer (negative: shorter)\n")
    head = f"{'workload':<12} {'hosts/jobs':<11} " + " ".join(f"{p + ' JCT':>14} {p + ' span':>14}" for p in others)
    print(head)
    print("-" * len(head))
    gains: dict[str, dict[str, list[float]]] = {p: {"mean_jct": [], "makespan": []} for p in others}
    rows: list[dict[str, Any]] = []
    for path in paths:
        name = path.stem
        sc = load_scenario(path)
        row: dict[str, Any] = {"workload": name, "description": sc.description}
        cells = []
        for p in others:
            for field in ("mean_jct", "makespan"):
                d = pct_longer(mean_of(name, p, field), mean_of(name, BASELINE, field))
                row[f"{p}_{field}_pct"] = d
                if d is not None:
                    gains[p][field].append(d)
                cells.append(f"{d:>+13.1f}%" if d is not None else f"{'-':>14}")
        rows.append(row)
        print(f"{name:<12} {f'{len(sc.nodes)}/{len(sc.job_table)}':<11} " + " ".join(cells))
    print()
    for p in others:
        for field in ("mean_jct", "makespan"):
            xs = gains[p][field]
            if not xs:
                continue
            lo, hi = bootstrap(xs)
            label = "mean JCT" if field == "mean_jct" else "makespan"
            print(
                f"{p} {label} vs {BASELINE}: mean {statistics.fmean(xs):+.1f} % (95 % interval {lo:+.1f} to {hi:+.1f}), "
                f"median {statistics.median(xs):+.1f} %, no worse on {sum(x <= 0 for x in xs)} of {len(xs)}"
            )
        both = [r for r in rows if (r.get(f"{p}_mean_jct_pct") or 0) <= 0 and (r.get(f"{p}_makespan_pct") or 0) <= 0]
        print(f"{p}: no worse than {BASELINE} on both mean JCT and makespan on {len(both)} of {len(rows)} workloads")
    summary = {"generator_seed": args.generator_seed, "seeds": args.seeds, "policies": policies, "rows": rows}
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
