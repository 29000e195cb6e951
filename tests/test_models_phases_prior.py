"""Log-power family, learning-rate drops, the prior from earlier runs, and the convergence interval.

Cases:
- log-power: noisy synthetic curves with known (c, d, m, alpha) give back the plateau and the epoch
  of reaching a target; its closed forms agree with a numerical reading of the curve;
- drops: a synthetic step curve (drops at epochs 30 and 60, noise) is cut at the right epochs; every
  measured ImageNet curve is cut at 31 and 61 (its learning-rate steps at epochs 30 and 60), and the
  trained ``digits_sgd_step`` at 31; no cifar10, deepspeech2 or ncf curve is cut anywhere;
  ``after_drop=True`` fits the newest phase only (origin = last epoch before the drop);
- prior: a job running known reference curves 1.3x slower gets warp 1.3 and their plateau back;
  the benchmark's priors are leave-one-out (never the predicted curve; the leave-one-model-out
  one has no curve of the same model); with the other batch sizes as a prior, ImageNet observed for 22
  epochs predicts the epoch of 0.65 accuracy (after the unseen drop at epoch 30) within 10 %, which no
  prior-free fit can; one or two points with a same-task prior give a prediction, and up to three
  it is every reference's, unstretched (yolov3's epoch-8 loss read at its epoch 8, not 6.3-7.0); a
  shapes-only prior needs three;
- convergence interval: ordered and around the point estimate when cross-validated, unknown
  (``None``) otherwise;
- ugly input with a prior (NaN, constant, 1-2 points, rising loss, empty) never raises and never gives NaN.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA, real_curve

from models import CannotPredict, CurveFit, CurvePrior, detect_drops, fit_learning_curve
from models.curve_families import FAMILIES

REPO = Path(__file__).resolve().parents[1]
TRAINED = REPO / "tests" / "data" / "curves"
BATCHES = {
    "imagenet": (200, 400, 800, 1600, 3200, 6400, 12800),
    "cifar10": (128, 256, 512, 1024, 2048, 4096),
    "deepspeech2": (20, 40, 80, 160, 320, 640),
    "ncf": (256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
}


def _noisy(values: np.ndarray, sd: float, seed: int) -> np.ndarray:
    return values + np.random.default_rng(seed).normal(0, sd, values.size)


@pytest.mark.parametrize("seed", range(4))
def test_log_power_recovered(seed: int) -> None:
    k = np.arange(1, 61, dtype=float)
    c, d, m, alpha = 0.3, 2.0, 8.0, 1.5
    loss = c + d / (1 + (k / m) ** alpha)
    fit = fit_learning_curve(k, _noisy(loss, 0.005, seed), "lower", families=("log_power",))
    assert isinstance(fit, CurveFit) and fit.family == "log_power"
    assert fit.plateau == pytest.approx(c, abs=0.06)
    true_epoch = m * (d / (0.5 - c) - 1) ** (1 / alpha)  # loss 0.5
    got = fit.epoch_reaching(0.5)
    assert got is not None and got == pytest.approx(true_epoch, rel=0.1)


def test_log_power_closed_forms() -> None:
    p = {"c": 0.1, "d": 1.0, "m": 5.0, "alpha": 2.0}
    fam = FAMILIES["log_power"]
    k = float(fam.epoch_at(p, 0.3))
    assert float(fam.z(p, np.array([k]))[0]) == pytest.approx(0.3, abs=1e-9)
    flat = fam.flat_from(p, 1e-3)
    grid = np.linspace(flat, flat + 200, 2001)
    rate = -np.diff(fam.z(p, grid)) / np.diff(grid)
    assert rate.max() < 1e-3 * 1.01  # flat from there on
    before = fam.z(p, np.array([flat - 1.0, flat]))
    assert before[0] - before[1] > 0.9e-3  # and not long before


def _step_curve(seed: int) -> np.ndarray:
    k = np.arange(1, 91, dtype=float)
    acc = 0.55 - 0.4 * np.exp(-k / 6)
    acc = acc + np.where(k > 30, 0.15, 0.0) + np.where(k > 60, 0.08, 0.0)
    return _noisy(acc, 0.01, seed)


@pytest.mark.parametrize("seed", range(4))
def test_drops_found_on_a_synthetic_step_curve(seed: int) -> None:
    acc = _step_curve(seed)
    assert [i + 1 for i in detect_drops(-acc)] == [31, 61]
    # Online: with 45 epochs seen only the first drop exists.
    assert [i + 1 for i in detect_drops(-acc[:45])] == [31]


@pytest.mark.parametrize("bsz", BATCHES["imagenet"])
def test_drops_found_on_real_imagenet(bsz: int) -> None:
    acc = real_curve("imagenet", bsz)
    assert [i + 1 for i in detect_drops(-acc)] == [31, 61]


def test_drop_found_on_trained_step_curve() -> None:
    rows = (TRAINED / "digits_sgd_step.csv").read_text().splitlines()[1:]
    acc = np.array([float(r.split(",")[1]) for r in rows])
    first = json.loads((TRAINED / "index.json").read_text())["digits_sgd_step"]["lr_drops"][0]
    assert [i + 1 for i in detect_drops(-acc)][:1] == [first]


@pytest.mark.parametrize(("model", "direction"), [("cifar10", "higher"), ("deepspeech2", "lower"), ("ncf", "higher")])
def test_no_false_drops(model: str, direction: str) -> None:
    for bsz in BATCHES[model]:
        v = real_curve(model, bsz)
        assert detect_drops(v if direction == "lower" else -v) == [], (model, bsz)


def test_after_drop_fits_the_newest_phase() -> None:
    acc = _step_curve(0)[:50]
    fit = fit_learning_curve(np.arange(1, 51), acc, "higher", after_drop=True)
    assert isinstance(fit, CurveFit)
    assert fit.drops == (31.0,) and fit.origin == 30.0 and fit.first_epoch == 31.0 and fit.n_points == 20
    assert fit.predict([50.0])[0] == pytest.approx(0.70, abs=0.03)  # the new level, not the old one
    assert abs(fit.plateau - 0.70) < abs(fit.plateau - 0.55)
    assert np.isfinite(fit.predict(np.arange(0, 500))).all()
    plain = fit_learning_curve(np.arange(1, 51), acc, "higher")
    assert isinstance(plain, CurveFit) and plain.drops == () and plain.origin == 0.0


def _bench_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_curves", REPO / "benchmarks" / "bench_curves.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_curves"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_priors_are_leave_one_out() -> None:
    bench = _bench_module()
    curves = bench.load_curves(DATA)
    for curve in curves:
        priors = bench.priors_for(curve, curves)
        own = tuple(float(x) for x in curve["values"])
        same = priors["flowplan+prior"]
        lomo = priors["flowplan+lomo"]
        assert all(ref.values != own for ref in lomo.references)
        n_same = sum(c["model"] == curve["model"] for c in curves) - 1
        assert len(lomo.references) == len(curves) - n_same - 1  # no curve of the same model
        if same is not None:
            assert len(same.references) == n_same and all(ref.values != own for ref in same.references)


def _imagenet_prior(excluding: int) -> CurvePrior:
    others = [b for b in BATCHES["imagenet"] if b != excluding]
    return CurvePrior.of([(np.arange(1, 91), real_curve("imagenet", b)) for b in others])


def test_prior_foresees_the_imagenet_drop() -> None:
    """Every batch size, leave-one-out; 6 of 7 must succeed: on batch 12800 (noisiest prefix) the
    prior loses the cross-validation to the hyperbola, as the benchmark records."""
    good = []
    for bsz in BATCHES["imagenet"]:
        acc = real_curve("imagenet", bsz)
        true_epoch = int(np.flatnonzero(acc >= 0.65)[0]) + 1  # just after the drop at epoch 30
        k = np.arange(1, 23)
        fit = fit_learning_curve(k, acc[:22], "higher", prior=_imagenet_prior(bsz))
        assert isinstance(fit, CurveFit)
        got = fit.epoch_reaching(0.65)
        if fit.family == "prior" and got is not None and abs(got - true_epoch) / true_epoch < 0.10:
            # The final accuracy too (within 5 %).
            assert fit.predict([90.0])[0] == pytest.approx(acc[-1], rel=0.05), bsz
            good.append(bsz)
        # Without the prior nothing in the prefix shows the drop: the model-averaged curve reaches
        # 0.65 only by extrapolating the slow pre-drop trend, far later than the drop brings it.
        without = fit_learning_curve(k, acc[:22], "higher")
        assert isinstance(without, CurveFit)
        late = without.epoch_reaching(0.65)
        assert late is None or late > 1.5 * true_epoch, (bsz, late, true_epoch)
    assert len(good) >= 6, good


@pytest.mark.parametrize("seed", range(3))
def test_prior_recovers_a_known_stretch(seed: int) -> None:
    """A job that runs the references' curve 1.3x slower: the fitted warp and the plateau come back."""
    k = np.arange(1, 101, dtype=float)
    refs = [(k, 0.2 + 0.8 * np.exp(-k / 10.0)), (k, 0.21 + 0.8 * np.exp(-k / 10.5))]
    job = _noisy(0.2 + 0.8 * np.exp(-k / 13.0), 0.003, seed)
    fit = fit_learning_curve(k[:25], job[:25], "lower", prior=CurvePrior.of(refs), families=("hyperbola",))
    assert isinstance(fit, CurveFit) and fit.family == "prior"
    assert fit.params["warp"] == pytest.approx(1.3, abs=0.1)
    assert fit.plateau == pytest.approx(0.2, abs=0.02)
    assert fit.epoch_reaching(0.3) == pytest.approx(13.0 * math.log(8.0), rel=0.1)


@pytest.mark.parametrize("n", (1, 2))
def test_prior_predicts_from_one_or_two_points(n: int) -> None:
    acc = real_curve("ncf", 1024)
    prior = CurvePrior.of([(np.arange(1, 11), real_curve("ncf", b)) for b in BATCHES["ncf"] if b != 1024])
    fit = fit_learning_curve(np.arange(1, n + 1), acc[:n], "higher", prior=prior)
    assert isinstance(fit, CurveFit) and fit.family == "prior"
    assert fit.predict([10.0])[0] == pytest.approx(acc[-1], rel=0.03)
    assert isinstance(fit_learning_curve(np.arange(1, n + 1), acc[:n], "higher"), CannotPredict)
    shapes = CurvePrior(prior.references, same_task=False)
    assert isinstance(fit_learning_curve(np.arange(1, n + 1), acc[:n], "higher", prior=shapes), CannotPredict)


@pytest.mark.parametrize("n", (1, 2, 3))
def test_up_to_three_points_do_not_stretch_the_references(n: int) -> None:
    """A reference fitted with a stretch of its epoch axis, an offset and a scale passes through any
    three points, so three points cannot tell a faster run from a lower one: no reference is
    stretched and all of them count. Measured yolov3 validation loss at batch 128 (the job) and the
    six other batch sizes (the prior). Its first value lies below theirs; read as a stretch (warp
    0.73-0.80, one reference of six kept) the job reached its epoch-8 value at epoch 6.3-7.0, one or
    two epochs early. It is read at 7.5-9 now."""
    loss = real_curve("yolov3", 128)
    prior = CurvePrior.of([(np.arange(1, 51), real_curve("yolov3", b)) for b in (8, 16, 32, 64, 256, 512)], same_task=True)
    fit = fit_learning_curve(np.arange(1, n + 1), loss[:n], "lower", prior=prior)
    assert isinstance(fit, CurveFit) and fit.family == "prior"
    assert fit.params["warp"] == 1.0 and fit.params["references"] == 6.0
    assert 7.5 <= (fit.epoch_reaching(float(loss[7])) or math.inf) <= 9.0


@pytest.mark.parametrize("n", (1, 2))
def test_a_prior_alone_has_a_band_as_wide_as_its_references_disagree(n: int) -> None:
    """From one or two points every reference fits (an offset and a scale each), so the points cannot
    tell them apart: the band at each epoch is how far all of them, fitted to the points, disagree
    there. Measured ncf curves of the other batch sizes
    as the references; at the end the band is their spread, and most of the job's later measured
    points lie inside its 80 % band (a band of zero, as before, left nearly all of them outside)."""
    acc = real_curve("ncf", 1024)
    refs = [(np.arange(1, 11), real_curve("ncf", b)) for b in BATCHES["ncf"] if b != 1024]
    fit = fit_learning_curve(np.arange(1, n + 1), acc[:n], "higher", prior=CurvePrior.of(refs))
    assert isinstance(fit, CurveFit) and fit.family == "prior"
    k = np.arange(n + 1, 11)
    band = fit.band(k)
    assert np.all(band > 0.0)
    ends = np.array([r[-1] for _, r in refs])
    assert 0.3 * ends.std() < band[-1] < 3.0 * ends.std()
    inside = np.abs(fit.predict(k) - acc[n:]) <= 1.2816 * band
    assert inside.mean() >= 0.6, (inside, band)


def test_convergence_interval() -> None:
    acc = real_curve("cifar10", 128)[:50]
    fit = fit_learning_curve(np.arange(1, 51), acc, "higher")
    assert isinstance(fit, CurveFit) and fit.variants
    lo, hi = fit.convergence_interval(1e-3)
    point = fit.convergence_epoch(1e-3)
    assert lo is not None and hi is not None and lo <= point <= hi
    short = fit_learning_curve([1, 2, 3, 4], acc[:4], "higher")
    assert isinstance(short, CurveFit) and short.convergence_interval(1e-3) == (None, None)


UGLY = {
    "empty": ([], []),
    "one": ([1], [0.5]),
    "two": ([1, 2], [0.5, 0.6]),
    "constant": (range(1, 21), [0.5] * 20),
    "nan": (range(1, 21), [math.nan if i % 3 == 0 else 0.3 + 0.01 * i for i in range(20)]),
    "rising_loss": (range(1, 31), list(0.2 + 0.02 * np.arange(30))),
    "all_nan": (range(1, 6), [math.nan] * 5),
}


@pytest.mark.parametrize("case", sorted(UGLY))
@pytest.mark.parametrize("same_task", (True, False))
def test_ugly_input_with_a_prior(case: str, same_task: bool) -> None:
    epochs, values = UGLY[case]
    refs = [(np.arange(1, 51), 0.2 + 0.5 * np.exp(-np.arange(1, 51) / b)) for b in (5, 8, 12)]
    prior = CurvePrior.of(refs, same_task=same_task)
    for direction in ("lower", "higher"):
        fit = fit_learning_curve(list(epochs), list(values), direction, prior=prior, after_drop=True)
        if isinstance(fit, CannotPredict):
            assert fit.reason
            continue
        grid = np.arange(0, 200, dtype=float)
        assert np.isfinite(fit.predict(grid)).all() and np.isfinite(fit.band(grid)).all()
        assert math.isfinite(fit.plateau) and math.isfinite(fit.convergence_epoch(1e-3))
        got = fit.epoch_reaching(0.4)
        assert got is None or math.isfinite(got)


def test_the_band_of_a_prior_alone_is_that_of_one_more_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below FIT_POINTS points the references are a sample of runs the job is one more of: the band is
    their standard deviation widened to a prediction interval for a new draw (sample deviation, the
    mean's own error, Student's t with n - 1 degrees of freedom at the band's 0.9 quantile). Five
    references: sqrt(5/4 * 6/5) * t_4(0.9) / z(0.9) = 1.2247 * 1.5332 / 1.2816 = 1.465 (tables).
    With FIT_POINTS points or more the kept references' spread is the band as it was."""
    import models.curve_prior as cp

    factor = cp.new_draw_factor
    assert factor(5) == pytest.approx(1.2247 * 1.5332 / 1.2816, rel=1e-3)
    assert factor(1) == 1.0
    assert factor(2) > factor(5) > factor(50) > 1.0
    refs = [(np.arange(1, 11), real_curve("ncf", b)) for b in BATCHES["ncf"] if b != 1024]
    acc = real_curve("ncf", 1024)

    def spreads() -> tuple[np.ndarray, np.ndarray]:
        prior = CurvePrior.of(refs)  # fresh: nothing cached between the two readings
        (one,) = cp.fit_prior(np.array([1.0]), -acc[:1], np.ones((1, 1)), prior, -1.0)
        k = cp.FIT_POINTS
        (three,) = cp.fit_prior(np.arange(1.0, k + 1.0), -acc[:k], np.ones((1, k)), prior, -1.0)
        assert one is not None and one.spread is not None and three is not None and three.spread is not None
        return one.spread, three.spread

    widened, kept = spreads()
    monkeypatch.setattr(cp, "new_draw_factor", lambda n: 1.0)
    plain, kept_plain = spreads()
    assert plain[-1] > 0.0
    np.testing.assert_allclose(widened, plain * factor(len(refs)))
    np.testing.assert_array_equal(kept, kept_plain)
