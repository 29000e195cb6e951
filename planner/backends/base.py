"""The small interface every solver backend implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from planner.problem import Problem

Status = Literal["optimal", "feasible", "unknown", "infeasible"]


@dataclass(frozen=True)
class SolveResult:
    """What a backend found: an option index per job (``None`` if nothing), with status and bound."""

    backend: str
    status: Status
    choice: np.ndarray | None
    objective: float | None
    bound: float | None
    seconds: float
    message: str = ""
    variables: int = 0
    #: Set by solvers whose gap is not ``(objective - bound) / objective`` of the whole (decomposed runs).
    gap: float | None = None


class Backend(Protocol):
    name: str

    def solve(self, problem: Problem, *, time_limit: float, wall_limit: float) -> SolveResult:
        """Solve ``problem`` starting from ``problem.hint``; stop after ``time_limit`` (deterministic
        where the backend supports it) and never later than ``wall_limit`` wall-clock seconds."""
        ...


def capacity_rows(problem: Problem) -> list[tuple[int, np.ndarray, np.ndarray, int]]:
    """Capacity constraints that can bind: (node, option indices, demands, capacity) per node and resource.

    A node whose options' largest demands cannot exceed its capacity even if all were chosen needs no
    row; skipping those keeps large models small.
    """
    rows: list[tuple[int, np.ndarray, np.ndarray, int]] = []
    placed = np.flatnonzero(problem.opt_node >= 0)
    if placed.size == 0:
        return rows
    # (node, option, demand) entries: each option on its own node, and a gang's extra charges on the
    # other nodes it puts replicas on (planner.problem); grouped by node, options in order within.
    opt = np.concatenate((placed, problem.ext_opt))
    on = np.concatenate((problem.opt_node[placed], problem.ext_node))
    demands = (
        (np.concatenate((problem.dem_cpu[placed], problem.ext_cpu)), problem.cap_cpu),
        (np.concatenate((problem.dem_gpu[placed], problem.ext_gpu)), problem.cap_gpu),
        (np.concatenate((problem.dem_mem[placed], problem.ext_mem)), problem.cap_mem),
    )
    order = np.argsort(on, kind="stable")
    cuts = np.flatnonzero(np.diff(on[order])) + 1
    for block in np.split(order, cuts):
        n = int(on[block[0]])
        jobs = problem.opt_job[opt[block]]
        for dem, cap in demands:
            d = dem[block]
            if not d.any():
                continue
            # Worst case: every job on the node takes its largest option here.
            worst = np.zeros(int(jobs.max()) + 1, dtype=np.int64)
            np.maximum.at(worst, jobs, d)
            if worst.sum() <= cap[n]:
                continue
            nz = d > 0
            rows.append((n, opt[block][nz], d[nz], int(cap[n])))
    return rows
