"""Learning-rate schedules: the contract, the rate each kind sets, and curves that know them.

Cases:

- contract (table): every kind of the issue parses; a wrong kind, a misspelt field, an out-of-range
  or NaN number, non-increasing milestones, a cosine or warm-up schedule without
  ``target.max_epochs`` and a warm-up as long as the run are one-line errors naming the field;
- the rate: ``LRSchedule`` gives, for every recorded run of ``benchmarks/data/schedules``, the mean
  rate of each epoch that torch's own scheduler set (all seven kinds; plateau drops replayed from
  the recorded loss with :func:`models.schedule.plateau_drops` land where torch put them); the
  closed-form cumulative rate equals a fine numerical integral;
- the curve: fitted before a declared step milestone, it predicts the drop there (the schedule-free
  fit does not); fitted on a quarter of a cosine run it flattens at the last planned epoch and not
  before; the plateau kind simulates drops ahead; without any hint, the model-averaged curve reaches
  the tuning runs' targets where its single family levels off short of them;
- the planner: a job at its pre-drop plateau with a declared step schedule is not "converged, nothing
  left": its tier-1 target is predicted after the milestone, and without the schedule it is not.
"""

from __future__ import annotations

import csv
import json
import math
from functools import cache
from typing import Any

import numpy as np
import pytest
from conftest import REPO

from models import FAMILIES, CannotPredict, CurveFit, LRSchedule, fit_learning_curve
from models.schedule import plateau_drops
from models.schedule_curve import fit_schedule_curve
from planner import PlannerConfig, SnapshotError, check_plan, load_snapshot, parse_snapshot, plan
from planner.io import parse_schedule
from planner.outlook import build_outlook

RUNS = REPO / "benchmarks" / "data" / "schedules"


@cache
def recorded() -> dict[str, dict[str, Any]]:
    """Every recorded run: its declared schedule, epochs and per-epoch columns."""
    meta = json.loads((RUNS / "runs.json").read_text())["runs"]
    cols: dict[str, dict[str, list[float]]] = {}
    with (RUNS / "runs.csv").open() as fh:
        for row in csv.DictReader(fh):
            c = cols.setdefault(row["run"], {"epoch": [], "train_loss": [], "lr": []})
            for key in c:
                c[key].append(float(row[key]))
    return {name: {**meta[name], **{k: np.array(v) for k, v in cols[name].items()}} for name in meta}


def declared(spec: dict[str, Any], max_epochs: float) -> LRSchedule:
    return parse_schedule(json.dumps(spec), max_epochs)


# -- the contract ------------------------------------------------------------------------------------
VALID = [
    {"kind": "constant"},
    {"kind": "step", "milestones": [30, 60], "gamma": 0.1},
    {"kind": "exp", "gamma": 0.93},
    {"kind": "cosine"},
    {"kind": "warmup_cosine", "warmup": 10},
    {"kind": "warmup_linear", "warmup": 5},
    {"kind": "plateau", "factor": 0.5, "patience": 4, "min_lr": 1e-06},
]
INVALID = {
    "unknown kind": ({"kind": "cosin"}, "jobs[0].schedule: unknown kind 'cosin'; did you mean 'cosine'?"),
    "no kind": ({"gamma": 0.5}, "jobs[0].schedule.kind: missing"),
    "misspelt field": (
        {"kind": "step", "milestones": [30], "gama": 0.1},
        "jobs[0].schedule.gama: unknown field 'gama'; did you mean 'gamma'?",
    ),
    "field of another kind": ({"kind": "exp", "gamma": 0.9, "warmup": 3}, "jobs[0].schedule.warmup: unknown field 'warmup'"),
    "gamma above 1": ({"kind": "exp", "gamma": 1.5}, "jobs[0].schedule.gamma: Input should be less than or equal to 1 (got 1.5)"),
    "step gamma 1 (no drop)": ({"kind": "step", "milestones": [3], "gamma": 1}, "jobs[0].schedule.gamma"),
    "negative milestone": ({"kind": "step", "milestones": [-1]}, "jobs[0].schedule.milestones[0]"),
    "milestones not increasing": ({"kind": "step", "milestones": [60, 30]}, "jobs[0].schedule: milestones must increase"),
    "no milestones": ({"kind": "step", "milestones": []}, "jobs[0].schedule.milestones"),
    "factor 1": ({"kind": "plateau", "factor": 1.0}, "jobs[0].schedule.factor"),
    "patience not whole": ({"kind": "plateau", "patience": 2.5}, "jobs[0].schedule.patience"),
    "warm-up as long as the run": ({"kind": "warmup_linear", "warmup": 60}, "jobs[0].schedule: warmup 60 must be shorter"),
    "a string": ("cosine", "jobs[0].schedule: Input should be a valid dictionary"),
}


def _snapshot(schedule: Any, max_epochs: float | None = 60) -> str:
    target: dict[str, Any] = {"metric": "loss", "direction": "lower", "tier1": {"value": 0.1}}
    if max_epochs is not None:
        target["max_epochs"] = max_epochs
    job = {"id": "j", "status": "pending", "target": target, "schedule": schedule}
    return json.dumps({"time": 0, "nodes": [{"name": "n", "cpu_millis": 1000}], "jobs": [job]})


@pytest.mark.parametrize("spec", VALID, ids=[s["kind"] for s in VALID])
def test_every_kind_of_the_issue_parses(spec: dict[str, Any]) -> None:
    job = parse_snapshot(_snapshot(spec)).jobs[0]
    assert job.schedule is not None and job.schedule.kind == spec["kind"]


@pytest.mark.parametrize("case", sorted(INVALID))
def test_bad_schedule_is_one_line_naming_the_field(case: str) -> None:
    spec, must = INVALID[case]
    with pytest.raises(SnapshotError) as err:
        parse_snapshot(_snapshot(spec))
    assert must in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_nan_in_a_schedule_is_refused() -> None:
    text = _snapshot({"kind": "exp", "gamma": 0.5}).replace("0.5", "NaN")
    with pytest.raises(SnapshotError, match=r"jobs\[0\]\.schedule\.gamma: Input should be a finite number"):
        parse_snapshot(text)


@pytest.mark.parametrize("kind", ["cosine", "warmup_cosine", "warmup_linear"])
def test_annealing_kinds_need_the_planned_epochs(kind: str) -> None:
    spec = {"kind": kind, **({"warmup": 2} if kind != "cosine" else {})}
    with pytest.raises(SnapshotError, match=r"jobs\[0\]\.schedule: .* anneals over the planned epochs: it needs max_epochs"):
        parse_snapshot(_snapshot(spec, max_epochs=None))


# -- the rate ----------------------------------------------------------------------------------------
def _torch_drops(lr: np.ndarray) -> list[float]:
    """First epoch (``t``, from 0) trained at each lower rate, read off the recorded per-epoch rate."""
    return [float(i) for i in range(1, lr.size) if lr[i] < lr[i - 1] * (1 - 1e-6)]


def test_the_rate_of_every_recorded_run_is_the_one_torch_set() -> None:
    runs = recorded()
    assert len({r["schedule"]["kind"] for r in runs.values()}) == 7
    for name, run in runs.items():
        sched = declared(run["schedule"], float(run["epochs"]))
        if sched.kind == "plateau":
            sched = sched.with_drops(_torch_drops(run["lr"]))
        _, rate = sched.cumulative(run["epoch"])
        # Per-batch warm-ups are stepped in whole batches, the contract's rate continuously: half a batch apart.
        np.testing.assert_allclose(rate, run["lr"], atol=5e-3, err_msg=name)


def test_plateau_drops_replay_torchs_rule_on_the_recorded_loss() -> None:
    checked = 0
    for name, run in recorded().items():
        if run["schedule"]["kind"] != "plateau":
            continue
        s = run["schedule"]
        got = plateau_drops(run["train_loss"], run["epoch"], s["patience"], s["factor"], s["min_lr"])
        # A drop decided at the last epoch trains nothing: the recorded rates cannot show it.
        assert [d for d in got if d < run["epoch"][-1]] == _torch_drops(run["lr"]), name
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize(
    "sched",
    [
        LRSchedule("step", milestones=(30, 45), gamma=0.1),
        LRSchedule("step", milestones=(2.5, 7), gamma=0.5),
        LRSchedule("exp", gamma=0.93),
        LRSchedule("cosine", max_epochs=60),
        LRSchedule("warmup_cosine", warmup=10, max_epochs=60),
        LRSchedule("warmup_linear", warmup=5, max_epochs=60),
        LRSchedule("plateau", factor=0.5, min_lr=0.2, drops=(12.0, 20.0, 30.0)),
    ],
    ids=lambda s: s.kind,
)
def test_cumulative_rate_is_the_integral_of_the_rate(sched: LRSchedule) -> None:
    t = np.linspace(0.0, 80.0, 80 * 200 + 1)
    mid = t[:-1] + (t[1] - t[0]) / 2
    numeric = np.concatenate([[0.0], np.cumsum(sched.multiplier(mid)) * (t[1] - t[0])])
    k = np.array([0.0, 0.5, 1.0, 2.7, 10.0, 29.0, 30.0, 31.0, 45.5, 59.0, 60.0, 61.0, 80.0])
    np.testing.assert_allclose(sched.integral(k), np.interp(k, t, numeric), atol=1e-6)
    # Monotone, and an annealed schedule stops adding progress after its last epoch.
    assert np.all(np.diff(sched.integral(k)) >= 0)
    if sched.kind in ("cosine", "warmup_cosine", "warmup_linear"):
        assert sched.integral(np.array([60.0]))[0] == pytest.approx(sched.integral(np.array([1e9]))[0])


# -- curves that know the schedule -------------------------------------------------------------------
def _synthetic(sched: LRSchedule, epochs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A loss that follows the schedule-aware law with noise (the law the fit assumes): the epoch's
    mean over 200 sub-steps (a training loss is the mean over the epoch's batches) of
    ``0.1 + 1.2 * (1 + S)^-0.8``, plus ``0.25`` times the epoch's mean rate."""
    k = np.arange(1.0, epochs + 1)
    t = (k - 1.0)[:, None] + (np.arange(200) + 0.5)[None, :] / 200
    progress = ((1.0 + sched.integral(t)) ** -0.8).mean(1)
    _, r = sched.cumulative(k)
    rng = np.random.default_rng(seed)
    return k, 0.1 + 1.2 * progress + 0.25 * r + rng.normal(0.0, 0.01, k.size)


def test_a_declared_step_milestone_is_predicted_before_it_is_seen() -> None:
    sched = LRSchedule("step", milestones=(30,), gamma=0.1)
    k, y = _synthetic(sched, 60)
    fit = fit_learning_curve(k[:25], y[:25], "lower", schedule=sched)
    plain = fit_learning_curve(k[:25], y[:25], "lower")
    assert isinstance(fit, CurveFit) and isinstance(plain, CurveFit)
    before, after = fit.predict([30.0, 32.0])
    true_drop = y[26:30].mean() - y[32:36].mean()
    assert before - after > 0.5 * true_drop  # the drop is there, and about as large
    assert abs(float(fit.predict([45.0])[0]) - y[43:47].mean()) < 0.3 * true_drop
    p_before, p_after = plain.predict([30.0, 32.0])
    assert p_before - p_after < 0.1 * true_drop  # the schedule-free curve cannot see it


def test_a_recorded_step_drop_is_predicted_from_the_epochs_before_it() -> None:
    run = recorded()["digits_mlp/step/s0"]  # tuning split; milestones 30 and 45 of 60
    sched = declared(run["schedule"], 60)
    k, y = run["epoch"], run["train_loss"]
    fit = fit_learning_curve(k[:25], y[:25], "lower", schedule=sched)
    plain = fit_learning_curve(k[:25], y[:25], "lower")
    assert isinstance(fit, CurveFit) and isinstance(plain, CurveFit)
    measured = y[25:30].mean() - y[32:37].mean()
    drop = float(fit.predict([30.0])[0] - fit.predict([33.0])[0])
    assert drop > 0.3 * measured
    assert float(plain.predict([30.0])[0] - plain.predict([33.0])[0]) < 0.1 * measured


def test_cosine_to_zero_flattens_at_the_last_planned_epoch() -> None:
    sched = LRSchedule("cosine", max_epochs=60)
    k, y = _synthetic(sched, 60)
    fit = fit_learning_curve(k[:15], y[:15], "lower", schedule=sched)
    assert isinstance(fit, CurveFit)
    pred = fit.predict(np.arange(15.0, 91.0))
    slope = -np.diff(pred)
    assert np.all(slope >= -1e-9)  # never worse
    assert slope[60 - 15 - 1] < 0.05 * slope[:10].mean()  # flat at the end of the run ...
    assert slope[40 - 15] > 0.2 * slope[:10].mean()  # ... but still improving two thirds in
    # Nothing after it (but the lag of the last epoch's rate): the level at epoch 60 is the plateau.
    gain = float(pred[0] - pred[-1])
    assert abs(float(pred[-1] - fit.predict([60.0])[0])) < 0.01 * gain
    assert abs(fit.plateau - float(fit.predict([60.0])[0])) < 0.01 * gain
    assert fit.convergence_epoch(1e-3) <= 61.0


def test_the_plateau_kind_simulates_drops_ahead() -> None:
    truth = LRSchedule("step", milestones=(20, 30), gamma=0.5)
    k, y = _synthetic(truth, 60)
    fit = fit_learning_curve(k[:15], y[:15], "lower", schedule=LRSchedule("plateau", factor=0.5, patience=4, min_lr=0.01))
    assert isinstance(fit, CurveFit)
    ahead = [d for d in fit.drops if d > 15]
    assert ahead and fit.params["drops_ahead"] == len(ahead)
    assert float(fit.predict([60.0])[0]) < float(fit.predict([15.0])[0])


def test_constant_schedule_is_the_schedule_free_fit() -> None:
    k, y = _synthetic(LRSchedule("constant"), 40)
    a = fit_learning_curve(k[:20], y[:20], "lower", schedule=LRSchedule("constant"))
    b = fit_learning_curve(k[:20], y[:20], "lower")
    assert isinstance(a, CurveFit) and isinstance(b, CurveFit)
    assert a.family == b.family and a.params == b.params


def _epochs_to_target_errors(fitter: Any, share: float, kinds: tuple[str, ...] | None = None) -> list[float]:
    """Errors of ``fitter(k, v, run)`` on the tuning runs (of ``kinds``, default all), measured as
    ``benchmarks/schedule_curves.py`` does (targets 80/90/95 % of the way to the final value, not
    reached yet; none = 100 %)."""
    errs = []
    for run in recorded().values():
        if run["split"] != "tune" or (kinds is not None and run["schedule"]["kind"] not in kinds):
            continue
        v = run["train_loss"]
        n = max(1, round(share * v.size))
        fit = fitter(run["epoch"][:n], v[:n], run)
        for p in (0.8, 0.9, 0.95):
            tv = v[0] + p * (v[-1] - v[0])
            true = int(np.flatnonzero(v <= tv)[0]) + 1
            if true <= n:
                continue
            at = fit.epoch_reaching(tv) if isinstance(fit, CurveFit) else None
            errs.append(1.0 if at is None or at > v.size else min(abs(at - true) / true, 1.0))
    return errs


def test_without_a_hint_the_averaged_curve_beats_its_single_family_on_the_tuning_runs() -> None:
    """No schedule, no prior, a quarter of each ``digits_mlp`` run (the runs its constants were
    chosen on, so this guards the mechanism, not a held-out claim): the single family levels off
    above most targets; the model-averaged curve reaches them (median error under a quarter, the
    single family's 100 %)."""
    single = _epochs_to_target_errors(lambda k, v, _: fit_learning_curve(k, v, "lower", families=tuple(FAMILIES)), 0.25)
    averaged = _epochs_to_target_errors(lambda k, v, _: fit_learning_curve(k, v, "lower"), 0.25)
    assert len(single) == len(averaged) > 30
    assert float(np.median(averaged)) < 0.25 < float(np.median(single))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_progress_term_keeps_progressing_on_a_recorded_constant_rate_run(seed: int) -> None:
    """The schedule-aware curve with nothing to anneal (a constant rate: ``e`` cannot be told from
    ``c``), fitted on a quarter of a recorded tuning run: the progress term alone must fit the points
    and keep falling as the loss does. A first epoch that falls fast used to drag the power law's
    exponent to 2-3 (or the fit to the exponential at its fastest rate): the curve then stayed flat
    from the last observed epoch on (5 % of the measured fall to the run's end) and the annealing
    term's targets came late."""
    run = recorded()[f"digits_mlp/constant/s{seed}"]
    k, y = run["epoch"], run["train_loss"]
    fit = fit_schedule_curve(k[:15], y[:15], "lower", LRSchedule("constant"))
    assert isinstance(fit, CurveFit)
    assert fit.residual_std < 0.05 * float(np.ptp(y[:15]))  # it fits the points it saw
    predicted_fall = float(fit.predict([15.0])[0] - fit.predict([60.0])[0])
    measured_fall = float(y[12:17].mean() - y[-5:].mean())
    assert 0.3 * measured_fall < predicted_fall < 1.5 * measured_fall


def test_declared_cosine_and_exp_schedules_reach_the_tuning_runs_targets_on_time() -> None:
    """A quarter of each ``digits_mlp`` cosine and exp run with the schedule declared (the runs the
    constants were chosen on: this guards the mechanism; held-out figures are in docs/models.md):
    median epochs-to-target error under 15 % (it was 27 % and 34 %: the progress term flattened
    early and the targets were predicted late)."""

    def with_schedule(k: np.ndarray, v: np.ndarray, run: dict[str, Any]) -> CurveFit | CannotPredict:
        return fit_learning_curve(k, v, "lower", schedule=declared(run["schedule"], float(run["epochs"])))

    errs = _epochs_to_target_errors(with_schedule, 0.25, kinds=("cosine", "exp"))
    assert len(errs) >= 12
    assert float(np.median(errs)) < 0.15


# -- the planner -------------------------------------------------------------------------------------
def test_a_job_at_its_pre_drop_plateau_is_not_converged() -> None:
    """A recorded step run (tuning split) seen up to epoch 28 of 60, two epochs before its first drop,
    with a tier-1 loss it reaches only after the drop."""
    run = recorded()["digits_mlp/step/s0"]
    k, y = run["epoch"], run["train_loss"]
    seen = 28
    tier1 = float(y[40])  # reached after the first drop, not before
    assert tier1 < y[:seen].min()
    truth = int(np.argmax(y <= tier1)) + 1
    job: dict[str, Any] = {
        "id": "stepped",
        "status": "running",
        "node": "n",
        "allocation": {"cpu_millis": 1000},
        "history": [{"time": 60.0 * e, "epoch": float(e), "loss": float(v)} for e, v in zip(k[:seen], y[:seen], strict=True)],
        "speed": [{"cpu_millis": 1000, "seconds_per_epoch": 60.0}],
        "target": {"metric": "loss", "direction": "lower", "tier1": {"value": tier1}, "max_epochs": 60},
    }
    outlooks = {}
    for name, schedule in (("declared", run["schedule"]), ("none", None)):
        j = {**job, "schedule": schedule} if schedule else job
        snap = parse_snapshot(json.dumps({"time": 60.0 * seen, "nodes": [{"name": "n", "cpu_millis": 1000}], "jobs": [j]}))
        outlooks[name] = build_outlook(snap.jobs[0], snap.settings, PlannerConfig())
    with_s, without = outlooks["declared"], outlooks["none"]
    assert "step learning-rate schedule" in with_s.curve_note
    # Reached after the declared drop at 30, in the phase before the next one at 45 (measured: 41;
    # how far into the slow phase after a drop a level is crossed is the imprecise part).
    assert with_s.remaining_tier1 is not None
    assert 30 <= seen + with_s.remaining_tier1 <= 45, (seen + with_s.remaining_tier1, truth)
    assert 30 <= truth <= 45
    assert with_s.remaining_finish >= 30 - seen
    # The schedule-free fit reads the plateau as the end: the target out of reach, little left.
    assert without.remaining_tier1 is None or seen + without.remaining_tier1 > 1.5 * truth
    assert math.isfinite(with_s.remaining_finish)


def test_the_example_snapshot_plans_the_declared_job_past_its_plateau() -> None:
    """``examples/schedules/step-before-drop.json``: the same recorded prefix twice, with and without
    the declared schedule; only the declared one is predicted to reach its tier 1 (in time)."""
    snap = load_snapshot(REPO / "examples" / "schedules" / "step-before-drop.json")
    result = plan(snap, PlannerConfig(solver="greedy"))
    assert check_plan(snap, result.plan) == []
    by_id = {a.job: a for a in result.plan.assignments}
    declared_job, undeclared = by_id["digits-step-declared"], by_id["digits-step-undeclared"]
    assert declared_job.predictions.epochs_to_tier1 is not None and declared_job.predictions.tier1_satisfied
    assert undeclared.predictions.epochs_to_tier1 is None and undeclared.predictions.tier1_satisfied is False
