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

The backend talks to ``ortools.sat.python.cp_model_helper``, the compiled module under OR-Tools'
``cp_model`` (its ``CpModelProto``, ``SatParameters`` and ``SolveWrapper`` are what ``CpModel`` and
``CpSolver`` hold and call), not to ``cp_model`` itself: that module imports pandas for its
Series helpers, 0.2-0.4 s of every process that plans (the daemon, each service worker, the CLI),
and the backend uses none of them. The proto is the same (``tests/test_backends.py``).
"""

from __future__ import annotations

import time

import numpy as np
from ortools.sat.python import cp_model_helper as cmh

from planner.backends.base import SolveResult, capacity_rows
from planner.problem import Problem

#: Above this many options presolve is skipped: on large models it eats a short budget whole, while
#: without it the search still starts from the LP relaxation and reports its bound.
PRESOLVE_MAX_OPTIONS = 5000

#: CP-SAT deterministic time units per wall-clock second, measured on the reference machine (2 cores):
#: 30.9 units took 83.6 s, 1.05 units 2.7 s under load, about 0.5 per second when idle.
DETERMINISTIC_UNITS_PER_SECOND = 0.4

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


def _linear(linear: object, variables: list[int], coeffs: list[int], lo: int, hi: int) -> None:
    """Fill a ``LinearConstraintProto``: ``lo <= sum(coeffs * variables) <= hi``."""
    linear.vars.extend(variables)  # type: ignore[attr-defined]
    linear.coeffs.extend(coeffs)  # type: ignore[attr-defined]
    linear.domain.extend((lo, hi))  # type: ignore[attr-defined]


_S = cmh.CpSolverStatus
_STATUS = {
    _S.OPTIMAL: "optimal",
    _S.FEASIBLE: "feasible",
    _S.INFEASIBLE: "infeasible",
    _S.MODEL_INVALID: "unknown",
    _S.UNKNOWN: "unknown",
}


class CpSatBackend:
    name = "cpsat"

    def __init__(self, workers: int = 1, seed: int = 1) -> None:
        self.workers = workers
        self.seed = seed

    def _model(self, problem: Problem) -> tuple[cmh.CpModelProto, int]:
        """The model, written into its proto directly (option ``i`` is variable ``i``; the makespan is
        the variable whose index comes back): the same proto, constraint for constraint, as building
        it through ``new_bool_var`` and linear expressions (``tests/test_backends.py`` holds them equal),
        in 2.8 ms where that took 4.5 ms for a problem of ~1,100 options (`docs/benchmarks.md`, "Warm
        plans over HTTP: less work per request (session 19)")."""
        proto = cmh.CpModelProto()
        n = problem.n_options
        variables, constraints = proto.variables, proto.constraints
        for _ in range(n):
            variables.add().domain.extend((0, 1))
        starts = problem.job_start.tolist()
        for j in range(problem.n_jobs):
            constraints.add().exactly_one.literals.extend(range(starts[j], starts[j + 1]))
        for _, idx, dem, cap in capacity_rows(problem):
            _linear(constraints.add().linear, idx.tolist(), dem.tolist(), _INT_MIN, int(cap))
        mv = np.flatnonzero(problem.moves)
        if mv.size > problem.migration_budget:
            _linear(constraints.add().linear, mv.tolist(), [1] * mv.size, _INT_MIN, int(problem.migration_budget))
        fq = problem.finish_q
        # The makespan is at least every job's fastest finish: a tight lower bound on M.
        floor = int(np.minimum.reduceat(fq, problem.job_start[:-1]).max()) if problem.n_jobs else 0
        floor = max(floor, problem.makespan_floor)
        top = max(int(fq.max()) if n else 0, floor)
        makespan = n  # the variable after the options, as ``CpModel.new_int_var`` would add it
        var = variables.add()
        var.name = "makespan"
        var.domain.extend((floor, top))
        finish = fq.tolist()
        for j in range(problem.n_jobs):
            s, e = starts[j], starts[j + 1]
            if max(finish[s:e]) <= floor:
                continue  # can never push the makespan above its lower bound
            # sum(finish * x) <= M, as CP-SAT itself normalises it: M - sum(finish * x) >= 0.
            _linear(constraints.add().linear, [*range(s, e), makespan], [*(-f for f in finish[s:e]), 1], 0, _INT_MAX)
        objective = proto.objective
        objective.vars.extend([*range(n), makespan])
        objective.coeffs.extend([*problem.cost.tolist(), problem.makespan_weight])
        # Hint the chosen option of each job; exactly-one propagates the zeros.
        hint = proto.solution_hint
        hint.vars.extend([*problem.hint.tolist(), makespan])
        hint.values.extend([1] * problem.n_jobs + [max(int(fq[problem.hint].max()) if problem.n_jobs else 0, floor)])
        return proto, makespan

    def solve(self, problem: Problem, *, time_limit: float, wall_limit: float) -> SolveResult:
        t0 = time.perf_counter()
        proto, _ = self._model(problem)
        p = cmh.SatParameters()
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
        solver = cmh.SolveWrapper()
        solver.set_parameters(p)
        response = solver.solve(proto)
        status = response.status
        search_wall = time.perf_counter() - t_search
        name = _STATUS.get(status, "unknown")
        choice = None
        obj = bound = None
        if status in (_S.OPTIMAL, _S.FEASIBLE):
            vals = np.array(list(response.solution)[: problem.n_options], dtype=bool)
            choice = np.zeros(problem.n_jobs, dtype=np.int64)
            sel = np.flatnonzero(vals)
            choice[problem.opt_job[sel]] = sel
            obj = float(problem.objective(choice))  # exact: the solver reports a double
        if status in (_S.OPTIMAL, _S.FEASIBLE, _S.UNKNOWN):
            # Even without a solution the search may have proved a lower bound (the LP relaxation).
            b = float(response.best_objective_bound)
            bound = b if b > 0 or obj is not None else None
        det = response.deterministic_time
        cut = status != _S.OPTIMAL and search_wall >= 0.95 * p.max_time_in_seconds and det < 0.95 * p.max_deterministic_time
        msg = f"{status.name}; deterministic time {det:.3f} of {p.max_deterministic_time:.3f}"
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
