"""Calibration of the learning-curve prediction band on every measured curve. Prints; asserts nothing.

For each curve of the Pollux/AdaptDL artifact (``../shared/data``) and observed share 25 % / 50 %:
fit on the observed epochs, then count how many of the *future* measured points fall inside the
model's 80 % band (``±1.2816·band(k)``). A calibrated band covers about 80 %. Then the same for
fits on the first 1 and 2 epochs with the same-model prior: too few points for any family, so the
prior alone predicts, and its band is the references' disagreement.

    python benchmarks/bench_band.py [--data DIR]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
from bench_curves import DIRECTIONS, load_curves, priors_for

from models import CurveFit, fit_learning_curve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = ap.parse_args()
    traces = args.data / "adaptdl-osdi21" / "traces"
    if not traces.is_dir():
        raise SystemExit(f"bench_band: no traces at {traces} (use --data)")
    curves = load_curves(args.data)
    print(
        "observed  curves  mean coverage of the 80% band  median  (constant residual band, for contrast)"
        "  | with the same-model prior: curves, mean, median"
    )
    for share in (0.25, 0.5):
        cover, flat, cover_prior = [], [], []
        for path in sorted(traces.glob("*/validation-*.csv")):
            direction = DIRECTIONS[path.parent.name]
            with path.open() as fh:
                v = np.array([float(r["metric"]) for r in csv.DictReader(fh)])
            n = round(share * v.size)
            if n < 3 or n >= v.size:
                continue
            k = np.arange(n + 1, v.size + 1)
            fit = fit_learning_curve(np.arange(1, n + 1), v[:n], direction)  # type: ignore[arg-type]
            if isinstance(fit, CurveFit):
                miss = np.abs(v[n:] - fit.predict(k))
                cover.append(float(np.mean(miss <= 1.2816 * fit.band(k))))
                flat.append(float(np.mean(miss <= 1.2816 * fit.residual_std)))
            me = next(c for c in curves if c["curve"] == f"{path.parent.name}/{path.stem}")
            prior = priors_for(me, curves)["flowplan+prior"]
            fit = fit_learning_curve(np.arange(1, n + 1), v[:n], direction, prior=prior)  # type: ignore[arg-type]
            if isinstance(fit, CurveFit):
                miss = np.abs(v[n:] - fit.predict(k))
                cover_prior.append(float(np.mean(miss <= 1.2816 * fit.band(k))))
        print(
            f"{share:8.0%}  {len(cover):6d}  {np.mean(cover):30.1%}  {np.median(cover):6.1%}  ({np.mean(flat):.1%})"
            f"  | {len(cover_prior)} {np.mean(cover_prior):.1%} {np.median(cover_prior):.1%}"
        )
    print("observed  curves  prior alone: mean coverage of the 80% band  median")
    for n in (1, 2):
        cover = []
        for path in sorted(traces.glob("*/validation-*.csv")):
            with path.open() as fh:
                v = np.array([float(r["metric"]) for r in csv.DictReader(fh)])
            if n >= v.size:
                continue
            me = next(c for c in curves if c["curve"] == f"{path.parent.name}/{path.stem}")
            prior = priors_for(me, curves)["flowplan+prior"]
            fit = fit_learning_curve(np.arange(1, n + 1), v[:n], DIRECTIONS[path.parent.name], prior=prior)  # type: ignore[arg-type]
            if isinstance(fit, CurveFit):
                k = np.arange(n + 1, v.size + 1)
                cover.append(float(np.mean(np.abs(v[n:] - fit.predict(k)) <= 1.2816 * fit.band(k))))
        print(f"{n:2d} epoch{'s' if n > 1 else ' '}  {len(cover):6d}  {np.mean(cover):38.1%}  {np.median(cover):6.1%}")


if __name__ == "__main__":
    main()
