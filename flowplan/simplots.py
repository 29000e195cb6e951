"""PNG plots of simulation runs: JCT CDF per policy, allocation over time, predicted vs actual finish.

Needs matplotlib (``pip install "flowplan[plot]"``); without it :func:`plot_all` writes nothing and
says so on stderr.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from adapters.sim.run import RunResult


def plot_all(runs: list[RunResult], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots skipped: matplotlib is not installed (pip install 'flowplan[plot]')", file=sys.stderr)
        return []
    written: list[Path] = []

    # JCT CDF, all seeds of a policy pooled.
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    by: dict[str, list[float]] = defaultdict(list)
    for r in runs:
        by[r.policy].extend(j.jct / 60.0 for j in r.jobs if j.jct is not None)
    for policy, xs in by.items():
        xs.sort()
        if xs:
            ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=policy)
    ax.set_xlabel("job completion time (min)")
    ax.set_ylabel("share of jobs")
    ax.set_title(f"{runs[0].scenario}: JCT CDF" if runs else "JCT CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    p = out / "jct-cdf.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    written.append(p)

    # Allocation over time: the first seed of each policy, one panel each (CPU cores, or GPUs).
    first: dict[str, RunResult] = {}
    for r in runs:
        first.setdefault(r.policy, r)
    if first:
        fig, axes = plt.subplots(len(first), 1, figsize=(7.0, 1.9 * len(first) + 0.6), sharex=True, squeeze=False)
        for ax, (policy, r) in zip(axes[:, 0], first.items(), strict=False):
            gpu = any(v[1] > 0 for t in r.timeline for v in t["alloc"].values())
            ids = sorted({j for t in r.timeline for j in t["alloc"]})
            t0 = r.timeline[0]["time"] if r.timeline else 0.0
            xs = [(t["time"] - t0) / 60.0 for t in r.timeline]
            ys = [
                [(t["alloc"].get(j, [0, 0])[1] if gpu else t["alloc"].get(j, [0, 0])[0] / 1000.0) for t in r.timeline]
                for j in ids
            ]
            if ids:
                ax.stackplot(xs, ys, labels=ids, step="post")
            ax.set_ylabel("GPUs" if gpu else "cores")
            ax.set_title(f"{policy} (seed {r.seed})", fontsize=9)
            if len(ids) <= 12:
                ax.legend(fontsize=6, loc="upper right", ncol=2)
        axes[-1, 0].set_xlabel("time (min)")
        fig.tight_layout()
        p = out / "allocation.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

    # Predicted vs actual finish (policies that predict: FlowPlan), first seed.
    for policy, r in first.items():
        if not r.eta:
            continue
        actual = {j.id: j.finish for j in r.jobs}
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        t0 = r.timeline[0]["time"] if r.timeline else 0.0
        for job, pts in sorted(r.eta.items()):
            fin = actual.get(job)
            if fin is None or not pts:
                continue
            ax.plot([(t - t0) / 60 for t, _ in pts], [(e - fin) / 60 for _, e in pts], lw=1, alpha=0.8)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlabel("time of the prediction (min)")
        ax.set_ylabel("predicted - actual finish (min)")
        ax.set_title(f"{policy}: finish-time predictions, one line per job (seed {r.seed})", fontsize=9)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        p = out / f"eta-{policy}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)
    return written
