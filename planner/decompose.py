"""Split a large problem into node-disjoint sub-problems (in the spirit of POP, SOSP 2021).

Nodes are dealt round-robin into ``k`` groups in order of size, so each group gets a similar mix of
machines. Each job goes with the group of the node the greedy warm start gave it (so the warm start
stays valid in every part), and a job the greedy left waiting is dealt round-robin. The migration
budget is shared out: each part keeps the migrations its warm start already uses, and the rest is
split in proportion to its running jobs. Each part is solved on its own; the makespan couples them
only weakly (the global makespan is the largest part's).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from planner.problem import Problem


def parts_needed(problem: Problem, max_jobs: int) -> int:
    return max(1, math.ceil(problem.n_jobs / max(max_jobs, 1)))


def split(problem: Problem, k: int) -> list[tuple[Problem, np.ndarray]]:
    """Return ``k`` sub-problems, each with ``keep``: its option indices in ``problem`` (so a
    sub-problem's choice ``c`` maps back as ``keep[c]``, job by job in the order of its menus)."""
    N = len(problem.node_names)
    order = np.lexsort((np.arange(N), -problem.cap_mem, -problem.cap_cpu, -problem.cap_gpu))
    group_of_node = np.empty(N, dtype=np.int64)
    group_of_node[order] = np.arange(N) % k

    hint_node = problem.opt_node[problem.hint]
    group_of_job = np.where(hint_node >= 0, group_of_node[np.maximum(hint_node, 0)], -1)
    waiting = np.flatnonzero(group_of_job < 0)
    group_of_job[waiting] = np.arange(waiting.size) % k

    running = np.array([m.outlook.job.status == "running" for m in problem.menus])
    hint_moves = np.bincount(group_of_job, weights=problem.moves[problem.hint], minlength=k).astype(np.int64)
    spare = max(problem.migration_budget - int(hint_moves.sum()), 0)
    share = np.bincount(group_of_job, weights=running.astype(float), minlength=k)
    extra = np.floor(spare * share / max(share.sum(), 1)).astype(np.int64)
    extra[: spare - int(extra.sum())] += 1 if spare - int(extra.sum()) > 0 else 0
    budgets = hint_moves + extra

    out: list[tuple[Problem, np.ndarray]] = []
    for gi in range(k):
        jobs = np.flatnonzero(group_of_job == gi)
        nodes = np.flatnonzero(group_of_node == gi)
        out.append(_restrict(problem, jobs, nodes, int(budgets[gi])))
    return out


def _restrict(problem: Problem, jobs: np.ndarray, nodes: np.ndarray, budget: int) -> tuple[Problem, np.ndarray]:
    node_map = np.full(len(problem.node_names), -1, dtype=np.int64)
    node_map[nodes] = np.arange(nodes.size)
    keep_parts: list[np.ndarray] = []
    starts = [0]
    hint = np.zeros(jobs.size, dtype=np.int64)
    for new_j, j in enumerate(jobs):
        idx = np.arange(problem.job_start[j], problem.job_start[j + 1])
        on = problem.opt_node[idx]
        idx = idx[(on < 0) | (node_map[np.maximum(on, 0)] >= 0)]
        hint[new_j] = starts[-1] + int(np.flatnonzero(idx == problem.hint[j])[0])
        keep_parts.append(idx)
        starts.append(starts[-1] + idx.size)
    keep = np.concatenate(keep_parts) if keep_parts else np.zeros(0, dtype=np.int64)
    job_map = np.full(problem.n_jobs, -1, dtype=np.int64)
    job_map[jobs] = np.arange(jobs.size)
    opt_node = problem.opt_node[keep]
    return replace(
        problem,
        node_names=[problem.node_names[i] for i in nodes],
        cap_cpu=problem.cap_cpu[nodes],
        cap_gpu=problem.cap_gpu[nodes],
        cap_mem=problem.cap_mem[nodes],
        menus=[problem.menus[j] for j in jobs],
        job_start=np.array(starts, dtype=np.int64),
        opt_job=job_map[problem.opt_job[keep]],
        opt_node=np.where(opt_node >= 0, node_map[np.maximum(opt_node, 0)], -1),
        opt_level=problem.opt_level[keep],
        opt_way=problem.opt_way[keep],
        dem_cpu=problem.dem_cpu[keep],
        dem_gpu=problem.dem_gpu[keep],
        dem_mem=problem.dem_mem[keep],
        moves=problem.moves[keep],
        finish_q=problem.finish_q[keep],
        cost=problem.cost[keep],
        migration_budget=budget,
        hint=hint,
        warnings=[],
    ), keep
