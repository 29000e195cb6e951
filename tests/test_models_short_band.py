"""The band of a history too short to cross-validate (3-5 points, no prior).

Cases:
- a 5-point fit's band widens with the horizon (it was the residual spread at every epoch: a
  3-parameter family through 4-5 points has next to none), and never beyond the observed range;
- 3 points (no prefix to forecast from): the band widens as far as the families part after them
  (it was the residual spread, which three points all but interpolate), never beyond the observed
  range; restricted to one family there is no parting and the band stays the residual's; on the
  held-out schedule runs fitted on their first 3 points it holds most of the future points
  (measured when written: 89.8 % on average; 8.1 % before);
- the predictions are those of before: only the band changes;
- the schedule-aware curve (a declared schedule) the same way: fitted on the first 3, 4 and 5
  points of the held-out schedule runs its band holds most of the future points (measured when
  written: 94.7 / 69.2 / 87.9 % on average; 59.0 / 57.3 / 55.4 % when it was the residual's), never
  beyond the observed range;
- on the held-out schedule runs whose 10 % is 4 points (``benchmarks/data/schedules``, task
  ``digits_conv``, no hint), the 80 % interval holds most of the true target epochs (measured when
  written: 60 of 63; 22 of 63 before) and the band most of the future points (95 %; 37 % before).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import benchmark_module

from models import CurveFit, fit_learning_curve


def _points(n: int) -> tuple[np.ndarray, np.ndarray]:
    k = np.arange(1, n + 1, dtype=float)
    return k, 0.3 + 1.0 / (0.4 * k + 0.6) + np.random.default_rng(3).normal(0.0, 0.01, n)


def test_a_five_point_band_widens_with_the_horizon_up_to_the_observed_range() -> None:
    k, v = _points(5)
    fit = fit_learning_curve(k, v, "lower")
    assert isinstance(fit, CurveFit) and fit.family != "ensemble"
    near, far = fit.band(np.array([6.0, 500.0]))
    assert fit.drift_std > 0.0
    assert far > near > fit.residual_std
    assert far <= max(float(np.ptp(v)), fit.residual_std) + 1e-12


def test_three_points_widen_as_far_as_the_families_part() -> None:
    k, v = _points(3)
    fit = fit_learning_curve(k, v, "lower")
    assert isinstance(fit, CurveFit)
    near, far = fit.band(np.array([4.0, 500.0]))
    assert fit.drift_std > 0.0
    assert far > near > fit.residual_std
    assert far <= max(float(np.ptp(v)), fit.residual_std) + 1e-12
    # The median is the family's own, as before: only the band changes.
    alone = fit_learning_curve(k, v, "lower", families=(fit.family,))
    assert isinstance(alone, CurveFit)
    assert np.array_equal(alone.predict(np.array([4.0, 40.0])), fit.predict(np.array([4.0, 40.0])))
    # One family: nothing to part from, the residual band.
    assert alone.drift_std == 0.0
    assert np.allclose(alone.band(np.array([4.0, 40.0])), alone.residual_std)


def _held_out(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[dict[str, Any]]]:
    """``benchmarks/schedule_curves.py`` and its 63 held-out runs (train loss)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))  # it imports bench_curves
    bench = benchmark_module("schedule_curves.py")
    return bench, [r for r in bench.load(bench.DATA, "train_loss") if r["split"] == "holdout"]


def test_three_point_histories_of_held_out_runs_are_covered(monkeypatch: pytest.MonkeyPatch) -> None:
    _, runs = _held_out(monkeypatch)
    cover = []
    for r in runs:
        k, v = r["epochs_arr"], r["values"]
        fit = fit_learning_curve(k[:3], v[:3], "lower")
        assert isinstance(fit, CurveFit)
        cover.append(float(np.mean(np.abs(v[3:] - fit.predict(k[3:])) <= 1.2816 * fit.band(k[3:]))))
    assert len(cover) == 63
    assert np.mean(cover) >= 0.7, np.mean(cover)


def test_four_point_histories_of_held_out_runs_are_covered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))  # it imports bench_curves
    bench = benchmark_module("schedule_curves.py")
    monkeypatch.setattr(bench, "METHODS", ("flowplan",))
    monkeypatch.setattr(bench, "FRACTIONS", (0.10,))
    runs = [r for r in bench.load(bench.DATA, "train_loss") if r["split"] == "holdout" and r["task"] == "digits_conv"]
    assert runs and all(round(0.1 * r["epochs_arr"].size) == 4 for r in runs)
    rows = bench.bench(runs, bench.DIRECTION["train_loss"])
    inside = [t["inside"] for r in rows for t in r["targets"]]
    bands = [r["band"] for r in rows if r["band"] is not None]
    assert len(inside) >= 40 and len(bands) == len(runs)
    assert np.mean(inside) >= 0.7, np.mean(inside)
    assert 0.7 <= np.mean(bands), np.mean(bands)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_a_short_history_under_a_declared_schedule_is_covered(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    bench, runs = _held_out(monkeypatch)
    cover = []
    for r in runs:
        k, v = r["epochs_arr"], r["values"]
        fit = fit_learning_curve(k[:n], v[:n], "lower", schedule=bench.to_schedule(r["schedule"], float(r["epochs"])))
        assert isinstance(fit, CurveFit)
        if r["schedule"]["kind"] != "constant":  # constant: the schedule-free fit, above
            assert fit.family == "schedule"
            assert fit.band(np.array([1e4]))[0] <= max(float(np.ptp(v[:n])), fit.residual_std) + 1e-12
        cover.append(float(np.mean(np.abs(v[n:] - fit.predict(k[n:])) <= 1.2816 * fit.band(k[n:]))))
    assert len(cover) == 63
    assert np.mean(cover) >= 0.65, np.mean(cover)
