"""PNG plots of simulation runs: JCT CDF per policy, allocation over time, predicted vs actual finish.

Needs matplotlib (``pip install "flowplan[plot]"``); without it :func:`plot_all` writes nothing and
says so on stderr.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

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

    # Allocation over time: the first seed of each policy, one panel each (CPU cores in use, or GPUs).
    first: dict[str, RunResult] = {}
    for r in runs:
        first.setdefault(r.policy, r)
    if first:
        written.append(_allocation(plt, first, out))
    for policy, r in first.items():
        if r.eta:
            written.append(_eta(plt, policy, r, out))
    return written


def _allocation(plt: Any, first: dict[str, RunResult], out: Path) -> Path:
    """One stacked band per job, coloured by model (shades within a model), with the cluster's
    capacity as a dashed line. CPU is what each job *uses* under the kernel's water-fill (its
    guarantee is a weight: capacity others leave idle flows to it); GPUs are what it holds."""
    fig, axes = plt.subplots(len(first), 1, figsize=(8.4, 2.1 * len(first) + 0.8), sharex=True, squeeze=False)
    cmap = plt.get_cmap("tab10")
    models = sorted({j.model for r in first.values() for j in r.jobs})
    base = {m: cmap(i % 10) for i, m in enumerate(models)}
    for ax, (policy, r) in zip(axes[:, 0], first.items(), strict=False):
        gpu = any(v[1] > 0 for t in r.timeline for v in t["alloc"].values())
        model_of = {j.id: j.model for j in r.jobs}
        ids = sorted({j for t in r.timeline for j in t["alloc"]}, key=lambda k: (model_of.get(k, ""), k))
        t0 = r.timeline[0]["time"] if r.timeline else 0.0
        xs = [(t["time"] - t0) / 60.0 for t in r.timeline]

        def value(t: dict[str, Any], job: str, gpu: bool = gpu) -> float:
            if gpu:
                return float(t["alloc"].get(job, [0, 0])[1])
            used = t.get("used_cpu")
            return (used.get(job, 0.0) if used is not None else t["alloc"].get(job, [0, 0])[0]) / 1000.0

        colours = []
        seen: dict[str, int] = defaultdict(int)
        for job in ids:
            m = model_of.get(job, "")
            k = seen[m]
            seen[m] += 1
            shade = 1.0 - 0.45 * ((k * 0.618) % 1.0)  # shades of the model's colour, neighbours apart
            colours.append(tuple(min(1.0, c * shade + (1 - shade) * 0.15) for c in base.get(m, (0.5, 0.5, 0.5))[:3]))
        if ids:
            bands = [[value(t, j) for t in r.timeline] for j in ids]
            ax.stackplot(xs, bands, colors=colours, step="post", lw=0.3, edgecolor="white")
        caps: list[list[float]] = [t["capacity"] for t in r.timeline if t.get("capacity")]
        if caps:
            ax.axhline(caps[0][1] if gpu else caps[0][0] / 1000.0, color="k", ls="--", lw=1.0)
        ax.set_ylabel("GPUs held" if gpu else "cores in use")
        ax.set_title(f"{policy} (seed {r.seed})", fontsize=9)
        ax.grid(alpha=0.25, axis="y")
    handles = [plt.Rectangle((0, 0), 1, 1, color=base[m]) for m in models]
    handles.append(plt.Line2D([0], [0], color="k", ls="--", lw=1.0))
    fig.legend(handles, [*models, "capacity"], loc="upper center", ncol=min(len(handles), 6), fontsize=8, frameon=False)
    axes[-1, 0].set_xlabel("time (min); one band per job, coloured by model")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (2.1 * len(first) + 0.8)))
    p = out / "allocation.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _eta(plt: Any, policy: str, r: RunResult, out: Path) -> Path:
    """How wrong the predicted finish was, against how far the job had got: each job a thin grey
    line, the median absolute error and its 80th percentile in bold. Errors are relative to the
    job's whole time in the system, so short and long jobs share one scale."""
    import numpy as np

    jobs = {j.id: j for j in r.jobs if j.finish is not None}
    fig, ax = plt.subplots(figsize=(6.8, 4.0))
    bins = np.linspace(0.0, 1.0, 11)
    per_bin: list[list[float]] = [[] for _ in range(bins.size - 1)]
    for job, pts in sorted(r.eta.items()):
        j = jobs.get(job)
        if j is None or j.finish is None or not pts:
            continue
        life = max(j.finish - j.arrival, 1e-9)
        xs = [(t - j.arrival) / life for t, _ in pts]
        ys = [100.0 * (e - j.finish) / life for _, e in pts]
        ax.plot(xs, ys, color="0.6", lw=0.6, alpha=0.6)
        for x, y in zip(xs, ys, strict=True):
            if 0.0 <= x <= 1.0:
                per_bin[min(int(x * 10), 9)].append(abs(y))
    mids = [(bins[i] + bins[i + 1]) / 2 for i in range(10) if per_bin[i]]
    med = [float(np.median(b)) for b in per_bin if b]
    p80 = [float(np.percentile(b, 80)) for b in per_bin if b]
    ax.plot(mids, med, color="C0", lw=2.2, marker="o", ms=3, label="median |error|")
    ax.plot(mids, p80, color="C3", lw=1.8, marker="o", ms=3, label="80th percentile |error|")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("share of the job's time in the system when the prediction was made")
    ax.set_ylabel("predicted - actual finish (% of that time)")
    ax.set_ylim(-100, 100)
    ax.set_title(f"{policy}: finish-time predictions, {len(jobs)} jobs (seed {r.seed}); grey: one job each", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    p = out / f"eta-{policy}.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
