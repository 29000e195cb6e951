"""Probing a CPU job's speed-up (planner/split.py, ``_probe_share``): a job seen at one share only.

A CPU-only job whose own speeds were all measured at one share has a speed-up only the prior
says (it scales well). Held at that share, as a short job at its max is, it would never show that
it does not scale. The split then gives it half that share for one interval, where the jobs beside
it can use what that frees, so that the next plan fits its speed-up from two shares.

Case matrix:

- an ncf job (its measured speed does not depend on the CPU) seen only at its max of 4 CPU, beside
  a cifar10 job that could use more: at most 2 CPU, and its explanation says why;
- the same job alone on its node: no probe (nobody could use what it frees, so its real share
  would not change);
- the same job with too little left to run (two epochs): no probe;
- the same job when it is the one that ends the node's batch: no probe;
- the same job with a tier-1 deadline open: no probe (its reservation comes first);
- its speeds already seen at 2 and 4 CPU (flat): no probe, and the plan gives it less CPU than it
  held and than it would get had they shown it scale, which is what the probe is for;
- a cifar10 job (it scales) seen at one share is probed the same way: nothing tells them apart
  before the probe;
- a deepspeech2 job (batch 20: flat above about 1.5 cores) seen only below one core, among five
  cifar10 jobs on a crowded node: it cannot be probed lower, so it is given at least 2 CPU for the
  interval, and its explanation says why; once seen at 2 CPU it is not probed again, and its
  predicted finish is where its speeds put it, not the prior's (found on a held-out workload:
  ``benchmarks/heldout.py --generator-seed 9``, workload 1).

Jobs are built on measured data: each job's speeds are the simulator's ground truth for a
measured model (AdaptDL's throughput tables, bundled), its history a prefix of that model's
measured validation curve (``../shared/data``). Every plan comes from the whole planner and
passes its checker.
"""

from __future__ import annotations

from typing import Any

from conftest import real_curve

from adapters.sim.truth import GroundTruth, TraceLibrary
from planner import PlannerConfig, plan
from planner.plan import Assignment
from planner.snapshot import Snapshot

CONFIG = PlannerConfig(fit_processes=1)
NOW = 10_000.0


def _job(
    name: str, model: str, batch: int, cpu: int, done: int, max_epochs: int, seen: tuple[int, ...], hi: int, **extra: Any
) -> dict[str, Any]:
    """A running job of ``model`` that has done ``done`` epochs of ``max_epochs`` at ``cpu``, its
    speed measured at the shares ``seen``."""
    truth = GroundTruth(TraceLibrary.bundled(), model, batch, "cpu")
    curve = real_curve(model, batch)
    spe = truth.epoch_seconds(cpu, 0)
    history = [{"time": NOW - (done - e) * spe, "epoch": e, "metric": round(float(curve[e - 1]), 4)} for e in range(1, done + 1)]
    job: dict[str, Any] = {
        "id": name,
        "status": "running",
        "node": "n0",
        "allocation": {"cpu_millis": cpu},
        "min_cpu_millis": 500,
        "max_cpu_millis": hi,
        "history": history,
        "speed": [{"cpu_millis": c, "gpus": 0, "seconds_per_epoch": truth.epoch_seconds(c, 0)} for c in seen],
        # Run to max_epochs: a tier 1 no curve reaches, so the finish is the epochs left.
        "target": {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.9999}, "max_epochs": max_epochs},
    }
    job.update(extra)
    return job


def _ncf(done: int = 2, seen: tuple[int, ...] = (4000,), max_epochs: int = 20, **extra: Any) -> dict[str, Any]:
    return _job("ncf", "ncf", 2048, 4000, done, max_epochs, seen, 4000, **extra)


def _cifar(
    name: str = "cifar", seen: tuple[int, ...] = (1000, 2000, 4000, 8000), cpu: int = 4000, max_epochs: int = 60
) -> dict[str, Any]:
    return _job(name, "cifar10", 256, cpu, 3, max_epochs, seen, 8000)


def _plan(*jobs: dict[str, Any]) -> dict[str, Assignment]:
    snapshot = Snapshot.model_validate(
        {"time": NOW, "nodes": [{"name": "n0", "cpu_millis": 8000}], "jobs": list(jobs), "settings": {"interval_seconds": 60}}
    )
    return {a.job: a for a in plan(snapshot, CONFIG).plan.assignments}


def test_a_job_seen_at_one_share_is_probed_at_half() -> None:
    got = _plan(_ncf(), _cifar())
    ncf = got["ncf"]
    assert ncf.node == "n0" and ncf.cpu_millis <= 2000
    assert "probing its speed-up: at most 2 CPU this interval (its speed seen only at 4)" in ncf.explanation
    assert "probing" not in got["cifar"].explanation  # its speed is known at four shares
    assert got["cifar"].cpu_millis >= 8000 - ncf.cpu_millis - 1  # what the probe frees goes to it


def test_no_probe_where_nobody_could_use_the_cpu() -> None:
    ncf = _plan(_ncf())["ncf"]
    assert ncf.cpu_millis == 4000 and "probing" not in ncf.explanation


def test_no_probe_near_the_end() -> None:
    """Two epochs of 22 s left: what a probe would teach has no time to pay."""
    ncf = _plan(_ncf(done=2, max_epochs=4), _cifar())["ncf"]
    assert "probing" not in ncf.explanation


def test_no_probe_for_the_job_that_ends_the_batch() -> None:
    """Thirty-eight epochs of 22 s left, the cifar10 job's 57 take less beside it: the ncf job ends
    the node's batch, and what a probe costs it would lengthen the makespan (as in the value search,
    such a job gets no less now than the rule gives it)."""
    ncf = _plan(_ncf(max_epochs=40), _cifar())["ncf"]
    assert "probing" not in ncf.explanation


def test_no_probe_with_an_open_deadline() -> None:
    job = _ncf()
    job["target"]["tier1"] = {"value": 0.9999, "deadline": NOW + 3600}
    ncf = _plan(job, _cifar())["ncf"]
    assert "probing" not in ncf.explanation


def test_seen_at_two_shares_its_speed_up_is_known() -> None:
    """Flat between 2 and 4 CPU (its measured speeds): fitted as scaling little (a serial fraction
    of 0.77 from two points, the prior's pull), it is given less than the 4 CPU it held, and less
    than the same job would get had the two points shown it scale (the probe's purpose); it is not
    probed again. (Eighteen epochs left: it does not end the batch, so the tail guard does not hold
    it at the equal split's share.)"""
    flat = _plan(_ncf(seen=(2000, 4000)), _cifar())["ncf"]
    assert "probing" not in flat.explanation
    scaling = _ncf(seen=(2000, 4000))
    scaling["speed"][0]["seconds_per_epoch"] = 1.8 * scaling["speed"][1]["seconds_per_epoch"]
    scales = _plan(scaling, _cifar())["ncf"]
    assert flat.cpu_millis < 4000 and flat.cpu_millis < scales.cpu_millis


def test_a_job_that_scales_is_probed_the_same_way() -> None:
    """Before the probe nothing tells a job that scales from one that does not: a cifar10 job seen
    only at its max is probed too (and costs one interval at half, which the job beside it gains)."""
    got = _plan(_cifar("seen-once", seen=(8000,), cpu=8000, max_epochs=30), _cifar("known", cpu=500))
    assert got["seen-once"].cpu_millis <= 4000
    assert "probing its speed-up: at most 4 CPU this interval (its speed seen only at 8)" in got["seen-once"].explanation


def _slow_and_crowded(seen: tuple[int, ...], cpu: int) -> dict[str, Assignment]:
    """A deepspeech2 (batch 20) job seen at the shares ``seen`` beside five cifar10 jobs on 8 cores."""
    ds = _job("ds", "deepspeech2", 20, cpu, 3, 18, seen, 8000)
    ds["target"] = {"metric": "accuracy", "direction": "lower", "tier1": {"value": 0.0001}, "max_epochs": 18}
    return _plan(ds, *(_cifar(f"c{i}", cpu=1500, max_epochs=20 + 3 * i) for i in range(5)))


def test_a_job_seen_only_below_one_core_is_probed_higher() -> None:
    """Below one core every serial fraction gives the same linear speed-up, so its speeds at 0.5 and
    0.95 CPU leave the prior's (it scales well): planned to finish in about 20 minutes. Given 2 CPU
    for one interval (the split gave it 1.33), it shows it does not scale: planned at 50 minutes."""
    probed = _slow_and_crowded((500, 952), 500)["ds"]
    assert probed.cpu_millis >= 2000
    assert "probing its speed-up: at least 2 CPU this interval (its speed seen only up to 0.952)" in probed.explanation
    seen = _slow_and_crowded((500, 952, 2000), 2000)["ds"]
    assert "probing" not in seen.explanation
    assert probed.predictions.eta_finish is not None and seen.predictions.eta_finish is not None
    assert seen.predictions.eta_finish - NOW > 2 * (probed.predictions.eta_finish - NOW)
