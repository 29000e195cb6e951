"""PNG plots of simulation runs: JCT CDF per policy, allocation over time, predicted vs actual finish.

Needs matplotlib (``pip install -e ".[plot]"`` in a checkout); without it :func:`plot_all` writes nothing and
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
        print('plots skipped: matplotlib is not installed (pip install -e ".[plot]")', file=sys.stderr)
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
    """One stacked band per job, with the cluster's capacity as a dashed line. Up to 10 jobs each has
    its own colour and legend entry; more are coloured by model (shades within a model) and named
    inside their bands where a band is wide enough, so the plot reads at 5 jobs and at 50. CPU is
    what each job *uses* under the kernel's water-fill (its guarantee is a weight: capacity others
    leave idle flows to it); GPUs are what it holds."""
    fig, axes = plt.subplots(len(first), 1, figsize=(8.4, 2.1 * len(first) + 0.8), sharex=True, squeeze=False)
    cmap = plt.get_cmap("tab10")
    models = sorted({j.model for r in first.values() for j in r.jobs})
    base = {m: cmap(i % 10) for i, m in enumerate(models)}
    # Up to 10 jobs: a colour and a legend entry each. More: coloured by model, named in the bands.
    every = sorted({j.id for r in first.values() for j in r.jobs})
    own = {job: cmap(i) for i, job in enumerate(every)} if len(every) <= 10 else None
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
        for job in [] if own is not None else ids:
            m = model_of.get(job, "")
            k = seen[m]
            seen[m] += 1
            shade = 1.0 - 0.45 * ((k * 0.618) % 1.0)  # shades of the model's colour, neighbours apart
            colours.append(tuple(min(1.0, c * shade + (1 - shade) * 0.15) for c in base.get(m, (0.5, 0.5, 0.5))[:3]))
        caps: list[list[float]] = [t["capacity"] for t in r.timeline if t.get("capacity")]
        top = (caps[0][1] if gpu else caps[0][0] / 1000.0) if caps else None
        if ids:
            bands = [[value(t, j) for t in r.timeline] for j in ids]
            if own is not None:
                colours = [own[job][:3] for job in ids]
            ax.stackplot(xs, bands, colors=colours, step="post", lw=0.3, edgecolor="white")
            if own is None:
                _label_bands(ax, xs, ids, bands, top)
        if top is not None:
            ax.axhline(top, color="k", ls="--", lw=1.0)
        ax.set_ylabel("GPUs held" if gpu else "cores in use")
        ax.set_title(f"{policy} (seed {r.seed})", fontsize=9)
        ax.grid(alpha=0.25, axis="y")
    names = every if own is not None else models
    handles = [plt.Rectangle((0, 0), 1, 1, color=(own or base)[m]) for m in names]
    handles.append(plt.Line2D([0], [0], color="k", ls="--", lw=1.0))
    fig.legend(handles, [*names, "capacity"], loc="upper center", ncol=min(len(handles), 6), fontsize=8, frameon=False)
    how = "one colour per job" if own is not None else "coloured by model, named where it is wide enough"
    axes[-1, 0].set_xlabel(f"time (min); one band per job, {how}")
    rows = -(-len(handles) // 6)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 * rows / (2.1 * len(first) + 0.8)))
    p = out / "allocation.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _label_bands(ax: Any, xs: list[float], ids: list[str], bands: list[list[float]], top: float | None) -> None:
    """Name each job inside its band, in the middle of its thickest stretch, where the band stays
    thick enough for the text and no other name is there (at 50 jobs only the big ones get a name;
    the model's colour tells the rest)."""
    if len(xs) < 2:
        return
    span = top if top else max((sum(col) for col in zip(*bands, strict=True)), default=1.0)
    right = max(xs[-1] - xs[0], 1e-9)
    base = [0.0] * len(xs)
    placed: list[tuple[float, float]] = []
    for job, vals in zip(ids, bands, strict=True):
        # The thickest stretch lasting at least 12% of the run: the largest value held all through it.
        best, first, last = 0.0, -1, -1
        j = 0
        for i in range(len(xs)):
            j = max(j, i)
            while j < len(xs) - 1 and xs[j] - xs[i] < 0.12 * right:
                j += 1
            if xs[j] - xs[i] < 0.12 * right:
                break
            held = min(vals[i : j + 1])
            if held > best:
                best, first, last = held, i, j
        if first >= 0 and best >= 0.06 * span:
            half = 0.0042 * len(job) * right  # about half the name's width at this font size
            x = min(max((xs[first] + xs[last]) / 2.0, xs[0] + half), xs[-1] - half)
            k = max([i for i in range(first, last + 1) if xs[i] <= x] or [first])
            y = base[k] + vals[k] / 2.0
            if all(abs(x - px) > 0.13 * right or abs(y - py) > 0.06 * span for px, py in placed):
                ax.text(x, y, job, fontsize=6, ha="center", va="center", color="white", clip_on=True)
                placed.append((x, y))
        base = [b + v for b, v in zip(base, vals, strict=True)]


def _eta(plt: Any, policy: str, r: RunResult, out: Path) -> Path:
    """How wrong the predicted finish was, against how far the job had got: the middle 80% of the
    jobs' errors as a band, their median as a line, and the three jobs with the most predictions
    drawn and named (so one job can be followed); with 8 jobs or fewer every job is. Errors
    are relative to the job's whole time in the system, so short and long jobs share one scale."""
    import numpy as np

    jobs = {j.id: j for j in r.jobs if j.finish is not None}
    fig, ax = plt.subplots(figsize=(8.4, 4.0))
    per_bin: list[list[float]] = [[] for _ in range(10)]
    curves: dict[str, tuple[list[float], list[float]]] = {}
    for job, pts in sorted(r.eta.items()):
        j = jobs.get(job)
        if j is None or j.finish is None or not pts:
            continue
        life = max(j.finish - j.arrival, 1e-9)
        xs = [(t - j.arrival) / life for t, _ in pts]
        ys = [100.0 * (e - j.finish) / life for _, e in pts]
        curves[job] = (xs, ys)
        for x, y in zip(xs, ys, strict=True):
            if 0.0 <= x <= 1.0:
                per_bin[min(int(x * 10), 9)].append(y)
    mids = [(i + 0.5) / 10 for i in range(10) if per_bin[i]]
    full = [b for b in per_bin if b]
    if full:
        lo = [float(np.percentile(b, 10)) for b in full]
        hi = [float(np.percentile(b, 90)) for b in full]
        med = [float(np.median(b)) for b in full]
        ax.fill_between(mids, lo, hi, color="C0", alpha=0.2, lw=0, label="10th-90th percentile of the jobs")
        ax.plot(mids, med, color="C0", lw=2.2, marker="o", ms=3, label="median")
    # Named: every job up to 8; beyond, the three with the most predictions (the longest in the
    # system), whose lines run across the plot and can be followed.
    longest = sorted(curves, key=lambda k: (-len(curves[k][0]), k))
    named = longest if len(curves) <= 8 else longest[:3]
    ids = sorted(j.id for j in r.jobs)
    for i, job in enumerate(named):
        xs, ys = curves[job]
        # Up to 10 jobs the allocation plot's colour of the job; beyond, three colours apart from the band's.
        colour = f"C{ids.index(job)}" if len(ids) <= 10 else f"C{i + 1}"
        ax.plot(xs, ys, lw=1.0, color=colour, alpha=0.9, label=job)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("share of the job's time in the system when the prediction was made")
    ax.set_ylabel("predicted - actual finish (% of that time)")
    ax.set_ylim(-100, 100)
    which = "every job named" if len(curves) <= 8 else "the 3 longest in the system named"
    ax.set_title(f"{policy}: finish-time predictions, {len(jobs)} jobs (seed {r.seed}); {which}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside the data, not on it
    fig.tight_layout()
    p = out / f"eta-{policy}.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
