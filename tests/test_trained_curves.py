"""The learning-curve model on curves we trained ourselves (``tests/data/curves/``, from ``examples/train_curves.py``).

Six small real models trained on scikit-learn's bundled datasets, one validation measurement per
epoch (see ``tests/data/curves/README.md``): ``digits_mlp_sgd``, ``digits_sgd_step`` (step learning
rate, drops at epochs 31 and 61), ``breast_cancer_sgd``, ``diabetes_mlp_adam`` (S-shaped MSE),
``diabetes_sgd`` and ``digits_mlp_adam`` (validation log loss).

Cases, table-driven over ``index.json``:

- the fixture folder is consistent: every curve in the index has its CSV with epochs 1..N, finite
  metric and loss, a valid direction, and stays small;
- for each curve and an observed share of 25 % and 50 % of its epochs, ``fit_learning_curve`` on the
  observed part never raises and returns a :class:`CurveFit` with a finite plateau (a
  :class:`CannotPredict` must carry a reason, and fails the case while the table expects a fit);
  predictions are finite up to ten times the curve length; the relative error of the predicted
  final value (at the last epoch of the full curve) stays below a per-curve bound set at about
  1.5x what the model measured when the bounds were written (at least 2 %);
- ``epoch_interval`` for a target 90 % of the way from the first to the final value gives finite
  epochs with ``low <= high`` whenever both ends are known;
- the step-schedule curve really shows each learning-rate drop: the metric improves at the first
  epoch trained at the lower rate by more than the mean absolute epoch-to-epoch change over the 5
  epochs before it.

Run ``python tests/test_trained_curves.py`` to print the currently measured errors (to revise the bounds).
"""

from __future__ import annotations

import csv
import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from models import CannotPredict, CurveFit, fit_learning_curve

CURVES_DIR = Path(__file__).resolve().parent / "data" / "curves"
INDEX: dict[str, dict] = json.loads((CURVES_DIR / "index.json").read_text())
FRACTIONS = (0.25, 0.5)

#: Upper bound on |predicted final - observed final| / |observed final|, per (curve, observed share).
#: Measured with models/curves.py at commit dfdb709 (power-law family, family chosen by time-series CV);
#: bound = max(2 %, 1.5 x measured, rounded up to 0.01). Measured errors:
#:   digits_mlp_sgd     25 %: 0.0211  50 %: 0.0051
#:   digits_sgd_step    25 %: 0.0564  50 %: 0.0295   (step LR: the fit cannot know about the drops)
#:   breast_cancer_sgd  25 %: 0.0006  50 %: 0.0130
#:   diabetes_mlp_adam  25 %: 0.5677  50 %: 0.5767   (S-shaped: plateau predicted at ~1300 vs ~3300 observed)
#: Re-measured after the log-power family was added: diabetes_mlp_adam 25 % is now 1.0992 (the
#: log-power sigmoid wins the cross-validation and levels off at ~6900 against ~3300 observed;
#: bound raised to 1.65), 50 % 0.3343; the other cases unchanged or better.
#:   diabetes_sgd       25 %: 0.1332  50 %: 0.0163
#:   digits_mlp_adam    25 %: 1.4353  50 %: 0.2171   (loss heading towards 0: relative errors are large)
#: Re-measured with the model-averaged curve (models/curve_ensemble.py, issue 13): digits_mlp_sgd
#: 0.0333 / 0.0060, digits_sgd_step 0.0294 / 0.0286, breast_cancer_sgd 0.0012 / 0.0248 (was 0.0130:
#: bound raised to 0.04), diabetes_mlp_adam 0.7968 / 0.4402, diabetes_sgd 0.3842 / 0.0881 (was
#: 0.1332 / 0.0163: the naive lines keep weight on a loss that is levelling off; bounds raised to
#: 0.58 / 0.14), digits_mlp_adam 1.4109 / 0.2452.
BOUNDS: dict[tuple[str, float], float | None] = {
    ("digits_mlp_sgd", 0.25): 0.04,
    ("digits_mlp_sgd", 0.5): 0.02,
    ("digits_sgd_step", 0.25): 0.09,
    ("digits_sgd_step", 0.5): 0.05,
    ("breast_cancer_sgd", 0.25): 0.02,
    ("breast_cancer_sgd", 0.5): 0.04,
    ("diabetes_mlp_adam", 0.25): 1.65,
    ("diabetes_mlp_adam", 0.5): 0.87,
    ("diabetes_sgd", 0.25): 0.58,
    ("diabetes_sgd", 0.5): 0.14,
    ("digits_mlp_adam", 0.25): 2.16,
    ("digits_mlp_adam", 0.5): 0.33,
}

CASES = [(name, share) for name in INDEX for share in FRACTIONS]
DROPS = [(name, drop) for name, info in INDEX.items() for drop in info["lr_drops"]]


@functools.cache
def load(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(epochs, validation metric, training loss) of one trained curve; ``time`` is machine-dependent and unused."""
    with (CURVES_DIR / f"{name}.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    return tuple(np.array([float(r[col]) for r in rows]) for col in ("epoch", "metric", "loss"))  # type: ignore[return-value]


def observed(name: str, share: float) -> int:
    return max(3, int(len(load(name)[0]) * share))


def fit_part(name: str, share: float) -> CurveFit | CannotPredict:
    epochs, metric, _ = load(name)
    n = observed(name, share)
    return fit_learning_curve(epochs[:n], metric[:n], INDEX[name]["direction"])


def final_error(fit: CurveFit, name: str) -> float:
    epochs, metric, _ = load(name)
    predicted = float(fit.predict([epochs[-1]])[0])
    return abs(predicted - metric[-1]) / abs(metric[-1])


def test_bounds_cover_every_case() -> None:
    assert set(BOUNDS) == set(CASES)


@pytest.mark.parametrize("name", list(INDEX))
def test_fixture_is_consistent(name: str) -> None:
    info = INDEX[name]
    assert info["direction"] in ("higher", "lower")
    assert (CURVES_DIR / f"{name}.csv").stat().st_size < 10_000
    with (CURVES_DIR / f"{name}.csv").open() as fh:
        assert fh.readline().strip() == "epoch,metric,loss,time"
    epochs, metric, loss = load(name)
    assert np.array_equal(epochs, np.arange(1, len(epochs) + 1))
    assert 60 <= len(epochs) <= 120
    assert np.isfinite(metric).all() and np.isfinite(loss).all()
    assert all(1 < d < len(epochs) for d in info["lr_drops"])
    assert name in (CURVES_DIR / "README.md").read_text()


@pytest.mark.parametrize(("name", "share"), CASES)
def test_fit_on_part_predicts_final_value(name: str, share: float) -> None:
    epochs, metric, _ = load(name)
    fit = fit_part(name, share)
    bound = BOUNDS[(name, share)]
    if isinstance(fit, CannotPredict):
        assert isinstance(fit.reason, str) and fit.reason
        assert bound is None, f"{name} at {share:.0%}: cannot predict ({fit.reason}) but a fit is expected"
        return
    assert isinstance(fit, CurveFit)
    assert math.isfinite(fit.plateau), fit
    assert fit.family
    horizon = np.arange(1, 10 * len(epochs) + 1, dtype=float)
    assert np.isfinite(fit.predict(horizon)).all()
    assert bound is not None
    err = final_error(fit, name)
    assert err < bound, f"{name} at {share:.0%}: final-value relative error {err:.4f} >= {bound} ({fit.family})"


@pytest.mark.parametrize(("name", "share"), CASES)
def test_epoch_interval_is_ordered(name: str, share: float) -> None:
    _, metric, _ = load(name)
    fit = fit_part(name, share)
    if isinstance(fit, CannotPredict):
        pytest.skip(f"cannot predict: {fit.reason}")  # the case above decides whether that is allowed
    target = float(metric[0] + 0.9 * (metric[-1] - metric[0]))
    low, high = fit.epoch_interval(target)
    for end in (low, high):
        assert end is None or math.isfinite(end)
    if low is not None and high is not None:
        assert low <= high, (low, high)


@pytest.mark.parametrize(("name", "drop"), DROPS)
def test_lr_drop_is_visible(name: str, drop: int) -> None:
    """``drop`` is the first epoch (1-based) trained at the lower rate; array index ``i`` holds epoch ``i + 1``."""
    _, metric, _ = load(name)
    sign = 1.0 if INDEX[name]["direction"] == "higher" else -1.0
    jump = sign * (metric[drop - 1] - metric[drop - 2])
    before = np.abs(np.diff(metric[drop - 7 : drop - 1])).mean()  # the 5 changes between epochs drop-6 .. drop-1
    assert jump > before, f"{name}: change {jump:.4f} at epoch {drop} vs mean |change| {before:.4f} before"


def test_step_curve_is_in_the_index() -> None:
    assert DROPS, "no curve with a learning-rate drop in index.json"


if __name__ == "__main__":
    for name, share in CASES:
        got = fit_part(name, share)
        if isinstance(got, CannotPredict):
            print(f"{name:20s} {share:4.0%}  cannot predict: {got.reason}")
        else:
            print(f"{name:20s} {share:4.0%}  {got.family:12s} error {final_error(got, name):.4f}  bound {BOUNDS[(name, share)]}")
