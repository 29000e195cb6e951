"""Relax and fix: the LP relaxation decides most jobs, the integer solver the rest.

For large problems the integer solver cannot even load a warm start within a sub-second budget, but
the LP relaxation of this model is nearly integral (at 1,000 jobs × 100 nodes: 66 of 18,700
variables fractional) and solves in a fraction of a second with HiGHS's dual simplex (bundled with
SciPy; a vertex solution, so few fractions). So:

1. solve the LP relaxation — its optimum is a valid lower bound for the whole problem, which is what
   the plan's ``gap`` is measured against;
2. *fix* every job whose LP choice is integral (one option at 1);
3. solve the *residual* problem — the undecided jobs over the capacity and migration budget the
   fixed jobs leave, with the makespan at least the fixed jobs' latest finish — exactly, with the
   configured backend (CP-SAT or PuLP).

One kind of integral decision is not fixed: when the LP spends the whole migration budget, the jobs
whose LP choice spends it (a migration, a restart in place, a pause) are left to the residual too,
hinted with the LP's choice. The budget is the one constraint that couples every node; the LP spends
part of it in fractions over several running jobs, and fixing the integral spenders leaves the
residual only the restarts they do not take. A deadline that needs another set of restarts was then
missed although a whole solve meets it (issue 14: at 1,000 × 100, seed 2, 19 spenders fixed and one
restart left to a 31-job residual; released, the residual has 50 jobs and is still solved exactly in
milliseconds). At most ``migration_budget`` jobs are added.

Fixing can leave the residual infeasible: the LP spread a running job between staying and pausing,
the fixed jobs took the room it needs to stay, and pausing is over the budget. Then a *wider*
residual is tried: the fixed jobs on the nodes where undecided running jobs would stay, and every
fixed job that spends budget, are released too. If that fails as well, the greedy warm start
stands.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from planner.backends.base import capacity_rows
from planner.menu import STAY
from planner.problem import Problem

#: LP values within this of 0 or 1 count as integral.
INTEGRAL_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Relaxation:
    values: np.ndarray  # LP value per option
    bound: float  # LP optimum (a lower bound on the integer optimum)
    seconds: float


def solve_relaxation(problem: Problem) -> Relaxation | None:
    """LP relaxation with HiGHS dual simplex; ``None`` if it fails (the caller falls back)."""
    import time

    t0 = time.perf_counter()
    n, J = problem.n_options, problem.n_jobs
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    rhs: list[float] = []
    r = 0
    for _, idx, dem, cap in capacity_rows(problem):
        rows.append(np.full(idx.size, r))
        cols.append(idx)
        vals.append(dem.astype(float))
        rhs.append(float(cap))
        r += 1
    mv = np.flatnonzero(problem.moves)
    if mv.size > problem.migration_budget:
        rows.append(np.full(mv.size, r))
        cols.append(mv)
        vals.append(np.ones(mv.size))
        rhs.append(float(problem.migration_budget))
        r += 1
    # Makespan: Σ_{o∈j} finish_o x_o - M <= 0 for every job.
    rows += [r + problem.opt_job, r + np.arange(J)]
    cols += [np.arange(n), np.full(J, n)]
    vals += [problem.finish_q.astype(float), -np.ones(J)]
    rhs += [0.0] * J
    r += J
    a_ub = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, n + 1)).tocsr()
    a_eq = coo_matrix((np.ones(n), (problem.opt_job, np.arange(n))), shape=(J, n + 1)).tocsr()
    # Costs span many orders of magnitude (QoE terms dominate time terms); scale them towards 1 so
    # the simplex tolerances stay meaningful.
    c = np.append(problem.cost.astype(float), float(problem.makespan_weight))
    scale = 1.0 / max(float(np.abs(c).max()), 1.0)
    # Bounds as one (n + 1) x 2 array: what linprog makes of a list of pairs (None: inf), without
    # converting a pair per option.
    bounds = np.empty((n + 1, 2))
    bounds[:n] = (0.0, 1.0)
    bounds[n] = (float(problem.makespan_floor), np.inf)
    res = linprog(c * scale, A_ub=a_ub, b_ub=np.array(rhs), A_eq=a_eq, b_eq=np.ones(J), bounds=bounds, method="highs-ds")
    if res.status != 0 or res.x is None:
        return None
    return Relaxation(values=np.asarray(res.x[:n]), bound=float(res.fun) / scale, seconds=time.perf_counter() - t0)


@dataclass(frozen=True)
class Residual:
    """The undecided part: ``problem`` over jobs ``jobs`` (indices in the full problem), whose options
    are the full problem's options ``keep``; ``fixed`` holds the LP's choice for the decided jobs
    (-1 for undecided ones)."""

    problem: Problem
    jobs: np.ndarray
    keep: np.ndarray
    fixed: np.ndarray


def _around(problem: Problem, fixed: np.ndarray, keep: np.ndarray, room: np.ndarray) -> tuple[np.ndarray, Problem]:
    """The open jobs of ``fixed`` (-1) and the problem over them and their options ``keep``: on
    ``room`` (what the fixed jobs leave of each node), the budget they leave, and a makespan at least
    their latest finish."""
    open_jobs = np.flatnonzero(fixed < 0)
    decided = fixed[fixed >= 0]
    sub = problem.subset(
        open_jobs,
        keep,
        cap_cpu=room[0],
        cap_gpu=room[1],
        cap_mem=room[2],
        migration_budget=problem.migration_budget - int(problem.moves[decided].sum()),
        makespan_floor=max(problem.makespan_floor, int(problem.finish_q[decided].max()) if decided.size else 0),
    )
    return open_jobs, sub


def residual(problem: Problem, relaxation: Relaxation, *, wide: bool = False) -> Residual | None:
    """The residual problem after fixing the jobs the LP decided (with no jobs when the LP decided
    them all: ``fixed`` is then the answer); ``None`` if the fixed part leaves no feasible room."""
    x = relaxation.values
    fixed = np.full(problem.n_jobs, -1, dtype=np.int64)
    top = np.flatnonzero(x >= 1.0 - INTEGRAL_TOLERANCE)
    fixed[problem.opt_job[top]] = top
    lp_choice = fixed.copy()
    if _budget_binds(problem, x):
        # Which restarts the budget goes to is left to the exact solve (see the module docstring).
        chosen = fixed[fixed >= 0]
        fixed[problem.opt_job[chosen[problem.moves[chosen] > 0]]] = -1
    if wide:
        # Room where undecided running jobs would stay (pending ones can always wait).
        undecided = fixed[problem.opt_job] < 0
        hot = np.zeros(len(problem.node_names), dtype=bool)
        staying = undecided & (problem.opt_way == STAY)
        hot[problem.opt_node[staying]] = True
        hot[problem.ext_node[staying[problem.ext_opt]]] = True  # a gang stays on all its nodes
        chosen = fixed[fixed >= 0]
        node_of = problem.opt_node[chosen]
        release = ((node_of >= 0) & hot[np.maximum(node_of, 0)]) | (problem.moves[chosen] > 0)
        fixed[problem.opt_job[chosen[release]]] = -1
    room = problem.capacity() - problem.usage(fixed[fixed >= 0])
    keep = np.flatnonzero(fixed[problem.opt_job] < 0)
    open_jobs, sub = _around(problem, fixed, keep, room)
    if sub.migration_budget < 0 or (room < 0).any():
        return None
    # Released jobs are hinted with the LP's choice for them, the undecided ones with the warm start's.
    position = np.full(problem.n_options, -1, dtype=np.int64)
    position[keep] = np.arange(keep.size)
    released = lp_choice[open_jobs] >= 0
    sub = replace(sub, hint=np.where(released, position[np.maximum(lp_choice[open_jobs], 0)], sub.hint))
    if sub.violations(sub.hint):
        sub = replace(sub, hint=_waiting_hint(sub))
    return Residual(problem=sub, jobs=open_jobs, keep=keep, fixed=fixed)


def _budget_binds(problem: Problem, x: np.ndarray) -> bool:
    """Does the LP solution ``x`` spend the whole migration budget?"""
    return float(problem.moves @ x) >= problem.migration_budget - INTEGRAL_TOLERANCE


def _waiting_hint(sub: Problem) -> np.ndarray:
    """A hint that leaves every undecided job waiting where it may (else its first option)."""
    hint = sub.job_start[:-1].copy()
    for j in range(sub.n_jobs):
        idx = np.arange(sub.job_start[j], sub.job_start[j + 1])
        wait = idx[sub.opt_node[idx] < 0]
        if wait.size:
            hint[j] = wait[0]
    return hint


def _fitting(problem: Problem, free: np.ndarray, own: np.ndarray | None = None) -> np.ndarray:
    """Per option: does it fit ``free`` (3, N), its node's part plus ``own`` (each option's job's
    share on that node) and its extra charges (a gang's other nodes) each within its node's room."""
    on = problem.opt_node
    dems = (problem.dem_cpu, problem.dem_gpu, problem.dem_mem)
    fits = on >= 0
    for r, d in enumerate(dems):
        fits &= d <= free[r][np.maximum(on, 0)] + (0 if own is None else own[r])
    if problem.ext_opt.size:
        ext_ok = np.ones(problem.ext_opt.size, dtype=bool)
        for r, d in enumerate((problem.ext_cpu, problem.ext_gpu, problem.ext_mem)):
            ext_ok &= d <= free[r][problem.ext_node]
        fits[problem.ext_opt[~ext_ok]] = False
    return fits


def refill(problem: Problem, choice: np.ndarray) -> Residual | None:
    """The jobs that could use room ``choice`` leaves idle, as a problem of their own (``None`` if none).

    Relax and fix can leave capacity idle that a waiting job could use: the LP spread an undecided job
    over a node in fractions (a third of a 3-GPU move takes one GPU), the jobs it crowded out of that
    room were fixed to wait or pause, and the exact residual put the undecided job elsewhere. Nothing
    then hands the freed room back. So, after the solve: every job without a node (waiting or paused)
    that has an option fitting what the nodes have left (a gang's on every node it spans), and every
    placed job (not a gang) with an option of more GPUs on its own node that fits there, is released;
    the rest stay as chosen. Each released job keeps its choice (the hint, so the answer is never
    worse) and its options that fit the room left to it.
    """
    J = problem.n_jobs
    if J == 0 or not problem.node_names:
        return None  # no job, or no node to hand room on (every job waits)
    dems = (problem.dem_cpu, problem.dem_gpu, problem.dem_mem)
    node_of = problem.opt_node[choice]
    placed = node_of >= 0
    left = problem.capacity() - problem.usage(choice)
    job = problem.opt_job
    on = problem.opt_node
    here = on == node_of[job]
    # An option fits if its demand fits what its node has left, plus the job's own share there.
    own = [np.where(here & placed[job], d[choice[job]], 0) for d in dems]
    fits = _fitting(problem, left, np.stack(own))
    # Growth into idle room: GPUs only (the split hands each node's spare CPU out anyway).
    bigger = problem.dem_gpu > problem.dem_gpu[choice[job]]
    grow = fits & (~placed[job] | (here & bigger))
    released = np.zeros(J, dtype=bool)
    released[job[grow]] = True
    if problem.ext_opt.size:
        # A placed gang keeps its choice: its own room spans nodes, which this node-by-node test cannot
        # credit back; a gang without a node is released when one of its placements fits whole.
        released &= ~placed | np.array([m.count is None for m in problem.menus], dtype=bool)
    if not released.any():
        return None
    fixed = np.where(released, -1, choice)
    # Each released job's options that fit the room the others leave, and its own choice.
    room = problem.capacity() - problem.usage(fixed[fixed >= 0])
    opts = released[job] & ((on < 0) | _fitting(problem, room))
    opts[choice[released]] = True
    opts &= (on >= 0) | (np.arange(problem.n_options) == choice[job])  # waiting stays one option: the chosen one
    keep = np.flatnonzero(opts)
    jobs, sub = _around(problem, fixed, keep, room)
    position = np.full(problem.n_options, -1, dtype=np.int64)
    position[keep] = np.arange(keep.size)
    sub = replace(sub, hint=position[choice[jobs]])
    return Residual(problem=sub, jobs=jobs, keep=keep, fixed=fixed)
