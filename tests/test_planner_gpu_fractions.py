"""The planner with GPU fractions: milli-GPU capacities in the integer program, devices after it.

Cases (each with CP-SAT and PuLP, every plan through the independent checker):

- three pods of 600 milli on one 2-GPU node: two placed on different devices, one waits with the
  fragmentation reason;
- 460 + 500 milli on a 1-GPU node share device 0;
- a whole-GPU job and two fractions on a 2-GPU node: the fractions share the device the whole job
  leaves;
- a running fractional job keeps its device; a newcomer is packed best-fit onto it;
- the same snapshot planned twice gives the same plan (devices included);
- a fraction the solver put on a node it cannot pack onto is offered another node with room
  (:func:`planner.devices.pack_devices` on a hand-made choice: the solver itself spreads them);
- the room a packed-out job leaves goes to a pending job the solver left waiting (hand-made choice);
- a packed-out job whose options are all on its node gets other nodes from ``widen`` and starts
  there on the retry (hand-made choice);
- ``widen`` given the packing's devices offers a fraction only nodes where one device holds it: two
  600s beside a 2-GPU node whose devices running 500s half fill (1,000 milli free in its pool, no
  device with 600) are offered that node by the pool alone, and the two 1-GPU nodes with it;
- a snapshot without fractions gets no device anywhere (old snapshots plan as before), and its GPU
  row is in whole GPUs (the coefficients it had before fractions); with fractions, in their common
  unit;
- ``flowplan explain``'s options count the room fractions leave in milli-GPUs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from planner import PlannerConfig, Snapshot, check_plan, plan
from planner.alternatives import job_options
from planner.build import build_problem, widen
from planner.core import _outlooks
from planner.devices import pack_devices
from planner.menu import STAY
from planner.plan import Assignment, Plan

SOLVERS = ["cpsat", "pulp"]


def _job(job_id: str, milli: int | None = None, **extra: Any) -> dict[str, Any]:
    job: dict[str, Any] = {"id": job_id, "status": "pending", "min_gpus": 1, "max_gpus": 1, **extra}
    if milli is not None:
        job["gpu_milli"] = milli
    return job


def _snap(gpus: list[int], jobs: list[dict[str, Any]]) -> Snapshot:
    nodes = [{"name": f"n{i}", "cpu_millis": 16000, "gpus": g} for i, g in enumerate(gpus)]
    return Snapshot.model_validate({"time": 0.0, "nodes": nodes, "jobs": jobs})


def _plan(snap: Snapshot, solver: str, time_limit: float = 2) -> Plan:
    got = plan(snap, PlannerConfig(solver=solver, time_limit=time_limit)).plan  # type: ignore[arg-type]
    assert check_plan(snap, got) == []
    return got


def _by_job(p: Plan) -> dict[str, Assignment]:
    return {a.job: a for a in p.assignments}


@pytest.mark.parametrize("solver", SOLVERS)
def test_three_600s_on_two_gpus_one_waits_for_fragmentation(solver: str) -> None:
    p = _plan(_snap([2], [_job(f"p{i}", 600) for i in range(3)]), solver)
    placed = [a for a in p.assignments if a.node is not None]
    assert len(placed) == 2 and sorted(a.gpu_device for a in placed) == [0, 1]  # type: ignore[type-var]
    (left,) = p.unserved
    assert "needs 0.6 GPU on n0: 0.8 GPU free there in total but no single device has 600 milli free" in left.reason
    assert _by_job(p)[left.job].action == "wait" and _by_job(p)[left.job].gpu_device is None


@pytest.mark.parametrize("solver", SOLVERS)
def test_460_and_500_share_one_device(solver: str) -> None:
    a = _by_job(_plan(_snap([1], [_job("a", 460), _job("b", 500)]), solver))
    assert (a["a"].node, a["a"].gpu_device, a["b"].node, a["b"].gpu_device) == ("n0", 0, "n0", 0)
    assert "0.46 GPU (shared device 0)" in a["a"].explanation


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_whole_gpu_and_fractions_on_two_gpus(solver: str) -> None:
    a = _by_job(_plan(_snap([2], [_job("whole"), _job("f1", 300), _job("f2", 400)]), solver))
    assert all(x.node == "n0" for x in a.values())
    assert a["whole"].gpus == 1 and a["whole"].gpu_device is None
    assert a["f1"].gpu_device == a["f2"].gpu_device  # the one device the whole job does not hold


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_staying_fraction_keeps_its_device_and_a_newcomer_joins_it(solver: str) -> None:
    running = _job("old", 300, status="running", node="n0", allocation={"cpu_millis": 1000, "gpus": 1, "gpu_device": 1})
    snap = _snap([2], [running, _job("new", 600)])
    a = _by_job(_plan(snap, solver))
    assert (a["old"].action, a["old"].gpu_device) == ("keep", 1)
    assert (a["new"].node, a["new"].gpu_device) == ("n0", 1)  # best fit: the device with the least room that fits


@pytest.mark.parametrize("solver", SOLVERS)
def test_the_same_snapshot_gives_the_same_plan(solver: str) -> None:
    """Devices included. The PuLP case failed once in session 31's CI (the other suites loading the
    machine): the same assignments, but CBC, whose time limit is wall-clock seconds, was cut on one
    call and reported "feasible" without a bound where the other proved "optimal". PuLP therefore
    gets a limit this small problem never reaches, as in ``test_planner_gangs``; CP-SAT runs on
    deterministic time at the default."""
    jobs = [_job(f"p{i}", m) for i, m in enumerate((700, 460, 300, 250, 600, 900))] + [_job("w", None, max_gpus=2)]
    snap = _snap([2, 2], jobs)
    limit = 20.0 if solver == "pulp" else 2.0
    one, two = (_plan(snap, solver, limit).model_dump(exclude={"solver": {"seconds"}}) for _ in range(2))
    assert one == two
    assert any(a["gpu_device"] is not None for a in one["assignments"])


def test_a_fraction_that_does_not_pack_is_offered_another_node() -> None:
    snap = _snap([2, 2], [_job(f"p{i}", 600) for i in range(3)])
    config = PlannerConfig(time_limit=1)
    outlooks = _outlooks(snap, config, None, None)
    problem, _ = build_problem(snap, [outlooks[j.id][1] for j in snap.jobs], config)
    # Every job on n0 (node 0), the cheapest level there: 1800 of its 2000 milli, three devices' worth.
    choice = np.array(
        [min((o for o in problem.options_of(j) if problem.opt_node[o] == 0), key=lambda o: problem.cost[o]) for j in range(3)]
    )
    got = pack_devices(problem, choice, snap.nodes)
    nodes = [int(problem.opt_node[o]) for o in got.choice]
    assert sorted(nodes) == [0, 0, 1] and got.why == {}
    assert sorted(got.device[j] for j in range(3) if nodes[j] == 0) == [0, 1]


def test_no_fractions_no_devices() -> None:
    p = _plan(_snap([2], [_job("a"), _job("b", None, max_gpus=2)]), "cpsat")
    assert all(a.gpu_device is None for a in p.assignments)


def test_the_options_a_fraction_was_offered_count_milli_gpus() -> None:
    """``flowplan explain``'s options: two 600s on a 2-GPU node leave 800 milli, so a 300 fits
    there, not a GPU short (counting each fraction a whole GPU would say so)."""
    snap = _snap([2], [_job("p0", 600), _job("p1", 600), _job("late", 300)])
    p = _plan(snap, "cpsat")
    late = job_options(snap, p, "late")
    (there,) = [o for o in late.options if o.node == "n0"]
    assert there.short_gpus == 0 and there.fits


def test_the_room_a_packed_out_job_leaves_goes_to_a_waiting_one() -> None:
    """Three 600s chosen on one 2-GPU node and a 300 left waiting (a hand-made choice): one 600 is
    packed out, and the 300 it leaves room for starts on a device beside a 600."""
    snap = _snap([2], [_job(f"p{i}", 600) for i in range(3)] + [_job("small", 300)])
    config = PlannerConfig(time_limit=1)
    outlooks = _outlooks(snap, config, None, None)
    problem, _ = build_problem(snap, [outlooks[j.id][1] for j in snap.jobs], config)

    def cheapest(j: int, placed: bool) -> int:
        return min((o for o in problem.options_of(j) if (problem.opt_node[o] >= 0) == placed), key=lambda o: problem.cost[o])

    choice = np.array([cheapest(0, True), cheapest(1, True), cheapest(2, True), cheapest(3, False)])
    got = pack_devices(problem, choice, snap.nodes)
    placed = [j for j in range(4) if problem.opt_node[got.choice[j]] >= 0]
    assert placed == [0, 1, 3] and list(got.why) == [2]
    assert got.device[3] in (got.device[0], got.device[1])


def test_a_packed_out_fraction_is_offered_nodes_outside_its_candidates() -> None:
    """With no extra candidate nodes every 600 has options on n0 only (the greedy put all three
    there); the one packed out gets options on n1 from ``widen`` and starts there on the retry."""
    snap = _snap([2, 2], [_job(f"p{i}", 600) for i in range(3)])
    config = PlannerConfig(time_limit=1, candidate_nodes=0)
    outlooks = _outlooks(snap, config, None, None)
    problem, _ = build_problem(snap, [outlooks[j.id][1] for j in snap.jobs], config)
    assert {int(problem.opt_node[o]) for o in range(problem.n_options)} == {-1, 0}
    choice = np.array([min(o for o in problem.options_of(j) if problem.opt_node[o] == 0) for j in range(3)])
    first = pack_devices(problem, choice, snap.nodes)
    assert len(first.why) == 1
    wider, again = widen(snap.nodes, problem, first.choice, 1)
    second = pack_devices(wider, again, snap.nodes, retry=first.why)
    assert sorted(int(wider.opt_node[o]) for o in second.choice) == [0, 0, 1] and second.why == {}


def test_the_gpu_row_is_in_whole_gpus_without_fractions_and_in_their_common_unit_with_them() -> None:
    """Without a fractional job the integer program's GPU row is in whole GPUs, the coefficients it
    had before fractions existed (so such snapshots plan as before, bit for bit with CP-SAT); with
    fractions it is in the largest unit dividing 1,000 and every ``gpu_milli`` (460 and 500: 20)."""
    config = PlannerConfig()
    whole = _snap([2, 4], [_job("a"), _job("b", max_gpus=2)])
    outlooks = _outlooks(whole, config, None, None)
    problem, _ = build_problem(whole, [outlooks[j.id][1] for j in whole.jobs], config)
    assert problem.cap_gpu.tolist() == [2, 4]
    assert {int(problem.dem_gpu[o]) for o in range(problem.n_options) if problem.opt_node[o] >= 0} == {1, 2}
    shared = _snap([2, 4], [_job("a", 460), _job("b", 500), _job("c")])
    outlooks = _outlooks(shared, config, None, None)
    problem, _ = build_problem(shared, [outlooks[j.id][1] for j in shared.jobs], config)
    assert problem.cap_gpu.tolist() == [100, 200]
    placed = [o for o in range(problem.n_options) if problem.opt_node[o] >= 0]
    assert {int(problem.opt_job[o]): int(problem.dem_gpu[o]) for o in placed} == {0: 23, 1: 25, 2: 50}


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_fraction_left_waiting_is_told_its_share_in_gpus(solver: str) -> None:
    """Two 600s on one GPU: the pool holds one; the other waits, told it needs 0.6 GPU (not the
    GPU row's units, 3 of 200 milli, as a bug once printed)."""
    by = _by_job(_plan(_snap([1], [_job("a", 600), _job("b", 600)]), solver))
    waiting = [a for a in by.values() if a.node is None]
    assert len(waiting) == 1 and "0.6 GPU" in waiting[0].explanation, waiting[0].explanation


def test_a_running_fraction_whose_move_does_not_pack_stays_on_its_device() -> None:
    """A hand-made choice moves a running 500 from n0 to n1, whose two devices each hold a 600 (800
    milli free in all, 400 on each): no device takes it and no other node has room. It stays on n0,
    on the device it holds; it used to be paused (found replaying the Alibaba trace: running pods
    paused for a move the devices could not take, while their own device still held them)."""

    def running(job_id: str, milli: int, node: str, device: int) -> dict[str, Any]:
        alloc = {"cpu_millis": 1000, "gpus": 1, "gpu_device": device}
        return _job(job_id, milli, status="running", node=node, allocation=alloc)

    snap = _snap([1, 2], [running("mover", 500, "n0", 0), running("b0", 600, "n1", 0), running("b1", 600, "n1", 1)])
    config = PlannerConfig(time_limit=1)
    outlooks = _outlooks(snap, config, None, None)
    problem, _ = build_problem(snap, [outlooks[j.id][1] for j in snap.jobs], config)

    def cheapest(j: int, node: int) -> int:
        return min((o for o in problem.options_of(j) if problem.opt_node[o] == node), key=lambda o: problem.cost[o])

    choice = np.array([cheapest(0, 1), cheapest(1, 1), cheapest(2, 1)])
    got = pack_devices(problem, choice, snap.nodes)
    assert got.why == {}
    assert int(problem.opt_node[got.choice[0]]) == 0 and got.device[0] == 0
    assert [got.device[1], got.device[2]] == [0, 1]


def test_a_running_fraction_paused_for_a_newcomer_that_does_not_pack_runs_on() -> None:
    """A hand-made choice pauses a running 370 on n0's device 1 to make pool room for a pending 550
    (2,000 milli: 590 + 230 on device 0, 550 on device 1, so the pool has 630 free without the 370).
    No device takes the 550 (180 and 450 free), so the pause bought nothing: the 370 stays, on its
    device, and the 550 waits, told why. Before, it was paused, started again the next interval and
    paused again, at every event (found replaying the Alibaba trace with GPU models)."""

    def running(job_id: str, milli: int, device: int) -> dict[str, Any]:
        alloc = {"cpu_millis": 1000, "gpus": 1, "gpu_device": device}
        return _job(job_id, milli, status="running", node="n0", allocation=alloc)

    jobs = [running("a", 590, 0), running("b", 230, 0), running("p", 370, 1), running("c", 550, 1), _job("x", 550)]
    snap = _snap([2], jobs)
    config = PlannerConfig(time_limit=1)
    outlooks = _outlooks(snap, config, None, None)
    problem, _ = build_problem(snap, [outlooks[j.id][1] for j in snap.jobs], config)

    def option(j: int, on_node: bool, way: int | None = None) -> int:
        opts = [o for o in problem.options_of(j) if (problem.opt_node[o] >= 0) == on_node]
        opts = [o for o in opts if way is None or problem.opt_way[o] == way]
        return min(opts, key=lambda o: problem.cost[o])

    choice = np.array([option(0, True, STAY), option(1, True, STAY), option(2, False), option(3, True, STAY), option(4, True)])
    got = pack_devices(problem, choice, snap.nodes)
    assert set(got.why) == {4} and "550 milli" in got.why[4]
    assert int(problem.opt_way[got.choice[2]]) == STAY and got.device[2] == 1
    assert problem.objective(got.choice) < problem.objective(choice)


def test_widen_with_the_devices_offers_only_nodes_a_device_of_which_holds_the_fraction() -> None:
    nodes = [{"name": "n0", "cpu_millis": 16000, "gpus": 2}] + [{"name": f"n{i}", "cpu_millis": 16000, "gpus": 1} for i in (1, 2)]
    running = [
        _job(f"r{d}", 500, status="running", node="n0", migratable=False, resizable=False,
             allocation={"cpu_millis": 1000, "gpus": 1, "gpu_device": d})
        for d in (0, 1)
    ]  # fmt: skip
    snap = Snapshot.model_validate({"time": 0.0, "nodes": nodes, "jobs": [*running, _job("p0", 600), _job("p1", 600)]})
    config = PlannerConfig(time_limit=1, candidate_nodes=0)
    outlooks = _outlooks(snap, config, None, None)
    problem, _ = build_problem(snap, [outlooks[j.id][1] for j in snap.jobs], config)
    # The running 500s stay on n0's two devices; both 600s wait.
    choice = np.array([min(problem.options_of(j), key=lambda o: (problem.opt_node[o] < 0, o)) for j in (0, 1)] + [
        max(problem.options_of(j)) for j in (2, 3)
    ])  # fmt: skip
    packed = pack_devices(problem, choice, snap.nodes)
    assert packed.devices == ((0, (500, 500)), (1, (0,)), (1, (0,)))

    def offered(devices: tuple[tuple[int, tuple[int, ...]], ...]) -> set[str]:
        wider, _ = widen(snap.nodes, problem, packed.choice, 2, devices=devices)
        return {problem.node_names[int(wider.opt_node[o])] for j in (2, 3) for o in wider.options_of(j) if wider.opt_node[o] >= 0}

    assert "n0" in offered(())  # the pool alone: 1,000 milli free on n0
    assert offered(packed.devices) == {"n1", "n2"}
