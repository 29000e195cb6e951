"""Draw a few measured learning curves with FlowPlan's fit and band (``docs/curves.png``).

Each panel: one curve of the Pollux/AdaptDL artifact, fitted on its first quarter of epochs (dots),
the fitted curve and its 80 % band beyond that, and the measured rest of the run (crosses) that the
fit never saw; in orange the fit with a prior from the *other* batch sizes of the same model
(leave-one-out, as in ``bench_curves.py``). Needs matplotlib (``pip install -e ".[plot]"``).

    python benchmarks/plot_curves.py [--data DIR] [--out docs/curves.png] [--observed 0.25]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
from bench_curves import DIRECTIONS, load_curves, priors_for

from models import CurveFit, fit_learning_curve

PANELS = [("cifar10", 128), ("deepspeech2", 40), ("yolov3", 64), ("imagenet", 1600)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "curves.png")
    ap.add_argument("--observed", type=float, default=0.25, help="share of each curve shown to the fit")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = load_curves(args.data)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (model, bsz) in zip(axes.ravel(), PANELS, strict=True):
        prior = priors_for(next(c for c in curves if c["curve"] == f"{model}/validation-{bsz}"), curves)["flowplan+prior"]
        path = args.data / "adaptdl-osdi21" / "traces" / model / f"validation-{bsz}.csv"
        with path.open() as fh:
            v = np.array([float(r["metric"]) for r in csv.DictReader(fh)])
        k = np.arange(1, v.size + 1)
        n = max(3, round(args.observed * v.size))
        fit = fit_learning_curve(k[:n], v[:n], DIRECTIONS[model])  # type: ignore[arg-type]
        ax.plot(k[:n], v[:n], "o", ms=3, label=f"observed ({n} epochs)")
        ax.plot(k[n:], v[n:], "x", ms=3, color="gray", label="measured later (unseen)")
        if isinstance(fit, CurveFit):
            lo, hi = fit.interval_at(k)
            ax.plot(k, fit.predict(k), "-", color="C0", label=f"{fit.family} fit (no prior)")
            ax.fill_between(k, lo, hi, color="C0", alpha=0.15, label="80% band")
        with_prior = fit_learning_curve(k[:n], v[:n], DIRECTIONS[model], prior=prior)  # type: ignore[arg-type]
        if isinstance(with_prior, CurveFit):
            lo, hi = with_prior.interval_at(k)
            ax.plot(k, with_prior.predict(k), "-", color="C1", label=f"{with_prior.family} fit, other batch sizes as prior")
            ax.fill_between(k, lo, hi, color="C1", alpha=0.15)
        ax.set_title(f"{model}, batch {bsz}")
        ax.set_xlabel("epoch")
        ax.set_ylabel("validation metric")
        ax.legend(fontsize=7)
    fig.suptitle(f"FlowPlan learning-curve fits on the first {args.observed:.0%} of measured runs")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
