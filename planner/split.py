"""Apply the per-node CPU split (:mod:`planner.share`) to the integer program's decoded plan.

After the solve, every node's placed jobs whose share may change — pending jobs starting there,
jobs migrating there, running jobs that resize live — share what the others leave of the node's
CPU by :func:`planner.share.split_node`. Jobs that stay and cannot resize live keep what they have.
The assignments get the split's shares as their guarantees, the action that follows (``keep`` when
the share is unchanged, else ``resize``), and the rollout's predictions (which see completions).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from planner.config import PlannerConfig
from planner.decode import explain
from planner.menu import STAY, JobMenu
from planner.plan import Assignment, ObjectiveTerms
from planner.problem import WAIT_WAY, Problem
from planner.share import SearchBudget, ShareJob, share_grid, split_node


def _share_job(m: JobMenu, way: int, level: int, config: PlannerConfig) -> ShareJob:
    o = m.outlook
    job = o.job
    grid = share_grid(job.min_cpu_millis, job.max_cpu_millis, config.cpu_step_millis)
    spe = o.speed.seconds_per_epoch_many(grid, np.full(grid.size, int(m.gpu[level])))
    # An open tier 1 counts even when it is only assumed (no curve yet: tier 1 by the finish, the
    # pessimistic guess): a new job's deadline is reserved for from its first plan, not ignored.
    open1 = o.job.target is not None and not o.tier1_reached and o.remaining_tier1 is not None
    deadline = None
    if open1 and m.t1_slack_s is not None:
        deadline = float(m.t1_slack_s)
    return ShareJob(
        lo=job.min_cpu_millis,
        hi=job.max_cpu_millis,
        replicas=job.replicas,
        weight=float(m.weight),
        seconds_per_epoch=np.asarray(spe, dtype=float),
        grid=grid,
        remaining=float(o.remaining_finish),
        remaining_high=float(o.remaining_finish_high) if o.remaining_finish_high is not None else None,
        remaining_tier1=float(o.remaining_tier1) if open1 and o.remaining_tier1 is not None else None,
        deadline=deadline,
        blocked=float(m.lost[way]),
        current=job.allocation.cpu_millis if (way == STAY and job.allocation is not None) else None,
        tier1_assumed=bool(open1 and o.tiers_assumed),
        tier1_open=bool(o.job.target is not None and not o.tier1_reached),
        remaining_tier1_high=float(o.remaining_tier1_high) if (open1 and o.remaining_tier1_high is not None) else None,
    )


def apply_split(
    problem: Problem,
    choice: np.ndarray,
    assignments: list[Assignment],
    terms: ObjectiveTerms,
    now: float,
    profile: str,
    config: PlannerConfig,
    node_cpu: Sequence[int],
    makespan_slack: float | None = None,
) -> tuple[list[Assignment], ObjectiveTerms]:
    """The assignments with every node's CPU split (see the module docstring); ``node_cpu``: each
    node's real CPU (the problem's may be raised where jobs that cannot move overfill a node);
    ``makespan_slack``: the snapshot's ``Settings.makespan_slack``."""
    N = len(problem.node_names)
    flexible: list[list[int]] = [[] for _ in range(N)]
    fixed = np.zeros(N, dtype=np.int64)
    for j, m in enumerate(problem.menus):
        o = int(choice[j])
        n, way, _level = int(problem.opt_node[o]), int(problem.opt_way[o]), int(problem.opt_level[o])
        if n < 0 or way == WAIT_WAY:
            continue
        job = m.outlook.job
        if m.count is not None:
            # A gang keeps the level's share on every node it is on (one share for all its replicas).
            fixed[n] += int(problem.dem_cpu[o])
            for e in problem.extras_of(o):
                fixed[int(problem.ext_node[e])] += int(problem.ext_cpu[e])
        elif way == STAY and not job.resizable:
            fixed[n] += int(problem.dem_cpu[o])
        else:
            flexible[n].append(j)
    out = list(assignments)
    search = SearchBudget(config.split_search)  # shared by the nodes, in node order
    for n in range(N):
        jobs = flexible[n]
        if not jobs:
            continue
        capacity = min(int(problem.cap_cpu[n]), int(node_cpu[n])) - int(fixed[n])
        share_jobs = [
            _share_job(problem.menus[j], int(problem.opt_way[choice[j]]), int(problem.opt_level[choice[j]]), config) for j in jobs
        ]
        if sum(s.lo * s.replicas for s in share_jobs) > capacity:
            continue  # an overfull node the plan could not relieve: keep the program's levels
        split = split_node(share_jobs, capacity, profile, makespan_slack, search)
        for i, j in enumerate(jobs):
            out[j] = _rewrite(
                problem.menus[j], problem, int(choice[j]), out[j], int(split.shares[i]), split.finish[i], split.tier1[i], now
            )
    return out, _terms(terms, out, now)


def _rewrite(
    m: JobMenu, problem: Problem, option: int, a: Assignment, share: int, finish: float, tier1: float, now: float
) -> Assignment:
    job = m.outlook.job
    way, level = int(problem.opt_way[option]), int(problem.opt_level[option])
    action = a.action
    if way == STAY and job.allocation is not None:
        same = (share, a.gpus, None) == (job.allocation.cpu_millis, job.allocation.gpus, job.allocation.cpu_limit_millis)
        action = "keep" if same else "resize"
        if a.deliver and action == "keep":
            action = "deliver"
    p = a.predictions
    eta_finish = float(now + finish) if math.isfinite(finish) else None
    eta1 = float(now + tier1) if math.isfinite(tier1) else p.eta_tier1
    sat1 = p.tier1_satisfied
    if p.tier1_deadline is not None and math.isfinite(tier1):
        sat1 = bool(now + tier1 <= p.tier1_deadline)
    eta2 = p.eta_tier2
    r2, rf = m.outlook.remaining_tier2, m.outlook.remaining_finish
    if eta_finish is not None and r2 is not None and rf > 0:
        eta2 = float(now + finish * min(r2 / rf, 1.0))  # the rollout tracks the finish; tier 2 on the way there
    sat2 = p.tier2_satisfied
    if p.tier2_deadline is not None and eta2 is not None:
        sat2 = bool(eta2 <= p.tier2_deadline)
    spe = float(m.outlook.speed.seconds_per_epoch(share, a.gpus))
    pred = p.model_copy(
        update={
            "seconds_per_epoch": spe,
            "eta_finish": eta_finish if eta_finish is not None else p.eta_finish,
            "eta_tier1": eta1,
            "eta_tier2": eta2,
            "tier1_satisfied": sat1,
            "tier2_satisfied": sat2,
            "basis": p.basis + "; completion times from the node's share rollout (shares pass on when jobs finish)",
        }
    )
    text = explain(m, action, a.node, level, pred, now, None, cpu_millis=share, gpu_device=a.gpu_device)
    text += f"; guaranteed {share / 1000:g} CPU, more when others idle (up to {job.max_cpu_millis / 1000:g})"
    return a.model_copy(update={"cpu_millis": share, "action": action, "predictions": pred, "explanation": text})


def _terms(terms: ObjectiveTerms, assignments: Sequence[Assignment], now: float) -> ObjectiveTerms:
    etas = [a.predictions.eta_finish for a in assignments if a.node is not None]
    known = [e - now for e in etas if e is not None]
    preds = [a.predictions for a in assignments]
    return terms.model_copy(
        update={
            "tier1_met": sum(p.tier1_satisfied is True for p in preds),
            "tier1_missed": sum(p.tier1_satisfied is False for p in preds),
            "tier2_met": sum(p.tier2_satisfied is True for p in preds),
            "tier2_missed": sum(p.tier2_satisfied is False for p in preds),
            "makespan_seconds": max(known) if known else terms.makespan_seconds,
            "resizes": sum(a.action == "resize" for a in assignments),
        }
    )
