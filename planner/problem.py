"""The integer program in backend-neutral form: flat option arrays, node capacities, a hint.

Every active job has a contiguous block of *options* (``job_start[j] : job_start[j+1]``); exactly one
is chosen. An option is a node and a level reached by one way in (stay / start / move), or "no node"
(wait / pause). A gang spread over several nodes (:mod:`planner.gangs`) has its rank 0's replicas
on the option's node and the rest in a sparse table of *extra charges* (``ext_*``: option, node,
replicas, CPU, GPU, memory), which every capacity sum adds. The model::

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
#: The per-option arrays (one entry per option, in option order).
OPTION_FIELDS = ("opt_node", "opt_level", "opt_way", "dem_cpu", "dem_gpu", "dem_mem", "moves", "finish_q", "cost")
#: The extra-charge arrays (one entry per extra charge).
EXTRA_FIELDS = ("ext_opt", "ext_node", "ext_reps", "ext_cpu", "ext_gpu", "ext_mem")


def _empty() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


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
    #: Extra charges: the replicas option ``ext_opt[e]`` puts on node ``ext_node[e]`` (not its
    #: ``opt_node``), ``ext_reps[e]`` of them, taking ``ext_cpu/gpu/mem[e]``; sorted by option.
    ext_opt: np.ndarray = field(default_factory=lambda: _empty())
    ext_node: np.ndarray = field(default_factory=lambda: _empty())
    ext_reps: np.ndarray = field(default_factory=lambda: _empty())
    ext_cpu: np.ndarray = field(default_factory=lambda: _empty())
    ext_gpu: np.ndarray = field(default_factory=lambda: _empty())
    ext_mem: np.ndarray = field(default_factory=lambda: _empty())
    #: Nodes reserved for a waiting gang (:func:`planner.gangs.reservation`): no other job starts or moves there.
    reserved: np.ndarray = field(default_factory=lambda: _empty())
    #: The job (id) the reservation is for; ``None`` without one.
    reserved_for: str | None = None
    #: Seconds from now within which a job must be predicted to end to backfill the reserved nodes
    #: (the gang's shadow time; 0: none may).
    reserved_backfill_s: float = 0.0

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
        if self.ext_opt.size:
            at = position[self.ext_opt]
            sel = at >= 0
            fields.update({name: getattr(self, name)[sel] for name in EXTRA_FIELDS})
            fields["ext_opt"] = at[sel]
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
            fields["reserved"] = node_map[self.reserved][node_map[self.reserved] >= 0]
            if self.ext_opt.size:
                moved = node_map[fields["ext_node"]]
                assert (moved >= 0).all(), "a kept option has replicas on a node left out"
                fields["ext_node"] = moved
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
        if self.ext_opt.size:
            e = np.flatnonzero(np.isin(self.ext_opt, placed))
            for u, d in zip(used, (self.ext_cpu, self.ext_gpu, self.ext_mem), strict=True):
                u += np.bincount(self.ext_node[e], weights=d[e], minlength=n)
        return np.stack(used).astype(np.int64).reshape(3, n)

    def extras_of(self, option: int) -> np.ndarray:
        """Indices of ``option``'s extra charges (replicas on nodes other than its own)."""
        lo, hi = np.searchsorted(self.ext_opt, [option, option + 1])
        return np.arange(lo, hi)

    def shares_of(self, option: int, replicas: int) -> tuple[tuple[int, int], ...]:
        """``(node index, replicas)`` per node of an option placing ``replicas`` in all, its own node first."""
        e = self.extras_of(option)
        rest = tuple((int(self.ext_node[i]), int(self.ext_reps[i])) for i in e)
        return ((int(self.opt_node[option]), replicas - sum(k for _, k in rest)), *rest)

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
        used = self.usage(choice)
        for name, use, cap in zip(("cpu", "gpu", "memory"), used, (self.cap_cpu, self.cap_gpu, self.cap_mem), strict=True):
            for i in np.flatnonzero(use > cap + 1e-9):
                out.append(f"node {self.node_names[i]}: {name} {int(use[i])} > {int(cap[i])}")
        mv = int(self.moves[choice].sum())
        if mv > self.migration_budget:
            out.append(f"{mv} migrations > budget {self.migration_budget}")
        return out


def merge_options(
    problem: Problem, add: dict[str, np.ndarray], add_job: np.ndarray, extras: dict[str, np.ndarray]
) -> tuple[Problem, np.ndarray]:
    """``problem`` with the options ``add`` (per-option arrays of :data:`OPTION_FIELDS`, of jobs
    ``add_job``) and their extra charges ``extras`` (:data:`EXTRA_FIELDS`, ``ext_opt`` counting the
    added options from 0); and where each old option went. Options stay grouped by job, old ones in
    their order, new ones after a job's old placed options and before its wait option."""
    n_old = problem.n_options
    job = np.concatenate((problem.opt_job, add_job))
    waits = np.concatenate((problem.opt_node < 0, add["opt_node"] < 0))
    order = np.lexsort((waits, job))  # by job, a job's wait option last, stable otherwise
    position = np.empty(job.size, dtype=np.int64)
    position[order] = np.arange(job.size)
    counts = np.bincount(job, minlength=problem.n_jobs)
    fields: dict[str, Any] = {name: np.concatenate((getattr(problem, name), add[name]))[order] for name in OPTION_FIELDS}
    if extras["ext_opt"].size or problem.ext_opt.size:
        ext_opt = np.concatenate((position[problem.ext_opt], position[n_old + extras["ext_opt"]]))
        rows = np.argsort(ext_opt, kind="stable")
        fields.update({name: np.concatenate((getattr(problem, name), extras[name]))[rows] for name in EXTRA_FIELDS[1:]})
        fields["ext_opt"] = ext_opt[rows]
    merged = replace(
        problem,
        job_start=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        opt_job=job[order],
        hint=position[:n_old][problem.hint],
        **fields,
    )
    return merged, position[:n_old]
