"""Schedule-aware learning curves on real runs with real learning-rate schedules: does declaring the
schedule help, and against what?

Prints figures; asserts nothing. Data: ``benchmarks/data/schedules/`` (recorded by
``benchmarks/record_schedules.py``; see its README): small PyTorch models trained on this CPU under
the seven schedule kinds of the snapshot contract. The predicted metric is the epoch's training loss
(``train_loss``, lower is better: what a training log prints), or ``--metric val_loss|val_metric``.

For each run of ``K`` epochs and each observed fraction ``f`` (0.10, 0.25, 0.50) the first
``n = max(1, round(f*K))`` epochs are shown to each method; measured as in
``benchmarks/bench_curves.py``:

(a) final-value error ``|pred(K) - true(K)| / |true(K)|``;
(b) epochs-to-target error ``|pred_epoch - true_epoch| / true_epoch`` for targets ``v1 + p*(vK - v1)``,
    ``p`` in 0.8, 0.9, 0.95 (``true_epoch``: the first measured epoch at or beyond the target), only
    targets not reached in the observed epochs. No fit, "unreachable" and "past the last planned
    epoch" count as 100 %; every error is capped at 100 %.

FlowPlan's methods (``schedule``, ``runs``, ``flowplan``) are read as the planner reads a job
(``CurveFit.epoch_seen``): the median at the smooth crossing, the interval's ends at the reports (every
epoch here) that will show them; ``--crossing``: the interval's ends at the smooth crossings, as
before session 28 (the medians are the same).

Coverage: the share of the *future* measured points inside the method's 80 % band
(``CurveFit.interval_at``), and the share of (b)'s targets whose true epoch lies inside the 80 %
epochs-to-target interval (``CurveFit.seen_interval``; with ``--crossing``, ``CurveFit.epoch_interval``);
"open-ended": the share of those intervals
whose pessimistic end never gets to the target (``[optimistic, inf)``, which holds any true epoch
after its start).

Methods:

``schedule``   ``fit_learning_curve(..., schedule=LRSchedule(declared, max_epochs=K))``;
``runs``       the same job with the finished runs of its task under the same declared schedule (the
               other seeds) from the state store, as the planner reads it then (``planner.outlook``):
               ``fit_learning_curve(..., prior=CurvePrior.of(them))``, and the ``schedule`` curve
               for a target that fit does not reach by the planned end (bands and intervals: the
               prior fit's);
``flowplan``   ``fit_learning_curve`` with no hint (no schedule, no prior): the model-averaged curve;
``optimus``    the Optimus hyperbola (``bench_curves.fit_optimus``);
``line3``      a straight line through the last 3 observed points, extended (never reaches a target
               it is not heading towards);
``logline3``   the same in log-epochs (``v = a + b*ln(epoch)``): slowing down like ``1/epoch``;
``last``       the last observed value, for ever (every unreached target is "unreachable").

Splits: ``tune`` (task ``digits_mlp``: the only runs the model's constants were chosen on) and
``holdout`` (every other task, never looked at while choosing them).

    python benchmarks/schedule_curves.py                 # tables, both splits
    python benchmarks/schedule_curves.py --learn-prior   # the annealing-gain prior from the tuning runs
    python benchmarks/schedule_curves.py --why           # why the schedule-free fit misses
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from bench_curves import capped, first_epoch_reaching, fit_optimus

import models.schedule_curve as schedule_curve
from models import CannotPredict, CurveFit, CurvePrior, fit_learning_curve
from models.curves import report_cadence
from models.schedule import LRSchedule

DATA = Path(__file__).resolve().parent / "data" / "schedules"
FRACTIONS = (0.10, 0.25, 0.50)
TARGET_PS = (0.8, 0.9, 0.95)
METHODS = ("schedule", "runs", "flowplan", "optimus", "line3", "logline3", "last")
DIRECTION = {"train_loss": "lower", "val_loss": "lower", "val_metric": "higher"}


def to_schedule(spec: dict[str, Any], max_epochs: float) -> LRSchedule:
    """The contract's JSON form -> :class:`LRSchedule` (``planner.snapshot`` does the same for jobs)."""
    kind = spec["kind"]
    return LRSchedule(
        kind=kind,
        milestones=tuple(float(m) for m in spec.get("milestones", ())),
        gamma=float(spec.get("gamma", 1.0)),
        warmup=float(spec.get("warmup", 0.0)),
        max_epochs=max_epochs,
        factor=float(spec.get("factor", 0.1)),
        patience=int(spec.get("patience", 10)),
        min_lr=float(spec.get("min_lr", 0.0)),
    )


def load(data: Path, metric: str) -> list[dict[str, Any]]:
    meta = json.loads((data / "runs.json").read_text())["runs"]
    series: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    with open(data / "runs.csv") as fh:
        for row in csv.DictReader(fh):
            series[row["run"]].append((float(row["epoch"]), float(row[metric]), float(row["lr"])))
    runs = []
    for name, pts in series.items():
        e, v, lr = (np.array(x) for x in zip(*pts, strict=True))
        runs.append({"name": name, **meta[name], "epochs_arr": e, "values": v, "lr": lr})
    return runs


class Line3:
    """A straight line through the last 3 points, in epochs or (``log=True``) in log-epochs."""

    def __init__(self, k: np.ndarray, v: np.ndarray, *, log: bool = False) -> None:
        self.log = log
        self.slope, self.icept = np.polyfit(self._x(k[-3:]), v[-3:], 1)
        self.last = float(k[-1])

    def _x(self, k: Any) -> np.ndarray:
        k = np.asarray(k, dtype=float)
        return np.log(k) if self.log else k

    def predict(self, epochs: Any) -> np.ndarray:
        return self.icept + self.slope * self._x(epochs)

    def epoch_reaching(self, target: float, direction: str) -> float | None:
        if (direction == "lower" and self.slope >= 0) or (direction == "higher" and self.slope <= 0):
            return None
        x = (target - self.icept) / self.slope
        k = math.exp(min(x, 700.0)) if self.log else x
        return max(float(k), self.last)


@dataclass(frozen=True)
class Reading:
    """How a fitted curve is read for a target: as the planner reads it (``seen``:
    ``CurveFit.epoch_seen``, the interval's ends at the reports every ``cadence`` epochs that show
    them), or the smooth crossings (``CurveFit.epoch_reaching`` / ``epoch_interval``)."""

    seen: bool
    cadence: float = 1.0

    def at(self, curve: CurveFit, target: float) -> float | None:
        return curve.epoch_seen(target, cadence=self.cadence) if self.seen else curve.epoch_reaching(target)

    def interval(self, curve: CurveFit, target: float) -> tuple[float | None, float | None]:
        return curve.seen_interval(target, cadence=self.cadence) if self.seen else curve.epoch_interval(target)


class WithFallback:
    """The planner's reading for a job with runs under its own schedule (``planner.outlook``): the
    prior's fit, and where it does not reach a target by the planned end, the declared schedule's
    curve. Bands and intervals are the prior fit's."""

    def __init__(self, primary: Any, fallback: Any, planned: float) -> None:
        self.primary, self.fallback, self.planned = primary, fallback, planned

    def epoch_reaching(self, target: float, reading: Reading) -> float | None:
        got = None if isinstance(self.primary, CannotPredict) else reading.at(self.primary, target)
        if (got is None or got > self.planned) and isinstance(self.fallback, CurveFit):
            other = reading.at(self.fallback, target)
            return other if other is not None else got
        return got


def siblings(runs: list[dict[str, Any]]) -> dict[str, CurvePrior]:
    """Per run, its finished siblings as the state store would lend them to it: the other runs of
    its task under the same declared schedule (the other seeds; ``Snapshot.curve_priors`` as the
    planner reads them for a job that declares that schedule, ``planner.outlook.job_curve_prior``)."""
    out = {}
    for run in runs:
        same = [r for r in runs if r["task"] == run["task"] and r["schedule"] == run["schedule"] and r["name"] != run["name"]]
        out[run["name"]] = CurvePrior.of([(r["epochs_arr"], r["values"]) for r in same], same_task=True)
    return out


def fit(method: str, run: dict[str, Any], n: int, direction: str, prior: CurvePrior | None = None) -> Any:
    k, v = run["epochs_arr"][:n], run["values"][:n]
    if method == "runs":
        # What the planner fits for a job that declares its schedule and has runs of its task under
        # the same one (planner.outlook.build_outlook): the prior, competing with the families, and
        # the declared schedule's curve where the prior's misses a target.
        primary = fit_learning_curve(k, v, direction, prior=prior)  # type: ignore[arg-type]
        if isinstance(primary, CannotPredict):
            return primary
        declared = fit_learning_curve(k, v, direction, schedule=to_schedule(run["schedule"], float(run["epochs"])))  # type: ignore[arg-type]
        return WithFallback(primary, declared, float(run["epochs"]))
    if method == "schedule":
        return fit_learning_curve(k, v, direction, schedule=to_schedule(run["schedule"], float(run["epochs"])))  # type: ignore[arg-type]
    if method == "flowplan":
        return fit_learning_curve(k, v, direction)  # type: ignore[arg-type]
    if method == "optimus":
        return fit_optimus(k, v, direction)
    if n < 3 and method in ("line3", "logline3"):
        return CannotPredict("fewer than 3 points", n)
    if method in ("line3", "logline3"):
        return Line3(k, v, log=method == "logline3")
    return ("last", float(v[-1]))


def reach(model: Any, target: float, direction: str, reading: Reading) -> float | None:
    if isinstance(model, WithFallback):
        return model.epoch_reaching(target, reading)
    if isinstance(model, CannotPredict):
        return None
    if isinstance(model, tuple):
        return None  # the last value never moves
    if isinstance(model, Line3):
        return model.epoch_reaching(target, direction)
    if isinstance(model, CurveFit):
        return reading.at(model, target)
    return model.epoch_reaching(target)


def predict_at(model: Any, epoch: float) -> float | None:
    if isinstance(model, WithFallback):
        model = model.primary
    if isinstance(model, CannotPredict):
        return None
    if isinstance(model, tuple):
        return model[1]
    return float(model.predict(np.array([epoch]))[0])


def bench(runs: list[dict[str, Any]], direction: str, *, seen: bool = True) -> list[dict[str, Any]]:
    rows = []
    priors = siblings(runs)
    for run in runs:
        k_all, v_all = run["epochs_arr"], run["values"]
        K = int(k_all.size)
        for f in FRACTIONS:
            n = max(1, round(f * K))
            fits = {m: fit(m, run, n, direction, priors[run["name"]]) for m in METHODS}
            reading = Reading(seen, report_cadence(k_all[:n]))  # Optimus and the lines are read as they are
            for m, model in fits.items():
                pred_end = predict_at(model, float(k_all[-1]))
                fin = capped(abs(pred_end - v_all[-1]) / abs(v_all[-1])) if pred_end is not None else 1.0
                row = {
                    "run": run["name"],
                    "task": run["task"],
                    "split": run["split"],
                    "kind": run["schedule"]["kind"],
                    "fraction": f,
                    "method": m,
                    "final_err": fin,
                    "targets": [],
                    "band": None,
                }
                for p in TARGET_PS:
                    tv = v_all[0] + p * (v_all[-1] - v_all[0])
                    true = first_epoch_reaching(v_all, tv, direction)
                    if true is None or true <= n:
                        continue
                    at = reach(model, tv, direction, reading)
                    err = 1.0 if at is None or at > K else capped(abs(at - true) / true)
                    inside = None
                    open_end = None
                    if isinstance(curve := model.primary if isinstance(model, WithFallback) else model, CurveFit):
                        lo, hi = reading.interval(curve, tv)
                        inside = lo is not None and lo <= true and (hi is None or true <= hi)
                        open_end = hi is None
                    row["targets"].append({"p": p, "err": err, "inside": inside, "open": open_end})
                if isinstance(curve := model.primary if isinstance(model, WithFallback) else model, CurveFit) and n < K:
                    band_lo, band_hi = curve.interval_at(k_all[n:])
                    row["band"] = float(np.mean((v_all[n:] >= band_lo) & (v_all[n:] <= band_hi)))
                rows.append(row)
    return rows


def pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:.1f}%"


def table(rows: list[dict[str, Any]], title: str) -> None:
    print(f"\n{title}")
    head = [
        "observed",
        "method",
        "targets",
        "median (b)",
        "mean (b)",
        "unreach.",
        "median (a)",
        "band cov.",
        "target-interval cov.",
        "open-ended",
    ]
    out = [head]
    for f in FRACTIONS:
        for m in METHODS:
            sel = [r for r in rows if r["fraction"] == f and r["method"] == m]
            errs = [t["err"] for r in sel for t in r["targets"]]
            unr = [t["err"] >= 1.0 for r in sel for t in r["targets"]]
            bands = [r["band"] for r in sel if r["band"] is not None]
            ins = [t["inside"] for r in sel for t in r["targets"] if t["inside"] is not None]
            opens = [t["open"] for r in sel for t in r["targets"] if t["open"] is not None]
            out.append(
                [
                    f"{int(f * 100)}%",
                    m,
                    str(len(errs)),
                    pct(float(np.median(errs))) if errs else "-",
                    pct(float(np.mean(errs))) if errs else "-",
                    pct(float(np.mean(unr))) if unr else "-",
                    pct(float(np.median([r["final_err"] for r in sel]))) if sel else "-",
                    pct(float(np.mean(bands))) if bands else "-",
                    pct(float(np.mean(ins))) if ins else "-",
                    pct(float(np.mean(opens))) if opens else "-",
                ]
            )
    widths = [max(len(r[i]) for r in out) for i in range(len(head))]
    for i, r in enumerate(out):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def per_kind(rows: list[dict[str, Any]], f: float, title: str) -> None:
    print(f"\n{title}")
    kinds = sorted({r["kind"] for r in rows})
    print("| kind | targets | " + " | ".join(METHODS) + " |")
    print("|---|---:|" + "---:|" * len(METHODS))
    for kind in kinds:
        cells = []
        count = 0
        for m in METHODS:
            errs = [t["err"] for r in rows if r["kind"] == kind and r["fraction"] == f and r["method"] == m for t in r["targets"]]
            count = len(errs)
            cells.append(pct(float(np.median(errs))) if errs else "-")
        print(f"| {kind} | {count} | " + " | ".join(cells) + " |")


def learn_prior(runs: list[dict[str, Any]], direction: str) -> None:
    """Fit every tuning run whose rate changed on all its epochs with the prior switched off; print the
    annealing gain ``e`` as a share of the observed range (the constant ``ANNEAL_SHARE``)."""
    schedule_curve.ANNEAL_PRIOR_WEIGHT = 0.0
    shares = []
    for run in runs:
        if run["split"] != "tune" or run["schedule"]["kind"] == "constant":
            continue
        got = fit("schedule", run, int(run["values"].size), direction)
        if isinstance(got, CurveFit):
            # The prior is a share of the range seen in the prefix (a quarter of the run, the
            # fraction the goal is set at), which is what the fit knows when it needs the prior.
            seen = run["values"][: max(1, round(0.25 * run["values"].size))]
            share = got.params["e"] / float(np.ptp(seen))
            shares.append(share)
            print(f"{run['name']}: e / range = {share:.3f}")
    print(f"median over {len(shares)} tuning runs: {float(np.median(shares)):.3f}")


def why(runs: list[dict[str, Any]], direction: str, split: str) -> None:
    """Why the schedule-free fit misses: each unreached target of the split, by what the fit said."""
    print(f"{split}: what the schedule-free fit (no hint, no prior) says about each unreached target")
    print(
        "| observed | targets | no fit | plateau short of target | past the run's last epoch"
        " | error >= 100% | error < 100% | families chosen |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for f in FRACTIONS:
        counts: dict[str, int] = defaultdict(int)
        families: dict[str, int] = defaultdict(int)
        for run in (r for r in runs if r["split"] == split):
            k_all, v_all = run["epochs_arr"], run["values"]
            n = max(1, round(f * k_all.size))
            model = fit("flowplan", run, n, direction)
            families[model.family if isinstance(model, CurveFit) else "none"] += 1
            for p in TARGET_PS:
                tv = v_all[0] + p * (v_all[-1] - v_all[0])
                true = first_epoch_reaching(v_all, tv, direction)
                if true is None or true <= n:
                    continue
                counts["targets"] += 1
                at = reach(model, tv, direction)
                if isinstance(model, CannotPredict):
                    counts["none"] += 1
                elif at is None:
                    counts["plateau"] += 1
                elif at > k_all.size:
                    counts["past"] += 1
                else:
                    counts["bad" if abs(at - true) / true >= 1.0 else "ok"] += 1
        fams = ", ".join(f"{name} {c}" for name, c in sorted(families.items(), key=lambda x: -x[1]))
        cells = [str(counts[c]) for c in ("targets", "none", "plateau", "past", "bad", "ok")]
        print(f"| {int(f * 100)}% | " + " | ".join(cells) + f" | {fams} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--metric", choices=sorted(DIRECTION), default="train_loss")
    ap.add_argument("--learn-prior", action="store_true")
    ap.add_argument("--why", action="store_true", help="why the schedule-free fit misses (per split)")
    ap.add_argument("--split", choices=["tune", "holdout", "all"], default=None, help="only this split (default: each)")
    ap.add_argument(
        "--crossing",
        action="store_true",
        help="read the intervals' ends at the smooth crossings (CurveFit.epoch_interval), as before session 28, "
        "instead of at the reports that show them (CurveFit.seen_interval, the planner's reading)",
    )
    args = ap.parse_args(argv)
    direction = DIRECTION[args.metric]
    runs = load(args.data, args.metric)
    if args.learn_prior:
        learn_prior(runs, direction)
        return 0
    if args.why:
        for split in [args.split] if args.split and args.split != "all" else ["holdout", "tune"]:
            why(runs, direction, split)
        return 0
    rows = bench(runs, direction, seen=not args.crossing)
    splits = [args.split] if args.split else ["holdout", "tune", "all"]
    reading = "the smooth crossings (--crossing)" if args.crossing else "the reports that show them (CurveFit.epoch_seen)"
    print(
        f"metric: {args.metric} ({direction} is better); {len(runs)} runs; errors capped at 100%; interval ends at {reading}",
        file=sys.stderr,
    )
    for split in splits:
        sel = rows if split == "all" else [r for r in rows if r["split"] == split]
        n_runs = len({r["run"] for r in sel})
        table(sel, f"{split}: {n_runs} runs")
        # A constant schedule tells nothing a prefix does not (the schedule method is then the
        # schedule-free fit): the same table over the six kinds that change the rate.
        changing = [r for r in sel if r["kind"] != "constant"]
        table(changing, f"{split}, the six kinds that change the rate: {len({r['run'] for r in changing})} runs")
    for split in [s for s in splits if s != "all"]:
        for f in FRACTIONS:
            sel = [r for r in rows if r["split"] == split]
            per_kind(sel, f, f"{split}, {int(f * 100)}% observed: median epochs-to-target error by schedule kind")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
