"""``flowplan simulate``: run policies on a simulated cluster through the same control loop as the daemon.

Without a scenario it runs the embedded demo (one 8-core host, six CPU training jobs with measured
curves, one with a tight tier-1 deadline) under FlowPlan and under Docker's default, showing who gets
what and the predicted finish times as the run goes, and ends with the two side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowplan.argtypes import fraction_0_10, positive_seconds, whole
from flowplan.state_arg import add_state_argument

if TYPE_CHECKING:
    from adapters.sim.run import RunResult
    from adapters.sim.scenario import Scenario
    from adapters.sim.truth import TraceLibrary

# The simulator (and through it the planner) is imported inside the functions that run it: building
# the ``flowplan`` parser imports this module, and ``flowplan --help`` must not wait for the planner.

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
        help="policy to run (repeat, or comma-separated: flowplan,tiresias; 'all' = the scenario's list and the "
        "oracle, FlowPlan fed the simulator's ground truth; 'oracle-speed' / 'oracle-epochs': the oracle given only "
        "the true speeds / only the true epochs left, which split FlowPlan's gap to the oracle in two). "
        "Default: flowplan and the scenario's baseline",
    )
    from flowplan.cli import objective_help

    p.add_argument("--objective", metavar="PROFILE", help=objective_help("FlowPlan and the oracle plan"))
    p.add_argument(
        "--makespan-slack",
        type=fraction_0_10,
        metavar="F",
        help="with the mean-jct profile: FlowPlan and the oracle hold each node's predicted makespan within F over the "
        "shortest reachable (0.05: 5 %%), at the cost of a longer mean JCT (sets settings.makespan_slack; default: "
        "unset, only the tail guard: no later than the equal split)",
    )
    p.add_argument("--seeds", type=whole(1, 1000), default=1, metavar="N", help="run seeds 0..N-1 (default 1)")
    p.add_argument("--seed", type=whole(0, 2**31 - 1), default=0, metavar="S", help="first seed (default 0)")
    p.add_argument("--out", metavar="DIR", help="write a JSON result per policy and seed, a summary and PNG plots here")
    add_state_argument(
        p,
        "record the first policy's first seed (its plans and actions) to this state store, as the daemon does, for "
        "flowplan status / events / explain (appended to an existing store; default: none)",
        default=None,
    )
    p.add_argument("--data", metavar="DIR", help="measured data folder (default: the bundled copy; traces need ../shared/data)")
    p.add_argument(
        "--time-limit",
        type=positive_seconds,
        default=1.0,
        metavar="S",
        help="FlowPlan's solver time limit per interval, seconds (default 1)",
    )
    p.add_argument(
        "--priors",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give FlowPlan the curves of earlier runs of each job's model at other batch sizes (default: on)",
    )
    p.add_argument(
        "--learn-curves",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also put the curves of the jobs finished so far into each snapshot, per task, as the state store "
        "gives a daemon (snapshot curve_priors; default: off)",
    )
    p.add_argument(
        "--live",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show who holds what and each job's predicted finish as each policy's first seed runs: on a terminal "
        "every interval, redrawn in place; piped, every 10 simulated minutes and at the run's end (default: on for "
        "the embedded demo with one seed)",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress output (default: a bar per policy and seed on a terminal, one line per run when piped)",
    )
    p.set_defaults(func=run_command)


def _fmt_t(seconds: float | None) -> str:
    from flowplan.simprogress import fmt_t

    return fmt_t(seconds)


def make_sim_policy(
    name: str, time_limit: float, priors: dict[str, Any] | None, objective: str | None = None, makespan_slack: float | None = None
) -> Any:
    """A fresh policy for one run: FlowPlan and the oracle with the same solver options, priors, objective and
    makespan slack."""
    from planner.policies import make_policy

    if name == "flowplan" or name.startswith("oracle"):
        return make_policy(name, time_limit=time_limit, curve_priors=priors, objective=objective, makespan_slack=makespan_slack)
    return make_policy(name)


def _resolve(args: argparse.Namespace) -> tuple[Scenario, list[str], TraceLibrary, Path | None]:
    from adapters.sim.scenario import ScenarioError, load_scenario
    from adapters.sim.truth import TraceError, TraceLibrary
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

    names = ["flowplan", scenario.baseline]
    if args.policy:  # repeated, or comma-separated
        names = [n.strip() for value in args.policy for n in value.split(",")]
        empty = next((value for value in args.policy if "" in (n.strip() for n in value.split(","))), None)
        if empty is not None:
            raise UsageError(f"--policy {empty!r}: an empty policy name (give NAME or NAME,NAME)")
    if "all" in names:
        names = with_oracle(scenario.policies)
    out: list[str] = []
    for n in names:
        if n not in POLICIES:
            raise UsageError(f"--policy: unknown policy {n!r} (known: {', '.join(sorted(POLICIES))}, all)")
        if n not in out:
            out.append(n)
    return scenario, out, library, data


def with_oracle(policies: Sequence[str]) -> list[str]:
    """``policies`` with the oracle right after FlowPlan (or first), once."""
    out = [p for p in policies if p != "oracle"]
    at = out.index("flowplan") + 1 if "flowplan" in out else 0
    return [*out[:at], "oracle", *out[at:]]


def run_command(args: argparse.Namespace) -> int:
    from adapters.sim.run import simulate
    from adapters.sim.scenario import ScenarioError
    from adapters.sim.truth import history_priors
    from flowplan.cli import UsageError, objective_arg
    from flowplan.simprogress import SimProgress

    objective = objective_arg(args.objective)
    scenario, policies, library, data = _resolve(args)
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise UsageError(f"--out {args.out}: is a file, not a directory") from None
        except OSError as e:
            raise UsageError(f"--out {args.out}: {e.strerror or e}") from None
    seeds = list(range(args.seed, args.seed + args.seeds))
    live = args.live if args.live is not None else (args.scenario is None and len(seeds) == 1)
    if not args.quiet:
        print(f"scenario {scenario.name}: {scenario.description}", file=sys.stderr)
        print(f"policies: {', '.join(policies)}; seeds: {', '.join(map(str, seeds))}", file=sys.stderr)
        if objective is not None:
            print(f"objective (flowplan, oracle): {objective}", file=sys.stderr)
        if args.makespan_slack is not None:
            print(f"makespan slack (flowplan, oracle): {args.makespan_slack:g}", file=sys.stderr)
    priors = history_priors(library) if args.priors else None
    runs: list[RunResult] = []
    recorder = None
    if args.state is not None:
        from flowplan.state_arg import open_store

        recorder = open_store(args.state)
    labels = [f"{p} seed {s}" for p in policies for s in seeds]
    shown = {f"{p} seed {seeds[0]}" for p in policies} if live else set()
    progress = SimProgress(labels, shown, quiet=args.quiet, every=max(600.0, scenario.interval_seconds))
    try:
        for policy_name in policies:
            for seed in seeds:
                label = f"{policy_name} seed {seed}"
                t0 = time.perf_counter()
                try:
                    policy = make_sim_policy(policy_name, args.time_limit, priors, objective, args.makespan_slack)
                    record = recorder if (policy_name, seed) == (policies[0], seeds[0]) else None
                    result = simulate(
                        scenario,
                        policy,
                        policy_name,
                        seed,
                        library,
                        data=data,
                        on_tick=progress.run(label),
                        recorder=record,
                        learn_curves=args.learn_curves,
                    )
                except ScenarioError as e:  # found as the jobs are drawn: name the file, as load_scenario does
                    raise UsageError(f"{scenario.path}: {e}" if scenario.path else str(e)) from None
                runs.append(result)
                progress.ended(
                    label,
                    f"{label}: makespan {_fmt_t(result.makespan)}, mean JCT {_fmt_t(result.mean_jct)}, "
                    f"{result.intervals} intervals, {time.perf_counter() - t0:.1f} s wall",
                )
                if out_dir is not None:
                    _write_json(out_dir / f"{policy_name}-seed{seed}.json", result.to_dict())
    finally:
        progress.close()
    if recorder is not None:
        recorder.close()
    summary = _summary(scenario, runs)
    summary["objective"] = objective
    summary["makespan_slack"] = args.makespan_slack
    from flowplan.tables import for_stream

    sys.stdout.write(render_summary(scenario, summary, rich=for_stream()))
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


# -- measures the table adds to RunResult's own fields -------------------------------------------------


def run_restarts(r: RunResult) -> int:
    """Checkpoint-restarts of one run: the jobs' own count where the simulator keeps one, else
    migrations + pauses."""
    per_job = [getattr(j, "restarts", None) for j in r.jobs]
    if r.jobs and all(isinstance(x, int) for x in per_job):
        return sum(int(x) for x in per_job if x is not None)
    return r.migrations + r.pauses


def run_idle_waits(r: RunResult) -> int | None:
    """Intervals x jobs left waiting while a node had room for their minimum (None: not measured)."""
    v = getattr(r, "idle_waits", None)
    return None if v is None else int(v)


def run_tier1(r: RunResult) -> tuple[float | None, int]:
    """Mean time from arrival to tier 1 over the jobs that reached it, and how many did."""
    ts = [j.tier1_time for j in r.jobs if j.tier1_time is not None]
    return (sum(ts) / len(ts) if ts else None), len(ts)


EXTRA_FIELDS = ("tier1_time_reached", "tier1_reached", "jobs", "qoe_total", "idle_waits", "restarts")


def _extra(r: RunResult) -> dict[str, float | None]:
    t1, reached = run_tier1(r)
    idle = run_idle_waits(r)
    return {
        "tier1_time_reached": t1,
        "tier1_reached": float(reached),
        "jobs": float(len(r.jobs)),
        "qoe_total": float(r.qoe_total),
        "idle_waits": None if idle is None else float(idle),
        "restarts": float(run_restarts(r)),
    }


def gain_text(value: float, unit: str, sd: float | None = None) -> str:
    """FlowPlan's gain on a metric in words, the sign turned into the right word (one place for it).

    ``unit`` is :func:`adapters.sim.compare.improvement`'s: ``% shorter`` (negative: longer),
    ``% shorter for one job`` (the largest one-job reduction; negative: every job is longer), or a
    ratio (``x jobs meeting ...``).
    """
    spread = f" ± {sd:.1f}" if sd is not None else ""
    if unit.startswith("% shorter"):
        rest = unit[len("% shorter") :]
        if round(value, 1) == 0.0:
            return f"0.0{spread} % (the same){rest}"
        if value > 0:
            return f"{value:.1f}{spread} % shorter{rest}"
        if rest.strip() == "for one job":
            return f"{-value:.1f}{spread} % longer even for the job it shortens most"
        return f"{-value:.1f}{spread} % longer{rest}"
    if unit.startswith("x "):
        return f"{value:.2f}{spread}x {unit[2:]}" + (" (fewer)" if value < 1.0 else "")
    return f"{value:.1f}{spread} {unit}"


def change_text(what: str, change_pct: float) -> str:
    """A change in percent (positive: longer) in words: ``makespan 3.3 % longer``."""
    return f"{what} {gain_text(-change_pct, '% shorter')}"


def _summary(scenario: Scenario, runs: list[RunResult]) -> dict[str, Any]:
    from adapters.sim.compare import improvements, stat, summarise
    from adapters.sim.scenario import SCENARIO_METRICS

    stats = summarise(runs)
    extra: dict[str, dict[str, Any]] = {}
    for p in stats:
        mine = [_extra(r) for r in runs if r.policy == p]
        extra[p] = {f: {"mean": (st := stat([m[f] for m in mine])).mean, "sd": st.sd} for f in EXTRA_FIELDS}
    return {
        "scenario": scenario.name,
        "paper": scenario.paper,
        "metric": scenario.metric,
        "metric_meaning": SCENARIO_METRICS[scenario.metric][0],
        "baseline": scenario.baseline,
        "headline": scenario.headline,
        "headline_text": scenario.headline_text,
        "seeds": sorted({r.seed for r in runs}),
        "policies": {p: {**{f: {"mean": s.mean, "sd": s.sd} for f, s in fs.items()}, **extra[p]} for p, fs in stats.items()},
        "lower_bound": {"mean": sum(r.makespan_lower_bound for r in runs) / len(runs) if runs else None},
        "makespan_over_bound": {p: _ratio([r for r in runs if r.policy == p]) for p in stats},
        "improvement": improvements(scenario.metric, runs) if any(r.policy == "flowplan" for r in runs) else {},
    }


def _ratio(runs: list[RunResult]) -> float | None:
    vals = [r.makespan / r.makespan_lower_bound for r in runs if r.makespan is not None and r.makespan_lower_bound > 0]
    return sum(vals) / len(vals) if vals and len(vals) == len(runs) else None


def _count(x: float | None, n_seeds: int) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}" if n_seeds > 1 and abs(x - round(x)) > 1e-9 else f"{round(x):d}"


def _grid(header: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    """A plain-text table: every column as wide as its widest cell, two spaces between columns; the
    first ``left`` columns left-aligned, the rest (numbers) right-aligned. Cells never run together."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    out = [line(header).rstrip(), "  ".join("-" * w for w in widths)]
    return out + [line(r).rstrip() for r in rows]


def render_summary(scenario: Scenario, summary: dict[str, Any], *, rich: bool = False) -> str:
    """The final table and its notes; ``rich``: the table drawn for a terminal (flowplan.tables)."""
    from adapters.sim.scenario import SCENARIO_METRICS

    n = len(summary["seeds"])

    def get(p: str, f: str) -> tuple[float | None, float | None]:
        s = summary["policies"][p].get(f, {"mean": None, "sd": None})
        return s["mean"], s["sd"]

    def cell(p: str, f: str, kind: str) -> str:
        m, sd = get(p, f)
        if m is None:
            return "-"
        if kind == "t":
            return _fmt_t(m) + (f" ±{_fmt_t(sd)}" if n > 1 and sd is not None else "")
        if kind == "pct":
            return f"{100 * m:.0f}%"
        if kind == "ms":
            return f"{1000 * m:.0f} ms"
        return _count(m, n)

    lines = [f"\n{scenario.name}: {SCENARIO_METRICS[scenario.metric][0]} ({n} seed(s))"]
    if summary.get("objective"):
        lines.append(f"objective of flowplan and oracle: {summary['objective']}")
    if summary.get("makespan_slack") is not None:
        lines.append(f"makespan slack of flowplan and oracle: {summary['makespan_slack']:g}")
    lines.append("")
    header = ["POLICY", "MAKESPAN", "/BOUND", "MEAN JCT", "P95 JCT", "TIER1", "DEADLINES", "UTIL", "MIGR", "RESIZE"]
    header += ["RESTARTS", "IDLE", "PLAN"]
    rows: list[list[str]] = []
    reached: list[str] = []  # "jobs that reached tier 1 / jobs", for the policies where not all did
    reached_by: list[str] = []
    for p in summary["policies"]:
        util_field = "gpu_utilisation" if get(p, "gpu_utilisation")[0] is not None else "cpu_utilisation"
        ratio = summary["makespan_over_bound"].get(p)
        total = get(p, "qoe_total")[0]
        deadlines = "-" if not total else f"{_count(get(p, 'qoe_met')[0], n)}/{_count(total, n)}"
        n_reached, n_jobs = get(p, "tier1_reached")[0], get(p, "jobs")[0]
        if n_jobs and n_reached is not None and n_reached < n_jobs:
            reached.append(f"{_count(n_reached, n)}/{_count(n_jobs, n)}")
            reached_by.append(p)
        rows.append(
            [
                p,
                cell(p, "makespan", "t"),
                "-" if ratio is None else f"{ratio:.2f}",
                cell(p, "mean_jct", "t"),
                cell(p, "p95_jct", "t"),
                cell(p, "tier1_time_reached", "t"),
                deadlines,
                cell(p, util_field, "pct"),
                cell(p, "migrations", "n"),
                cell(p, "resizes", "n"),
                cell(p, "restarts", "n"),
                cell(p, "idle_waits", "n"),
                cell(p, "plan_seconds_mean", "ms"),
            ]
        )
    if rich:
        from flowplan.tables import rich_lines

        lines += rich_lines(rows, header, right_from=1)
    else:
        lines += _grid(header, rows)
    lb = summary["lower_bound"]["mean"]
    lines.append("")
    lines.append(
        f"makespan lower bound: {_fmt_t(lb)} (longest job alone at its best allocation, total work / capacity, "
        "or the CPU the jobs need to end by then)"
    )
    if not reached:
        how_many = ""
    elif len(set(reached)) == 1 and len(reached) == len(summary["policies"]):
        how_many = f" ({reached[0]} jobs under every policy)"
    else:
        how_many = f" (reached by {', '.join(f'{c} jobs under {p}' for c, p in zip(reached, reached_by, strict=True))})"
    lines.append(f"TIER1: mean time from arrival to tier 1 of the jobs that reached it{how_many}")
    lines.append("DEADLINES: tier-1 deadlines met / jobs with one")
    lines.append("RESTARTS: checkpoint-restarts (migrations, pauses, restarts in place)")
    lines.append("IDLE: intervals x jobs left waiting while a node had room for their minimum (0: work-conserving)")
    width = max((len(b) for b in summary["improvement"]), default=0)
    if summary["improvement"]:
        lines.append(f"FlowPlan against each policy on the scenario's metric, {SCENARIO_METRICS[scenario.metric][0]}:")
    for base, imp in summary["improvement"].items():
        label = f"flowplan vs {base:<{width}}:"
        if imp["mean"] is None:
            lines.append(f"{label} -")
            continue
        extra = ""
        if scenario.metric == "job_jct" and imp.get("makespan_change") is not None:
            extra = f" ({change_text('makespan', imp['makespan_change'])})"
        sd = imp["sd"] if imp["sd"] is not None and n > 1 else None
        mark = ""
        if base == scenario.baseline:
            mark = " <- the paper's baseline"
        elif base == "oracle":
            mark = " <- FlowPlan with the ground truth: the cost of its prediction errors"
        elif base == "oracle-speed":
            mark = " <- the true speeds only: the cost of its speed predictions"
        elif base == "oracle-epochs":
            mark = " <- the true epochs left only: the cost of its curve predictions"
        lines.append(f"{label} {gain_text(imp['mean'], imp['unit'], sd)}{extra}{mark}")
    if scenario.headline is not None:
        lines.append(f"paper ({scenario.paper}): {scenario.headline_text}")
    return "\n".join(lines) + "\n"
