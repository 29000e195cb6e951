"""The oracle policy (FlowPlan fed the ground truth) and the rule that only the oracle reads it.

Case matrix:

- registry: ``oracle`` is registered; it alone has ``reads_ground_truth``; no other policy has an
  ``observe_truth`` method to receive one;
- refusal: without ``observe_truth`` the oracle raises a clear :class:`OracleError`; a truth is
  used once (a stale one is never reused); a truth that lacks an active job is refused, naming it;
- same configuration as FlowPlan (solver, time limit, priors, objective);
- different decisions where FlowPlan's predictions are wrong: two jobs with measured cifar10
  histories wait for one node; the oracle is told that the job FlowPlan starts needs 500 more
  epochs and the other one 1: it starts the other one, and its predictions are the truth's;
- contract: on random snapshots (real curve prefixes) with a made-up truth per job, every plan
  passes the independent checker;
- objective profiles: a policy's ``objective`` reaches the snapshot it plans (the plan's digest is
  the digest of the snapshot with that profile), for FlowPlan and the oracle alike;
- in the simulator (the demo): every other policy's run is identical when any read of the truth
  fails; the oracle finishes with checked plans, differs from FlowPlan, and a wrong truth changes
  its run (it reads it); ``flowplan simulate --policy oracle`` prints its row and FlowPlan's gap to it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import random_snapshot, real_curve

from adapters.sim.cluster import SimCluster
from adapters.sim.run import simulate
from adapters.sim.scenario import load_scenario
from adapters.sim.truth import TraceLibrary
from planner import JobTruth, check_plan, snapshot_digest
from planner.policies import POLICIES, OracleError, OraclePolicy, make_policy, reads_ground_truth
from planner.policies.flowplan import with_objective
from planner.profiles import OBJECTIVE_ALIASES, OBJECTIVE_PROFILES, resolve_objective
from planner.snapshot import Snapshot

NOW = 1_000_000.0


@dataclass(frozen=True)
class AmdahlSpeed:
    """A true speed: ``t1 · (s / min(c, 1) + (1 - s) / c)`` seconds per epoch on ``c`` cores; GPUs divide it."""

    t1: float
    serial: float = 0.1
    source: str = "ground truth"
    n_observations: int = 0

    def seconds_per_epoch(self, cpu_millis: float, gpus: float) -> float:
        return float(self.seconds_per_epoch_many(np.array([cpu_millis]), np.array([gpus]))[0])

    def seconds_per_epoch_many(self, cpu_millis: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        c = np.maximum(np.asarray(cpu_millis, dtype=float) / 1000.0, 1e-3)
        base = self.t1 * (self.serial / np.minimum(c, 1.0) + (1.0 - self.serial) / c)
        return base / np.maximum(np.asarray(gpus, dtype=float), 1.0)


def _history(first: int, last: int, seconds_per_epoch: float = 60.0) -> list[dict[str, Any]]:
    """Measured cifar10 (batch 128) validation accuracy of epochs ``first..last``, the last at ``NOW``."""
    c = real_curve("cifar10", 128)
    return [{"time": NOW - (last - e) * seconds_per_epoch, "epoch": e, "metric": float(c[e - 1])} for e in range(first, last + 1)]


def _two_waiting_jobs() -> Snapshot:
    """One 2-core node; two paused cifar10 jobs that each need the whole node: one nearly at its
    target by its history, one just started."""
    target = {"metric": "accuracy", "direction": "higher", "tier1": {"value": round(float(real_curve("cifar10", 128)[39]), 4)}}
    target["max_epochs"] = 100

    def job(jid: str, last: int) -> dict[str, Any]:
        return {
            "id": jid,
            "status": "pending",
            "min_cpu_millis": 2000,
            "max_cpu_millis": 2000,
            "history": _history(1, last),
            "speed": [{"cpu_millis": 2000, "gpus": 0, "seconds_per_epoch": 60.0}],
            "target": target,
        }

    return Snapshot.model_validate(
        {"time": NOW, "nodes": [{"name": "n0", "cpu_millis": 2000}], "jobs": [job("nearly", 36), job("early", 3)]}
    )


def _truth_for(snap: Snapshot, remaining: float = 10.0) -> dict[str, JobTruth]:
    return {
        j.id: JobTruth(remaining / 2 if j.target is not None else None, None, remaining, AmdahlSpeed(60.0))
        for j in snap.jobs
        if j.status != "finished"
    }


# -- registry: only the oracle reads the ground truth ------------------------------------------------


ORACLES = ("oracle", "oracle-speed", "oracle-epochs")


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_only_the_oracle_reads_ground_truth(name: str) -> None:
    policy = make_policy(name)
    if name in ORACLES:
        assert reads_ground_truth(policy) and callable(policy.observe_truth)  # type: ignore[attr-defined]
        assert policy.name == name
    else:
        assert getattr(policy, "reads_ground_truth", False) is False and not reads_ground_truth(policy)
        assert not hasattr(policy, "observe_truth"), f"{name} could be handed the ground truth"


def test_the_oracle_refuses_to_plan_without_the_truth() -> None:
    snap = _two_waiting_jobs()
    oracle = make_policy("oracle")
    with pytest.raises(OracleError, match="no ground truth.*observe_truth"):
        oracle(snap)
    oracle.observe_truth(_truth_for(snap))  # type: ignore[attr-defined]
    assert check_plan(snap, oracle(snap)) == []
    with pytest.raises(OracleError, match="no ground truth"):  # used once: a stale truth is never reused
        oracle(snap)
    partial = _truth_for(snap)
    del partial["early"]
    oracle.observe_truth(partial)  # type: ignore[attr-defined]
    with pytest.raises(OracleError, match="lacks active job.*early"):
        oracle(snap)


def test_the_oracle_has_flowplans_configuration() -> None:
    kw: dict[str, Any] = {"solver": "greedy", "time_limit": 0.3, "objective": "makespan"}
    flowplan, oracle = make_policy("flowplan", **kw), make_policy("oracle", **kw)
    assert oracle.config == flowplan.config and oracle.objective == flowplan.objective == "deadlines>makespan>mean-jct"  # type: ignore[attr-defined]
    assert make_policy("oracle").config == make_policy("flowplan").config  # type: ignore[attr-defined]


# -- the oracle decides differently where FlowPlan's predictions are wrong --------------------------


@pytest.mark.parametrize("objective", OBJECTIVE_PROFILES)
def test_the_oracle_acts_on_the_truth_where_flowplan_predicts_otherwise(objective: str) -> None:
    snap = _two_waiting_jobs()
    fp = {a.job: a for a in make_policy("flowplan", objective=objective)(snap).assignments}
    started = [j for j, a in fp.items() if a.node is not None]
    assert len(started) == 1, "one node for two jobs that each need all of it"
    other = next(j for j in fp if j not in started)
    # The truth says the opposite of FlowPlan's choice: the job it starts is far from done, the other
    # needs one epoch. Under either profile the short job goes first (same makespan, lower mean JCT).
    speed = AmdahlSpeed(60.0)
    truth = {started[0]: JobTruth(500.0, None, 500.0, speed), other: JobTruth(1.0, None, 1.0, speed)}
    oracle = make_policy("oracle", objective=objective)
    oracle.observe_truth(truth)  # type: ignore[attr-defined]
    plan = oracle(snap)
    assert check_plan(snap, plan) == []
    got = {a.job: a for a in plan.assignments}
    assert (got[other].action, got[other].node) == ("start", "n0")
    assert got[started[0]].node is None
    for job, t in truth.items():
        p = got[job].predictions
        assert p.epochs_to_finish == pytest.approx(t.remaining_finish)
        assert p.epochs_to_tier1 == pytest.approx(t.remaining_tier1)
        assert "ground truth" in p.basis
    assert got[other].predictions.seconds_per_epoch == pytest.approx(speed.seconds_per_epoch(2000, 0))


def test_the_oracles_variants_know_one_half_of_the_truth() -> None:
    """``oracle-speed`` plans with the true speed and FlowPlan's own epochs left; ``oracle-epochs``
    with the true epochs left and FlowPlan's own fitted speed; ``oracle`` with both. Told that the job
    FlowPlan starts needs 500 epochs at 600 s each and the other 1 epoch at 6 s, each variant's
    predictions carry its half of the truth and FlowPlan's other half, and only the half that changes
    FlowPlan's order (the epochs, here) makes the variant start the other job."""
    snap = _two_waiting_jobs()
    fp = make_policy("flowplan")(snap)
    mine = {a.job: a.predictions for a in fp.assignments}
    started = next(a.job for a in fp.assignments if a.node is not None)
    other = next(a.job for a in fp.assignments if a.node is None)
    truth = {started: JobTruth(500.0, None, 500.0, AmdahlSpeed(600.0)), other: JobTruth(1.0, None, 1.0, AmdahlSpeed(6.0))}
    got = {}
    for name in ORACLES:
        policy = make_policy(name)
        policy.observe_truth(truth)  # type: ignore[attr-defined]
        plan = policy(snap)
        assert check_plan(snap, plan) == []
        got[name] = {a.job: a for a in plan.assignments}
    fitted = 60.0  # FlowPlan's speed of either job: both measured at 60 s an epoch on the 2 cores
    checked = 0
    for job, t in truth.items():
        true_spe = t.speed.seconds_per_epoch(2000, 0)
        speed, epochs, both = (got[n][job].predictions for n in ("oracle-speed", "oracle-epochs", "oracle"))
        assert speed.epochs_to_finish == pytest.approx(mine[job].epochs_to_finish)
        assert epochs.epochs_to_finish == pytest.approx(t.remaining_finish) == both.epochs_to_finish
        assert "ground truth" in speed.basis and "ground truth" in epochs.basis
        # An epoch's time is shown where the job runs (the plan's share).
        for p, want in ((speed, true_spe), (both, true_spe), (epochs, fitted)):
            if p.seconds_per_epoch is not None:
                assert p.seconds_per_epoch == pytest.approx(want)
                checked += 1
    assert checked == 3  # one running job under each
    assert got["oracle-epochs"][other].node == "n0" and got["oracle"][other].node == "n0"
    assert got["oracle-epochs"][started].node is None


def test_the_oracles_variant_is_named_and_checked() -> None:
    with pytest.raises(ValueError, match="knows: must be all, speed or epochs, got 'curve'"):
        OraclePolicy(knows="curve")  # type: ignore[arg-type]
    assert make_policy("oracle").name == "oracle"


@pytest.mark.parametrize("seed", [1, 5, 8, 13, 21, 34])
def test_oracle_plans_pass_the_checker_on_random_snapshots(seed: int) -> None:
    snap = random_snapshot(seed, n_nodes=3, n_jobs=8)
    oracle = make_policy("oracle", solver="greedy")
    for remaining in (0.0, 3.0, 40.0):
        oracle.observe_truth(_truth_for(snap, remaining))  # type: ignore[attr-defined]
        plan = oracle(snap)
        assert check_plan(snap, plan) == [], (seed, remaining)
        assert sorted(a.job for a in plan.assignments) == sorted(j.id for j in snap.jobs if j.status != "finished")


# -- objective profiles ----------------------------------------------------------------------------


def test_objective_names_resolve_and_bad_ones_are_named() -> None:
    for profile in OBJECTIVE_PROFILES:
        assert resolve_objective(profile) == profile
    assert {resolve_objective(a) for a in OBJECTIVE_ALIASES} == set(OBJECTIVE_PROFILES)
    with pytest.raises(ValueError, match="unknown objective profile 'makespan>deadlines'.*deadlines>mean-jct>makespan"):
        resolve_objective("makespan>deadlines")


@pytest.mark.parametrize("name", ["flowplan", "oracle"])
@pytest.mark.parametrize("objective", [None, *OBJECTIVE_PROFILES])
def test_the_policys_objective_reaches_the_planned_snapshot(name: str, objective: str | None) -> None:
    snap = _two_waiting_jobs()
    policy = make_policy(name, solver="greedy", objective=objective)
    if name == "oracle":
        policy.observe_truth(_truth_for(snap))  # type: ignore[attr-defined]
    plan = policy(snap)
    planned = snap if objective is None else with_objective(snap, resolve_objective(objective))
    assert plan.snapshot_digest == snapshot_digest(planned)
    assert (plan.snapshot_digest == snapshot_digest(snap)) == (objective in (None, snap.settings.objective))


# -- in the simulator: the oracle alone is handed the truth ----------------------------------------------

DEMO = Path(__file__).resolve().parents[1] / "adapters" / "sim" / "data" / "demo.toml"


def _result(run: Any) -> dict[str, Any]:
    """A run's results without its wall times."""
    return {k: v for k, v in run.to_dict().items() if not k.startswith("plan_seconds")}


@pytest.fixture(scope="module")
def demo_runs() -> dict[str, Any]:
    """Each policy on the demo (seed 0) as the simulator runs it."""
    sc, library = load_scenario(DEMO), TraceLibrary.bundled()
    return {name: simulate(sc, make_policy(name), name, 0, library, record_timeline=False) for name in sorted(POLICIES)}


@pytest.mark.parametrize("name", sorted(set(POLICIES) - set(ORACLES)))
def test_in_the_simulator_no_other_policy_reads_the_truth(name: str, demo_runs: dict[str, Any], monkeypatch: Any) -> None:
    """Runs are identical whether or not the simulator has a truth to give: any read of it fails the run."""

    def no_truth(self: SimCluster) -> dict[str, JobTruth]:
        raise AssertionError(f"{name} made the simulator read the ground truth")

    monkeypatch.setattr(SimCluster, "truth", no_truth)
    sc, library = load_scenario(DEMO), TraceLibrary.bundled()
    again = simulate(sc, make_policy(name), name, 0, library, record_timeline=False)
    assert _result(again) == _result(demo_runs[name])


def test_in_the_simulator_the_oracle_plans_with_the_truth(demo_runs: dict[str, Any], monkeypatch: Any) -> None:
    oracle = demo_runs["oracle"]
    assert oracle.finished and oracle.checker_failures == 0
    assert _result(oracle) != {**_result(demo_runs["flowplan"]), "policy": "oracle"}  # it planned differently
    # A wrong truth (each job is told what remains of another one) changes what the oracle does: it reads it.
    real = SimCluster.truth

    def wrong(self: SimCluster) -> dict[str, JobTruth]:
        truth = real(self)
        ids = sorted(truth)
        return {k: truth[ids[(i + 1) % len(ids)]] for i, k in enumerate(ids)}

    monkeypatch.setattr(SimCluster, "truth", wrong)
    misled = simulate(load_scenario(DEMO), make_policy("oracle"), "oracle", 0, TraceLibrary.bundled(), record_timeline=False)
    assert misled.checker_failures == 0 and _result(misled) != _result(oracle)


@pytest.mark.parametrize("name", ["oracle-speed", "oracle-epochs"])
def test_in_the_simulator_the_oracles_variants_plan_with_their_half(name: str, demo_runs: dict[str, Any]) -> None:
    """Each variant finishes the demo with checked plans and plans neither as FlowPlan nor as the oracle
    (each half of the truth changes something there: ``docs/results.md``, "Which prediction costs what")."""
    run = demo_runs[name]
    assert run.finished and run.checker_failures == 0
    for other in ("flowplan", "oracle"):
        assert _result(run) != {**_result(demo_runs[other]), "policy": name}


def test_simulate_cli_runs_the_oracle_beside_flowplan(tmp_path: Path) -> None:
    args = ["simulate", "--policy", "flowplan", "--policy", "oracle", "--quiet", "--out", str(tmp_path)]
    r = subprocess.run([sys.executable, "-m", "flowplan", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [line.split()[0] for line in r.stdout.splitlines() if line.startswith(("flowplan ", "oracle ")) and " vs " not in line]
    assert rows == ["flowplan", "oracle"]
    assert "flowplan vs oracle:" in r.stdout and "prediction errors" in r.stdout
    assert json.loads((tmp_path / "oracle-seed0.json").read_text())["checker_failures"] == 0
