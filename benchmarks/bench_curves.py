"""Learning-curve prediction accuracy on measured training runs: FlowPlan's model vs. the Optimus hyperbola.

Prints figures; asserts nothing. Data: every ``traces/<model>/validation-<bsz>.csv`` of the Pollux /
AdaptDL OSDI 2021 artifact (see ``/work/shared/data/README.md``; Apache-2.0), one row per epoch,
column ``metric``; epoch = row number (1-based).

For each curve of ``K`` epochs and each observed fraction ``f`` (0.10, 0.25, 0.50) the first
``n = max(1, round(f*K))`` epochs are shown to each method (Python ``round``: halves go to the even
integer, e.g. ``round(12.5) = 12``). Measured:

(a) final-metric error ``|pred(K) - true(K)| / |true(K)|``;
(b) epochs-to-target error ``|pred_epoch - true_epoch| / true_epoch`` for targets ``v1 + p*(vK - v1)``,
    ``p`` in 0.8, 0.9, 0.95, where ``true_epoch`` is the first measured epoch at (or beyond) the target;
    only targets not yet reached within the ``n`` observed epochs count (a prediction of the future).

"Cannot predict" (no fit) and "unreachable" (the fitted plateau never gets to the target) count as an
error of 1.0 (100 %); every error is capped at 1.0, so one wild prediction counts as 100 %, not 10,000 %.

Methods:

``flowplan``  ``models.fit_learning_curve`` (hyperbola or exponential, chosen on a hold-out, with bounds,
              recency weights; needs >= 3 points).
``optimus``   plain Optimus (EuroSys 2018): ``z(k) = c + 1/(a*k + b)`` in badness coordinates
              (``z = value`` if lower is better, ``-value`` if higher), fitted by
              ``scipy.optimize.least_squares`` with ``a, b > 0``, ``c`` free, unweighted, no other
              priors; three starting points (plateau guesses), the lowest cost wins. Fewer points than
              its three parameters: cannot predict. ``epoch_reaching`` is analytic, ``None`` past the plateau.

    python benchmarks/bench_curves.py --out /tmp/curves.json --markdown
    python benchmarks/bench_curves.py --show cifar10/validation-128   # per-case detail for some curves
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import platform
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

import models.curves
from models import CannotPredict, CurvePrior, fit_learning_curve

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
TRACES = Path("adaptdl-osdi21") / "traces"

FRACTIONS = (0.10, 0.25, 0.50)
TARGET_PS = (0.8, 0.9, 0.95)
ERROR_CAP = 1.0
METHODS = ("flowplan", "flowplan+prior", "flowplan+lomo", "optimus")
#: The FlowPlan variants (every method but the Optimus baseline).
OURS = METHODS[:-1]
#: Options of the FlowPlan fits (set from the command line for ablations).
FIT_OPTIONS: dict[str, Any] = {"after_drop": False, "families": None}
#: model -> direction of its validation metric (README of the data set).
DIRECTIONS = {
    "cifar10": "higher",
    "imagenet": "higher",
    "bert": "higher",
    "ncf": "higher",
    "deepspeech2": "lower",
    "yolov3": "lower",
}
BREAKDOWN_FRACTION = 0.25


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# Baseline: plain Optimus hyperbola
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OptimusFit:
    """``z(k) = c + 1/(a*k + b)`` in badness units (``z = sign * value``)."""

    a: float
    b: float
    c: float
    sign: float  # +1 lower is better, -1 higher is better

    @property
    def plateau(self) -> float:
        return self.sign * self.c

    def predict(self, epochs: Any) -> np.ndarray:
        k = np.asarray(epochs, dtype=float)
        return self.sign * (self.c + 1.0 / (self.a * k + self.b))

    def epoch_reaching(self, target: float) -> float | None:
        zt = self.sign * target
        if zt <= self.c:
            return None  # at or beyond the plateau: never reached
        k = (1.0 / (zt - self.c) - self.b) / self.a
        return k if math.isfinite(k) else None


def fit_optimus(epochs: np.ndarray, values: np.ndarray, direction: str) -> OptimusFit | CannotPredict:
    """Unweighted least squares of the Optimus hyperbola; ``CannotPredict`` on any failure."""
    k = np.asarray(epochs, dtype=float)
    v = np.asarray(values, dtype=float)
    if k.size < 3:
        return CannotPredict(f"only {k.size} point(s) for 3 parameters", int(k.size))
    sign = 1.0 if direction == "lower" else -1.0
    z = sign * v
    # Standardise z (the hyperbola family is closed under affine maps of z, so this changes only the
    # conditioning, not the optimum), then map the parameters back.
    shift, scale = float(z.mean()), float(np.ptp(z))
    if not (scale > 0 and math.isfinite(scale)):
        return CannotPredict("the metric has not changed", int(k.size))
    u = (z - shift) / scale
    umin = float(u.min())

    def resid(x: np.ndarray) -> np.ndarray:
        a, b, c = x
        return c + 1.0 / (a * k + b) - u

    best = None
    for gap in (0.05, 0.5, 2.0):  # plateau guesses below the best point, in observed ranges
        c0 = umin - gap
        # Initial a, b: straight line through 1/(u - c0) against k, clipped positive.
        y = 1.0 / (u - c0)
        a0, b0 = np.polyfit(k, y, 1) if np.ptp(k) > 0 else (0.0, float(y.mean()))
        x0 = np.array([max(float(a0), 1e-3), max(float(b0), 1e-3), c0])
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                res = least_squares(resid, x0, bounds=([1e-12, 1e-12, -np.inf], [np.inf, np.inf, np.inf]), max_nfev=2000)
        except Exception:  # noqa: BLE001  (a failed start is just a failed start)
            continue
        if np.all(np.isfinite(res.x)) and math.isfinite(res.cost) and (best is None or res.cost < best.cost):
            best = res
    if best is None:
        return CannotPredict("least_squares failed from every start", int(k.size))
    a, b, c = (float(x) for x in best.x)
    return OptimusFit(a=a / scale, b=b / scale, c=shift + scale * c, sign=sign)


def fit_method(method: str, epochs: np.ndarray, values: np.ndarray, direction: str, prior: CurvePrior | None = None) -> Any:
    if method in OURS:
        try:
            return fit_learning_curve(epochs, values, direction, prior=prior, **FIT_OPTIONS)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001  (a raising model is a data point, not a crash)
            return CannotPredict(f"raised {type(exc).__name__}: {exc}", int(len(epochs)))
    return fit_optimus(epochs, values, direction)


def priors_for(curve: dict[str, Any], curves: list[dict[str, Any]]) -> dict[str, CurvePrior | None]:
    """The prior each method may use when predicting ``curve`` (leave-one-out: never ``curve`` itself).

    ``flowplan+prior``: the OTHER batch sizes of the same model (what a cluster that trained this
    model before would have), as a same-task prior. ``flowplan+lomo``: leave-one-MODEL-out, every
    curve of the other five models, shapes only (normalised, free scale, epoch stretch 0.1-10x).
    """
    same = [c for c in curves if c["model"] == curve["model"] and c["curve"] != curve["curve"]]
    other = [c for c in curves if c["model"] != curve["model"]]

    def table(cs: list[dict[str, Any]]) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.arange(1, c["values"].size + 1, dtype=float), c["values"]) for c in cs]

    return {
        "flowplan": None,
        "flowplan+prior": CurvePrior.of(table(same), same_task=True) if same else None,
        "flowplan+lomo": CurvePrior.of(
            table(other), same_task=False, warp_range=(0.1, 10.0), directions=[c["direction"] for c in other]
        ),
        "optimus": None,
    }


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------
def load_curves(data: Path) -> list[dict[str, Any]]:
    root = data / TRACES
    if not root.is_dir():
        raise SystemExit(f"no traces folder at {root} (use --data)")
    curves = []
    for model in sorted(DIRECTIONS):
        files = sorted((root / model).glob("validation-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
        for path in files:
            with path.open(newline="") as fh:
                values = [float(row["metric"]) for row in csv.DictReader(fh)]
            curves.append(
                {
                    "curve": f"{model}/{path.stem}",
                    "model": model,
                    "batch_size": int(path.stem.split("-")[1]),
                    "direction": DIRECTIONS[model],
                    "values": np.array(values),
                }
            )
    return curves


def first_epoch_reaching(values: np.ndarray, target: float, direction: str) -> int | None:
    hit = values >= target if direction == "higher" else values <= target
    idx = np.flatnonzero(hit)
    return int(idx[0]) + 1 if idx.size else None


def capped(err: float) -> float:
    return min(float(err), ERROR_CAP) if math.isfinite(err) else ERROR_CAP


def _num(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


# --------------------------------------------------------------------------------------------------
# Benchmark
# --------------------------------------------------------------------------------------------------
def describe_fit(fit: Any) -> dict[str, Any]:
    if isinstance(fit, CannotPredict):
        return {"status": "cannot_predict", "reason": fit.reason}
    out: dict[str, Any] = {"status": "ok", "plateau": _num(fit.plateau)}
    if isinstance(fit, OptimusFit):
        out["family"] = "hyperbola"
        out["params"] = {"a": fit.a, "b": fit.b, "c": fit.c}
    else:
        out["family"] = fit.family
        out["params"] = dict(fit.params)
    return out


def bench_curve(curve: dict[str, Any], priors: dict[str, CurvePrior | None]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    values: np.ndarray = curve["values"]
    direction = curve["direction"]
    K = int(values.size)
    v1, vK = float(values[0]), float(values[-1])
    rows: list[dict[str, Any]] = []
    fit_seconds = dict.fromkeys(METHODS, 0.0)
    for f in FRACTIONS:
        n = max(1, round(f * K))
        k_obs = np.arange(1, n + 1, dtype=float)
        fits = {}
        for m in METHODS:
            t0 = time.perf_counter()
            fits[m] = fit_method(m, k_obs, values[:n], direction, priors.get(m))
            fit_seconds[m] += time.perf_counter() - t0
        base = {"curve": curve["curve"], "model": curve["model"], "batch_size": curve["batch_size"], "epochs": K}
        base |= {"direction": direction, "fraction": f, "n_observed": n}
        fit_info = {m: describe_fit(fits[m]) for m in METHODS}

        # (a) final metric
        row: dict[str, Any] = dict(base, kind="final", p=None, target=None, true_value=vK, true_epoch=K)
        for m in METHODS:
            fit = fits[m]
            if isinstance(fit, CannotPredict):
                pred, err, status = None, ERROR_CAP, "cannot_predict"
            else:
                pred = _num(fit.predict(np.array([float(K)]))[0])
                err = capped(abs(pred - vK) / abs(vK)) if pred is not None else ERROR_CAP
                status = "ok" if pred is not None else "non_finite"
            row[m] = {"pred_value": pred, "error": err, "status": status, "fit": fit_info[m]}
        rows.append(row)

        # (b) epochs to target
        for p in TARGET_PS:
            target = v1 + p * (vK - v1)
            true_epoch = first_epoch_reaching(values, target, direction)
            if true_epoch is None or true_epoch <= n:
                continue  # already reached in the observed window: not a prediction of the future
            row = dict(base, kind="target", p=p, target=target, true_value=None, true_epoch=true_epoch)
            for m in METHODS:
                fit = fits[m]
                if isinstance(fit, CannotPredict):
                    pred, err, status = None, ERROR_CAP, "cannot_predict"
                else:
                    pred = _num(fit.epoch_reaching(target))
                    if pred is None:
                        err, status = ERROR_CAP, "unreachable"
                    else:
                        err, status = capped(abs(pred - true_epoch) / true_epoch), "ok"
                row[m] = {"pred_epoch": pred, "error": err, "status": status, "fit": fit_info[m]}
            rows.append(row)
    return rows, fit_seconds


def _stats(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    errs = np.array([r[method]["error"] for r in rows], dtype=float)
    fails = sum(r[method]["status"] in ("cannot_predict", "unreachable", "non_finite") for r in rows)
    if errs.size == 0:
        return {"cases": 0, "median": None, "p90": None, "mean": None, "fail_share": None}
    return {
        "cases": int(errs.size),
        "median": float(np.median(errs)),
        "mean": float(errs.mean()),
        "p90": float(np.percentile(errs, 90)),
        "fail_share": fails / errs.size,
        "capped_share": float(np.mean(errs >= ERROR_CAP)),
    }


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None:
        return None
    return num / den if den > 0 else None  # no ratio to a zero median


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def block(sel: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in FRACTIONS:
            fr = [r for r in sel if r["fraction"] == f]
            ent: dict[str, Any] = {}
            for kind in ("final", "target"):
                kr = [r for r in fr if r["kind"] == kind]
                ent[kind] = {m: _stats(kr, m) for m in METHODS}
                for m in OURS:
                    for stat in ("median", "mean"):
                        ent[kind][f"ratio_{stat}_optimus_over_{m}"] = _ratio(ent[kind]["optimus"][stat], ent[kind][m][stat])
            out[f"{f:.2f}"] = ent
        return out

    per_model: dict[str, Any] = {}
    for model in sorted(DIRECTIONS):
        mr = [r for r in rows if r["model"] == model and r["fraction"] == BREAKDOWN_FRACTION]
        tr = [r for r in mr if r["kind"] == "target"]
        fr = [r for r in mr if r["kind"] == "final"]
        per_model[model] = {
            "n_observed": sorted({r["n_observed"] for r in mr}),
            "target": {m: _stats(tr, m) for m in METHODS},
            "final": {m: _stats(fr, m) for m in METHODS},
        }
    return {
        "all_cases": block(rows),
        "cases_with_at_least_3_observed_points": block([r for r in rows if r["n_observed"] >= 3]),
        f"per_model_fraction_{BREAKDOWN_FRACTION:.2f}": per_model,
    }


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _rat(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def summary_tables(
    summary: dict[str, Any], block: str = "all_cases"
) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    head1 = [
        "fraction",
        "measure",
        "method",
        "cases",
        "median",
        "p90",
        "mean",
        "cannot/unreach.",
        "ratio optimus/method median, mean",
    ]
    t1 = []
    for fkey, ent in summary[block].items():
        for kind, label in (("final", "(a) final metric"), ("target", "(b) epochs to target")):
            for m in METHODS:
                s = ent[kind][m]
                t1.append(
                    [
                        fkey,
                        label,
                        m,
                        str(s["cases"]),
                        _pct(s["median"]),
                        _pct(s["p90"]),
                        _pct(s["mean"]),
                        _pct(s["fail_share"]),
                        (
                            f"{_rat(ent[kind][f'ratio_median_optimus_over_{m}'])}, "
                            f"{_rat(ent[kind][f'ratio_mean_optimus_over_{m}'])}"
                        )
                        if m in OURS
                        else "",
                    ]
                )
    head2 = [
        "model",
        "n observed",
        "target cases",
        "median (b) flowplan",
        "median (b) +prior",
        "median (b) +lomo",
        "median (b) optimus",
        "unreach. flowplan",
        "unreach. +prior",
        "unreach. optimus",
        "median (a) flowplan",
        "median (a) +prior",
        "median (a) optimus",
    ]
    t2 = []
    for model, ent in summary[f"per_model_fraction_{BREAKDOWN_FRACTION:.2f}"].items():
        t2.append(
            [
                model,
                ",".join(str(n) for n in ent["n_observed"]),
                str(ent["target"]["flowplan"]["cases"]),
                _pct(ent["target"]["flowplan"]["median"]),
                _pct(ent["target"]["flowplan+prior"]["median"]),
                _pct(ent["target"]["flowplan+lomo"]["median"]),
                _pct(ent["target"]["optimus"]["median"]),
                _pct(ent["target"]["flowplan"]["fail_share"]),
                _pct(ent["target"]["flowplan+prior"]["fail_share"]),
                _pct(ent["target"]["optimus"]["fail_share"]),
                _pct(ent["final"]["flowplan"]["median"]),
                _pct(ent["final"]["flowplan+prior"]["median"]),
                _pct(ent["final"]["optimus"]["median"]),
            ]
        )
    return head1, t1, head2, t2


def text_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def md_table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 3 else "---:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(c if c else " " for c in r) + " |" for r in rows]
    return "\n".join(out)


NOTES = (
    f"Errors are relative and each one is capped at {ERROR_CAP:.0%} (a wild prediction counts as {ERROR_CAP:.0%}); "
    f"'cannot predict' and 'unreachable' (plateau short of the target) also count as {ERROR_CAP:.0%}. "
    "(a) = |pred(K) - true(K)| / |true(K)|; (b) = |pred epoch - true epoch| / true epoch, targets at "
    f"p = {', '.join(str(p) for p in TARGET_PS)} of the way from the first to the final measured value, "
    "only those not yet reached in the observed epochs. n = max(1, round(f*K)) observed epochs; "
    f"Optimus needs >= 3 points (3 parameters), FlowPlan's model {getattr(models.curves, 'MIN_POINTS', '?')}. "
    "Ratio > 1: the method's error is lower than Optimus's. flowplan: no prior; flowplan+prior: prior from the "
    "OTHER batch sizes of the same model (never the predicted curve itself); flowplan+lomo: prior from the "
    "curves of the other five models only (leave-one-model-out, shapes only)."
)


def print_text(summary: dict[str, Any], meta: dict[str, Any]) -> None:
    print(
        f"Learning-curve prediction: {meta['curves']} measured curves ({meta['models']}), "
        f"fractions {', '.join(f'{f:.2f}' for f in FRACTIONS)}; FlowPlan vs plain Optimus hyperbola"
    )
    print(NOTES)
    for block, title in (
        ("all_cases", "All cases"),
        ("cases_with_at_least_3_observed_points", "Only cases with >= 3 observed points"),
    ):
        h1, t1, _, _ = summary_tables(summary, block)
        print(f"\n{title}:")
        print(text_table(h1, t1))
    _, _, h2, t2 = summary_tables(summary)
    print(f"\nPer model, observed fraction {BREAKDOWN_FRACTION:.2f} (all cases):")
    print(text_table(h2, t2))
    print(
        f"\nfit time: flowplan {meta['fit_ms_mean']['flowplan']:.2f} ms/fit, "
        f"optimus {meta['fit_ms_mean']['optimus']:.2f} ms/fit; total {meta['wall_s']:.1f}s"
    )


def print_markdown(summary: dict[str, Any]) -> None:
    print("\n<!-- bench_curves.py --markdown -->")
    for block, title in (
        ("all_cases", "All cases"),
        ("cases_with_at_least_3_observed_points", "Only cases with >= 3 observed points"),
    ):
        h1, t1, _, _ = summary_tables(summary, block)
        print(f"\n**{title}**\n")
        print(md_table(h1, t1))
    _, _, h2, t2 = summary_tables(summary)
    print(f"\n**Per model, observed fraction {BREAKDOWN_FRACTION:.2f}**\n")
    print(md_table(h2, t2))
    print(f"\n{NOTES}")


def print_detail(rows: list[dict[str, Any]], pattern: str) -> None:
    sel = [r for r in rows if pattern in r["curve"]]
    print(f"\nDetail for curves matching {pattern!r}:")
    for r in sel:
        tag = f"{r['curve']:28s} f={r['fraction']:.2f} n={r['n_observed']:3d}"
        if r["kind"] == "final":
            cells = [f"true(K={r['epochs']})={r['true_value']:.4g}"]
            for m in METHODS:
                d = r[m]
                pl = d["fit"].get("plateau")
                fam = d["fit"].get("family", "-")
                pv = "-" if d["pred_value"] is None else f"{d['pred_value']:.4g}"
                cells.append(f"{m}: pred={pv} err={_pct(d['error'])} [{fam}, plateau={'-' if pl is None else f'{pl:.4g}'}]")
        else:
            cells = [f"p={r['p']:.2f} target={r['target']:.4g} true epoch={r['true_epoch']}"]
            for m in METHODS:
                d = r[m]
                pe = d["status"] if d["pred_epoch"] is None else f"{d['pred_epoch']:.1f}"
                cells.append(f"{m}: epoch={pe} err={_pct(d['error'])}")
        print(f"  {tag}  " + "  |  ".join(cells))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"data folder (default {DEFAULT_DATA})")
    ap.add_argument("--out", type=Path, help="write every per-case row and the summary to this JSON file")
    ap.add_argument("--markdown", action="store_true", help="also print the summary tables as Markdown")
    ap.add_argument("--show", action="append", default=[], metavar="SUBSTR", help="print per-case detail for matching curves")
    ap.add_argument("--after-drop", action="store_true", help="ablation: fit only the phase after a detected learning-rate drop")
    ap.add_argument("--families", help="ablation: comma-separated families that compete (default: all)")
    args = ap.parse_args(argv)
    FIT_OPTIONS["after_drop"] = args.after_drop
    FIT_OPTIONS["families"] = tuple(args.families.split(",")) if args.families else None

    t_start = time.perf_counter()
    curves = load_curves(args.data)
    log(f"{len(curves)} curves from {args.data / TRACES}")
    rows: list[dict[str, Any]] = []
    fit_s = dict.fromkeys(METHODS, 0.0)
    for model in sorted(DIRECTIONS):
        mc = [c for c in curves if c["model"] == model]
        t0 = time.perf_counter()
        for c in mc:
            got, secs = bench_curve(c, priors_for(c, curves))
            rows += got
            for m in METHODS:
                fit_s[m] += secs[m]
        log(f"  {model}: {len(mc)} curves, {time.perf_counter() - t0:.2f}s")
    n_fits = len(curves) * len(FRACTIONS)
    summary = summarize(rows)
    curves_py = REPO / "models" / "curves.py"
    meta = {
        "curves": len(curves),
        "models": ", ".join(f"{m} {sum(c['model'] == m for c in curves)}" for m in sorted(DIRECTIONS)),
        "fractions": list(FRACTIONS),
        "target_ps": list(TARGET_PS),
        "error_cap": ERROR_CAP,
        "fit_ms_mean": {m: 1000 * fit_s[m] / n_fits for m in METHODS},
        "wall_s": time.perf_counter() - t_start,
        "data": str(args.data),
        "models_curves_py_sha256": hashlib.sha256(curves_py.read_bytes()).hexdigest() if curves_py.exists() else None,
        "models_module": getattr(models, "__file__", None),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print_text(summary, meta)
    if args.markdown:
        print_markdown(summary)
    for pattern in args.show:
        print_detail(rows, pattern)
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1))
        log(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
