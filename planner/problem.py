"""The integer program in backend-neutral form: flat option arrays, node capacities, a hint.

Every active job has a contiguous block of *options* (``job_start[j] : job_start[j+1]``); exactly one
is chosen. An option is a node and a level reached by one way in (stay / start / move), or "no node"
(wait / pause). The model::

    minimise   Σ_o cost_o · x_o + A · M
    subject to Σ_{o ∈ job j} x_o = 1                                  (one placement per active job)
               Σ_{o on node n} demand_o^r · x_o ≤ capacity_n^r          (r ∈ cpu, gpu, memory)
               Σ_o moves_o · x_o ≤ migration_budget          (migrations, restarts and pauses)
               M ≥ Σ_{o ∈ job j} finish_o · x_o                         (makespan)
               x_o ∈ {0, 1}

Backends (:mod:`planner.backends`) turn this into CP-SAT or PuLP models; nothing here knows about
either.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from planner.menu import JobMenu

WAIT_WAY = -1  # ``opt_way`` of a no-node option


@dataclass
class Problem:
    node_names: list[str]
    cap_cpu: np.ndarray
    cap_gpu: np.ndarray
    cap_mem: np.ndarray
    menus: list[JobMenu]
    job_start: np.ndarray  # (J+1,)
    opt_job: np.ndarray
    opt_node: np.ndarray  # -1: no node
    opt_level: np.ndarray  # -1: no node
    opt_way: np.ndarray  # STAY / START / MOVE, or WAIT_WAY
    dem_cpu: np.ndarray
    dem_gpu: np.ndarray
    dem_mem: np.ndarray
    moves: np.ndarray  # 0/1: a checkpoint-restart (migration, restart in place, pause): spends the budget
    finish_q: np.ndarray
    cost: np.ndarray
    makespan_weight: int
    migration_budget: int
    quantum_seconds: float
    hint: np.ndarray  # (J,) option index per job, always feasible
    warnings: list[str] = field(default_factory=list)
    #: The makespan is at least this (set when jobs outside this problem already finish that late).
    makespan_floor: int = 0

    @property
    def n_jobs(self) -> int:
        return len(self.menus)

    @property
    def n_options(self) -> int:
        return int(self.opt_job.size)

    def options_of(self, j: int) -> range:
        return range(int(self.job_start[j]), int(self.job_start[j + 1]))

    def subset(self, jobs: np.ndarray, keep: np.ndarray, nodes: np.ndarray | None = None, **changes: Any) -> Problem:
        """The problem over ``jobs`` (ascending) and their options ``keep`` (ascending), optionally
        over ``nodes`` only; ``changes`` replace fields (capacities, budget, makespan floor...).

        The hint carries over where the hinted option is kept (else -1: the caller must set one).
        """
        job_map = np.full(self.n_jobs, -1, dtype=np.int64)
        job_map[jobs] = np.arange(jobs.size)
        opt_job = job_map[self.opt_job[keep]]
        starts = np.concatenate([[0], np.cumsum(np.bincount(opt_job, minlength=jobs.size))]).astype(np.int64)
        position = np.full(self.n_options, -1, dtype=np.int64)
        position[keep] = np.arange(keep.size)
        fields: dict[str, Any] = {
            "menus": [self.menus[j] for j in jobs],
            "job_start": starts,
            "opt_job": opt_job,
            "opt_node": self.opt_node[keep],
            "opt_level": self.opt_level[keep],
            "opt_way": self.opt_way[keep],
            "dem_cpu": self.dem_cpu[keep],
            "dem_gpu": self.dem_gpu[keep],
            "dem_mem": self.dem_mem[keep],
            "moves": self.moves[keep],
            "finish_q": self.finish_q[keep],
            "cost": self.cost[keep],
            "hint": position[self.hint[jobs]],
            "warnings": [],
        }
        if nodes is not None:
            node_map = np.full(len(self.node_names), -1, dtype=np.int64)
            node_map[nodes] = np.arange(nodes.size)
            on = self.opt_node[keep]
            fields.update(
                node_names=[self.node_names[i] for i in nodes],
                cap_cpu=self.cap_cpu[nodes],
                cap_gpu=self.cap_gpu[nodes],
                cap_mem=self.cap_mem[nodes],
                opt_node=np.where(on >= 0, node_map[np.maximum(on, 0)], -1),
            )
        fields.update(changes)
        return replace(self, **fields)

    def capacity(self) -> np.ndarray:
        """(3, nodes): CPU, GPUs and memory of each node."""
        return np.stack([self.cap_cpu, self.cap_gpu, self.cap_mem]).astype(np.int64).reshape(3, len(self.node_names))

    def usage(self, options: np.ndarray) -> np.ndarray:
        """(3, nodes): CPU, GPUs and memory ``options`` take on each node (no-node options take nothing)."""
        placed = options[self.opt_node[options] >= 0]
        n = len(self.node_names)
        used = [
            np.bincount(self.opt_node[placed], weights=d[placed], minlength=n) for d in (self.dem_cpu, self.dem_gpu, self.dem_mem)
        ]
        return np.stack(used).astype(np.int64).reshape(3, n)

    def objective(self, choice: np.ndarray) -> int:
        """Objective value of a full choice (option index per job)."""
        if choice.size == 0:
            return self.makespan_weight * self.makespan_floor
        return int(self.cost[choice].sum()) + self.makespan_weight * max(int(self.finish_q[choice].max()), self.makespan_floor)

    def violations(self, choice: np.ndarray) -> list[str]:
        """Constraint violations of a choice, in model terms (the plan checker re-checks from scratch)."""
        out: list[str] = []
        for j in range(self.n_jobs):
            o = int(choice[j])
            if not (self.job_start[j] <= o < self.job_start[j + 1]):
                out.append(f"job {self.menus[j].outlook.job.id}: option {o} not its own")
        placed = choice[self.opt_node[choice] >= 0]
        n = len(self.node_names)
        for name, dem, cap in (
            ("cpu", self.dem_cpu, self.cap_cpu),
            ("gpu", self.dem_gpu, self.cap_gpu),
            ("memory", self.dem_mem, self.cap_mem),
        ):
            use = np.bincount(self.opt_node[placed], weights=dem[placed], minlength=n)
            for i in np.flatnonzero(use > cap + 1e-9):
                out.append(f"node {self.node_names[i]}: {name} {int(use[i])} > {int(cap[i])}")
        mv = int(self.moves[choice].sum())
        if mv > self.migration_budget:
            out.append(f"{mv} migrations > budget {self.migration_budget}")
        return out
