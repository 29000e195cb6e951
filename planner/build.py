"""Build the integer program from a snapshot: candidates, then options, then the warm start.

Steps, each a function below:

1. *menus* — per job, the allocation levels and their predicted finish / tier times (:mod:`planner.menu`),
   priced in integer cost units (:mod:`planner.objective`);
2. *eligibility* — per job, the nodes it may start or move to: schedulable, labels and GPU type
   matching, big enough for its smallest level;
3. *greedy* — a feasible plan over all eligible nodes (:mod:`planner.greedy`), the IP's warm start;
4. *candidates* — per job, its current node, the greedy's node, and the ``candidate_nodes`` eligible
   nodes with the most room left after the greedy plan: this pruning is what keeps the model small;
5. *options* — every (candidate node × level) that fits the node when empty, with the way in
   (stay / start / move), plus "wait" (pending) or "pause" (running, if it can checkpoint).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planner.config import PlannerConfig
from planner.greedy import GreedyChoice, greedy
from planner.menu import MOVE, START, STAY, JobMenu, build_menu
from planner.objective import Pricing, price_menus
from planner.outlook import JobOutlook
from planner.problem import WAIT_WAY, Problem
from planner.snapshot import Job, Node, Snapshot


def _eligibility(nodes: Sequence[Node], menus: Sequence[JobMenu], cap: np.ndarray) -> list[np.ndarray]:
    """Indices of nodes each job may be placed on (before looking at what is free)."""
    schedulable = np.array([n.schedulable for n in nodes], dtype=bool)
    cache: dict[tuple[str | None, tuple[tuple[str, str], ...]], np.ndarray] = {}
    out: list[np.ndarray] = []
    for m in menus:
        job = m.outlook.job
        key = (job.gpu_type, tuple(sorted(job.node_selector.items())))
        mask = cache.get(key)
        if mask is None:
            mask = schedulable.copy()
            if job.gpu_type is not None:
                mask &= np.array([n.gpu_type == job.gpu_type for n in nodes], dtype=bool)
            for k, v in key[1]:
                mask &= np.array([n.labels.get(k) == v for n in nodes], dtype=bool)
            cache[key] = mask
        fit = mask & (cap[0] >= m.dem_cpu[0]) & (cap[1] >= m.dem_gpu[0]) & (cap[2] >= m.dem_mem)
        out.append(np.flatnonzero(fit))
    return out


def _stay_levels(m: JobMenu) -> np.ndarray | None:
    """Levels a running job may hold on its node without a restart (None: not running)."""
    job = m.outlook.job
    if job.status != "running":
        return None
    ok = np.ones(m.cpu.size, dtype=bool)
    if not job.resizable:
        ok[:] = False
        if m.current_level is not None:
            ok[m.current_level] = True
    return ok


def build_problem(snapshot: Snapshot, outlooks: Sequence[JobOutlook], config: PlannerConfig) -> tuple[Problem, Pricing]:
    nodes = snapshot.nodes
    N = len(nodes)
    node_index = {n.name: i for i, n in enumerate(nodes)}
    cap = np.array(
        [[n.cpu_millis for n in nodes], [n.gpus for n in nodes], [n.memory_mib for n in nodes]], dtype=np.int64
    ).reshape(3, N)
    warnings: list[str] = []

    interval = snapshot.settings.interval_seconds
    menus = [build_menu(i, o, snapshot.time, interval, config) for i, o in enumerate(outlooks)]
    pricing = price_menus(menus, config)

    current = np.array(
        [node_index[m.outlook.job.node] if m.outlook.job.node and m.outlook.job.status == "running" else -1 for m in menus],
        dtype=np.int64,
    )
    pinned = np.array([m.outlook.job.status == "running" and not m.outlook.job.migratable for m in menus], dtype=bool)
    stay_ok = [_stay_levels(m) for m in menus]
    for j, m in enumerate(menus):
        ok = stay_ok[j]
        if pinned[j] and ok is not None and not ok.any():
            warnings.append(
                f"job {m.outlook.job.id}: cannot resize live or migrate, and its allocation is outside its bounds; "
                "planned as if it could resize live"
            )
            ok[:] = True

    # Nodes already over capacity with jobs that cannot leave: plan around it, and say so.
    forced = np.zeros((3, N), dtype=np.int64)
    for jj in np.flatnonzero(pinned):
        j = int(jj)
        m = menus[j]
        lv = int(np.argmax(stay_ok[j]))  # type: ignore[arg-type]
        forced[:, current[j]] += (m.dem_cpu[lv], m.dem_gpu[lv], m.dem_mem)
    over = np.flatnonzero((forced > cap).any(axis=0))
    for i in over:
        warnings.append(f"node {nodes[i].name}: jobs that cannot move already exceed its capacity; planned as is")
    cap = np.maximum(cap, forced)

    eligible = _eligibility(nodes, menus, cap)
    budget = snapshot.settings.migration_budget
    g = greedy(menus, eligible, current, pinned, stay_ok, cap[0], cap[1], cap[2], budget)
    cand = _candidates(menus, eligible, current, pinned, g, cap, config.candidate_nodes)

    problem = _options(menus, cand, current, pinned, stay_ok, cap, g, pricing, node_index, budget)
    forced_moves = int(problem.moves[problem.hint].sum())
    if forced_moves > budget:
        warnings.append(
            f"{forced_moves} running jobs cannot stay where they are (overfull nodes or shares outside their bounds); "
            f"the migration budget of {budget} is raised to {forced_moves} for them"
        )
        problem.migration_budget = forced_moves
    problem.warnings.extend(warnings)
    return problem, pricing


def _candidates(
    menus: Sequence[JobMenu],
    eligible: Sequence[np.ndarray],
    current: np.ndarray,
    pinned: np.ndarray,
    g: GreedyChoice,
    cap: np.ndarray,
    extra: int,
) -> list[list[int]]:
    free = cap.astype(np.float64).copy()
    for j, m in enumerate(menus):
        n, lv = int(g.node[j]), int(g.level[j])
        if n >= 0:
            free[:, n] -= (m.dem_cpu[lv], m.dem_gpu[lv], m.dem_mem)
    out: list[list[int]] = []
    for j, m in enumerate(menus):
        nodes: list[int] = []
        if current[j] >= 0:
            nodes.append(int(current[j]))
        if g.node[j] >= 0 and int(g.node[j]) not in nodes:
            nodes.append(int(g.node[j]))
        el = eligible[j]
        if not pinned[j] and extra > 0 and el.size:
            # Room left for this job's smallest level, in multiples of it, on its scarcest resource.
            room = free[0, el] / max(int(m.dem_cpu[0]), 1)
            if m.dem_gpu[0] > 0:
                room = np.minimum(room, free[1, el] / m.dem_gpu[0])
            if m.dem_mem > 0:
                room = np.minimum(room, free[2, el] / m.dem_mem)
            k = min(extra + len(nodes), el.size)
            top = np.argpartition(-room, k - 1)[:k] if k < el.size else np.arange(el.size)
            order = top[np.lexsort((el[top], -room[top]))]
            for i in order:
                if len(nodes) >= extra + (1 if current[j] >= 0 else 0) + (1 if g.node[j] >= 0 else 0):
                    break
                n = int(el[i])
                if n not in nodes:
                    nodes.append(n)
        out.append(nodes)
    return out


def _options(
    menus: Sequence[JobMenu],
    cand: Sequence[Sequence[int]],
    current: np.ndarray,
    pinned: np.ndarray,
    stay_ok: Sequence[np.ndarray | None],
    cap: np.ndarray,
    g: GreedyChoice,
    pricing: Pricing,
    node_index: dict[str, int],
    budget: int,
) -> Problem:
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("job", "node", "level", "way", "cpu", "gpu", "mem", "fq", "cost")}
    job_start = [0]
    hint = np.zeros(len(menus), dtype=np.int64)
    count = 0

    def add(j: int, n: int, levels: np.ndarray, way: int, m: JobMenu) -> None:
        nonlocal count
        k = levels.size
        if k == 0:
            return
        assert m.finish_q is not None and m.cost is not None
        cols["job"].append(np.full(k, j))
        cols["node"].append(np.full(k, n))
        cols["level"].append(levels)
        cols["way"].append(np.full(k, way))
        cols["cpu"].append(m.dem_cpu[levels])
        cols["gpu"].append(m.dem_gpu[levels])
        cols["mem"].append(np.full(k, m.dem_mem))
        cols["fq"].append(m.finish_q[way, levels])
        cols["cost"].append(m.cost[way, levels])
        hit = np.flatnonzero(levels == g.level[j]) if (g.node[j] == n and g.way[j] == way) else np.zeros(0, dtype=np.int64)
        if hit.size:
            hint[j] = count + int(hit[0])
        count += k

    for j, m in enumerate(menus):
        job: Job = m.outlook.job
        levels_all = np.arange(m.cpu.size)
        for n in cand[j]:
            fit = (m.dem_cpu <= cap[0, n]) & (m.dem_gpu <= cap[1, n]) & (m.dem_mem <= cap[2, n])
            if n == current[j]:
                ok = stay_ok[j]
                assert ok is not None
                stay = ok & (fit | pinned[j])
                add(j, n, levels_all[stay], STAY, m)
                if job.migratable and not job.resizable:
                    add(j, n, levels_all[fit & ~ok], MOVE, m)  # restart in place with a new share
            elif job.status == "running":
                if job.migratable:
                    add(j, n, levels_all[fit], MOVE, m)
            else:
                add(j, n, levels_all[fit], START, m)
        if job.status == "pending" or job.migratable:
            cols["job"].append(np.array([j]))
            cols["node"].append(np.array([-1]))
            cols["level"].append(np.array([-1]))
            cols["way"].append(np.array([WAIT_WAY]))
            cols["cpu"].append(np.zeros(1, dtype=np.int64))
            cols["gpu"].append(np.zeros(1, dtype=np.int64))
            cols["mem"].append(np.zeros(1, dtype=np.int64))
            cols["fq"].append(np.array([m.wait_q]))
            cols["cost"].append(np.array([m.wait_cost]))
            if g.node[j] < 0:
                hint[j] = count
            count += 1
        job_start.append(count)

    def cat(k: str) -> np.ndarray:
        return np.concatenate(cols[k]).astype(np.int64) if cols[k] else np.zeros(0, dtype=np.int64)

    way = cat("way")
    running = np.array([m.outlook.job.status == "running" for m in menus], dtype=bool)
    running_of_option = running[cat("job")] if way.size else np.zeros(0, dtype=bool)
    return Problem(
        node_names=list(node_index),
        cap_cpu=cap[0].copy(),
        cap_gpu=cap[1].copy(),
        cap_mem=cap[2].copy(),
        menus=list(menus),
        job_start=np.array(job_start, dtype=np.int64),
        opt_job=cat("job"),
        opt_node=cat("node"),
        opt_level=cat("level"),
        opt_way=way,
        dem_cpu=cat("cpu"),
        dem_gpu=cat("gpu"),
        dem_mem=cat("mem"),
        moves=((way == MOVE) | ((way == WAIT_WAY) & running_of_option)).astype(np.int64),
        finish_q=cat("fq"),
        cost=cat("cost"),
        makespan_weight=pricing.makespan_weight,
        migration_budget=budget,
        quantum_seconds=pricing.quantum_seconds,
        hint=hint,
    )
