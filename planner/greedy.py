"""Greedy allocation: a fast, always-feasible plan used as the IP's warm start and as its fallback.

1. *Pinned* jobs (running, cannot migrate) stay on their node at their lowest allowed level.
2. Other running jobs stay on their node at their lowest level when it fits.
3. Everyone else (pending jobs, and running jobs that no longer fit) is placed at its lowest level,
   most urgent first (tier-1 deadline slack, then priority): GPU jobs best-fit on free GPUs (less
   fragmentation), CPU jobs worst-fit on free CPU (room to grow). A running job placed elsewhere is a
   migration and spends the budget; with none left it is paused.
4. *Growth*: repeatedly give the next CPU or GPU level on its node to the job whose cost falls the
   most per unit of the node's resource it takes (Optimus-style marginal gain), while it fits.

It works on the job menus and full node arrays (vectorised over nodes), so it runs over every
eligible node, not just the IP's candidate list — its choice is always among the IP's candidates.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from planner.menu import MOVE, START, STAY, JobMenu


@dataclass
class GreedyChoice:
    """Per job: node index (-1: none), level index (-1: none), way in (STAY/START/MOVE, -1: none)."""

    node: np.ndarray
    level: np.ndarray
    way: np.ndarray


def _urgency(m: JobMenu) -> tuple[float, float, str]:
    d = m.outlook.tier1_deadline
    slack = math.inf
    if d is not None and m.t1_met.size:
        slack = float(np.nanmin(np.where(np.isfinite(m.t1_s[START]), m.t1_s[START], np.inf)))
        slack = (d - slack) if math.isfinite(slack) else math.inf
    return (slack, -m.outlook.job.priority, m.outlook.job.id)


def greedy(
    menus: list[JobMenu],
    eligible: list[np.ndarray],
    current_node: np.ndarray,
    pinned: np.ndarray,
    stay_ok: list[np.ndarray | None],
    cap_cpu: np.ndarray,
    cap_gpu: np.ndarray,
    cap_mem: np.ndarray,
    migration_budget: int,
) -> GreedyChoice:
    """Return a feasible choice.

    ``eligible[j]``: node indices job j may start or move to; ``current_node[j]``: its node (-1: none);
    ``pinned[j]``: it cannot leave that node; ``stay_ok[j]``: which levels it may hold there without a
    restart (``None`` for jobs not running).
    """
    J = len(menus)
    free = np.stack([cap_cpu, cap_gpu, cap_mem]).astype(np.float64)  # (3, N)
    node = np.full(J, -1, dtype=np.int64)
    level = np.full(J, -1, dtype=np.int64)
    way = np.full(J, -1, dtype=np.int64)

    def take(j: int, n: int, lv: int, sign: float = 1.0) -> None:
        m = menus[j]
        free[0, n] -= sign * m.dem_cpu[lv]
        free[1, n] -= sign * m.dem_gpu[lv]
        free[2, n] -= sign * m.dem_mem

    def fits(j: int, n: int, lv: int) -> bool:
        m = menus[j]
        return bool(
            m.dem_cpu[lv] <= free[0, n] + 1e-9 and m.dem_gpu[lv] <= free[1, n] + 1e-9 and m.dem_mem <= free[2, n] + 1e-9
        )

    # 1-2: running jobs stay where they are.
    waiting: list[int] = []
    for j, m in enumerate(menus):
        cn = int(current_node[j])
        if cn < 0:
            waiting.append(j)
            continue
        ok_levels = stay_ok[j]
        assert ok_levels is not None
        if not ok_levels.any():
            waiting.append(j)  # must restart to get a share within its bounds
            continue
        lv = int(np.argmax(ok_levels))  # lowest level it may hold in place (levels grow with index)
        if pinned[j] or fits(j, cn, lv):
            node[j], level[j], way[j] = cn, lv, STAY
            take(j, cn, lv)
        else:
            waiting.append(j)

    # 3: place the rest, most urgent first.
    budget = migration_budget
    waiting.sort(key=lambda j: _urgency(menus[j]))
    for j in waiting:
        m = menus[j]
        is_move = current_node[j] >= 0
        if is_move and budget <= 0:
            continue
        nodes = eligible[j]
        if nodes.size == 0:
            continue
        lv = 0  # the grid is ordered by (gpu, cpu): level 0 is the least of both
        ok = (
            (free[0, nodes] >= m.dem_cpu[lv] - 1e-9)
            & (free[1, nodes] >= m.dem_gpu[lv] - 1e-9)
            & (free[2, nodes] >= m.dem_mem - 1e-9)
        )
        if is_move:
            ok &= nodes != current_node[j]
        cand = nodes[ok]
        if cand.size == 0:
            continue
        if m.dem_gpu[lv] > 0:
            # Best fit on GPUs, then most free CPU; ties by node order (deterministic).
            key = np.lexsort((cand, -free[0, cand], free[1, cand]))
        else:
            frac = free[0, cand] / np.maximum(cap_cpu[cand], 1)
            key = np.lexsort((cand, -frac))
        n = int(cand[key[0]])
        node[j], level[j], way[j] = n, lv, (MOVE if is_move else START)
        take(j, n, lv)
        if is_move:
            budget -= 1

    # 4: growth by marginal gain per unit of the node's scarcest resource it takes.
    heap: list[tuple[float, int, int, int]] = []

    def push(j: int) -> None:
        m = menus[j]
        assert m.cost is not None
        lv, w, n = int(level[j]), int(way[j]), int(node[j])
        ci, gi = lv % m.n_cpu, lv // m.n_cpu
        n_gpu = m.cpu.size // m.n_cpu
        allowed = stay_ok[j] if w == STAY else None
        for nxt in ((lv + 1) if ci + 1 < m.n_cpu else -1, (lv + m.n_cpu) if gi + 1 < n_gpu else -1):
            if nxt < 0 or (allowed is not None and not allowed[nxt]):
                continue
            gain = float(m.cost[w, lv] - m.cost[w, nxt])
            if gain <= 0:
                continue
            share = max(
                (m.dem_cpu[nxt] - m.dem_cpu[lv]) / max(cap_cpu[n], 1),
                (m.dem_gpu[nxt] - m.dem_gpu[lv]) / max(cap_gpu[n], 1),
                1e-9,
            )
            heapq.heappush(heap, (-gain / share, j, lv, nxt))

    for j in range(J):
        if node[j] >= 0:
            push(j)
    while heap:
        _, j, lv, nxt = heapq.heappop(heap)
        if level[j] != lv:
            continue  # stale entry
        n = int(node[j])
        take(j, n, lv, sign=-1.0)
        if fits(j, n, nxt):
            take(j, n, nxt)
            level[j] = nxt
            push(j)
        else:
            take(j, n, lv)
    return GreedyChoice(node=node, level=level, way=way)
