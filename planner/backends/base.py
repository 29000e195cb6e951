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
    order = placed[np.argsort(problem.opt_node[placed], kind="stable")]
    nodes = problem.opt_node[order]
    cuts = np.flatnonzero(np.diff(nodes)) + 1
    for block in np.split(order, cuts):
        n = int(problem.opt_node[block[0]])
        jobs = problem.opt_job[block]
        for dem, cap in (
            (problem.dem_cpu, problem.cap_cpu),
            (problem.dem_gpu, problem.cap_gpu),
            (problem.dem_mem, problem.cap_mem),
        ):
            d = dem[block]
            if not d.any():
                continue
            # Worst case: every job on the node takes its largest option here.
            worst = np.zeros(int(jobs.max()) + 1, dtype=np.int64)
            np.maximum.at(worst, jobs, d)
            if worst.sum() <= cap[n]:
                continue
            nz = d > 0
            rows.append((n, block[nz], d[nz], int(cap[n])))
    return rows
