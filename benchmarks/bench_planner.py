"""Planner latency and quality at scale, on snapshots from :mod:`benchmarks.workload`.

Prints figures; asserts nothing about time. For each size ``<jobs>x<nodes>``:

1. cold ``plan(snapshot, PlannerConfig(solver, time_limit))`` with its per-step timings;
2. warm ``plan(..., previous=cold)`` (cached model fits);
3. reference: the same with ``--reference-limit`` seconds (best bound), and greedy only.

    python benchmarks/bench_planner.py --sizes 100x10,1000x100 --reference-limit 10 --out bench.json

Cold and warm calls are repeated ``--repeat`` times (default 3) and the median run is shown.

Quality against a long solve: the default-budget plan's objective terms next to those of the
reference (long) solve of the same snapshot, printed per size and seed after the timing table:
deadlines met and missed, the remaining objective (everything but the deadline term), makespan and
total completion. With a weighted objective the solver's own relative gap is dominated by its
largest term; comparing the terms with a long solve's says what the short budget gives up.

    python benchmarks/bench_planner.py --sizes 1000x100 --seeds 0,1,2,3,4 --repeat 1 --reference-limit 30 --long full

``--long plan`` (the default) makes the long solve the planner itself with ``--reference-limit``:
relax-and-fix stops once its residual is solved, so it rarely uses the time. ``--long full`` runs
CP-SAT on the whole problem (never split into parts, even where the planner splits it) for
``--reference-limit`` seconds of deterministic time, warm-started from the default-budget choice,
then the planner's refill, and reports its bound: a search that does use the time, so the terms say
what the default budget leaves on the table (above 2,000 jobs it needs ``--reference-all``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from workload import describe, make_snapshot, with_gangs

import planner
from planner.config import PlannerConfig
from planner.decompose import parts_needed

REFERENCE_MAX_JOBS = 2000
STEPS = ("models", "build", "solve", "decode_check", "total")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        jobs, nodes = part.lower().strip().split("x")
        out.append((int(jobs), int(nodes)))
    return out


def run_plan(label: str, snapshot: Any, config: PlannerConfig, previous: Any = None) -> tuple[dict[str, Any], Any]:
    """One planner call; figures (or the exception with its traceback) and the result."""
    log(f"  {label}: solver={config.solver} time_limit={config.time_limit} ...")
    t0 = time.perf_counter()
    try:
        result = planner.plan(snapshot, config, previous=previous)
    except Exception as exc:  # noqa: BLE001  (report, don't hide: the benchmark keeps going with the next step)
        wall = time.perf_counter() - t0
        tb = traceback.format_exc()
        log(f"  {label}: FAILED after {wall:.2f}s: {type(exc).__name__}: {exc}")
        print(tb, file=sys.stderr, flush=True)
        return {"error": f"{type(exc).__name__}: {exc}", "traceback": tb, "wall": wall}, None
    wall = time.perf_counter() - t0
    p = result.plan
    s = p.solver
    fig = {
        "wall": wall,
        "timings": dict(result.timings),
        "solver": {
            "name": s.name,
            "status": s.status,
            "gap": s.gap,
            "bound": s.bound,
            "objective": s.objective,
            "subproblems": s.subproblems,
            "variables": s.variables,
            "message": s.message,
        },
        "objective_total": p.objective.total,
        "objective_terms": p.objective.model_dump(),
        "summary": p.summary.model_dump(),
        "unserved": len(p.unserved),
        "warnings": len(p.warnings),
    }
    t = result.timings
    log(
        f"  {label}: {wall:.2f}s ("
        + " ".join(f"{k}={t.get(k, float('nan')):.2f}" for k in STEPS[:-1])
        + f") status={s.status} obj={s.objective} gap={_fmt(s.gap, '.4f')} parts={s.subproblems} "
        f"vars={s.variables} unserved={len(p.unserved)}"
    )
    return fig, result


def run_repeated(
    label: str, snapshot: Any, config: PlannerConfig, repeat: int, previous: Any = None
) -> tuple[dict[str, Any], Any]:
    """``repeat`` identical calls; the figures of the median run (by total time), all totals kept.

    Single timings on a shared 2-core machine wander by ±20 %; the median of a few is what to quote.
    """
    runs = [run_plan(f"{label} {i + 1}/{repeat}", snapshot, config, previous) for i in range(repeat)]
    ok = [(fig, res) for fig, res in runs if "error" not in fig]
    if not ok:
        return runs[0]
    ok.sort(key=lambda fr: fr[0]["timings"]["total"])
    fig, res = ok[len(ok) // 2]
    fig = dict(fig, totals=[f["timings"]["total"] for f, _ in ok])
    return fig, res


def _fmt(x: Any, spec: str = ".2f") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return format(x, spec)
    return str(x)


def bench_size(n_jobs: int, n_nodes: int, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"size": f"{n_jobs}x{n_nodes}", "jobs": n_jobs, "nodes": n_nodes, "seed": seed}
    log(f"{n_jobs} jobs x {n_nodes} nodes: building snapshot (seed {seed}) ...")
    t0 = time.perf_counter()
    snap = with_gangs(make_snapshot(n_jobs, n_nodes, seed=seed), args.gangs)
    row["build_snapshot_s"] = time.perf_counter() - t0
    row["snapshot"] = describe(snap)
    log(f"  snapshot built in {row['build_snapshot_s']:.2f}s: {row['snapshot']}")

    config = PlannerConfig(solver=args.solver, time_limit=args.time_limit, fit_processes=args.fit_processes)
    if args.profile:
        profile_cold(snap, config, args.profile)
    row["cold"], cold = run_repeated("cold", snap, config, args.repeat)
    if cold is not None:
        row["warm"], _ = run_repeated("warm", snap, config, args.repeat, previous=cold)
    else:
        row["warm"] = {"error": "skipped (cold call failed)"}

    row["greedy"], _ = run_plan("greedy", snap, PlannerConfig(solver="greedy", time_limit=args.time_limit))

    if cold is not None and args.long == "full" and (n_jobs <= REFERENCE_MAX_JOBS or args.reference_all):
        row["reference"] = full_solve(snap, config, cold, args.reference_limit)
    elif n_jobs <= REFERENCE_MAX_JOBS or args.reference_all:
        ref_config = PlannerConfig(solver=args.solver, time_limit=args.reference_limit)
        row["reference"], _ = run_plan("reference", snap, ref_config, previous=cold)
    else:
        row["reference"] = {"skipped": f"more than {REFERENCE_MAX_JOBS} jobs (use --reference-all)"}
        log(f"  reference: skipped ({row['reference']['skipped']})")

    row["quality"] = quality(row["cold"], row["reference"])
    fast_obj = row["cold"].get("solver", {}).get("objective")
    ref_bound = row["reference"].get("solver", {}).get("bound")
    row["gap_vs_reference"] = (fast_obj - ref_bound) / fast_obj if (fast_obj and ref_bound is not None) else None
    return row


def profile_cold(snapshot: Any, config: PlannerConfig, top: int) -> None:
    """One cold plan under cProfile; the ``top`` functions by cumulative and by own time, to stderr.
    cProfile inflates code that makes many small NumPy calls: read it for where, not how long."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    result = planner.plan(snapshot, config)
    prof.disable()
    log(f"  profiled cold plan: {result.timings}")
    stats = pstats.Stats(prof, stream=sys.stderr)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def full_solve(snapshot: Any, config: PlannerConfig, cold: Any, limit: float) -> dict[str, Any]:
    """The long solve of ``--long full``: the planner's own steps up to its default-budget choice
    (with the cold call's model fits; ``planner.core._solve_step``: the solve, then the refill of the
    room it leaves idle, which offers jobs nodes outside their candidates, and the wider problem
    solved again where the refill paid), then CP-SAT on that whole
    problem (never split into parts, even where the planner splits it) for ``limit`` seconds of
    deterministic time from that choice, then the refill again with the long limit; decoded and
    checked like a plan. Uses the planner's private steps (``planner.core``): this is a measurement,
    not a way to plan. The reported bound is CP-SAT's over the options of that problem."""
    from planner.backends import CpSatBackend
    from planner.build import build_problem
    from planner.check import check_plan
    from planner.core import _decode, _Outcome, _refilled, _solve_step, planned_outlooks

    log(f"  full CP-SAT: {limit:g} s of deterministic time from the default-budget choice ...")
    t0 = time.perf_counter()
    problem, _ = build_problem(snapshot, planned_outlooks(snapshot, cold.outlooks), config)
    parts = parts_needed(problem, config.max_jobs_per_subproblem) if problem.n_options > 0 else 1
    problem, fast = _solve_step(snapshot.nodes, problem, config)  # the 1-s plan's choice, as planner.plan makes it
    got = CpSatBackend(workers=config.cpsat_workers).solve(
        replace(problem, hint=fast.choice), time_limit=limit, wall_limit=config.wall_clock_factor * limit + 1.0
    )
    better = got.choice is not None and not problem.violations(got.choice)
    better = better and problem.objective(got.choice) <= problem.objective(fast.choice)
    choice = got.choice if better else fast.choice
    outcome = _Outcome(choice, got.backend, got.status if better else "fallback", bound=got.bound, message=got.message)
    solved = float(problem.objective(choice))
    wider, outcome = _refilled(snapshot.nodes, problem, outcome, replace(config, time_limit=limit))
    plan_obj = _decode(snapshot, wider, config, outcome)
    violations = check_plan(snapshot, plan_obj)
    wall = time.perf_counter() - t0
    final = float(wider.objective(outcome.choice))
    log(
        f"  full CP-SAT: {wall:.2f}s status={got.status} obj={solved:.0f} bound={got.bound} "
        f"(default-budget choice {problem.objective(fast.choice)}, {parts} part(s) in the planner); "
        f"after the refill {final:.0f}; {got.message}"
    )
    return {
        "wall": wall,
        "solver": {"name": "cpsat-full", "status": got.status, "bound": got.bound, "objective": final},
        "objective_terms": plan_obj.objective.model_dump(),
        "violations": violations,
        "message": got.message,
        "planner_parts": parts,
    }


#: Objective terms compared with the long solve: (label, key in ObjectiveTerms or "remaining").
QUALITY_TERMS = (
    ("tier-1 deadlines met", "tier1_met"),
    ("tier-1 deadlines missed", "tier1_missed"),
    ("tier-2 deadlines met", "tier2_met"),
    ("tier-2 deadlines missed", "tier2_missed"),
    ("objective total", "total"),
    ("deadline (QoE) term", "qoe_cost"),
    ("remaining objective (total - QoE term)", "remaining"),
    ("unserved term", "unserved_cost"),
    ("completion term", "completion_cost"),
    ("makespan term", "makespan_cost"),
    ("churn term", "churn_cost"),
    ("makespan (s)", "makespan_seconds"),
    ("total completion (s)", "total_completion_seconds"),
)


def quality(fast: dict[str, Any], long: dict[str, Any]) -> dict[str, Any] | None:
    """The fast plan's objective terms against the long solve's: both values and the relative
    difference ``(fast - long) / |long|`` of each (positive: the fast plan is worse for a cost)."""
    if "objective_terms" not in fast or "objective_terms" not in long:
        return None
    out: dict[str, Any] = {}
    for _, key in QUALITY_TERMS:
        a, b = (_term(fig["objective_terms"], key) for fig in (fast, long))
        out[key] = {"fast": a, "long": b, "rel": (a - b) / abs(b) if (a is not None and b) else None}
    met = ("tier1_met", "tier2_met")
    out["deadlines_met_equal"] = all(out[k]["fast"] == out[k]["long"] for k in met)
    # The long solve's bound is below every plan's total, so the fast plan is at most (total - bound)
    # above the optimum (over the candidate options): said as a share of its remaining objective.
    bound = long.get("solver", {}).get("bound")
    remaining = out["remaining"]["fast"]
    over = fast["objective_terms"]["total"] - bound if bound is not None else None
    out["remaining_vs_bound"] = max(over, 0.0) / remaining if (over is not None and remaining) else None
    total = fast["objective_terms"]["total"]
    out["total_vs_bound"] = max(over, 0.0) / abs(total) if (over is not None and total) else None
    return out


def _term(terms: dict[str, Any], key: str) -> float | None:
    if key == "remaining":
        return terms["total"] - terms["qoe_cost"]
    return terms.get(key)


def print_quality(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    for r in rows:
        q = r.get("quality")
        if q is None:
            continue
        ref = r["reference"]["solver"]
        print(
            f"\n{r['size']} seed {r['seed']}: {args.time_limit:g}-s plan (cold, {r['cold']['wall']:.2f} s, "
            f"{r['cold']['solver']['status']}) against the {args.reference_limit:g}-s "
            f"{'full CP-SAT ' if args.long == 'full' else ''}solve "
            f"({ref['status']}, bound {_fmt(ref['bound'], '.0f')}); deadlines met equal: "
            f"{'yes' if q['deadlines_met_equal'] else 'NO'}; remaining objective "
            f"{_fmt(q['remaining']['rel'], '+.4%')}; " + _above_bound(q)
        )
        width = max(len(label) for label, _ in QUALITY_TERMS)
        print(f"  {'term'.ljust(width)}  {'fast':>16}  {'long':>16}  {'fast vs long':>12}")
        for label, key in QUALITY_TERMS:
            t = q[key]
            print(
                f"  {label.ljust(width)}  {_fmt(t['fast'], '.1f'):>16}  {_fmt(t['long'], '.1f'):>16}  "
                f"{_fmt(t['rel'], '+.4%'):>12}"
            )


def _above_bound(q: dict[str, Any]) -> str:
    """What the long solve's bound says of the fast plan: against its remaining objective where the bound
    settles the deadline term (the fast plan's total minus the bound is less than that remainder), else
    against its total."""
    rem, tot = q["remaining_vs_bound"], q.get("total_vs_bound")
    if rem is not None and rem <= 1.0:
        return f"at most {_fmt(rem, '.4%')} of the remaining objective above the optimum (the long solve's bound)"
    if tot is not None:
        return (
            f"the total at most {_fmt(tot, '.4%')} above the optimum (the long solve's bound, which does not settle "
            "the deadline term)"
        )
    return "no bound"


def _t(fig: dict[str, Any], key: str) -> str:
    return _fmt(fig.get("timings", {}).get(key))


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    def lat(fig: dict[str, Any]) -> str:
        if "error" in fig:
            return "ERROR"
        return f"{_t(fig, 'total')} ({_t(fig, 'models')}/{_t(fig, 'build')}/{_t(fig, 'solve')}/{_t(fig, 'decode_check')})"

    header = [
        "size",
        "run/pend",
        "snap s",
        "cold s (models/build/solve/dec+chk)",
        "warm s (models/build/solve/dec+chk)",
        "status",
        "parts",
        "vars",
        "gap",
        "objective",
        "ref bound",
        "gap vs ref",
        "greedy obj",
        "unserved",
    ]
    table = []
    for r in rows:
        c, ref, g = r["cold"], r["reference"], r["greedy"]
        cs = c.get("solver", {})
        table.append(
            [
                f"{r['size']} s{r['seed']}",
                f"{r['snapshot']['running']}/{r['snapshot']['pending']}",
                _fmt(r["build_snapshot_s"]),
                lat(c),
                lat(r["warm"]),
                cs.get("status", "ERROR"),
                _fmt(cs.get("subproblems")),
                _fmt(cs.get("variables")),
                _fmt(cs.get("gap"), ".4f"),
                _fmt(cs.get("objective"), ".0f"),
                ("skipped" if "skipped" in ref else "ERROR" if "error" in ref else _fmt(ref["solver"]["bound"], ".0f")),
                _fmt(r["gap_vs_reference"], ".4f"),
                ("ERROR" if "error" in g else _fmt(g["solver"]["objective"], ".0f")),
                _fmt(c.get("unserved")),
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(header)]

    def line(cells):
        return "  ".join(cell.rjust(w) for cell, w in zip(cells, widths, strict=False))

    print(
        f"FlowPlan planner benchmark: solver={args.solver} time_limit={args.time_limit}s "
        f"reference_limit={args.reference_limit}s seed={args.seeds or args.seed} "
        f"({platform.python_implementation()} {platform.python_version()}, {platform.machine()})"
    )
    print(line(header))
    print(line(["-" * w for w in widths]))
    for row in table:
        print(line(row))
    skipped = [r["size"] for r in rows if "skipped" in r["reference"]]
    if skipped:
        print(f"reference solve skipped for {', '.join(skipped)} (> {REFERENCE_MAX_JOBS} jobs; --reference-all to run it)")
    for r in rows:
        ref = r["reference"]
        if "solver" in ref:
            print(
                f"{r['size']}: reference ({args.reference_limit}s) status={ref['solver']['status']} "
                f"objective={_fmt(ref['solver']['objective'], '.0f')} bound={_fmt(ref['solver']['bound'], '.0f')} "
                f"wall={ref['wall']:.2f}s"
            )
        for step in ("cold", "warm", "greedy", "reference"):
            if "error" in r[step]:
                print(f"{r['size']}: {step} FAILED: {r[step]['error']}")
    print("gap = solver's own (objective - bound) / objective; gap vs ref = (cold objective - reference bound) / cold objective")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100x10,1000x100,10000x1000", help="comma-separated <jobs>x<nodes>")
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--reference-limit", type=float, default=30.0)
    ap.add_argument("--reference-all", action="store_true", help=f"also run the reference above {REFERENCE_MAX_JOBS} jobs")
    ap.add_argument(
        "--long",
        choices=["plan", "full"],
        default="plan",
        help="the reference (long) solve: the planner with --reference-limit, or CP-SAT on the whole problem from "
        "the default-budget choice (see above)",
    )
    ap.add_argument("--solver", default="cpsat", choices=["cpsat", "pulp"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--gangs",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="turn this share of the GPU jobs into gangs that choose their count and spread (workload.with_gangs)",
    )
    ap.add_argument("--seeds", help="comma-separated workload seeds, each size planned for each (overrides --seed)")
    ap.add_argument("--repeat", type=int, default=3, help="cold and warm calls per size; the median is shown")
    ap.add_argument("--out", type=Path, help="write all figures as JSON here")
    ap.add_argument("--fit-processes", type=int, default=0, help="PlannerConfig.fit_processes (0: every usable CPU)")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="first profile one cold plan: top N functions")
    args = ap.parse_args(argv)

    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    rows = []
    for n_jobs, n_nodes in parse_sizes(args.sizes):
        for seed in seeds:
            rows.append(bench_size(n_jobs, n_nodes, seed, args))
            if args.out:  # keep partial results if a later size is interrupted
                args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=2))
    print_table(rows, args)
    print_quality(rows, args)
    if args.out:
        log(f"figures written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
