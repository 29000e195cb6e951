"""``flowplan simulate``: run policies on a simulated cluster through the same control loop as the daemon.

Without a scenario it runs the embedded demo (one 8-core host, six CPU training jobs with measured
curves, one with a tight tier-1 deadline) under FlowPlan and under Docker's default, showing who gets
what and the predicted finish times as the run goes, and ends with the two side by side.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from adapters.loop import Tick
from adapters.sim.cluster import SimCluster
from adapters.sim.compare import improvements, summarise
from adapters.sim.run import RunResult, simulate
from adapters.sim.scenario import SCENARIO_METRICS, Scenario, ScenarioError, load_scenario
from adapters.sim.truth import TraceError, TraceLibrary, history_priors
from flowplan.argtypes import whole

DEMO = Path(__file__).resolve().parent.parent / "adapters" / "sim" / "data" / "demo.toml"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="run scheduling policies on a simulated cluster (trace-driven, measured curves)",
        description="Run one or more policies on a simulated cluster through the shared control loop and "
        "compare them. Without SCENARIO: the embedded demo, FlowPlan against Docker's default.",
    )
    p.add_argument("scenario", nargs="?", help="scenario TOML file (default: the embedded demo)")
    p.add_argument(
        "--policy",
        action="append",
        metavar="NAME",
        help="policy to run (repeat; 'all' = the scenario's list). Default: flowplan and the scenario's baseline",
    )
    p.add_argument("--seeds", type=whole(1, 1000), default=1, metavar="N", help="run seeds 0..N-1 (default 1)")
    p.add_argument("--seed", type=whole(0, 2**31 - 1), default=0, metavar="S", help="first seed (default 0)")
    p.add_argument("--out", metavar="DIR", help="write a JSON result per policy and seed, a summary and PNG plots here")
    p.add_argument("--data", metavar="DIR", help="measured data folder (default: the bundled copy; traces need ../shared/data)")
    p.add_argument("--time-limit", type=float, default=1.0, metavar="S", help="FlowPlan's solver time limit per interval")
    p.add_argument(
        "--priors",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give FlowPlan the curves of earlier runs of each job's model at other batch sizes (default: on)",
    )
    p.add_argument("--live", action=argparse.BooleanOptionalAction, default=None, help="show allocations and ETAs as it runs")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run_command)


def _fmt_t(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """Progress for one run: a bar (jobs finished), or with ``live`` a table of who holds what and ETAs."""

    def __init__(self, label: str, live: bool, quiet: bool, every: float) -> None:
        self.label, self.live, self.quiet, self.every = label, live, quiet, every
        self.tty = sys.stderr.isatty()
        self.last_shown = -math.inf
        self.last_decile = -1
        self.lines = 0

    def __call__(self, cluster: SimCluster, tick: Tick) -> None:
        if self.quiet:
            return
        done = sum(1 for j in cluster.jobs.values() if j.status == "finished")
        total = len(cluster.jobs)
        if self.live:
            if self.tty or tick.time - self.last_shown >= self.every or done == total:
                self.last_shown = tick.time
                self._table(cluster, tick, done, total)
            return
        width = 30
        fill = int(width * done / max(total, 1))
        line = f"\r{self.label:<28} [{'#' * fill}{'.' * (width - fill)}] {done}/{total} jobs  t={_fmt_t(tick.time - cluster.t0)}"
        if self.tty:
            sys.stderr.write(line)
        elif done * 10 // max(total, 1) > self.last_decile or self.last_decile < 0:
            # Not a terminal (a log): one line per tenth of the jobs finished.
            self.last_decile = done * 10 // max(total, 1)
            sys.stderr.write(line.lstrip("\r") + "\n")
        sys.stderr.flush()

    def _table(self, cluster: SimCluster, tick: Tick, done: int, total: int) -> None:
        eta = {a.job: a.predictions.eta_finish for a in tick.plan.assignments}
        rows = [
            f"{self.label}  t={_fmt_t(tick.time - cluster.t0)}  finished {done}/{total}  plan {tick.plan_seconds * 1000:.0f} ms"
        ]
        rows.append(f"  {'JOB':<18} {'STATE':<9} {'NODE':<8} {'CPU':>6} {'GPU':>3} {'EPOCH':>9} {'ETA':>8}  {'DEADLINE':>8}")
        for j in cluster.jobs.values():
            if j.status == "future":
                continue
            e = eta.get(j.spec.id)
            state = j.status if j.blocked_until <= cluster.t or j.status != "running" else "starting"
            dl = j.spec.tier1_deadline
            rows.append(
                f"  {j.spec.id:<18} {state:<9} {(j.node or '-'):<8} {j.cpu_millis / 1000:>6.2f} {j.gpus:>3} "
                f"{j.progress:>5.1f}/{j.spec.epochs:<3} {_fmt_t(None if e is None else e - cluster.t0):>8}  "
                f"{_fmt_t(None if dl is None else dl - cluster.t0):>8}"
            )
        if self.tty and self.lines:
            sys.stderr.write(f"\x1b[{self.lines}F\x1b[J")
        sys.stderr.write("\n".join(rows) + "\n")
        sys.stderr.flush()
        self.lines = len(rows) if self.tty else 0

    def end(self) -> None:
        if not self.quiet and self.tty and not self.live:
            sys.stderr.write("\n")


def _policy(name: str, time_limit: float, priors: dict[str, Any] | None) -> Any:
    from planner.policies import make_policy

    if name == "flowplan":
        return make_policy(name, time_limit=time_limit, curve_priors=priors)
    return make_policy(name)


def _resolve(args: argparse.Namespace) -> tuple[Scenario, list[str], TraceLibrary, Path | None]:
    from flowplan.cli import UsageError

    path = args.scenario or str(DEMO)
    try:
        scenario = load_scenario(path)
    except ScenarioError as e:
        raise UsageError(str(e)) from None
    data = Path(args.data) if args.data else None
    if data is None and scenario.trace is not None:
        default = Path.cwd().parent / "shared" / "data"
        data = default if default.is_dir() else None
    try:
        library = TraceLibrary.load(data)
    except TraceError as e:
        raise UsageError(f"--data {args.data}: {e}") from None
    from planner.policies import POLICIES

    names = args.policy or ["flowplan", scenario.baseline]
    if "all" in names:
        names = list(scenario.policies)
    out: list[str] = []
    for n in names:
        if n not in POLICIES:
            raise UsageError(f"--policy: unknown policy {n!r} (known: {', '.join(sorted(POLICIES))}, all)")
        if n not in out:
            out.append(n)
    return scenario, out, library, data


def run_command(args: argparse.Namespace) -> int:
    from flowplan.cli import UsageError

    scenario, policies, library, data = _resolve(args)
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--out {args.out}: {e.strerror or e}") from None
    seeds = list(range(args.seed, args.seed + args.seeds))
    live = args.live if args.live is not None else (args.scenario is None and len(seeds) == 1)
    if not args.quiet:
        print(f"scenario {scenario.name}: {scenario.description}", file=sys.stderr)
        print(f"policies: {', '.join(policies)}; seeds: {', '.join(map(str, seeds))}", file=sys.stderr)
    priors = history_priors(library) if args.priors else None
    runs: list[RunResult] = []
    for policy_name in policies:
        for seed in seeds:
            label = f"{policy_name} seed {seed}"
            progress = Progress(
                label, live and policy_name == policies[0], args.quiet, every=max(600.0, scenario.interval_seconds)
            )
            t0 = time.perf_counter()
            try:
                policy = _policy(policy_name, args.time_limit, priors)
                result = simulate(scenario, policy, policy_name, seed, library, data=data, on_tick=progress)
            except ScenarioError as e:
                raise UsageError(str(e)) from None
            progress.end()
            runs.append(result)
            if not args.quiet:
                print(
                    f"{label}: makespan {_fmt_t(result.makespan)}, mean JCT {_fmt_t(result.mean_jct)}, "
                    f"{result.intervals} intervals, {time.perf_counter() - t0:.1f} s wall",
                    file=sys.stderr,
                )
            if out_dir is not None:
                _write_json(out_dir / f"{policy_name}-seed{seed}.json", result.to_dict())
    summary = _summary(scenario, runs)
    sys.stdout.write(render_summary(scenario, summary))
    if out_dir is not None:
        _write_json(out_dir / "summary.json", summary)
        from flowplan import simplots

        written = simplots.plot_all(runs, out_dir)
        if not args.quiet:
            print(f"wrote {len(runs)} run(s), summary.json and {len(written)} plot(s) to {out_dir}", file=sys.stderr)
    return 0


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


def _summary(scenario: Scenario, runs: list[RunResult]) -> dict[str, Any]:
    stats = summarise(runs)
    return {
        "scenario": scenario.name,
        "paper": scenario.paper,
        "metric": scenario.metric,
        "metric_meaning": SCENARIO_METRICS[scenario.metric][0],
        "baseline": scenario.baseline,
        "headline": scenario.headline,
        "headline_text": scenario.headline_text,
        "seeds": sorted({r.seed for r in runs}),
        "policies": {p: {f: {"mean": s.mean, "sd": s.sd} for f, s in fs.items()} for p, fs in stats.items()},
        "lower_bound": {"mean": sum(r.makespan_lower_bound for r in runs) / len(runs) if runs else None},
        "makespan_over_bound": {p: _ratio([r for r in runs if r.policy == p]) for p in stats},
        "improvement": improvements(scenario.metric, runs) if any(r.policy == "flowplan" for r in runs) else {},
    }


def _ratio(runs: list[RunResult]) -> float | None:
    vals = [r.makespan / r.makespan_lower_bound for r in runs if r.makespan is not None and r.makespan_lower_bound > 0]
    return sum(vals) / len(vals) if vals and len(vals) == len(runs) else None


def render_summary(scenario: Scenario, summary: dict[str, Any]) -> str:
    def cell(p: str, f: str, kind: str) -> str:
        s = summary["policies"][p][f]
        m, sd = s["mean"], s["sd"]
        if m is None:
            return "-"
        n = len(summary["seeds"])
        if kind == "t":
            return _fmt_t(m) + (f" ±{_fmt_t(sd)}" if n > 1 else "")
        if kind == "pct":
            return f"{100 * m:.0f}%"
        if kind == "ms":
            return f"{1000 * m:.0f} ms"
        return f"{m:.1f}" if n > 1 else f"{m:.0f}"

    lines = [f"\n{scenario.name}: {SCENARIO_METRICS[scenario.metric][0]} ({len(summary['seeds'])} seed(s))\n"]
    head = (
        f"{'POLICY':<11} {'MAKESPAN':>16} {'/BOUND':>6} {'MEAN JCT':>16} {'P95 JCT':>9} {'TIER1':>8} "
        f"{'QOE MET':>8} {'UTIL':>5} {'MIGR':>5} {'RESIZE':>6} {'PLAN':>7}"
    )
    lines.append(head)
    lines.append("-" * len(head))
    for p in summary["policies"]:
        util_field = "gpu_utilisation" if summary["policies"][p]["gpu_utilisation"]["mean"] is not None else "cpu_utilisation"
        ratio = summary["makespan_over_bound"].get(p)
        qoe = summary["policies"][p]["qoe_met"]["mean"]
        lines.append(
            f"{p:<11} {cell(p, 'makespan', 't'):>16} {('-' if ratio is None else f'{ratio:.2f}'):>6} "
            f"{cell(p, 'mean_jct', 't'):>16} "
            f"{cell(p, 'p95_jct', 't'):>9} {cell(p, 'mean_tier1_time', 't'):>8} {('-' if qoe is None else f'{qoe:.1f}'):>8} "
            f"{cell(p, util_field, 'pct'):>5} {cell(p, 'migrations', 'n'):>5} {cell(p, 'resizes', 'n'):>6} "
            f"{cell(p, 'plan_seconds_mean', 'ms'):>7}"
        )
    lb = summary["lower_bound"]["mean"]
    lines.append(f"\nmakespan lower bound: {_fmt_t(lb)} (longest job alone at its best allocation, or total work / capacity)")
    for base, imp in summary["improvement"].items():
        if imp["mean"] is None:
            lines.append(f"flowplan vs {base}: -")
            continue
        extra = ""
        if scenario.metric == "job_jct" and imp.get("makespan_change") is not None:
            extra = f" (makespan {imp['makespan_change']:+.1f}%)"
        sd = f" ± {imp['sd']:.1f}" if imp["sd"] is not None and len(summary["seeds"]) > 1 else ""
        mark = " <- the paper's baseline" if base == scenario.baseline else ""
        lines.append(f"flowplan vs {base:<10}: {imp['mean']:.1f}{sd} {imp['unit']}{extra}{mark}")
    if scenario.headline is not None:
        lines.append(f"paper ({scenario.paper}): {scenario.headline_text}")
    return "\n".join(lines) + "\n"
