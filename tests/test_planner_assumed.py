"""A deadline whose tier is only assumed pauses no job; one a curve places still may.

The two snapshots are the real-engine demo's (``benchmarks/e2e_docker.py --side-by-side 0 1``,
session 40): what the Docker daemon posted to the planner on a 1000m node, four real training
containers' logs read into their histories; nothing in them is invented. ``job2`` (priority 4)
wants 0.93 accuracy within 25 s of its arrival; ``job0`` and ``job1`` (priority 1) are past their
tier 1.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from planner import PlannerConfig, plan
from planner.menu import build_menu, guessed_tiers
from planner.objective import price_menus
from planner.outlook import build_outlook
from planner.snapshot import Job, QoETarget, Settings, Snapshot, Tier

DATA = Path(__file__).parent / "data" / "snapshots"


def _snapshot(name: str) -> Snapshot:
    return Snapshot.model_validate_json(gzip.decompress((DATA / name).read_bytes()))


def test_a_deadline_only_assumed_pauses_no_job() -> None:
    """``job2`` has run 3 s at 500m and reported nothing yet: no curve, so its tier 1 is only
    assumed at its finish (40 epochs). Priced on that guess, the program paused ``job0`` and
    ``job1`` (a restart each) to give ``job2`` the node; 3 s later its first reports gave it a curve,
    the next plan met the deadline at 500m and started the two again. Now nothing is paused for the
    guess; the CPU split still reserves for the deadline what the node's other minimums leave."""
    snap = _snapshot("e2e-docker-deadline-no-curve.json.gz")
    got = {a.job: a for a in plan(snap).plan.assignments}
    assert [got[j].action for j in ("job0", "job1")] == ["keep", "keep"]
    assert got["job2"].node == "local" and got["job2"].cpu_millis == 500
    assert "no curve yet, so no job is paused for it" in got["job2"].explanation
    assert got["job2"].predictions.tier1_satisfied is False  # read at the finish, and said so


def test_a_guessed_deadline_is_priced_below_any_jobs_service() -> None:
    """The same plan's prices: ``job2``'s options that miss its guessed deadline still cost more
    than those that meet it (the guess steers where it goes and what it gets), but by less than
    leaving any other job without a node (it never decides who runs)."""
    snap = _snapshot("e2e-docker-deadline-no-curve.json.gz")
    config = PlannerConfig()
    outlooks = [build_outlook(j, snap.settings, config) for j in snap.jobs]
    menus = [build_menu(i, o, snap.time, snap.settings.interval_seconds, config, 0) for i, o in enumerate(outlooks)]
    price_menus(menus, config, snap.time)
    by = {m.outlook.job.id: m for m in menus}
    new = by["job2"]
    assert guessed_tiers(new.outlook) and not guessed_tiers(by["job0"].outlook)
    missed = int(new.qoe_cost[new.t1_met == 0].max())
    assert 0 < missed < min(by[j].wait_unserved for j in ("job0", "job1"))
    assert (new.t1_met == 1).any() and int(new.qoe_cost[new.t1_met == 1].max()) == 0
    assert new.wait_qoe == missed  # waiting misses it too, at the same price


def test_guessed_deadlines_together_are_priced_below_one_jobs_service() -> None:
    """Two such jobs at once (``job2`` and a copy of it): one pause that made room for both must not
    pay either, so their misses together cost less than the cheapest job's service."""
    snap = _snapshot("e2e-docker-deadline-no-curve.json.gz")
    twin = snap.jobs[2].model_copy(update={"id": "job2b"})
    snap = snap.model_copy(update={"jobs": [*snap.jobs, twin]})
    config = PlannerConfig()
    outlooks = [build_outlook(j, snap.settings, config) for j in snap.jobs]
    menus = [build_menu(i, o, snap.time, snap.settings.interval_seconds, config, 0) for i, o in enumerate(outlooks)]
    price_menus(menus, config, snap.time)
    by = {m.outlook.job.id: m for m in menus}
    misses = sum(int(by[j].qoe_cost.max()) for j in ("job2", "job2b"))
    assert 0 < misses < min(by[j].wait_unserved for j in ("job0", "job1"))


def test_a_deadline_a_curve_places_still_pauses_a_job() -> None:
    """Later in another run: ``job2`` has ten reports (0.92 at epoch 10) and 7.7 s left to its
    deadline, which it meets only above 250m; ``job3`` has just arrived. The program still buys the
    deadline with one pause: on evidence, a priority-4 deadline is worth one priority-1 job's wait."""
    snap = _snapshot("e2e-docker-deadline-curve.json.gz")
    got = {a.job: a for a in plan(snap).plan.assignments}
    paused = [j for j, a in got.items() if a.action == "pause"]
    assert len(paused) == 1
    assert got["job2"].cpu_millis > 250 and got["job2"].predictions.tier1_satisfied is True


def _job(max_gpus: int) -> Job:
    target = QoETarget(metric="accuracy", direction="higher", tier1=Tier(value=0.9, deadline=600.0), max_epochs=40)
    return Job.model_validate(
        {"id": "j", "status": "pending", "history": [], "target": target, "max_gpus": max_gpus, "min_gpus": 0}
    )


def test_a_gpu_jobs_assumed_deadline_is_priced_in_full() -> None:
    """The GPU count is the program's own decision (changing it later is a restart), so a GPU job's
    deadline is priced in full on the guess; a CPU job's split reserves for it instead."""
    cpu = build_outlook(_job(0), Settings(), PlannerConfig())
    gpu = build_outlook(_job(4), Settings(), PlannerConfig())
    assert cpu.tiers_assumed and gpu.tiers_assumed
    assert guessed_tiers(cpu)
    assert not guessed_tiers(gpu)
