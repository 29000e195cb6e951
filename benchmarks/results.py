"""Reproduce the research results: every scenario in ``examples/scenarios/``, each of its policies, several seeds.

Writes ``docs/results.json`` (every run's summary numbers) and ``docs/results.md`` (the tables: each
policy's metrics as mean ± sd over the seeds, FlowPlan's gain over each baseline on the scenario's
own metric next to the paper's headline number, and the makespan lower bound). The verdict lines
are computed from the numbers, never written by hand.

Usage::

    python benchmarks/results.py [--seeds 5] [--scenarios flowcon-1node,specon-4nodes] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from adapters.sim.compare import improvements, summarise
from adapters.sim.run import RunResult, simulate
from adapters.sim.scenario import SCENARIO_METRICS, Scenario, load_scenario
from adapters.sim.truth import TraceLibrary, history_priors
from planner.policies import make_policy

REPO = Path(__file__).resolve().parent.parent
#: Everything after this line in docs/results.md is kept when the tables are regenerated.
ANALYSIS_MARKER = "<!-- analysis: kept when results.py regenerates the tables above -->"


def fmt_t(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def run_scenario(sc: Scenario, seeds: list[int], library: TraceLibrary, data: Path, priors: dict | None) -> list[RunResult]:
    runs = []
    for policy in sc.policies:
        t0 = time.perf_counter()
        for seed in seeds:
            pol = make_policy(policy, curve_priors=priors) if policy == "flowplan" else make_policy(policy)
            runs.append(simulate(sc, pol, policy, seed, library, data=data, record_timeline=False))
        print(f"  {sc.name} {policy}: {len(seeds)} seeds in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return runs


def verdict(sc: Scenario, imp: dict) -> list[str]:
    """Sentences computed from the numbers: does FlowPlan beat each baseline, and reach the headline?"""
    out = []
    lower_is_better = SCENARIO_METRICS[sc.metric][1]
    for base, d in imp.items():
        m = d["mean"]
        if m is None:
            out.append(f"- vs **{base}**: not comparable (some runs did not finish or the metric is undefined).")
            continue
        better = (m > 1.0) if sc.metric == "qoe_met" else (m > 0.0)
        if sc.metric == "job_jct":
            ms = d.get("makespan_change")
            better = better and ms is not None and ms <= 0.0
        word = "beats" if better else ("ties" if abs(m - (1.0 if sc.metric == "qoe_met" else 0.0)) < 1e-9 else "does NOT beat")
        out.append(f"- vs **{base}**: FlowPlan {word} it ({m:.1f} {d['unit']}).")
    if sc.headline is not None and sc.baseline in imp and imp[sc.baseline]["mean"] is not None:
        m = imp[sc.baseline]["mean"]
        reached = m >= sc.headline
        out.append(
            f"- Headline ({sc.paper}, vs {sc.baseline}): {sc.headline_text}. FlowPlan: {m:.1f} {imp[sc.baseline]['unit']} — "
            + ("**reached**." if reached else "**not reached**.")
        )
    del lower_is_better
    return out


def table(sc: Scenario, runs: list[RunResult]) -> list[str]:
    stats = summarise(runs)
    n = len({r.seed for r in runs})
    lines = [
        "| policy | makespan | / bound | mean JCT | p95 JCT | tier-1 time | tier-1 deadlines met | utilisation "
        "| migrations | resizes | plan time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in sc.policies:
        s = stats[p]
        mine = [r for r in runs if r.policy == p]
        ratios = [r.makespan / r.makespan_lower_bound for r in mine if r.makespan and r.makespan_lower_bound > 0]
        ratio = f"{sum(ratios) / len(ratios):.2f}" if len(ratios) == n else "-"
        gpu = s["gpu_utilisation"].mean is not None and any(node.gpus for node in sc.nodes)
        util = s["gpu_utilisation" if gpu else "cpu_utilisation"]
        qoe = s["qoe_met"]
        total = next(r.qoe_total for r in runs if r.policy == p)

        def t(field: str, stat: dict = s) -> str:
            v = stat[field]
            return "-" if v.mean is None else f"{fmt_t(v.mean)} ± {fmt_t(v.sd)}"

        lines.append(
            f"| {p} | {t('makespan')} | {ratio} | {t('mean_jct')} | {t('p95_jct')} | {t('mean_tier1_time')} | "
            f"{'-' if not total else f'{qoe.mean:.1f} / {total}'} | {'-' if util.mean is None else f'{100 * util.mean:.0f}%'} | "
            f"{s['migrations'].mean:.1f} | {s['resizes'].mean:.1f} | {1000 * s['plan_seconds_mean'].mean:.0f} ms |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--scenarios", help="comma-separated scenario names (default: all in examples/scenarios)")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=REPO / "docs")
    ap.add_argument("--no-priors", action="store_true", help="FlowPlan without curves of earlier runs (ablation)")
    args = ap.parse_args()
    library = TraceLibrary.from_dir(args.data)
    paths = sorted((REPO / "examples" / "scenarios").glob("*.toml"))
    if args.scenarios:
        want = set(args.scenarios.split(","))
        paths = [p for p in paths if p.stem in want]
    seeds = list(range(args.seeds))
    md = [
        "# Results: FlowPlan against the baselines on the simulated cluster",
        "",
        f"Generated by `python benchmarks/results.py --seeds {args.seeds}` (every scenario in `examples/scenarios/`,",
        f"each policy, seeds 0-{seeds[-1]}). Every number is a mean ± standard deviation over the seeds; the same",
        "seed gives every policy the same arrivals and the same measurement noise. Ground truth is the measured",
        "data (`docs/simulator.md`).",
        "",
    ]
    everything: dict[str, dict] = {}
    for path in paths:
        sc = load_scenario(path)
        print(f"{sc.name}: {', '.join(sc.policies)} x {len(seeds)} seeds", file=sys.stderr, flush=True)
        runs = run_scenario(sc, seeds, library, args.data, None if args.no_priors else history_priors(library))
        imp = improvements(sc.metric, runs)
        lb = sum(r.makespan_lower_bound for r in runs) / len(runs)
        everything[sc.name] = {
            "metric": sc.metric,
            "baseline": sc.baseline,
            "headline": sc.headline,
            "lower_bound": lb,
            "improvement": imp,
            "runs": [{k: v for k, v in r.to_dict().items() if k not in ("timeline", "eta", "jobs")} for r in runs],
            "checker_failures": sum(r.checker_failures for r in runs),
        }
        md += [f"## {sc.name} — {sc.paper}", "", sc.description + ".", ""]
        md.append(f"Judged on: **{SCENARIO_METRICS[sc.metric][0]}**; the paper's baseline: **{sc.baseline}**.")
        md.append(
            f"Makespan lower bound: {fmt_t(lb)} (the larger of the longest job alone at its best allocation "
            "and total work / capacity)."
        )
        md.append("")
        md += table(sc, runs)
        md.append("")
        md.append("FlowPlan's gain on the scenario's metric, per baseline (mean ± sd over seeds):")
        md.append("")
        for base, d in imp.items():
            if d["mean"] is None:
                md.append(f"- {base}: -")
                continue
            extra = ""
            if sc.metric == "job_jct" and d.get("makespan_change") is not None:
                extra = f", makespan {d['makespan_change']:+.1f}% (negative: shorter)"
            md.append(f"- {base}: {d['mean']:.1f} ± {d['sd']:.1f} {d['unit']}{extra}")
        md.append("")
        md += verdict(sc, imp)
        md.append("")
    md += [
        "## Figures (specon-4nodes, seed 0)",
        "",
        "Made by `flowplan simulate examples/scenarios/specon-4nodes.toml --policy flowplan --policy kubernetes "
        "--policy specon --policy docker --out out/specon` (copied to `docs/sim-specon-*.png`).",
        "",
        "![Cores held by each job over time under each policy](sim-specon-allocation.png)",
        "",
        "![FlowPlan's predicted minus actual finish time, per job, as the run goes](sim-specon-eta.png)",
        "",
        "![Job completion time CDF per policy](sim-specon-jct-cdf.png)",
        "",
    ]
    failures = sum(e["checker_failures"] for e in everything.values())
    n_runs = sum(len(e["runs"]) for e in everything.values())
    md.insert(7, f"Plans that failed the independent checker (never applied) over all {n_runs} runs: **{failures}**.")
    md.insert(8, "")
    (args.out / "results.json").write_text(json.dumps(everything, indent=1) + "\n")
    # The hand-written analysis below the marker survives regeneration (its figures must be re-read).
    old = args.out / "results.md"
    tail = ""
    if old.is_file() and ANALYSIS_MARKER in old.read_text():
        tail = old.read_text().split(ANALYSIS_MARKER, 1)[1]
    (args.out / "results.md").write_text("\n".join(md) + "\n" + (ANALYSIS_MARKER + tail if tail else ""))
    print(f"wrote {args.out / 'results.md'} and results.json", file=sys.stderr)


if __name__ == "__main__":
    main()
