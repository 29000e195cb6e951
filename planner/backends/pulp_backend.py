"""PuLP backend: the same model for CBC (bundled with PuLP) or HiGHS (when ``highspy`` is installed).

HiGHS is preferred when PuLP can load it: it reports its dual bound, so the plan carries a real gap.
CBC through PuLP's command-line interface reports none; its gap is 0 when it proves optimality and
unknown otherwise. Both run single-threaded with a fixed seed, so results repeat.

Note: the ``highspy`` wheel and OR-Tools 9.15 (which bundles its own HiGHS) clash at the symbol
level — whichever is loaded first breaks the other. FlowPlan therefore does not depend on
``highspy``; :mod:`planner.backends` imports OR-Tools first, so an installed ``highspy`` simply
shows up as unavailable here and the backend uses CBC.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pulp

from planner.backends.base import SolveResult, capacity_rows
from planner.problem import Problem


def highs_available() -> bool:
    try:
        return bool(pulp.HiGHS(msg=False).available())
    except Exception:  # noqa: BLE001 - any import/config failure means "not available"
        return False


class PulpBackend:
    def __init__(self, engine: str = "auto") -> None:
        if engine == "auto":
            engine = "highs" if highs_available() else "cbc"
        self.engine = engine
        self.name = f"pulp-{engine}"

    def solve(self, problem: Problem, *, time_limit: float, wall_limit: float) -> SolveResult:
        t0 = time.perf_counter()
        lp = pulp.LpProblem("flowplan", pulp.LpMinimize)
        n = problem.n_options
        x = [lp.add_variable(f"x{i}", lowBound=0, upBound=1, cat=pulp.LpBinary) for i in range(n)]
        fq = problem.finish_q
        starts = problem.job_start
        makespan = lp.add_variable(
            "makespan", lowBound=problem.makespan_floor, upBound=max(int(fq.max()) if n else 0, problem.makespan_floor)
        )
        lp += pulp.lpSum(int(c) * v for c, v in zip(problem.cost, x, strict=False)) + problem.makespan_weight * makespan
        for j in range(problem.n_jobs):
            s, e = int(starts[j]), int(starts[j + 1])
            lp += pulp.lpSum(x[s:e]) == 1, f"one_{j}"
            lp += pulp.lpSum(int(f) * v for f, v in zip(fq[s:e], x[s:e], strict=False)) <= makespan, f"mk_{j}"
        for k, (node, idx, dem, cap) in enumerate(capacity_rows(problem)):
            lp += pulp.lpSum(int(d) * x[i] for d, i in zip(dem, idx, strict=False)) <= cap, f"cap_{node}_{k}"
        mv = np.flatnonzero(problem.moves)
        if mv.size > problem.migration_budget:
            lp += pulp.lpSum(x[i] for i in mv) <= problem.migration_budget, "migrations"
        chosen = np.zeros(n, dtype=bool)
        chosen[problem.hint] = True
        for v, c in zip(x, chosen, strict=False):
            v.setInitialValue(1 if c else 0)
        makespan.setInitialValue(max(int(fq[problem.hint].max()) if problem.hint.size else 0, problem.makespan_floor))

        limit = max(min(time_limit, wall_limit), 0.1)
        if self.engine == "highs":
            solver = pulp.HiGHS(msg=False, timeLimit=limit, threads=1, random_seed=0)
        else:
            with warnings.catch_warnings():
                # PuLP 3.x flags its bundled CBC for removal in 4.0; pyproject pins pulp < 4.
                warnings.simplefilter("ignore", DeprecationWarning)
                # Seeds other than 0: CLP's "randomSeed 0" seeds from the clock, so CBC returned a
                # different one of several (near-)optimal solutions on every call.
                options = ["randomSeed 1", "randomCbcSeed 1"]
                solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=limit, warmStart=True, threads=1, options=options)
        lp.solve(solver)
        status_txt = pulp.LpStatus.get(lp.status, "Unknown")
        values = np.array([v.value() if v.value() is not None else 0.0 for v in x])
        choice = None
        obj = bound = None
        status = "unknown"
        if lp.status == pulp.LpStatusOptimal or (values.size and np.isclose(values, 1).sum() == problem.n_jobs):
            sel = np.flatnonzero(values > 0.5)
            if sel.size == problem.n_jobs and (np.bincount(problem.opt_job[sel], minlength=problem.n_jobs) == 1).all():
                choice = np.zeros(problem.n_jobs, dtype=np.int64)
                choice[problem.opt_job[sel]] = sel
                obj = float(problem.objective(choice))
        if choice is not None:
            status = "feasible"
            if self.engine == "highs":
                info = lp.solverModel.getInfo()
                bound = float(info.mip_dual_bound)
                model_status = lp.solverModel.getModelStatus()
                import highspy

                if model_status == highspy.HighsModelStatus.kOptimal:
                    status = "optimal"
            elif lp.status == pulp.LpStatusOptimal and lp.sol_status == pulp.LpSolutionOptimal:
                status = "optimal"
            if status == "optimal" and bound is None:
                bound = obj
        elif lp.status == pulp.LpStatusInfeasible:
            status = "infeasible"
        return SolveResult(
            backend=self.name,
            status=status,  # type: ignore[arg-type]
            choice=choice,
            objective=obj,
            bound=bound,
            seconds=time.perf_counter() - t0,
            message=status_txt,
            variables=n + 1,
        )
