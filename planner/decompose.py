"""Split a large problem into node-disjoint sub-problems (in the spirit of POP, SOSP 2021).

Nodes are dealt round-robin into ``k`` groups in order of size, so each group gets a similar mix of
machines. Each job goes with the group of the node the greedy warm start gave it (so the warm start
stays valid in every part), and a job the greedy left waiting is dealt round-robin. The migration
budget is shared out: each part keeps the migrations its warm start already uses, and the rest is
split in proportion to its running jobs. Each part is solved on its own; the makespan couples them
only weakly (the global makespan is the largest part's). A gang the warm start spreads over nodes
links them: they go to one group, and a gang option with replicas outside a part is not in it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

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

    if problem.ext_opt.size:
        group_of_node = _linked(problem, group_of_node)
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
    """The part over ``jobs`` and ``nodes``: each job keeps its options on those nodes and "no node"."""
    in_part = np.zeros(problem.n_jobs, dtype=bool)
    in_part[jobs] = True
    on_node = np.zeros(len(problem.node_names), dtype=bool)
    on_node[nodes] = True
    on = problem.opt_node
    outside = np.zeros(problem.n_options, dtype=bool)
    outside[problem.ext_opt[~on_node[problem.ext_node]]] = True  # a gang option with replicas elsewhere
    keep = np.flatnonzero(in_part[problem.opt_job] & ((on < 0) | on_node[np.maximum(on, 0)]) & ~outside)
    return problem.subset(jobs, keep, nodes, migration_budget=budget), keep


def _linked(problem: Problem, group_of_node: np.ndarray) -> np.ndarray:
    """``group_of_node`` with the nodes a warm-start gang spans in one group: each set of nodes linked
    by such gangs (connected components, :mod:`scipy.sparse.csgraph`) goes to its first node's group,
    so the warm start stays valid in its part."""
    hinted = np.isin(problem.ext_opt, problem.hint)
    if not hinted.any():
        return group_of_node
    a = problem.opt_node[problem.ext_opt[hinted]]
    b = problem.ext_node[hinted]
    n = group_of_node.size
    _, label = connected_components(coo_matrix((np.ones(a.size), (a, b)), shape=(n, n)), directed=False)
    first = np.full(n, n, dtype=np.int64)
    np.minimum.at(first, label, np.arange(n))
    return group_of_node[first[label]]
