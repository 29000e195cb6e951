"""OR-Tools CP-SAT backend (the default).

Determinism: search workers run interleaved in one thread (``interleave_search``) and the time limit
is CP-SAT's *deterministic* time, so the same problem gives the same answer on any load; a wall-clock
guard stops a run that strays far past the limit.
"""

from __future__ import annotations

import time

import numpy as np
from ortools.sat.python import cp_model

from planner.backends.base import SolveResult, capacity_rows
from planner.problem import Problem

_STATUS = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
    cp_model.MODEL_INVALID: "unknown",
    cp_model.UNKNOWN: "unknown",
}


class CpSatBackend:
    name = "cpsat"

    def __init__(self, workers: int = 8, seed: int = 0) -> None:
        self.workers = workers
        self.seed = seed

    def solve(self, problem: Problem, *, time_limit: float, wall_limit: float) -> SolveResult:
        t0 = time.perf_counter()
        model = cp_model.CpModel()
        n = problem.n_options
        x = [model.new_bool_var(f"x{i}") for i in range(n)]
        starts = problem.job_start
        for j in range(problem.n_jobs):
            block = x[starts[j] : starts[j + 1]]
            if len(block) == 1:
                model.add(block[0] == 1)
            else:
                model.add_exactly_one(block)
        for _, idx, dem, cap in capacity_rows(problem):
            model.add(cp_model.LinearExpr.weighted_sum([x[i] for i in idx], dem.tolist()) <= cap)
        mv = np.flatnonzero(problem.moves)
        if mv.size > problem.migration_budget:
            model.add(sum(x[i] for i in mv) <= problem.migration_budget)
        fq = problem.finish_q
        top = int(fq.max()) if n else 0
        floor = int(max((fq[starts[j] : starts[j + 1]].min() for j in range(problem.n_jobs)), default=0))
        makespan = model.new_int_var(floor, max(top, floor), "makespan")
        for j in range(problem.n_jobs):
            s, e = int(starts[j]), int(starts[j + 1])
            block_fq = fq[s:e]
            if block_fq.max() <= floor:
                continue  # can never set the makespan above its lower bound
            model.add(cp_model.LinearExpr.weighted_sum(x[s:e], block_fq.tolist()) <= makespan)
        model.minimize(cp_model.LinearExpr.weighted_sum(x, problem.cost.tolist()) + problem.makespan_weight * makespan)

        hint = problem.hint
        chosen = np.zeros(n, dtype=bool)
        chosen[hint] = True
        for i in range(n):
            model.add_hint(x[i], bool(chosen[i]))
        model.add_hint(makespan, max(int(fq[hint].max()) if hint.size else 0, floor))

        solver = cp_model.CpSolver()
        p = solver.parameters
        p.max_deterministic_time = max(time_limit, 0.01)
        p.max_time_in_seconds = max(wall_limit - (time.perf_counter() - t0), 0.05)
        p.num_workers = self.workers
        p.interleave_search = True
        p.random_seed = self.seed
        p.log_search_progress = False
        status = solver.solve(model)
        name = _STATUS.get(status, "unknown")
        choice = None
        obj = bound = None
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            vals = np.fromiter((solver.boolean_value(v) for v in x), dtype=bool, count=n)
            choice = np.zeros(problem.n_jobs, dtype=np.int64)
            sel = np.flatnonzero(vals)
            choice[problem.opt_job[sel]] = sel
            obj = float(solver.objective_value)
            bound = float(solver.best_objective_bound)
        return SolveResult(
            backend=self.name,
            status=name,  # type: ignore[arg-type]
            choice=choice,
            objective=obj,
            bound=bound,
            seconds=time.perf_counter() - t0,
            message=f"{solver.status_name(status)}; deterministic time {solver.deterministic_time:.2f}",
            variables=n + 1,
        )
