"""The rollout's check of CPU-only migrations (planner/split.py, ``moves_checked``).

The integer program prices an allocation as held until the job is done; the per-node split then
shares each node's CPU as jobs end. A CPU job's migration the program chose is kept only if the
two nodes' rollouts, with and without it, say it pays more than the program's hysteresis asks.

Case matrix:

- a job alone on its node at its max, moved to an empty node: nothing to gain, its lost work to
  pay: undone (it stays, on the option that keeps it where it is), and the plan decoded from that
  choice says so in the job's explanation and passes the checker;
- a job on a crowded node (four jobs at a quarter of it each), moved to an empty node where it can
  take its max: kept;
- undone only where staying fits: a move whose home now holds a new job and has no room for both
  minimums is kept;
- a job with an open tier-1 deadline is not second-guessed (the program moved it for QoE), nor a
  move off a node that holds one (it may make room for that deadline), nor a job that cannot
  resize live (the program's price of its level is what it gets at home);
- a whole plan of the crowded case passes the checker and moves nothing it should not.

Moves to idle CPU (``moves_to_room``), which the program never makes for a CPU-only job:

- two long jobs share a node at half their max each while the other node is empty: one moves there
  (the whole planner, from the snapshot), its explanation says why, the plan passes the checker;
- the same two jobs one epoch from their end: the move would not pay for what it loses, nothing moves;
- with a migration budget of 0 nothing moves;
- a node whose jobs are all at their max offers no candidate (nothing there would run faster).

Jobs are built on measured data: each job's speed table is the simulator's ground truth for a
measured model (AdaptDL's cifar10 throughput tables, bundled), its history a prefix of the measured
cifar10 validation curve (``../shared/data``). Nothing is faked; the problem is the real build.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from conftest import real_curve

from adapters.sim.truth import GroundTruth, TraceLibrary
from planner import PlannerConfig, plan
from planner.build import build_problem
from planner.check import check_plan
from planner.core import _decode, _Outcome
from planner.menu import MOVE, STAY
from planner.outlook import build_outlook
from planner.problem import Problem
from planner.snapshot import Snapshot
from planner.split import moves_checked, moves_to_room

CONFIG = PlannerConfig(fit_processes=1)
NOW = 10_000.0
LEVELS = (500, 1000, 2000, 4000, 8000)


def _job(name: str, node: str | None, cpu: int, done: int, max_epochs: int, hi: int = 8000, **extra: Any) -> dict[str, Any]:
    """A running cifar10 (batch 256) job that has done ``done`` epochs of its ``max_epochs``."""
    truth = GroundTruth(TraceLibrary.bundled(), "cifar10", 256, "cpu")
    curve = real_curve("cifar10", 128)
    spe = truth.epoch_seconds(cpu, 0)
    history = [{"time": NOW - (done - e) * spe, "epoch": e, "metric": round(float(curve[e - 1]), 4)} for e in range(1, done + 1)]
    job: dict[str, Any] = {
        "id": name,
        "status": "running" if node else "pending",
        "min_cpu_millis": 500,
        "max_cpu_millis": hi,
        "checkpoint_seconds": 20.0,
        "restart_seconds": 20.0,
        "history": history,
        "speed": [{"cpu_millis": c, "gpus": 0, "seconds_per_epoch": truth.epoch_seconds(c, 0)} for c in LEVELS if c <= hi],
        # Run to max_epochs: a tier 1 no curve reaches, so the finish is the epochs left.
        "target": {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.9999}, "max_epochs": max_epochs},
    }
    if node:
        job.update(node=node, allocation={"cpu_millis": cpu})
    job.update(extra)
    return job


def _snapshot(jobs: list[dict[str, Any]], cpus: tuple[int, ...] = (8000, 8000)) -> Snapshot:
    nodes = [{"name": f"n{i}", "cpu_millis": c} for i, c in enumerate(cpus)]
    return Snapshot.model_validate({"time": NOW, "nodes": nodes, "jobs": jobs, "settings": {"migration_budget": 4}})


def _problem(snapshot: Snapshot) -> Problem:
    outlooks = [build_outlook(j, snapshot.settings, CONFIG) for j in snapshot.jobs if j.status != "finished"]
    problem, _ = build_problem(snapshot, outlooks, CONFIG)
    return problem


def _staying(problem: Problem) -> np.ndarray:
    """Every running job on its current node (its first stay option), every other one waiting."""
    first = [next((o for o in problem.options_of(j) if problem.opt_way[o] == STAY), None) for j in range(problem.n_jobs)]
    wait = [next(o for o in problem.options_of(j) if problem.opt_node[o] < 0) for j in range(problem.n_jobs)]
    return np.array([s if s is not None else w for s, w in zip(first, wait, strict=True)])


def _moved(problem: Problem, choice: np.ndarray, j: int, node: str) -> np.ndarray:
    """``choice`` with job ``j`` moved to ``node`` at its largest level there."""
    n = problem.node_names.index(node)
    there = [o for o in problem.options_of(j) if problem.opt_way[o] == MOVE and problem.opt_node[o] == n]
    assert there, "the build offers the move"
    out = choice.copy()
    out[j] = max(there, key=lambda o: int(problem.dem_cpu[o]))
    return out


def _check(problem: Problem, choice: np.ndarray) -> np.ndarray:
    out, notes = moves_checked(problem, choice, "deadlines>mean-jct>makespan", CONFIG, [int(c) for c in problem.cap_cpu])
    undone = {j for j in range(problem.n_jobs) if out[j] != choice[j]}
    assert set(notes) == undone  # a note for each job kept home, and only for those
    return out


def test_a_move_that_gains_nothing_is_undone() -> None:
    """Alone on its node at its max, the job runs as fast at home as it would on the empty node;
    the move only loses its checkpoint, restart and the work since its last checkpoint."""
    problem = _problem(_snapshot([_job("alone", "n0", 8000, 5, 40)]))
    choice = _moved(problem, _staying(problem), 0, "n1")
    out = _check(problem, choice)
    assert problem.opt_way[out[0]] == STAY and problem.node_names[int(problem.opt_node[out[0]])] == "n0"
    assert problem.violations(out) == []


def test_the_plan_says_why_the_job_stays() -> None:
    """Decoded into a plan (the planner's own decode step, from the program's choice with the move),
    the job stays on its node, its explanation says a move was weighed and why it was not made, and
    the plan passes the independent checker."""
    snapshot = _snapshot([_job("alone", "n0", 8000, 5, 40)])
    problem = _problem(snapshot)
    choice = _moved(problem, _staying(problem), 0, "n1")
    p = _decode(snapshot, problem, CONFIG, _Outcome(choice, "cpsat", "optimal"))
    (a,) = p.assignments
    assert a.node == "n0" and a.action in ("keep", "resize")
    assert "a move to n1 was weighed" in a.explanation and "would not pay" in a.explanation
    assert p.objective.migrations == 0
    assert check_plan(snapshot, p) == []


def test_a_move_off_a_crowded_node_is_kept() -> None:
    """Four long jobs share one node at 2 cores each (each could use 8); the other node is empty.
    Moving one there gives it 8 cores and the other three more: far more than the move loses."""
    jobs = [_job(f"j{i}", "n0", 2000, 5, 40) for i in range(4)]
    problem = _problem(_snapshot(jobs))
    choice = _moved(problem, _staying(problem), 0, "n1")
    assert np.array_equal(_check(problem, choice), choice)


def test_a_move_is_kept_where_staying_does_not_fit() -> None:
    """The program placed a new job in the room the mover left at home, and the home node cannot
    hold both minimums (2 cores each on 2 cores): undoing the move would overfill it, so it stands
    and the choice stays feasible."""
    jobs = [
        _job("alone", "n0", 2000, 5, 40, hi=2000, min_cpu_millis=2000),
        _job("new", None, 0, 0, 40, hi=2000, min_cpu_millis=2000),
    ]
    snapshot = _snapshot(jobs, cpus=(2000, 2000))
    problem = _problem(snapshot)
    choice = _moved(problem, _staying(problem), 0, "n1")
    home = problem.node_names.index("n0")
    start = [o for o in problem.options_of(1) if problem.opt_node[o] == home]
    choice[1] = min(start, key=lambda o: int(problem.dem_cpu[o]))
    assert problem.violations(choice) == []
    assert np.array_equal(_check(problem, choice), choice)


def test_a_deadline_job_is_not_second_guessed() -> None:
    """A job with an open tier-1 deadline is moved for its QoE, which the rollout does not price."""
    target = {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.9999, "deadline": NOW + 3600}, "max_epochs": 40}
    problem = _problem(_snapshot([_job("urgent", "n0", 8000, 5, 40, target=target)]))
    choice = _moved(problem, _staying(problem), 0, "n1")
    assert np.array_equal(_check(problem, choice), choice)


def test_a_job_that_cannot_resize_live_is_not_second_guessed() -> None:
    """The gainless move of the first case, for a job that cannot change its share without a
    restart: at home it holds its level until done, as the program prices it, so its move stands."""
    problem = _problem(_snapshot([_job("fixed", "n0", 8000, 5, 40, resizable=False)]))
    choice = _moved(problem, _staying(problem), 0, "n1")
    assert np.array_equal(_check(problem, choice), choice)


def test_a_move_off_a_deadline_jobs_node_is_not_second_guessed() -> None:
    """The gainless move of the first case, but the home node also runs a job with an open tier-1
    deadline: the room the move leaves may be what meets it."""
    target = {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.9999, "deadline": NOW + 3600}, "max_epochs": 40}
    jobs = [_job("alone", "n0", 4000, 5, 40, hi=4000), _job("urgent", "n0", 4000, 5, 40, hi=4000, target=target)]
    problem = _problem(_snapshot(jobs))
    choice = _moved(problem, _staying(problem), 0, "n1")
    assert np.array_equal(_check(problem, choice), choice)
    # Without the deadline the same move is undone (each job is at its max at home already).
    problem = _problem(_snapshot([_job("alone", "n0", 4000, 5, 40, hi=4000), _job("other", "n0", 4000, 5, 40, hi=4000)]))
    choice = _moved(problem, _staying(problem), 0, "n1")
    assert problem.opt_way[_check(problem, choice)[0]] == STAY


def test_plans_of_the_crowded_case_pass_the_checker() -> None:
    """The whole planner on the crowded node: whatever it moves, the plan passes the independent
    checker, every job is placed, and at most the budget's migrations are made."""
    snapshot = _snapshot([_job(f"j{i}", "n0", 2000, 5, 40) for i in range(4)])
    p = plan(snapshot, CONFIG).plan
    assert check_plan(snapshot, p) == []
    assert all(a.node is not None for a in p.assignments)
    assert sum(a.action == "migrate" for a in p.assignments) <= 4


ROOM_PROFILE = "deadlines>mean-jct>makespan"


def _room(problem: Problem, choice: np.ndarray) -> tuple[np.ndarray, dict[int, str]]:
    return moves_to_room(problem, choice, ROOM_PROFILE, CONFIG, [int(c) for c in problem.cap_cpu])


def test_a_long_job_moves_to_an_empty_node() -> None:
    """Two long jobs at 4 cores each on one node (each could use 8), the other node empty (its job
    ended): the planner moves one of them there, says why, and the plan passes the checker. Before
    ``moves_to_room`` the program kept both home (a CPU job moves only when it must)."""
    snapshot = _snapshot([_job("a", "n0", 4000, 5, 40), _job("b", "n0", 4000, 5, 40)])
    p = plan(snapshot, CONFIG).plan
    assert check_plan(snapshot, p) == []
    by = {a.job: a for a in p.assignments}
    assert sorted(a.node for a in by.values()) == ["n0", "n1"]
    moved = [a for a in by.values() if a.action == "migrate"]
    assert len(moved) == 1 and moved[0].node == "n1"
    assert "has CPU no job there can use" in moved[0].explanation
    assert p.objective.migrations == 1


def test_no_move_where_it_cannot_pay() -> None:
    """The same two jobs one epoch from their end: what a move loses (checkpoint, restart, the work
    since the last checkpoint, four times over) outweighs sharing the node for one more epoch."""
    problem = _problem(_snapshot([_job("a", "n0", 4000, 39, 40), _job("b", "n0", 4000, 39, 40)]))
    choice = _staying(problem)
    out, notes = _room(problem, choice)
    assert np.array_equal(out, choice) and notes == {}


def test_no_move_without_budget() -> None:
    snapshot = _snapshot([_job("a", "n0", 4000, 5, 40), _job("b", "n0", 4000, 5, 40)])
    snapshot = snapshot.model_copy(update={"settings": snapshot.settings.model_copy(update={"migration_budget": 0})})
    problem = _problem(snapshot)
    choice = _staying(problem)
    out, notes = _room(problem, choice)
    assert np.array_equal(out, choice) and notes == {}


def test_no_candidate_where_every_job_has_its_max() -> None:
    """Two jobs whose max is half the node each: at home they already get all they can use, so the
    empty node offers them nothing and no move is priced."""
    problem = _problem(_snapshot([_job("a", "n0", 4000, 5, 40, hi=4000), _job("b", "n0", 4000, 5, 40, hi=4000)]))
    choice = _staying(problem)
    out, notes = _room(problem, choice)
    assert np.array_equal(out, choice) and notes == {}
