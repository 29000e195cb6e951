"""Train a few small real models on this CPU and write their learning curves to ``tests/data/curves/``.

The published curves in ``../shared/data`` are six; the learning-curve model must also hold on curves
it was not tuned on. This script produces such curves by actually training: scikit-learn models on
scikit-learn's *bundled* datasets (digits, breast cancer, diabetes; nothing is downloaded), one
``partial_fit`` call per epoch, measuring the validation metric after every epoch on a fixed held-out
split (30 %, ``random_state=0``, stratified for classification; features standardised on the training
part).

Curves (see ``CURVES`` below and ``tests/data/curves/README.md`` for every hyper-parameter):

- ``digits_mlp_sgd``     MLPClassifier, SGD + Nesterov momentum, constant LR; validation accuracy (higher);
- ``digits_sgd_step``    linear SGDClassifier (log loss), *step* LR: eta0 / 10 from epoch 31 and again from
  epoch 61; validation accuracy (higher). The drops show as jumps, as in the ResNet curves;
- ``breast_cancer_sgd``  SGDClassifier (log loss), small constant LR; validation accuracy (higher);
- ``diabetes_mlp_adam``  MLPRegressor, Adam; validation MSE (lower), S-shaped (slow start);
- ``diabetes_sgd``       SGDRegressor, constant LR; validation MSE (lower);
- ``digits_mlp_adam``    MLPClassifier, Adam; validation log loss (lower).

Why the step schedule uses ``SGDClassifier``: ``MLPClassifier.partial_fit`` builds its optimizer on the
first call and never reads ``learning_rate_init`` again, so changing it between calls has no effect
(checked at start-up by :func:`_lr_change_takes_effect`); ``SGDClassifier`` reads ``eta0`` on every
``partial_fit`` call, so changing it there is a real learning-rate drop (also checked).

Output, one file per curve: ``<name>.csv`` with ``epoch,metric,loss,time`` (epoch counts from 1;
``metric`` is the validation metric; ``loss`` the training loss after the epoch on the whole training
part: log loss for classifiers, MSE for regressors; ``time`` the cumulative wall seconds spent in
``partial_fit``, rounded to 0.01: machine-dependent, never compare it) plus ``index.json``
(``{name: {metric, direction, schedule, lr_drops}}``; ``lr_drops`` lists the first epoch trained at
each lower rate). ``README.md`` in that folder is written by hand.

Deterministic: fixed ``random_state`` everywhere and one BLAS/OpenMP thread, so re-running on the
same machine and library versions rewrites identical ``metric`` and ``loss`` columns. Takes a few
seconds.

Usage::

    python examples/train_curves.py [--out DIR] [--check]

``--check`` trains into a temporary folder and compares the ``metric``/``loss`` columns (and
``index.json``) with the files in ``--out`` instead of writing; exit status 1 on a difference.
Needs scikit-learn (``pip install -e '.[dev]'``).
"""

from __future__ import annotations

import os

# One thread for BLAS and OpenMP before numpy loads: results do not depend on thread scheduling.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import copy  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.linear_model import SGDClassifier, SGDRegressor  # noqa: E402
from sklearn.metrics import accuracy_score, log_loss, mean_squared_error  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.neural_network import MLPClassifier, MLPRegressor  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "curves"
SEED = 0
VALIDATION_SHARE = 0.3

Split = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Curve:
    """One training run: what to train, how to measure it, and the learning-rate schedule."""

    name: str
    dataset: Callable[..., Any]
    make: Callable[[], Any]
    metric: str  # "accuracy" | "mse" | "log_loss" (validation)
    direction: str  # "higher" | "lower"
    epochs: int
    schedule: str
    #: {first epoch (1-based) trained at the new rate: new rate}; applied to ``lr_attr`` before that epoch.
    lr_steps: dict[int, float] = field(default_factory=dict)
    lr_attr: str = ""

    @property
    def classifier(self) -> bool:
        return self.metric in ("accuracy", "log_loss")


CURVES = [
    Curve(
        name="digits_mlp_sgd",
        dataset=load_digits,
        make=lambda: MLPClassifier(
            hidden_layer_sizes=(32,),
            solver="sgd",
            learning_rate="constant",
            learning_rate_init=0.002,
            momentum=0.9,
            nesterovs_momentum=True,
            batch_size=64,
            alpha=1e-4,
            random_state=SEED,
        ),
        metric="accuracy",
        direction="higher",
        epochs=100,
        schedule="constant 0.002",
    ),
    Curve(
        name="digits_sgd_step",
        dataset=load_digits,
        make=lambda: SGDClassifier(
            loss="log_loss",
            penalty="l2",
            alpha=1e-3,
            learning_rate="constant",
            eta0=5.0,
            random_state=np.random.RandomState(SEED),  # an instance: a new shuffle every epoch
        ),
        metric="accuracy",
        direction="higher",
        epochs=90,
        schedule="step: eta0 5.0, 0.5 from epoch 31, 0.05 from epoch 61",
        lr_steps={31: 0.5, 61: 0.05},
        lr_attr="eta0",
    ),
    Curve(
        name="breast_cancer_sgd",
        dataset=load_breast_cancer,
        make=lambda: SGDClassifier(
            loss="log_loss",
            penalty="l2",
            alpha=1e-4,
            learning_rate="constant",
            eta0=1e-3,
            random_state=np.random.RandomState(SEED),
        ),
        metric="accuracy",
        direction="higher",
        epochs=80,
        schedule="constant 0.001",
    ),
    Curve(
        name="diabetes_mlp_adam",
        dataset=load_diabetes,
        make=lambda: MLPRegressor(
            hidden_layer_sizes=(32,),
            solver="adam",
            learning_rate_init=3e-3,
            batch_size=32,
            alpha=1e-4,
            random_state=SEED,
        ),
        metric="mse",
        direction="lower",
        epochs=120,
        schedule="adam 0.003",
    ),
    Curve(
        name="diabetes_sgd",
        dataset=load_diabetes,
        make=lambda: SGDRegressor(
            loss="squared_error",
            penalty="l2",
            alpha=1e-4,
            learning_rate="constant",
            eta0=1e-4,
            random_state=np.random.RandomState(SEED),
        ),
        metric="mse",
        direction="lower",
        epochs=100,
        schedule="constant 0.0001",
    ),
    Curve(
        name="digits_mlp_adam",
        dataset=load_digits,
        make=lambda: MLPClassifier(
            hidden_layer_sizes=(64,),
            solver="adam",
            learning_rate_init=3e-4,
            batch_size=64,
            alpha=1e-4,
            random_state=SEED,
        ),
        metric="log_loss",
        direction="lower",
        epochs=100,
        schedule="adam 0.0003",
    ),
]


def _split(curve: Curve) -> Split:
    X, y = curve.dataset(return_X_y=True)
    X_tr, X_va, y_tr, y_va = train_test_split(
        X, y, test_size=VALIDATION_SHARE, random_state=SEED, stratify=y if curve.classifier else None
    )
    scaler = StandardScaler().fit(X_tr)
    return scaler.transform(X_tr), scaler.transform(X_va), y_tr, y_va


def _fit_epoch(model: Any, X: np.ndarray, y: np.ndarray, classes: np.ndarray | None) -> None:
    if classes is None:
        model.partial_fit(X, y)
    else:
        model.partial_fit(X, y, classes=classes)


def _lr_change_takes_effect(make: Callable[[], Any], attr: str, X: np.ndarray, y: np.ndarray) -> bool:
    """Whether setting ``attr`` (divided by 10) between ``partial_fit`` calls changes the next epoch's weights."""
    classes = np.unique(y)
    model = make()
    _fit_epoch(model, X, y, classes)
    same, lowered = copy.deepcopy(model), copy.deepcopy(model)
    setattr(lowered, attr, getattr(lowered, attr) / 10.0)
    _fit_epoch(same, X, y, classes)
    _fit_epoch(lowered, X, y, classes)
    if hasattr(same, "coefs_"):  # a network: one weight matrix per layer
        return not all(np.array_equal(p, q) for p, q in zip(same.coefs_, lowered.coefs_, strict=True))
    return not np.array_equal(same.coef_, lowered.coef_)


def _check_schedules() -> None:
    """Refuse to write a step-LR curve whose LR change would be silently ignored."""
    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    mlp = lambda: MLPClassifier(hidden_layer_sizes=(8,), solver="sgd", learning_rate_init=0.01, random_state=SEED)  # noqa: E731
    if _lr_change_takes_effect(mlp, "learning_rate_init", X, y):
        print("note: MLPClassifier now honours learning_rate_init between partial_fit calls", file=sys.stderr)
    for curve in CURVES:
        if curve.lr_steps and not _lr_change_takes_effect(curve.make, curve.lr_attr, X, y):
            raise SystemExit(f"{curve.name}: changing {curve.lr_attr} between partial_fit calls has no effect")


def _score(curve: Curve, model: Any, X: np.ndarray, y: np.ndarray, classes: np.ndarray | None) -> float:
    if curve.metric == "accuracy":
        return float(accuracy_score(y, model.predict(X)))
    if curve.metric == "log_loss":
        return float(log_loss(y, model.predict_proba(X), labels=classes))
    return float(mean_squared_error(y, model.predict(X)))


def _train_loss(curve: Curve, model: Any, X: np.ndarray, y: np.ndarray, classes: np.ndarray | None) -> float:
    if curve.classifier:
        return float(log_loss(y, model.predict_proba(X), labels=classes))
    return float(mean_squared_error(y, model.predict(X)))


def train(curve: Curve) -> list[dict[str, str]]:
    """Train ``curve`` for its epochs; one row per epoch with the values formatted for the CSV."""
    X_tr, X_va, y_tr, y_va = _split(curve)
    classes = np.unique(y_tr) if curve.classifier else None
    model = curve.make()
    rows: list[dict[str, str]] = []
    spent = 0.0
    for epoch in range(1, curve.epochs + 1):
        if epoch in curve.lr_steps:
            setattr(model, curve.lr_attr, curve.lr_steps[epoch])
        start = time.perf_counter()
        _fit_epoch(model, X_tr, y_tr, classes)
        spent += time.perf_counter() - start
        metric = _score(curve, model, X_va, y_va, classes)
        loss = _train_loss(curve, model, X_tr, y_tr, classes)
        if not (np.isfinite(metric) and np.isfinite(loss)):
            raise SystemExit(f"{curve.name}: non-finite value at epoch {epoch}")
        rows.append({"epoch": str(epoch), "metric": f"{metric:.6g}", "loss": f"{loss:.6g}", "time": f"{spent:.2f}"})
    return rows


def index_entry(curve: Curve) -> dict[str, Any]:
    return {
        "metric": f"validation {curve.metric}",
        "direction": curve.direction,
        "schedule": curve.schedule,
        "lr_drops": sorted(curve.lr_steps),
    }


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for curve in CURVES:
        rows = train(curve)
        with (out / f"{curve.name}.csv").open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=["epoch", "metric", "loss", "time"], lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        last = rows[-1]
        print(f"{curve.name:20s} {curve.epochs:4d} epochs  final {curve.metric} {last['metric']:>9s}  {last['time']} s")
    index = {curve.name: index_entry(curve) for curve in CURVES}
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")


def _columns(path: Path) -> list[tuple[str, str, str]]:
    with path.open() as fh:
        return [(r["epoch"], r["metric"], r["loss"]) for r in csv.DictReader(fh)]


def check(out: Path) -> int:
    """Train into a temporary folder; compare everything but ``time`` with ``out``."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        write(fresh)
        bad = []
        for curve in CURVES:
            if not (out / f"{curve.name}.csv").exists() or _columns(fresh / f"{curve.name}.csv") != _columns(
                out / f"{curve.name}.csv"
            ):
                bad.append(f"{curve.name}.csv")
        if not (out / "index.json").exists() or json.loads((out / "index.json").read_text()) != json.loads(
            (fresh / "index.json").read_text()
        ):
            bad.append("index.json")
    for name in bad:
        print(f"differs: {out / name}", file=sys.stderr)
    print("reproduced" if not bad else f"{len(bad)} file(s) differ")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder for the CSVs and index.json (default {OUT})")
    parser.add_argument("--check", action="store_true", help="compare a fresh run with --out instead of writing")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", ConvergenceWarning)
    _check_schedules()
    if args.check:
        return check(args.out)
    write(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
