"""OR-Tools CP-SAT backend (the default).

Determinism: the search runs on CP-SAT's *deterministic* time, a work counter that does not depend
on machine load, so the same problem gives the same answer. ``time_limit`` (seconds) is converted at
:data:`DETERMINISTIC_UNITS_PER_SECOND`, measured on the 2-core reference machine; a wall-clock guard
(counted from the start of the search, model building excluded) stops a run that strays far past
it, and the result then says so, since a run cut by the wall clock may differ between runs.

The random seed is fixed at CP-SAT's own default (1): on the examples and 12 random 40-job
snapshots it proved all 15 optimal within a 1 s limit, where seed 0 stalled on the SpeCon example.

With ``workers > 1`` the search workers run interleaved in one thread (``interleave_search``),
still deterministic; one worker is the default because on two cores the single LP-guided search
closes small gaps fastest.
"""

from __future__ import annotations

import time

import numpy as np
from ortools.sat.python import cp_model

from planner.backends.base import SolveResult, capacity_rows
from planner.problem import Problem

#: Above this many options presolve is skipped: on large models it eats a short budget whole, while
#: without it the search still starts from the LP relaxation and reports its bound.
PRESOLVE_MAX_OPTIONS = 5000

#: CP-SAT deterministic time units per wall-clock second, measured on the reference machine (2 cores):
#: 30.9 units took 83.6 s, 1.05 units 2.7 s under load, about 0.5 per second when idle.
DETERMINISTIC_UNITS_PER_SECOND = 0.4

_STATUS = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
    cp_model.MODEL_INVALID: "unknown",
    cp_model.UNKNOWN: "unknown",
}


class CpSatBackend:
    name = "cpsat"

    def __init__(self, workers: int = 1, seed: int = 1) -> None:
        self.workers = workers
        self.seed = seed

    def _model(self, problem: Problem) -> tuple[cp_model.CpModel, list[cp_model.IntVar], cp_model.IntVar]:
        model = cp_model.CpModel()
        n = problem.n_options
        x = [model.new_bool_var("") for _ in range(n)]
        starts = problem.job_start
        for j in range(problem.n_jobs):
            model.add_exactly_one(x[starts[j] : starts[j + 1]])
        for _, idx, dem, cap in capacity_rows(problem):
            model.add(cp_model.LinearExpr.weighted_sum([x[i] for i in idx], dem.tolist()) <= cap)
        mv = np.flatnonzero(problem.moves)
        if mv.size > problem.migration_budget:
            model.add(sum(x[i] for i in mv) <= problem.migration_budget)
        fq = problem.finish_q
        # The makespan is at least every job's fastest finish: a tight lower bound on M.
        floor = int(np.minimum.reduceat(fq, starts[:-1]).max()) if problem.n_jobs else 0
        floor = max(floor, problem.makespan_floor)
        top = max(int(fq.max()) if n else 0, floor)
        makespan = model.new_int_var(floor, top, "makespan")
        for j in range(problem.n_jobs):
            s, e = int(starts[j]), int(starts[j + 1])
            if fq[s:e].max() <= floor:
                continue  # can never push the makespan above its lower bound
            model.add(cp_model.LinearExpr.weighted_sum(x[s:e], fq[s:e].tolist()) <= makespan)
        objective = model.proto.objective
        objective.vars.extend([*range(n), makespan.index])
        objective.coeffs.extend([*problem.cost.tolist(), problem.makespan_weight])
        # Hint the chosen option of each job; exactly-one propagates the zeros.
        hint = model.proto.solution_hint
        hint.vars.extend([*problem.hint.tolist(), makespan.index])
        hint.values.extend([1] * problem.n_jobs + [max(int(fq[problem.hint].max()) if problem.n_jobs else 0, floor)])
        return model, x, makespan

    def solve(self, problem: Problem, *, time_limit: float, wall_limit: float) -> SolveResult:
        t0 = time.perf_counter()
        model, x, _ = self._model(problem)
        solver = cp_model.CpSolver()
        p = solver.parameters
        p.max_deterministic_time = max(time_limit * DETERMINISTIC_UNITS_PER_SECOND, 0.005)
        p.max_time_in_seconds = max(wall_limit, 0.05)
        p.num_workers = self.workers
        if self.workers > 1:
            p.interleave_search = True
        p.random_seed = self.seed
        if problem.n_options > PRESOLVE_MAX_OPTIONS:
            p.cp_model_presolve = False
        p.log_search_progress = False
        t_search = time.perf_counter()
        status = solver.solve(model)
        search_wall = time.perf_counter() - t_search
        name = _STATUS.get(status, "unknown")
        choice = None
        obj = bound = None
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            vals = np.fromiter((solver.boolean_value(v) for v in x), dtype=bool, count=problem.n_options)
            choice = np.zeros(problem.n_jobs, dtype=np.int64)
            sel = np.flatnonzero(vals)
            choice[problem.opt_job[sel]] = sel
            obj = float(problem.objective(choice))  # exact: the solver reports a double
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
            # Even without a solution the search may have proved a lower bound (the LP relaxation).
            b = float(solver.best_objective_bound)
            bound = b if b > 0 or obj is not None else None
        det = solver.deterministic_time
        cut = status != cp_model.OPTIMAL and search_wall >= 0.95 * p.max_time_in_seconds and det < 0.95 * p.max_deterministic_time
        msg = f"{solver.status_name(status)}; deterministic time {det:.3f} of {p.max_deterministic_time:.3f}"
        if cut:
            msg += "; stopped by the wall-clock guard, so this answer may differ between runs"
        return SolveResult(
            backend=self.name,
            status=name,  # type: ignore[arg-type]
            choice=choice,
            objective=obj,
            bound=bound,
            seconds=time.perf_counter() - t0,
            message=msg,
            variables=problem.n_options + 1,
        )
