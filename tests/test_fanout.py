"""The per-job fits spread over processes (``planner.fanout``) give exactly what one process gives.

Real forked processes throughout (nothing faked): the work is shown to run in a child by its
process id, a child that fails has its share recomputed in the parent, and a plan fitted in two
processes equals the one fitted in one, outlooks included.
"""

from __future__ import annotations

import os

from conftest import random_snapshot

from planner import PlannerConfig, plan
from planner.core import PARALLEL_MIN_FITS
from planner.fanout import fan_out


def _square_with_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def test_fan_out_equals_the_serial_map_and_uses_a_child_process() -> None:
    items = list(range(40))
    costs = [float(1 + x % 5) for x in items]
    got = fan_out(_square_with_pid, items, costs, 2)
    assert [v for v, _ in got] == [x * x for x in items]
    pids = {pid for _, pid in got}
    assert os.getpid() in pids and len(pids) == 2  # half here, half in one forked child


def test_a_failing_child_has_its_share_computed_here() -> None:
    parent = os.getpid()

    def only_here(x: int) -> int:
        if os.getpid() != parent:
            raise RuntimeError("not in the parent")
        return 3 * x

    items = list(range(30))
    assert fan_out(only_here, items, [1.0] * len(items), 3) == [3 * x for x in items]


def test_one_process_or_one_item_runs_here() -> None:
    assert fan_out(_square_with_pid, [7], [1.0], 4) == [(49, os.getpid())]
    assert {pid for _, pid in fan_out(_square_with_pid, [1, 2, 3], [1.0] * 3, 1)} == {os.getpid()}


def test_a_plan_fitted_in_two_processes_equals_one_fitted_in_one() -> None:
    snap = random_snapshot(11, n_nodes=12, n_jobs=4 * PARALLEL_MIN_FITS)
    fits = sum(1 for j in snap.jobs if j.status != "finished" and len(j.history) >= 3)
    assert fits >= PARALLEL_MIN_FITS  # enough fits for the planner to fan out
    one = plan(snap, PlannerConfig(time_limit=0.5, fit_processes=1))
    two = plan(snap, PlannerConfig(time_limit=0.5, fit_processes=2))

    def strip(p: object) -> dict:
        d = p.model_dump()  # type: ignore[attr-defined]
        d["solver"].pop("seconds")
        d["solver"].pop("message")  # holds measured wall times (the LP's) on large problems
        return d

    assert strip(two.plan) == strip(one.plan)
    assert one.outlooks.keys() == two.outlooks.keys()
    for job_id, (digest, outlook) in one.outlooks.items():
        digest2, outlook2 = two.outlooks[job_id]
        assert digest2 == digest
        assert outlook2.job is outlook.job or outlook2.job == outlook.job
        assert outlook2.curve == outlook.curve
        assert (outlook2.remaining_tier1, outlook2.remaining_tier2, outlook2.remaining_finish) == (
            outlook.remaining_tier1,
            outlook.remaining_tier2,
            outlook.remaining_finish,
        )
        assert outlook2.curve_note == outlook.curve_note and outlook2.speed_note == outlook.speed_note
