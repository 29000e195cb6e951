"""One contract for every solver backend: same problem, same optimum.

Cases: seeded random snapshots (real curves) solved to optimality by CP-SAT and by PuLP/CBC must
reach the same objective; both return choices that satisfy the model's constraints; the greedy warm
start is always feasible; a decomposed solve (forced by a small part size) still passes the checker;
PuLP/CBC gives the same answer to the same problem every time (the planner is pure).
"""

from __future__ import annotations

import pytest
from conftest import benchmark_module, random_snapshot

from planner import PlannerConfig, check_plan, plan
from planner.backends import CpSatBackend, PulpBackend
from planner.build import build_problem
from planner.core import _outlooks


def _problem(seed: int, **kw):
    snap = random_snapshot(seed, **kw)
    cfg = PlannerConfig()
    outs = _outlooks(snap, cfg, None, None)
    ordered = [outs[j.id][1] for j in snap.jobs if j.status != "finished"]
    return build_problem(snap, ordered, cfg)[0]


@pytest.mark.parametrize("seed", range(25))
def test_cpsat_and_pulp_reach_the_same_optimum(seed: int) -> None:
    problem = _problem(seed, n_nodes=3, n_jobs=8)
    a = CpSatBackend().solve(problem, time_limit=20, wall_limit=30)
    b = PulpBackend().solve(problem, time_limit=20, wall_limit=30)
    assert a.status == "optimal" and b.status == "optimal", (a.message, b.message)
    assert a.objective == b.objective
    for r in (a, b):
        assert r.choice is not None
        assert problem.violations(r.choice) == []
        assert problem.objective(r.choice) == r.objective


@pytest.mark.parametrize("seed", range(25))
def test_greedy_warm_start_is_feasible(seed: int) -> None:
    problem = _problem(seed, n_nodes=4, n_jobs=12)
    assert problem.violations(problem.hint) == []


@pytest.mark.parametrize("solver", ["cpsat", "pulp"])
def test_decomposed_solve_passes_checker(solver: str) -> None:
    snap = random_snapshot(7, n_nodes=6, n_jobs=30)
    whole = plan(snap, PlannerConfig(solver=solver, time_limit=2)).plan
    parts = plan(snap, PlannerConfig(solver=solver, time_limit=2, max_jobs_per_subproblem=8)).plan
    assert parts.solver.subproblems >= 3
    assert check_plan(snap, parts) == []
    greedy = plan(snap, PlannerConfig(solver="greedy")).plan
    assert parts.objective.total <= greedy.objective.total
    assert whole.objective.total <= parts.objective.total


def test_pulp_gives_the_same_answer_every_time() -> None:
    """CBC seeded with 0 seeds from the clock: on this 300-job, 30-node problem (many ties) four calls
    gave four different choices of the same objective; seeded otherwise, every call gives the same
    one. The problem must be one CBC proves optimal well inside its limit (1.8 s of 30 here): a search
    stopped by the clock answers with whatever it reached, which is another source of different
    answers (the seed-7 snapshot this test used before needed 60 s once session 36 changed the curve
    prior, and failed so on an idle machine)."""
    snap = benchmark_module("workload.py").make_snapshot(300, 30, seed=3)
    cfg = PlannerConfig(solver="pulp")
    outs = _outlooks(snap, cfg, None, None)
    problem = build_problem(snap, [outs[j.id][1] for j in snap.jobs if j.status != "finished"], cfg)[0]
    got = [PulpBackend("cbc").solve(problem, time_limit=30, wall_limit=60) for _ in range(4)]
    assert all(r.choice is not None for r in got)
    assert all(r.status == "optimal" for r in got), ("CBC stopped by its clock", [r.status for r in got])
    assert len({r.choice.tobytes() for r in got}) == 1, [r.objective for r in got]


def _model_through_expressions(problem):
    """The CP-SAT model as the high-level API builds it (variables, exactly-one, linear expressions):
    the reference the backend's directly written proto must equal."""
    import numpy as np
    from ortools.sat.python import cp_model

    from planner.backends.base import capacity_rows

    model = cp_model.CpModel()
    n, starts, fq = problem.n_options, problem.job_start, problem.finish_q
    x = [model.new_bool_var("") for _ in range(n)]
    for j in range(problem.n_jobs):
        model.add_exactly_one(x[starts[j] : starts[j + 1]])
    for _, idx, dem, cap in capacity_rows(problem):
        model.add(cp_model.LinearExpr.weighted_sum([x[i] for i in idx], dem.tolist()) <= cap)
    mv = np.flatnonzero(problem.moves)
    if mv.size > problem.migration_budget:
        model.add(sum(x[i] for i in mv) <= problem.migration_budget)
    floor = max(int(np.minimum.reduceat(fq, starts[:-1]).max()), problem.makespan_floor)
    makespan = model.new_int_var(floor, max(int(fq.max()), floor), "makespan")
    for j in range(problem.n_jobs):
        s, e = int(starts[j]), int(starts[j + 1])
        if fq[s:e].max() > floor:
            model.add(cp_model.LinearExpr.weighted_sum(x[s:e], fq[s:e].tolist()) <= makespan)
    model.proto.objective.vars.extend([*range(n), makespan.index])
    model.proto.objective.coeffs.extend([*problem.cost.tolist(), problem.makespan_weight])
    model.proto.solution_hint.vars.extend([*problem.hint.tolist(), makespan.index])
    model.proto.solution_hint.values.extend([1] * problem.n_jobs + [max(int(fq[problem.hint].max()), floor)])
    return model


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("budget", [None, 1])
def test_cpsat_model_written_directly_is_the_expression_built_one(seed: int, budget: int | None) -> None:
    """The backend writes its model's proto directly (it is a tenth of a warm plan's time through the
    high-level API); the proto must be the one the high-level API builds, constraint for constraint,
    so the search, and every plan, stay as they were. ``budget``: a binding migration budget."""
    from dataclasses import replace

    import numpy as np

    problem = _problem(seed, n_nodes=4, n_jobs=12)
    if budget is not None:
        moves = np.zeros(problem.n_options, dtype=bool)
        moves[::3] = True
        problem = replace(problem, moves=moves, migration_budget=budget)
    proto, makespan = CpSatBackend()._model(problem)
    assert makespan == problem.n_options
    assert str(proto) == str(_model_through_expressions(problem).proto)


def test_planning_imports_no_pandas() -> None:
    """OR-Tools' ``cp_model`` imports pandas (0.2-0.4 s of a process's start); the backend goes to the
    compiled helper under it, so a process that plans (the daemon, a service worker, the CLI) never
    loads pandas. Run in a fresh interpreter: this test session has imported it already."""
    import subprocess
    import sys

    code = (
        "import sys, planner.core, planner.policies.flowplan\n"
        "from planner.backends import CpSatBackend\n"
        "print(sorted(m for m in ('pandas', 'ortools.sat.python.cp_model') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
