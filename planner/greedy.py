"""Greedy allocation: a fast, always-feasible plan used as the IP's warm start and as its fallback.

1. *Pinned* jobs (running, cannot migrate) stay on their node.
2. Other running jobs stay on their node when it fits: at their lowest level, or — with
   ``from_current`` — at their current allocation (the plan that changes nothing, as a start).
3. Everyone else (pending jobs, and running jobs that no longer fit) is placed at its lowest level,
   in order of *value density*: what placing it saves (its wait cost minus its cheapest placed cost)
   per unit of the cluster it takes — so when not everything fits, the most valuable jobs per unit
   of capacity go first. GPU jobs best-fit on free GPUs (less fragmentation), CPU jobs worst-fit on
   free CPU (room to grow). A running job placed elsewhere (it could not stay) is a forced migration.
4. *Preemption* (within the migration budget): a job still waiting may take the place of running
   jobs that can checkpoint, on one node, when pausing them costs less than leaving it waiting —
   cheapest victims first, as few as free enough room.
5. *Growth*: repeatedly give a job on its node the upgrade whose cost falls the most per unit of the
   node's resource it takes (Optimus-style marginal gain), while it fits. Upgrades are the next CPU
   level, the next GPU level, and the *jump* to the cheapest level that meets one more deadline tier —
   one step at a time often cannot see a deadline that only a bigger step reaches.

It works on the job menus and full node arrays (vectorised over nodes), so it runs over every
eligible node, not just the IP's candidate list — its choice is always among the IP's candidates.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from planner.gangs import GangGreedy, Shares
from planner.gangs import fits as gang_fits
from planner.gangs import take as gang_take
from planner.menu import MOVE, START, STAY, JobMenu


@dataclass
class GreedyChoice:
    """Per job: node index (-1: none), level index (-1: none), way in (STAY/START/MOVE, -1: none)."""

    node: np.ndarray
    level: np.ndarray
    way: np.ndarray
    #: Gangs placed: job index -> (level, placement), rank 0 (``node``) first.
    shares: dict[int, tuple[int, Shares]] = field(default_factory=dict)


def _density(m: JobMenu, way: int, mean_cap: np.ndarray) -> float:
    """What placing the job saves per unit of the cluster's average node it occupies."""
    assert m.cost is not None
    saving = float(m.wait_cost - m.cost[way].min())
    size = max(
        m.dem_cpu[0] / max(mean_cap[0], 1.0),
        m.dem_gpu[0] / max(mean_cap[1], 1.0) if m.dem_gpu[0] else 0.0,
        m.dem_mem / max(mean_cap[2], 1.0) if m.dem_mem else 0.0,
        1e-9,
    )
    return saving / size


def greedy(
    menus: list[JobMenu],
    eligible: list[np.ndarray],
    current_node: np.ndarray,
    pinned: np.ndarray,
    stay_ok: list[np.ndarray | None],
    cap_cpu: np.ndarray,
    cap_gpu: np.ndarray,
    cap_mem: np.ndarray,
    migration_budget: int = 0,
    from_current: bool = False,
    gangs: GangGreedy | None = None,
) -> GreedyChoice:
    """Return a feasible choice.

    ``eligible[j]``: node indices job j may start or move to; ``current_node[j]``: its node (-1: none);
    ``pinned[j]``: it cannot leave that node; ``stay_ok[j]``: which levels it may hold there without a
    restart (``None`` for jobs not running). ``gangs``: how to place the gangs (:mod:`planner.gangs`):
    whole, at their fewest count and lowest level, packed; never preempted, preempting or grown here.
    """
    J = len(menus)
    free = np.stack([cap_cpu, cap_gpu, cap_mem]).astype(np.float64)  # (3, N)
    node = np.full(J, -1, dtype=np.int64)
    level = np.full(J, -1, dtype=np.int64)
    way = np.full(J, -1, dtype=np.int64)
    gang = gangs.mask if gangs is not None else np.zeros(J, dtype=bool)
    placed: dict[int, tuple[int, Shares]] = {}

    def take(j: int, n: int, lv: int, sign: float = 1.0) -> None:
        m = menus[j]
        free[0, n] -= sign * m.dem_cpu[lv]
        free[1, n] -= sign * m.dem_gpu[lv]
        free[2, n] -= sign * m.dem_mem

    def fits(j: int, n: int, lv: int) -> bool:
        m = menus[j]
        return bool(m.dem_cpu[lv] <= free[0, n] + 1e-9 and m.dem_gpu[lv] <= free[1, n] + 1e-9 and m.dem_mem <= free[2, n] + 1e-9)

    # 1-2: running jobs stay where they are.
    waiting: list[int] = []
    for j in range(J):
        cn = int(current_node[j])
        if cn < 0:
            waiting.append(j)
            continue
        if gang[j]:
            assert gangs is not None
            got = gangs.stay(menus[j], j, from_current)
            extra = None if got is None else gangs.fixed(menus[j], j, got[1])
            if got is not None and (pinned[j] or gang_fits(free, gangs.per[j][:, got[0] % menus[j].n_alloc], got[1], extra)):
                node[j], level[j], way[j] = cn, got[0], STAY
                placed[j] = got
                gang_take(free, gangs.per[j][:, got[0] % menus[j].n_alloc], got[1], fixed=extra)
            else:
                waiting.append(j)
            continue
        ok_levels = stay_ok[j]
        assert ok_levels is not None
        if not ok_levels.any():
            waiting.append(j)  # must restart to get a share within its bounds
            continue
        m = menus[j]
        if from_current and m.current_level is not None and ok_levels[m.current_level]:
            lv = m.current_level
        else:
            lv = int(np.argmax(ok_levels))  # lowest level it may hold in place (levels grow with index)
        if pinned[j] or fits(j, cn, lv):
            node[j], level[j], way[j] = cn, lv, STAY
            take(j, cn, lv)
        else:
            waiting.append(j)

    # 3: place the rest, most valuable per unit of capacity first.
    # A running job here could not stay (its node is overfull, or it must restart to get a share
    # within its bounds): moving or pausing it is forced, so no budget is checked.
    mean_cap = np.array([cap_cpu.mean(), cap_gpu.mean(), cap_mem.mean()]) if cap_cpu.size else np.ones(3)
    waiting.sort(key=lambda j: (-_density(menus[j], MOVE if current_node[j] >= 0 else START, mean_cap), menus[j].outlook.job.id))
    for j in waiting:
        m = menus[j]
        is_move = current_node[j] >= 0
        if gang[j]:
            assert gangs is not None
            put = gangs.place(m, j, free, np.stack([cap_cpu, cap_gpu, cap_mem]), bool(pinned[j]))
            if put is not None:
                lv, w, shares = put
                node[j], level[j], way[j] = shares[0][0], lv, w
                placed[j] = (lv, shares)
                gang_take(free, gangs.per[j][:, lv % m.n_alloc], shares, fixed=gangs.fixed(m, j, shares))
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

    # 4: preemption of cheaper running jobs, within what the budget has left.
    budget = migration_budget - sum(1 for j in range(J) if current_node[j] >= 0 and way[j] != STAY)
    if budget > 0:
        _preempt(menus, eligible, current_node, pinned | gang, node, level, way, free, budget, take, gang)

    # 5: growth by marginal gain per unit of the node's scarcest resource it takes.
    heap: list[tuple[float, int, int, int]] = []

    def push(j: int) -> None:
        m = menus[j]
        assert m.cost is not None
        lv, w, n = int(level[j]), int(way[j]), int(node[j])
        ci, gi = lv % m.n_cpu, lv // m.n_cpu
        n_gpu = m.cpu.size // m.n_cpu
        allowed = stay_ok[j] if w == STAY else None
        steps = [(lv + 1) if ci + 1 < m.n_cpu else -1, (lv + m.n_cpu) if gi + 1 < n_gpu else -1]
        assert m.qoe_cost is not None
        better_qoe = np.flatnonzero(m.qoe_cost[w] < m.qoe_cost[w, lv])
        if allowed is not None:
            better_qoe = better_qoe[allowed[better_qoe]]
        if better_qoe.size:
            # The cheapest level (by its largest share of the node) that meets one more tier.
            size = np.maximum(m.dem_cpu[better_qoe] / max(cap_cpu[n], 1), m.dem_gpu[better_qoe] / max(cap_gpu[n], 1))
            steps.append(int(better_qoe[np.lexsort((better_qoe, size))[0]]))
        for nxt in steps:
            if nxt < 0 or nxt == lv or (allowed is not None and not allowed[nxt]):
                continue
            gain = float(m.cost[w, lv] - m.cost[w, nxt])
            if gain <= 0:
                continue
            if m.dem_cpu[nxt] < m.dem_cpu[lv] or m.dem_gpu[nxt] < m.dem_gpu[lv]:
                continue  # growth only: a jump that trades one resource for another is left to the IP
            share = max(
                (m.dem_cpu[nxt] - m.dem_cpu[lv]) / max(cap_cpu[n], 1),
                (m.dem_gpu[nxt] - m.dem_gpu[lv]) / max(cap_gpu[n], 1),
                1e-9,
            )
            heapq.heappush(heap, (-gain / share, j, lv, nxt))

    for j in range(J):
        if node[j] >= 0 and not gang[j]:
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
    return GreedyChoice(node=node, level=level, way=way, shares=placed)


#: Consider at most this many nodes per waiting job when looking for jobs to preempt.
PREEMPT_NODES = 4
#: Give up looking for preemptions after this many waiting jobs per unit of budget found no victims
#: (bounds the pass on huge, saturated clusters).
PREEMPT_TRIES_PER_BUDGET = 8


def _preempt(
    menus: list[JobMenu],
    eligible: list[np.ndarray],
    current_node: np.ndarray,
    pinned: np.ndarray,
    node: np.ndarray,
    level: np.ndarray,
    way: np.ndarray,
    free: np.ndarray,
    budget: int,
    take: object,
    gang: np.ndarray,
) -> None:
    """Pause running jobs to start more valuable waiting ones (see step 4 of the module docstring)."""
    # What keeping each staying job is worth: pausing it would add (wait cost - its current cost).
    keep_value: dict[int, list[tuple[float, int]]] = {}
    for j, m in enumerate(menus):
        if way[j] == STAY and not pinned[j]:
            assert m.cost is not None
            keep_value.setdefault(int(node[j]), []).append((float(m.wait_cost - m.cost[STAY, level[j]]), j))
    for lst in keep_value.values():
        lst.sort()
    waiting = [j for j in range(len(menus)) if node[j] < 0 and current_node[j] < 0 and eligible[j].size and not gang[j]]
    assert all(menus[j].cost is not None for j in waiting)
    waiting.sort(key=lambda j: (-(menus[j].wait_cost - int(menus[j].cost[START, 0])), menus[j].outlook.job.id))  # type: ignore[index]
    has_victims = np.zeros(free.shape[1], dtype=bool)
    has_victims[list(keep_value)] = True
    tries = PREEMPT_TRIES_PER_BUDGET * budget + 16
    for j in waiting:
        if budget <= 0 or tries <= 0:
            break
        tries -= 1
        m = menus[j]
        assert m.cost is not None
        gain = float(m.wait_cost - m.cost[START, 0])
        need = np.array([m.dem_cpu[0], m.dem_gpu[0], m.dem_mem], dtype=np.float64)
        # Nodes with pausable jobs, most free room (for this job) first.
        el = eligible[j][has_victims[eligible[j]]]
        if el.size == 0:
            continue
        room_now = np.min((free[:, el] + 1) / (need[:, None] + 1), axis=0)
        k = min(PREEMPT_NODES, el.size)
        top = np.argpartition(-room_now, k - 1)[:k] if k < el.size else np.arange(el.size)
        cands = el[top[np.lexsort((el[top], -room_now[top]))]]
        best: tuple[float, int, list[int]] | None = None
        for n in (int(c) for c in cands):
            room = free[:, n].copy()
            victims: list[int] = []
            loss = 0.0
            for value, v in keep_value[n]:
                if (room >= need - 1e-9).all() or len(victims) >= budget or loss + value >= gain:
                    break
                mv = menus[v]
                room += (mv.dem_cpu[level[v]], mv.dem_gpu[level[v]], mv.dem_mem)
                victims.append(v)
                loss += value
            if victims and (room >= need - 1e-9).all() and loss < gain and (best is None or loss < best[0]):
                best = (loss, n, victims)
        if best is None:
            continue
        _, n, victims = best
        for v in victims:
            take(v, n, int(level[v]), sign=-1.0)  # type: ignore[operator]
            node[v], level[v], way[v] = -1, -1, -1
        keep_value[n] = [(val, x) for val, x in keep_value[n] if x not in victims]
        has_victims[n] = bool(keep_value[n])
        node[j], level[j], way[j] = n, 0, START
        take(j, n, 0)  # type: ignore[operator]
        budget -= len(victims)
