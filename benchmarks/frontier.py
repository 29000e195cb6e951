"""The mean-JCT profile's trade-off: mean JCT against makespan as the makespan budget tightens.

``Settings.makespan_slack`` (``flowplan simulate --makespan-slack F``) holds each node's predicted
makespan within F over the shortest one reachable there; unset, only the tail guard holds it (no
later than the equal split, Docker's default). This runs FlowPlan and the oracle (FlowPlan fed the
ground truth) at several budgets on each scenario, with Docker's default and the makespan-first
profile as reference points, and prints one table per scenario (means over the seeds): where a
scenario asks for a mean JCT no worse than Docker's *and* a makespan within 5 % of the best policy's,
the oracle's row shows whether any budget gives both.

Usage::

    python benchmarks/frontier.py [--scenarios demo,tradl-tiers] [--seeds 3] [--slacks 0,0.02,0.05,0.1]
                                  [--jobs 2] [--data ../shared/data] [--plot docs/frontier.png]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from adapters.sim.run import RunResult
from adapters.sim.scenario import load_scenario
from adapters.sim.truth import TraceLibrary

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import FLOWPLAN_MAKESPAN, REPO, Task, fmt_t, run_all, scenario_paths  # noqa: E402


def rows(slacks: Sequence[float]) -> list[str]:
    """The policies run per scenario: the references, then FlowPlan and the oracle per budget."""
    out = ["docker", FLOWPLAN_MAKESPAN, "flowplan", "oracle"]
    for s in slacks:
        out += [f"flowplan[slack={s:g}]", f"oracle[slack={s:g}]"]
    return out


def _mean(runs: list[RunResult], row: str, field: str) -> float:
    return statistics.fmean(getattr(r, field) for r in runs if r.policy == row)


def _vs_docker(runs: list[RunResult], row: str) -> tuple[float, float]:
    """``row``'s makespan and mean JCT, each as a percentage over Docker's default."""
    d_mk, d_jct = _mean(runs, "docker", "makespan"), _mean(runs, "docker", "mean_jct")
    return 100 * (_mean(runs, row, "makespan") / d_mk - 1), 100 * (_mean(runs, row, "mean_jct") / d_jct - 1)


def table(name: str, runs: list[RunResult], slacks: Sequence[float]) -> list[str]:
    """A markdown table: makespan and mean JCT per row, each against Docker's default."""
    d_mk, d_jct = _mean(runs, "docker", "makespan"), _mean(runs, "docker", "mean_jct")
    out = [f"### {name}", "", "| budget | FlowPlan makespan | mean JCT | oracle makespan | mean JCT |"]
    out.append("|---|---:|---:|---:|---:|")

    def cell(row: str) -> str:
        (mk_pct, jct_pct), mk, jct = _vs_docker(runs, row), _mean(runs, row, "makespan"), _mean(runs, row, "mean_jct")
        return f"{fmt_t(mk)} ({mk_pct:+.1f}%) | {fmt_t(jct)} ({jct_pct:+.1f}%)"

    out.append(f"| none (tail guard only) | {cell('flowplan')} | {cell('oracle')} |")
    for s in slacks:
        out.append(f"| {100 * s:g} % | {cell(f'flowplan[slack={s:g}]')} | {cell(f'oracle[slack={s:g}]')} |")
    out.append(f"| makespan first | {cell(FLOWPLAN_MAKESPAN)} | - | - |")
    out += ["", f"Docker's default: makespan {fmt_t(d_mk)}, mean JCT {fmt_t(d_jct)} (the percentages are against these).", ""]
    return out


def plot(path: Path, by_scenario: dict[str, list[RunResult]], slacks: Sequence[float]) -> None:
    """Mean JCT against makespan (both relative to Docker's default), one panel per scenario."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(by_scenario), figsize=(4.2 * len(by_scenario), 3.8), squeeze=False)
    for ax, (name, runs) in zip(axes[0], by_scenario.items(), strict=True):
        for who, marker in (("flowplan", "o-"), ("oracle", "s--")):
            pts = [_vs_docker(runs, who)] + [_vs_docker(runs, f"{who}[slack={s:g}]") for s in slacks]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, label=who, ms=4)
            for (x, y), lab in zip(pts, ["none", *[f"{100 * s:g}%" for s in slacks]], strict=True):
                ax.annotate(lab, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        x, y = _vs_docker(runs, FLOWPLAN_MAKESPAN)
        ax.plot([x], [y], "^", color="tab:red", label="makespan first")
        ax.plot([0], [0], "*", color="black", ms=10, label="Docker's default")
        ax.axhline(0, color="grey", lw=0.5)
        ax.axvline(0, color="grey", lw=0.5)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("makespan vs Docker's default (%)")
        ax.set_ylabel("mean JCT vs Docker's default (%)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--scenarios", default="demo,dqoes-qoe,tradl-tiers", help="comma-separated scenario names")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--slacks", default="0.1,0.05,0.02,0", help="makespan budgets to try (fractions)")
    ap.add_argument("--jobs", type=int, default=1, metavar="N", help="simulations at a time (default 1)")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--plot", type=Path, help="write a PNG of the trade-off here")
    args = ap.parse_args(argv)
    try:
        slacks = [float(x) for x in args.slacks.split(",")]
    except ValueError:
        ap.error(f"--slacks {args.slacks!r}: not a comma-separated list of numbers")
    if args.seeds < 1 or args.jobs < 1 or not all(0 <= s <= 10 for s in slacks):
        ap.error("--seeds and --jobs must be at least 1, every slack between 0 and 10")
    paths = scenario_paths(args.scenarios)
    TraceLibrary.from_dir(args.data)
    tasks = [Task(str(p), row, seed, str(args.data), True) for p in paths for row in rows(slacks) for seed in range(args.seeds)]
    print(f"{len(tasks)} runs, {args.jobs} at a time", file=sys.stderr)
    runs = run_all(tasks, args.jobs, lambda t, r, w: print(f"  {r.scenario} {t.row} seed {t.seed}: {w:.1f} s", file=sys.stderr))
    by_scenario: dict[str, list[RunResult]] = {}
    for p in paths:
        by_scenario[load_scenario(p).name] = []
    for r in runs:
        by_scenario[r.scenario].append(r)
    for name, rs in by_scenario.items():
        print("\n".join(table(name, rs, slacks)))
    if args.plot is not None:
        plot(args.plot, by_scenario, slacks)
        print(f"plot: {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
