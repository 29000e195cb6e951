"""Reproduce the research results: every scenario in ``examples/scenarios/``, each of its policies, several seeds.

Writes ``docs/results.json`` (every run's summary numbers) and ``docs/results.md``. Per scenario:

- each policy's metrics as mean ± sd over the seeds, with idle waits and restarts per job;
- FlowPlan twice: with the default objective profile and as ``flowplan[makespan]`` (planned with
  ``deadlines>makespan>mean-jct``), and the *oracle* beside them (FlowPlan fed the simulator's ground
  truth; added to every scenario here, whatever its ``policies`` list says);
- FlowPlan's gap to the best policy on the scenario's own metric, split into prediction error
  (FlowPlan − oracle) and formulation error (oracle − best);
- FlowPlan's gain over each baseline next to the paper's headline number, and the makespan lower bound.

Then a goals section: each goal checked per scenario, met or NOT met, with the numbers. Every verdict
is computed from the numbers, never written by hand. Everything below the analysis marker of an
existing ``results.md`` in the output folder is kept.

Usage::

    python benchmarks/results.py [--seeds 5] [--scenarios flowcon-1node,specon-4nodes] [--jobs 2]
                                 [--data ../shared/data] [--out docs]

``--scenarios`` also accepts ``demo`` (the embedded demo of ``flowplan simulate``). ``--jobs N`` runs
N simulations at a time in separate processes (planner times are then measured on a busier machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.sim.compare import improvement, improvements, stat, summarise
from adapters.sim.run import RunResult, simulate
from adapters.sim.scenario import SCENARIO_METRICS, Scenario, load_scenario
from adapters.sim.truth import TraceLibrary, history_priors
from flowplan.simulate import DEMO, change_text, gain_text, run_idle_waits, run_restarts, run_tier1, with_oracle
from planner.policies import make_policy

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "examples" / "scenarios"
#: Everything after this line in docs/results.md is kept when the tables are regenerated.
ANALYSIS_MARKER = "<!-- analysis: kept when results.py regenerates the tables above -->"

ORACLE = "oracle"
#: FlowPlan planned with the makespan-first profile: a row of its own next to the default.
FLOWPLAN_MAKESPAN = "flowplan[makespan]"
MAKESPAN_PROFILE = "deadlines>makespan>mean-jct"
#: Rows that are FlowPlan itself or not deployable: never "the best policy" a goal compares with.
NOT_BASELINES = ("flowplan", FLOWPLAN_MAKESPAN, ORACLE)


def fmt_t(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# -- which runs ------------------------------------------------------------------------------------------


def scenario_paths(names: str | None) -> list[Path]:
    """The scenario files to run: all of ``examples/scenarios`` or the ``names`` given (comma-separated;
    ``demo`` is the embedded demo). An unknown name exits with one line naming it."""
    known = {p.stem: p for p in sorted(SCENARIOS.glob("*.toml"))}
    if not names:
        return list(known.values())
    known["demo"] = DEMO
    out = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name not in known:
            raise SystemExit(f"results.py: error: --scenarios: unknown scenario {name!r} (known: {', '.join(sorted(known))})")
        out.append(known[name])
    if not out:
        raise SystemExit("results.py: error: --scenarios: no scenario named")
    return out


def policy_rows(sc: Scenario) -> list[str]:
    """The rows of a scenario: its policies, the oracle right after FlowPlan, and FlowPlan planned with
    the makespan-first profile right after the oracle."""
    rows = with_oracle(sc.policies)
    at = rows.index(ORACLE) + 1
    return [*rows[:at], FLOWPLAN_MAKESPAN, *rows[at:]]


def build_policy(row: str, priors: dict[str, Any] | None) -> Any:
    """The policy of a row: a policy's name, ``flowplan[makespan]``, or ``flowplan[slack=F]`` /
    ``oracle[slack=F]`` (the default profile with ``Settings.makespan_slack`` F)."""
    if row.endswith("]") and "[slack=" in row:
        name, _, slack = row[:-1].partition("[slack=")
        return make_policy(name, curve_priors=priors, makespan_slack=float(slack))
    if row == "flowplan":
        return make_policy("flowplan", curve_priors=priors)
    if row == FLOWPLAN_MAKESPAN:
        return make_policy("flowplan", curve_priors=priors, objective=MAKESPAN_PROFILE)
    if row == ORACLE:
        return make_policy(ORACLE, curve_priors=priors)
    return make_policy(row)


@dataclass(frozen=True)
class Task:
    scenario: str  # path of the scenario file
    row: str
    seed: int
    data: str
    priors: bool


_CACHE: dict[tuple[str, bool], tuple[TraceLibrary, dict[str, Any] | None]] = {}


def run_task(task: Task) -> tuple[Task, RunResult, float]:
    """One simulation (in this process or a worker): the library and priors are loaded once per process."""
    key = (task.data, task.priors)
    if key not in _CACHE:
        library = TraceLibrary.from_dir(Path(task.data))
        _CACHE[key] = (library, history_priors(library) if task.priors else None)
    library, priors = _CACHE[key]
    sc = load_scenario(task.scenario)
    t0 = time.perf_counter()
    policy = build_policy(task.row, priors)
    result = simulate(sc, policy, task.row, task.seed, library, data=Path(task.data), record_timeline=False)
    return task, result, time.perf_counter() - t0


def run_all(tasks: Sequence[Task], jobs: int, on_done: Callable[[Task, RunResult, float], None]) -> list[RunResult]:
    """Every task's result, in the order of ``tasks`` (deterministic whatever ``jobs`` is)."""
    done: dict[Task, RunResult] = {}
    if jobs <= 1:
        for t in tasks:
            task, result, wall = run_task(t)
            done[task] = result
            on_done(task, result, wall)
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(run_task, t) for t in tasks]
            for f in as_completed(futures):
                task, result, wall = f.result()
                done[task] = result
                on_done(task, result, wall)
    return [done[t] for t in tasks]


# -- the scenario's own metric, per policy -----------------------------------------------------------


def metric_value(metric: str, run: RunResult, baseline_run: RunResult | None) -> float | None:
    """A run's value on the scenario's metric. For ``job_jct`` (FlowCon's claim, relative by nature):
    the largest one-job completion-time reduction against the scenario's baseline on the same seed,
    in percent, counted only when the makespan is not longer than the baseline's (else 0, nothing
    to claim; 0 for the baseline itself)."""
    if metric in ("makespan", "mean_jct"):
        return getattr(run, metric)
    if metric == "tier1_time":
        return run.mean_tier1_time
    if metric == "qoe_met":
        return float(run.qoe_met)
    if metric == "job_jct":
        if baseline_run is None:
            return None
        d = improvement("job_jct", run, baseline_run)
        if d["value"] is None or d["makespan_change"] is None:
            return None
        return float(d["value"]) if d["makespan_change"] <= 0.0 else 0.0
    raise ValueError(f"unknown metric {metric!r}")


JOB_JCT_NOTE = " (largest one-job reduction vs the baseline; 0 when the makespan is longer than the baseline's)"


def higher_is_better(metric: str) -> bool:
    return metric in ("qoe_met", "job_jct")


#: Unit of a gap on each metric: time metrics in percent of the best value (so that the two parts
#: of the split add up), deadlines in jobs, job_jct in percentage points.
GAP_UNIT = {"makespan": "%", "mean_jct": "%", "tier1_time": "%", "qoe_met": " deadline(s)", "job_jct": " pp"}


def gap(metric: str, worse: float, better: float, best: float) -> float:
    """How much worse ``worse`` is than ``better`` (positive: worse), in :data:`GAP_UNIT` of the metric;
    time metrics as a percentage of ``best``, so that gaps to the same best add up."""
    if higher_is_better(metric):
        return better - worse
    return 100.0 * (worse - better) / best if best > 0 else 0.0


def fmt_metric(metric: str, v: float | None) -> str:
    if v is None:
        return "-"
    if metric in ("makespan", "mean_jct", "tier1_time"):
        return fmt_t(v)
    if metric == "qoe_met":
        return f"{v:.1f}"
    return f"{v:.1f}%"


def per_policy_means(sc: Scenario, runs: list[RunResult]) -> dict[str, float | None]:
    """Each row's mean over seeds of the scenario's metric (None when a seed has no value)."""
    base = {r.seed: r for r in runs if r.policy == sc.baseline}
    out: dict[str, float | None] = {}
    for p in dict.fromkeys(r.policy for r in runs):
        out[p] = stat([metric_value(sc.metric, r, base.get(r.seed)) for r in runs if r.policy == p]).mean
    return out


def best_of(metric: str, values: dict[str, float | None], candidates: Sequence[str]) -> tuple[str, float] | None:
    known = [(p, v) for p, v in values.items() if p in candidates and v is not None]
    if not known:
        return None
    pick = max if higher_is_better(metric) else min
    return pick(known, key=lambda pv: pv[1])


def deployable(rows: Sequence[str]) -> list[str]:
    """FlowPlan (default profile) and the baselines: what "the best policy" is chosen from."""
    return [p for p in rows if p not in (FLOWPLAN_MAKESPAN, ORACLE)]


def split(sc: Scenario, runs: list[RunResult]) -> dict[str, Any]:
    """FlowPlan's gap to the best deployable policy = prediction error + formulation error."""
    means = per_policy_means(sc, runs)
    best = best_of(sc.metric, means, deployable(list(means)))
    f, o = means.get("flowplan"), means.get(ORACLE)
    out: dict[str, Any] = {"values": means, "best": best[0] if best else None, "best_value": best[1] if best else None}
    if best is None or f is None or o is None:
        return out | {"gap": None, "prediction": None, "formulation": None}
    b = best[1]
    return out | {
        "gap": gap(sc.metric, f, b, b),
        "prediction": gap(sc.metric, f, o, b),
        "formulation": gap(sc.metric, o, b, b),
        "unit": GAP_UNIT[sc.metric],
    }


# -- goals -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    goal: str
    flowplan: str
    reference: str
    met: bool | None  # None: not checked here (with the reason in ``reference``)
    makespan_profile: bool | None = None  # the same goal for flowplan[makespan]


def _mean(runs: list[RunResult], policy: str, field: str) -> float | None:
    return stat([getattr(r, field) for r in runs if r.policy == policy]).mean


def _ratio_to_bound(runs: list[RunResult], policy: str) -> float | None:
    mine = [r for r in runs if r.policy == policy]
    vals = [r.makespan / r.makespan_lower_bound for r in mine if r.makespan is not None and r.makespan_lower_bound > 0]
    return statistics.fmean(vals) if vals and len(vals) == len(mine) else None


def goals(sc: Scenario, runs: list[RunResult]) -> list[Goal]:
    """Each goal for this scenario, checked on the numbers (means over seeds)."""
    rows = list(dict.fromkeys(r.policy for r in runs))
    out: list[Goal] = []

    def variant(check: Callable[[str], bool | None]) -> bool | None:
        return check(FLOWPLAN_MAKESPAN) if FLOWPLAN_MAKESPAN in rows else None

    def within(field: str, share: float, label: str) -> None:
        """A time (lower is better) within ``share`` of the best deployable policy's."""
        values = {p: _mean(runs, p, field) for p in rows}
        known = [(p, v) for p, v in values.items() if p in deployable(rows) and v is not None]
        ours = values.get("flowplan")
        if not known or ours is None:
            out.append(Goal(label, fmt_t(ours), "not comparable (a run did not finish)", None))
            return
        best_p, best_v = min(known, key=lambda pv: pv[1])

        def ok(p: str) -> bool:
            v = values.get(p)
            return v is not None and v <= best_v * (1 + share) + 1e-9

        pct = 100.0 * (ours - best_v) / best_v if best_v > 0 else 0.0
        out.append(Goal(label, f"{fmt_t(ours)} ({pct:+.1f}%)", f"best {best_p} {fmt_t(best_v)}", ok("flowplan"), variant(ok)))

    # 1. Best, or within 1 % of the best, on the scenario's own metric.
    means = per_policy_means(sc, runs)
    best = best_of(sc.metric, means, [p for p in rows if p not in NOT_BASELINES])
    f = means.get("flowplan")
    label = f"best or within 1% of the best on {sc.metric}"
    if best is None or f is None:
        out.append(Goal(label, fmt_metric(sc.metric, f), "not comparable", None))
    else:
        b = best[1]

        def near(p: str) -> bool:
            v = means.get(p)
            if v is None:
                return False
            if sc.metric == "job_jct":  # percent already: within 1 percentage point
                return v >= b - 1.0
            return v >= 0.99 * b - 1e-9 if higher_is_better(sc.metric) else v <= 1.01 * b + 1e-9

        reference = f"best baseline {best[0]} {fmt_metric(sc.metric, b)}"
        out.append(Goal(label, fmt_metric(sc.metric, f), reference, near("flowplan"), variant(near)))
    # 2. Mean JCT no worse than Docker's default.
    if "docker" in rows:
        d = _mean(runs, "docker", "mean_jct")

        def no_worse(p: str) -> bool:
            v = _mean(runs, p, "mean_jct")
            return v is not None and d is not None and v <= d + 1e-9

        ours = _mean(runs, "flowplan", "mean_jct")
        label = "mean JCT no worse than docker"
        out.append(Goal(label, fmt_t(ours), f"docker {fmt_t(d)}", no_worse("flowplan"), variant(no_worse)))
    else:
        out.append(Goal("mean JCT no worse than docker", fmt_t(_mean(runs, "flowplan", "mean_jct")), "docker not run here", None))
    # 3-4. Makespan within 5 % of the best, p95 JCT within 10 %.
    within("makespan", 0.05, "makespan within 5% of the best")
    within("p95_jct", 0.10, "p95 JCT within 10% of the best")
    # 5. Pollux: mean JCT below Tiresias.
    if sc.name == "pollux-160":
        t = _mean(runs, "tiresias", "mean_jct")

        def below(p: str) -> bool:
            v = _mean(runs, p, "mean_jct")
            return v is not None and t is not None and v < t

        ours = _mean(runs, "flowplan", "mean_jct")
        out.append(Goal("mean JCT below tiresias", fmt_t(ours), f"tiresias {fmt_t(t)}", below("flowplan"), variant(below)))
    # 6. Single host: makespan / lower bound <= 1.15.
    if len(sc.nodes) == 1:

        def tight(p: str) -> bool:
            v = _ratio_to_bound(runs, p)
            return v is not None and v <= 1.15 + 1e-9

        ratio = _ratio_to_bound(runs, "flowplan")
        shown = "-" if ratio is None else f"{ratio:.2f}"
        out.append(Goal("makespan / lower bound <= 1.15 (one host)", shown, "1.15", tight("flowplan"), variant(tight)))
    # 7. Work-conserving: no job waits while a node has room for it.
    idle = [run_idle_waits(r) for r in runs if r.policy == "flowplan"]
    if not idle or any(v is None for v in idle):
        out.append(Goal("idle waits = 0", "not measured", "the simulator does not count idle waits", None))
    else:

        def none_idle(p: str) -> bool:
            vs = [run_idle_waits(r) for r in runs if r.policy == p]
            return bool(vs) and all(v == 0 for v in vs)

        total = sum(v or 0 for v in idle)
        out.append(Goal("idle waits = 0", f"{total} over {len(idle)} run(s)", "0", none_idle("flowplan"), variant(none_idle)))
    return out


def _verdict_word(met: bool | None) -> str:
    return "-" if met is None else ("met" if met else "**NOT met**")


# -- markdown --------------------------------------------------------------------------------------------


def verdict(sc: Scenario, imp: dict[str, Any]) -> list[str]:
    """Sentences computed from the numbers: does FlowPlan beat each baseline, and reach the headline?"""
    out = []
    for base, d in imp.items():
        m = d["mean"]
        if m is None:
            out.append(f"- vs **{base}**: not comparable (some runs did not finish or the metric is undefined).")
            continue
        neutral = 1.0 if sc.metric == "qoe_met" else 0.0
        better = m > neutral
        if sc.metric == "job_jct":
            ms = d.get("makespan_change")
            better = better and ms is not None and ms <= 0.0
        word = "beats" if better else ("ties" if abs(m - neutral) < 1e-9 else "does NOT beat")
        extra = ""
        if sc.metric == "job_jct" and d.get("makespan_change") is not None:
            extra = f", {change_text('makespan', d['makespan_change'])}"
        out.append(f"- vs **{base}**: FlowPlan {word} it ({gain_text(m, d['unit'])}{extra}).")
    if sc.headline is not None and sc.baseline in imp and imp[sc.baseline]["mean"] is not None:
        m = imp[sc.baseline]["mean"]
        reached = m >= sc.headline
        extra = ""
        if sc.metric == "job_jct":  # "without a longer makespan" is part of the headline
            ms = imp[sc.baseline].get("makespan_change")
            reached = reached and ms is not None and ms <= 0.0
            if ms is not None:
                extra = f", {change_text('makespan', ms)}"
        out.append(
            f"- Headline ({sc.paper}, vs {sc.baseline}): {sc.headline_text}. FlowPlan: "
            f"{gain_text(m, imp[sc.baseline]['unit'])}{extra} — " + ("**reached**." if reached else "**not reached**.")
        )
    return out


def table(sc: Scenario, runs: list[RunResult]) -> list[str]:
    stats = summarise(runs)
    lines = [
        "| policy | makespan | / bound | mean JCT | p95 JCT | tier-1 time | tier-1 deadlines met | utilisation "
        "| restarts / job | idle waits | migrations | resizes | plan time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in dict.fromkeys(r.policy for r in runs):
        s = stats[p]
        mine = [r for r in runs if r.policy == p]
        ratio = _ratio_to_bound(runs, p)
        gpu = s["gpu_utilisation"].mean is not None and any(node.gpus for node in sc.nodes)
        util = s["gpu_utilisation" if gpu else "cpu_utilisation"]
        qoe = s["qoe_met"]
        total = mine[0].qoe_total

        def t(field: str, stat_: dict[str, Any] = s) -> str:
            v = stat_[field]
            return "-" if v.mean is None else f"{fmt_t(v.mean)} ± {fmt_t(v.sd)}"

        t1 = stat([run_tier1(r)[0] for r in mine])
        reached = statistics.fmean(run_tier1(r)[1] for r in mine)
        n_jobs = statistics.fmean(len(r.jobs) for r in mine)
        t1_cell = "-" if t1.mean is None else f"{fmt_t(t1.mean)} ± {fmt_t(t1.sd)}"
        if t1.mean is not None and reached < n_jobs:
            t1_cell += f" ({reached:g}/{n_jobs:g} jobs)"
        idle = [run_idle_waits(r) for r in mine]
        idle_cell = "-" if any(v is None for v in idle) else f"{statistics.fmean(v or 0 for v in idle):g}"
        per_job = statistics.fmean(run_restarts(r) / max(len(r.jobs), 1) for r in mine)
        name = f"**{p}**" if p in ("flowplan", ORACLE) else p
        lines.append(
            f"| {name} | {t('makespan')} | {'-' if ratio is None else f'{ratio:.2f}'} | {t('mean_jct')} | {t('p95_jct')} | "
            f"{t1_cell} | {'-' if not total else f'{qoe.mean:.1f} / {total}'} | "
            f"{'-' if util.mean is None else f'{100 * util.mean:.0f}%'} | {per_job:.2f} | {idle_cell} | "
            f"{s['migrations'].mean:.1f} | {s['resizes'].mean:.1f} | {1000 * s['plan_seconds_mean'].mean:.0f} ms |"
        )
    return lines


def split_lines(sc: Scenario, sp: dict[str, Any]) -> list[str]:
    v = sp["values"]
    m = sc.metric
    lines = [
        f"FlowPlan and the oracle on **{m}**{JOB_JCT_NOTE if m == 'job_jct' else ''}:",
        "",
        "| flowplan | oracle | flowplan[makespan] | best (FlowPlan or a baseline) | gap to best | = prediction error "
        "(flowplan − oracle) | + formulation error (oracle − best) |",
        "|---:|---:|---:|---|---:|---:|---:|",
    ]
    if sp.get("gap") is None:
        lines.append(
            f"| {fmt_metric(m, v.get('flowplan'))} | {fmt_metric(m, v.get(ORACLE))} | {fmt_metric(m, v.get(FLOWPLAN_MAKESPAN))} "
            f"| {sp['best'] or '-'} {fmt_metric(m, sp['best_value'])} | - | - | - |"
        )
    else:
        u = sp["unit"]
        lines.append(
            f"| {fmt_metric(m, v.get('flowplan'))} | {fmt_metric(m, v.get(ORACLE))} | {fmt_metric(m, v.get(FLOWPLAN_MAKESPAN))} "
            f"| {sp['best']} {fmt_metric(m, sp['best_value'])} | {sp['gap']:+.1f}{u} | {sp['prediction']:+.1f}{u} "
            f"| {sp['formulation']:+.1f}{u} |"
        )
    lines += [
        "",
        "Positive: worse than the reference"
        + (" (as a percentage of the best value, so the two parts add up)." if GAP_UNIT[m] == "%" else "."),
    ]
    return lines


def goals_section(results: dict[str, list[Goal]]) -> list[str]:
    met = sum(g.met is True for gs in results.values() for g in gs)
    checked = sum(g.met is not None for gs in results.values() for g in gs)
    lines = [
        "## Goals, checked per scenario",
        "",
        f'FlowPlan (default profile) meets **{met} of {checked}** checked goals. Means over the seeds; "the best" is the '
        "best of FlowPlan and the baselines (the oracle and `flowplan[makespan]` are not counted); the last column "
        "checks the same goal for `flowplan[makespan]`.",
        "",
        "| scenario | goal | FlowPlan | reference | verdict | flowplan[makespan] |",
        "|---|---|---:|---|---|---|",
    ]
    for name, gs in results.items():
        for g in gs:
            verdicts = f"{_verdict_word(g.met)} | {_verdict_word(g.makespan_profile)}"
            lines.append(f"| {name} | {g.goal} | {g.flowplan} | {g.reference} | {verdicts} |")
    return lines + [""]


def scenario_section(sc: Scenario, runs: list[RunResult]) -> tuple[list[str], dict[str, Any]]:
    imp_all = improvements(sc.metric, runs)
    imp = {b: d for b, d in imp_all.items() if b not in NOT_BASELINES}
    lb = statistics.fmean(r.makespan_lower_bound for r in runs)
    sp = split(sc, runs)
    gs = goals(sc, runs)
    record = {
        "metric": sc.metric,
        "baseline": sc.baseline,
        "headline": sc.headline,
        "lower_bound": lb,
        "improvement": imp_all,
        "split": sp,
        "goals": [vars(g) for g in gs],
        "runs": [{k: v for k, v in r.to_dict().items() if k not in ("timeline", "eta", "jobs")} for r in runs],
        "checker_failures": sum(r.checker_failures for r in runs),
    }
    md = [f"## {sc.name} — {sc.paper}", "", sc.description + ".", ""]
    md.append(f"Judged on: **{SCENARIO_METRICS[sc.metric][0]}**; the paper's baseline: **{sc.baseline}**.")
    md.append(
        f"Makespan lower bound: {fmt_t(lb)} (the largest of: the longest job alone at its best allocation; "
        "total work / capacity; for CPU jobs, the least end by which the jobs arriving after each arrival fit the "
        "fewest core-seconds that end them by then; `docs/simulator.md`)."
    )
    md.append("")
    md += table(sc, runs)
    md.append("")
    md.append(
        "Tier-1 time: mean time from arrival to tier 1 of the jobs that reached it (how many, when not all); restarts: "
        "checkpoint-restarts (migrations, pauses, restarts in place) per job; idle waits: intervals × jobs left waiting "
        "while a node had room for their minimum."
    )
    md.append("")
    md += split_lines(sc, sp)
    md.append("")
    md.append("FlowPlan's gain on the scenario's metric, per baseline (mean ± sd over seeds):")
    md.append("")
    for base, d in imp.items():
        if d["mean"] is None:
            md.append(f"- {base}: -")
            continue
        extra = ""
        if sc.metric == "job_jct" and d.get("makespan_change") is not None:
            extra = f", {change_text('makespan', d['makespan_change'])}"
        md.append(f"- {base}: {gain_text(d['mean'], d['unit'], d['sd'])}{extra}")
    md.append("")
    md += verdict(sc, imp)
    md.append("")
    return md, record


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--scenarios", help="comma-separated scenario names (default: all in examples/scenarios; 'demo' too)")
    ap.add_argument("--jobs", type=int, default=1, metavar="N", help="simulations at a time, in separate processes (default 1)")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=REPO / "docs")
    ap.add_argument("--no-priors", action="store_true", help="FlowPlan without curves of earlier runs (ablation)")
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1:
        ap.error("--seeds and --jobs must be at least 1")
    paths = scenario_paths(args.scenarios)
    TraceLibrary.from_dir(args.data)  # a missing data folder fails here, once
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = list(range(args.seeds))
    scenarios = [load_scenario(p) for p in paths]
    tasks = [
        Task(str(path), row, seed, str(args.data), not args.no_priors)
        for path, sc in zip(paths, scenarios, strict=True)
        for row in policy_rows(sc)
        for seed in seeds
    ]
    t_start = time.perf_counter()

    def progress(task: Task, result: RunResult, wall: float) -> None:
        print(f"  {result.scenario} {task.row} seed {task.seed}: {wall:.1f} s", file=sys.stderr, flush=True)

    print(f"{len(tasks)} runs ({len(scenarios)} scenario(s), {len(seeds)} seed(s)), {args.jobs} at a time", file=sys.stderr)
    runs = run_all(tasks, args.jobs, progress)
    by_scenario: dict[str, list[RunResult]] = {sc.name: [] for sc in scenarios}
    for r in runs:
        by_scenario[r.scenario].append(r)

    everything: dict[str, dict[str, Any]] = {}
    all_goals: dict[str, list[Goal]] = {}
    body: list[str] = []
    for sc in scenarios:
        md, record = scenario_section(sc, by_scenario[sc.name])
        everything[sc.name] = record
        all_goals[sc.name] = [Goal(**g) for g in record["goals"]]
        body += md
    failures = sum(e["checker_failures"] for e in everything.values())
    n_runs = sum(len(e["runs"]) for e in everything.values())
    command = f"python benchmarks/results.py --seeds {args.seeds}" + (f" --scenarios {args.scenarios}" if args.scenarios else "")
    md = [
        "# Results: FlowPlan against the baselines on the simulated cluster",
        "",
        f"Generated by `{command}` (each scenario's policies, the oracle and `flowplan[makespan]`, seeds "
        f"0-{seeds[-1]}; {time.perf_counter() - t_start:.0f} s with {args.jobs} process(es)). Every number is a mean ± "
        "standard deviation over the seeds; the same seed gives every policy the same arrivals and the same measurement "
        "noise. Ground truth is the measured data (`docs/simulator.md`). The *oracle* is FlowPlan fed that ground truth "
        "(remaining epochs and true speeds) instead of its predictions; `flowplan[makespan]` is FlowPlan planned with "
        f"the `{MAKESPAN_PROFILE}` objective profile.",
        "",
        f"Plans that failed the independent checker (never applied) over all {n_runs} runs: **{failures}**.",
        "",
        *goals_section(all_goals),
        *body,
        "## Figures (specon-4nodes, seed 0)",
        "",
        "Made by `flowplan simulate examples/scenarios/specon-4nodes.toml --policy flowplan --policy kubernetes "
        "--policy specon --policy docker --out out/specon` (copied to `docs/sim-specon-*.png`).",
        "",
        "![Cores each job uses over time under each policy (one band per job, coloured by model, named inside the "
        "band where it is wide enough; dashed: capacity)](sim-specon-allocation.png)",
        "",
        "![FlowPlan's predicted minus actual finish, as a share of each job's time in the system, against how far "
        "the job had got (band: the 10th to 90th percentile of the jobs' errors; bold: their median; thin: the three "
        "jobs longest in the system, named)](sim-specon-eta.png)",
        "",
        "![Job completion time CDF per policy](sim-specon-jct-cdf.png)",
        "",
    ]
    (args.out / "results.json").write_text(json.dumps(everything, indent=1, default=str) + "\n")
    # The hand-written analysis below the marker survives regeneration (its figures must be re-read).
    old = args.out / "results.md"
    tail = ""
    if old.is_file() and ANALYSIS_MARKER in old.read_text():
        tail = old.read_text().split(ANALYSIS_MARKER, 1)[1]
    (args.out / "results.md").write_text("\n".join(md) + "\n" + (ANALYSIS_MARKER + tail if tail else ""))
    print(f"wrote {args.out / 'results.md'} and results.json", file=sys.stderr)


if __name__ == "__main__":
    main()
