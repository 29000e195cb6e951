"""Gangs' placements: where a gang's replicas may go, as options of the integer program.

A gang (:func:`planner.gang_levels.is_gang`) is placed whole — a count in [min_replicas, replicas],
on at most ``max_nodes`` nodes — or waits. Its *option* is a count, a concrete placement (replicas
per node, rank 0 first), a per-replica (CPU, GPU) level and a way in; rank 0's replicas are charged
to the option's node, the others to the problem's extra charges (:class:`planner.problem.Problem`),
so every node's capacity stays exact.

Candidate placements, per job and count level, deterministic (ties by node index):

- where it runs (its current placement; and, for other counts, its current nodes filled first);
- the greedy warm start's placements (a gang that starts: its fewest count packed, or spread as
  *wide* below says);
- *packed*: one node when the count fits one (best fit: the node that fits it with the least room
  to spare), else the fewest nodes, wholly free nodes first (a gang that takes whole nodes leaves
  no fragments), then the nodes with the most room. Packed twice: into the room the greedy plan
  leaves, and into the room that the running jobs leave (so the solver may start a gang instead
  of the smaller pending jobs the greedy put there); for a gang that starts, a third time, into
  the room the running gangs would leave at their fewest replicas (:func:`shrunk_room`: so the
  solver may shrink a long running gang to start a short one);
- *wide* (:func:`pack_wide`), for a gang that is not running: where the fewest nodes are a node
  count the gang's speed model predicts slower than a wider one by more than
  :data:`WIDE_TOLERANCE` (two nodes, by the measured tables' prior: :mod:`models.gang_speed`), the
  same two packings over the fewest nodes that are not, as evenly as their room takes
  (:func:`pack_over`). A running gang is not offered them: it would restart, a certain loss, for a
  gain the prior guesses (measured on Pollux's workloads: ``docs/results.md``).

Ways in: a pending gang starts; a running one stays (same placement: keep, or a live resize of its
per-replica share), is resized live to another count or placement when it is ``elastic`` and rank 0
stays (:func:`planner.transitions.action_for`), else migrates (a checkpoint-restart, spending the
budget).

Starvation: a pending gang that cannot be placed whole while small jobs keep taking the room it
needs would wait for ever. The oldest such gang that has waited ``gang_reserve_seconds`` gets a
*reservation* (:func:`reservation`): the nodes of its packing into the running jobs' room take no
new start or move of another job until it starts; what runs there keeps running, so the nodes drain
as those jobs finish. One reservation at a time bounds the capacity held idle. The held room is
*backfilled* as in EASY backfilling: a start or move onto the reserved nodes is allowed when the job
is predicted to finish by the *shadow time* (:func:`drain_seconds`), when the running jobs there are
predicted to have left room for the gang; so the gang starts no later than without it, as far as
the predictions hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from planner.gang_levels import node_block
from planner.menu import MOVE, START, STAY, JobMenu
from planner.snapshot import MILLI_PER_GPU

Shares = tuple[tuple[int, int], ...]  # (node index, replicas), rank 0 first

#: A wider spread is a candidate only where it is predicted faster than the fewest nodes by more than
#: this (the measured tables time placements alike in nodes and replicas 2-4 % apart).
WIDE_TOLERANCE = 0.03


def gang_mask(menus: Sequence[JobMenu]) -> np.ndarray:
    """Per job: is it a gang (planned here)?"""
    return np.array([m.count is not None for m in menus], dtype=bool)


def per_replica(m: JobMenu) -> np.ndarray:
    """(3, K): CPU, GPU (in the problem's GPU unit) and memory of one replica at each per-replica level."""
    k = m.n_alloc
    gpu = m.gpu[:k] * MILLI_PER_GPU // m.gpu_unit
    return np.stack([m.cpu[:k], gpu, np.full(k, m.outlook.job.memory_mib, dtype=np.int64)]).astype(np.int64)


def server_need(m: JobMenu) -> np.ndarray:
    """(3,) CPU, GPU and memory of one of the job's parameter servers (zeros without servers)."""
    role = m.outlook.job.servers
    if role is None:
        return np.zeros(3, dtype=np.int64)
    return np.array([role.cpu_millis, 0, role.memory_mib], dtype=np.int64)


def servers_on(m: JobMenu, count: int, nodes: int) -> int:
    """The parameter servers on each node of a placement of ``count`` workers over ``nodes`` nodes:
    what the job runs with where its count and node count stay (its servers change only with its
    shape), else the scaling's choice (:meth:`models.gang_speed.PSScaling.servers_per_node`); 0 for
    a job without servers."""
    job = m.outlook.job
    if job.servers is None:
        return 0
    shares = job.shares()
    if shares and (count, nodes) == (sum(k for _, k in shares), len(shares)):
        return job.running_servers
    per_node = getattr(m.scaling, "servers_per_node", None)
    if per_node is None:
        return job.fewest_servers(nodes)
    return int(per_node(np.array([count]), np.array([nodes]))[0])


def node_fixed(m: JobMenu, shares: Shares) -> np.ndarray:
    """(3,) what each node of ``shares`` holds besides the workers: the job's servers there."""
    return servers_on(m, sum(k for _, k in shares), len(shares)) * server_need(m)


def pack_fixed(m: JobMenu, count: int) -> np.ndarray:
    """(3,) the servers per node a packing of ``count`` workers leaves room for first: as many as on one
    node (a wider spread never has more per node), or as the job runs with now if that is more."""
    per = servers_on(m, count, 1)
    return max(per, m.outlook.job.running_servers) * server_need(m)


def packed(m: JobMenu, count: int, place: Callable[[np.ndarray | None], Shares | None]) -> Shares | None:
    """``place(fixed)`` for ``count`` workers of gang ``m``: a parameter-server job's placement, tried with
    room for as many servers per node as on one node (:func:`pack_fixed`), then for as few as each wider
    spread takes, kept where the servers its own spread takes fit what was left for them; any other
    gang's, at once."""
    if m.outlook.job.servers is None:
        return place(None)
    need = server_need(m)
    per = [max(servers_on(m, count, 1), m.outlook.job.running_servers)]  # pack_fixed's count
    for n in range(2, m.outlook.job.max_nodes + 1):
        if per[-1] <= 1:
            break  # none fewer (what a node holds only falls with the spread)
        v = servers_on(m, count, n)
        if v not in per:
            per.append(v)
    for k in per:
        got = place(k * need)
        if got is not None and (node_fixed(m, got) <= k * need).all():
            return got
    return None


def block_level(m: JobMenu, count: int, nodes: int) -> int | None:
    """The first level of the block of ``count`` replicas over ``nodes`` nodes (priced at the node
    level not above it: :func:`planner.gang_levels.node_block`)."""
    assert m.count is not None and m.nodes is not None
    k = m.n_alloc
    counts, levels = m.count[::k], m.nodes[::k]
    mine = counts == count
    if not mine.any():
        return None
    hit = np.flatnonzero(mine & (levels == node_block(levels[mine], nodes)))
    return int(hit[0]) * k if hit.size else None


def stay_allocs(m: JobMenu, pinned: bool) -> np.ndarray:
    """(K,) per-replica levels a running gang may hold in place without a restart."""
    job = m.outlook.job
    ok = np.zeros(m.n_alloc, dtype=bool)
    if job.resizable:
        ok[:] = True
    elif m.current_level is not None:
        ok[m.current_level % m.n_alloc] = True
    if pinned and not ok.any():
        ok[:] = True  # planned as if it could resize live (build_problem warns)
    return ok


def current_shares(m: JobMenu, node_index: dict[str, int]) -> Shares:
    return tuple((node_index[n], k) for n, k in m.outlook.job.shares())


def slots(room: np.ndarray, need: np.ndarray, fixed: np.ndarray | None = None) -> np.ndarray:
    """(N,) replicas of demand ``need`` (3,) that fit each node's ``room`` (3, N), with ``fixed`` (3,)
    taken once on a node that holds any (a parameter-server job's servers there)."""
    out = np.full(room.shape[1], 1 << 20, dtype=np.int64)
    if fixed is not None and fixed.any():
        room = room - fixed[:, None]
        out[(room < 0).any(axis=0)] = 0
    for r in range(3):
        if need[r] > 0:
            out = np.minimum(out, np.floor_divide(np.maximum(room[r], 0), need[r]).astype(np.int64))
    return out


def pack(
    count: int,
    room: np.ndarray,
    cap: np.ndarray,
    eligible: np.ndarray,
    need: np.ndarray,
    max_nodes: int,
    fixed: np.ndarray | None = None,
) -> Shares | None:
    """``count`` replicas of ``need`` (and ``fixed`` on each node used) into ``room`` on ``eligible``
    nodes (module docstring), or None."""
    fit = slots(room[:, eligible], need, fixed)
    ok = fit > 0
    el, fit = eligible[ok], fit[ok]
    if el.size == 0:
        return None
    one = np.flatnonzero(fit >= count)
    if one.size:
        best = one[np.lexsort((el[one], fit[one]))][0]
        return ((int(el[best]), count),)
    whole = (room[:, el] >= cap[:, el]).all(axis=0)
    order = np.lexsort((el, -fit, ~whole))
    out: list[tuple[int, int]] = []
    left = count
    for i in order[:max_nodes]:
        k = int(min(fit[i], left))
        out.append((int(el[i]), k))
        left -= k
        if left == 0:
            return tuple(out)
    return None


def pack_over(
    count: int,
    nodes: int,
    room: np.ndarray,
    cap: np.ndarray,
    eligible: np.ndarray,
    need: np.ndarray,
    fixed: np.ndarray | None = None,
) -> Shares | None:
    """``count`` replicas of ``need`` over exactly ``nodes`` of the ``eligible`` nodes, as evenly as
    their room takes, the nodes in :func:`pack`'s order (wholly free first, then the most room);
    None when those nodes cannot hold ``count`` with a replica on each."""
    fit = slots(room[:, eligible], need, fixed)
    ok = fit > 0
    el, fit = eligible[ok], fit[ok]
    if el.size < nodes or count < nodes:
        return None
    whole = (room[:, el] >= cap[:, el]).all(axis=0)
    order = np.lexsort((el, -fit, ~whole))[:nodes]
    if int(fit[order].sum()) < count:
        return None
    out: list[tuple[int, int]] = []
    left = count
    # The nodes with the least room first: each takes its even part of what is left, or all it holds.
    for i, o in enumerate(sorted(order.tolist(), key=lambda o: (int(fit[o]), int(el[o])))):
        k = int(min(fit[o], -(-left // (nodes - i))))
        out.append((int(el[o]), k))
        left -= k
    return tuple(sorted(out, key=lambda x: (-x[1], x[0]))) if left == 0 else None


def pack_wide(
    m: JobMenu,
    count: int,
    room: np.ndarray,
    cap: np.ndarray,
    eligible: np.ndarray,
    need: np.ndarray,
    fewest: Shares | None,
    fixed: np.ndarray | None = None,
) -> Shares | None:
    """Where the node count matters (:mod:`models.gang_speed`): ``count`` replicas over the fewest
    nodes among the counts the gang's scaling predicts within :data:`WIDE_TOLERANCE` of its fastest
    spread from ``fewest``'s node count up to ``max_nodes``; None when that is ``fewest``'s count."""
    if fewest is None or len(fewest) < 2 or m.scaling is None:
        return None
    lo = len(fewest)
    hi = min(count, m.outlook.job.max_nodes, int((slots(room[:, eligible], need, fixed) > 0).sum()))
    if hi <= lo:
        return None
    n = np.arange(lo, hi + 1)
    step = m.scaling.per_step(np.full(n.size, count), n)
    best = int(n[np.flatnonzero(step <= step.min() * (1.0 + WIDE_TOLERANCE))[0]])
    return None if best == lo else pack_over(count, best, room, cap, eligible, need, fixed)


def pack_onto(
    count: int,
    room: np.ndarray,
    cap: np.ndarray,
    eligible: np.ndarray,
    need: np.ndarray,
    max_nodes: int,
    first: Shares,
    fixed: np.ndarray | None = None,
) -> Shares | None:
    """``count`` replicas on the nodes of ``first`` (in its order, as many as their room takes), the
    rest packed on other eligible nodes: a running gang's new count where it runs."""
    out: list[tuple[int, int]] = []
    left = count
    for n, _ in first:
        k = int(min(slots(room[:, [n]], need, fixed)[0], left))
        if k > 0 and len(out) < max_nodes:
            out.append((n, k))
            left -= k
        if left == 0:
            return tuple(out)
    if not out:
        return None
    rest_el = eligible[~np.isin(eligible, [n for n, _ in out])]
    rest = pack(left, room, cap, rest_el, need, max_nodes - len(out), fixed) if max_nodes > len(out) else None
    return None if rest is None else (*out, *rest)


def take(free: np.ndarray, need: np.ndarray, shares: Shares, sign: float = 1.0, fixed: np.ndarray | None = None) -> None:
    """Charge ``shares`` (replicas of ``need``, and ``fixed`` on each node) to ``free`` (``sign`` -1: give back)."""
    for n, k in shares:
        free[:, n] -= sign * (k * need + (0 if fixed is None else fixed))


def fits(free: np.ndarray, need: np.ndarray, shares: Shares, fixed: np.ndarray | None = None) -> bool:
    extra = 0 if fixed is None else fixed
    return all(bool((k * need + extra <= free[:, n] + 1e-9).all()) for n, k in shares)


@dataclass
class GangOptions:
    """Options of the gangs, as per-option lists and extra charges (``ext_opt`` from 0)."""

    job: list[int] = field(default_factory=list)
    node: list[int] = field(default_factory=list)
    level: list[int] = field(default_factory=list)
    way: list[int] = field(default_factory=list)
    dem: list[tuple[int, int, int]] = field(default_factory=list)
    ext: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)

    def arrays(self, menus: Sequence[JobMenu]) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray]]:
        job = np.asarray(self.job, dtype=np.int64)
        way = np.asarray(self.way, dtype=np.int64)
        level = np.asarray(self.level, dtype=np.int64)
        dem = np.asarray(self.dem, dtype=np.int64).reshape(-1, 3)
        fq = [int(menus[j].finish_q[w, lv]) for j, w, lv in zip(self.job, self.way, self.level, strict=True)]  # type: ignore[index]
        cost = [int(menus[j].cost[w, lv]) for j, w, lv in zip(self.job, self.way, self.level, strict=True)]  # type: ignore[index]
        add = {
            "opt_node": np.asarray(self.node, dtype=np.int64),
            "opt_level": level,
            "opt_way": way,
            "dem_cpu": dem[:, 0],
            "dem_gpu": dem[:, 1],
            "dem_mem": dem[:, 2],
            "moves": (way == MOVE).astype(np.int64),
            "finish_q": np.asarray(fq, dtype=np.int64),
            "cost": np.asarray(cost, dtype=np.int64),
        }
        ext = np.asarray(self.ext, dtype=np.int64).reshape(-1, 6)
        names = ("ext_opt", "ext_node", "ext_reps", "ext_cpu", "ext_gpu", "ext_mem")
        return add, job, {name: ext[:, i] for i, name in enumerate(names)}


def ways_in(m: JobMenu, shares: Shares, now: Shares, a: int, fit: bool, stay_ok: np.ndarray, pinned: bool) -> list[int]:
    """The ways a gang may take placement ``shares`` at per-replica level ``a`` (``now``: where it runs)."""
    job = m.outlook.job
    if job.status != "running":
        return [START] if fit else []
    if shares == now:
        out = [STAY] if stay_ok[a] and (fit or pinned) else []
        if job.migratable and not job.resizable and not stay_ok[a] and fit:
            out.append(MOVE)  # restart in place with a new share
        return out
    if not fit:
        return []
    cur = m.current_level % m.n_alloc if m.current_level is not None else -1
    if shares[0][0] == now[0][0] and job.elastic and (job.resizable or a == cur):
        return [STAY]  # a live resize to another count or placement
    return [MOVE] if job.migratable else []


def gang_options(
    menus: Sequence[JobMenu],
    candidates: dict[int, list[Shares]],
    now: dict[int, Shares],
    pinned: np.ndarray,
    cap: np.ndarray,
) -> GangOptions:
    out = GangOptions()
    for j in sorted(candidates):
        m = menus[j]
        per = per_replica(m)
        stay_ok = stay_allocs(m, bool(pinned[j])) if j in now else np.zeros(m.n_alloc, dtype=bool)
        for shares in candidates[j]:
            base = block_level(m, sum(k for _, k in shares), len(shares))
            if base is None:
                continue
            on = np.array([n for n, _ in shares], dtype=np.int64)
            ks = np.array([k for _, k in shares], dtype=np.int64)
            if m.outlook.job.servers is not None and servers_on(m, int(ks.sum()), len(shares)) == 0:
                continue  # wider than its servers allow
            fixed = node_fixed(m, shares)
            # (K,): each per-replica level fits every node of the placement when it is empty.
            room = cap[:, on].T[:, :, None] - fixed[None, :, None]
            fit_all = (ks[:, None, None] * per[None, :, :] <= room).all(axis=(0, 1))
            for a in range(m.n_alloc):
                fit = bool(fit_all[a])
                for way in ways_in(m, shares, now.get(j, ()), a, fit, stay_ok, bool(pinned[j])):
                    o = len(out.job)
                    (n0, k0), rest = shares[0], shares[1:]
                    out.job.append(j)
                    out.node.append(n0)
                    out.level.append(base + a)
                    out.way.append(way)
                    out.dem.append(tuple(int(x) for x in k0 * per[:, a] + fixed))  # type: ignore[arg-type]
                    out.ext.extend((o, n, k, *(int(x) for x in k * per[:, a] + fixed)) for n, k in rest)  # type: ignore[misc]
    return out


def _add(got: list[Shares], now: Shares | None, s: Shares | None) -> None:
    """Append placement ``s`` to ``got`` unless there; rank 0 stays where it runs (``now``) when the
    placement keeps its node (no needless move)."""
    if s is not None and now and now[0][0] in dict(s):
        s = now if dict(s) == dict(now) else tuple(sorted(s, key=lambda x: x[0] != now[0][0]))
    if s is not None and s not in got:
        got.append(s)


def candidates(
    menus: Sequence[JobMenu],
    gangs: np.ndarray,
    eligible: Sequence[np.ndarray],
    now: dict[int, Shares],
    chosen: Sequence[dict[int, tuple[int, Shares]]],
    free: np.ndarray,
    running_room: np.ndarray,
    cap: np.ndarray,
    shrunk_room: np.ndarray | None = None,
) -> dict[int, list[Shares]]:
    """Per gang, its candidate placements (module docstring); ``chosen``: the greedy plans' (level,
    placement) per gang, the first of them the plan ``free`` is what is left of; ``running_room``:
    what the running jobs that stay in that plan leave; ``shrunk_room``: what they would leave with
    every running gang at its fewest replicas (:func:`shrunk_room`), offered to gangs that start."""
    out: dict[int, list[Shares]] = {}
    for j in np.flatnonzero(gangs).tolist():
        m = menus[j]
        job = m.outlook.job
        assert m.count is not None
        per = per_replica(m)
        need = per[:, 0]
        got: list[Shares] = []
        add = partial(_add, got, now.get(j))
        add(now.get(j))
        for plan in chosen:
            add(plan[j][1] if j in plan else None)
        own_free = free.copy()
        own_room = running_room.copy()
        if j in chosen[0]:
            lv, sh = chosen[0][j]
            fixed = node_fixed(m, sh)
            take(own_free, per[:, lv % m.n_alloc], sh, sign=-1.0, fixed=fixed)
            if job.status == "running":
                take(own_room, per[:, lv % m.n_alloc], sh, sign=-1.0, fixed=fixed)
        for c in sorted(set(m.count.tolist())):
            el = eligible[j]
            if j in now:
                add(packed(m, c, partial(pack_onto, c, own_free, cap, el, need, job.max_nodes, now[j])))
            for room in (own_free, own_room):
                fewest = packed(m, c, partial(pack, c, room, cap, el, need, job.max_nodes))
                add(fewest)
                if job.status != "running":
                    # Only where the gang starts: a running gang would restart for a spread whose
                    # gain is the prior's guess (it has not run over that many nodes) at a certain loss.
                    add(packed(m, c, partial(pack_wide, m, c, room, cap, el, need, fewest)))
            if shrunk_room is not None and job.status != "running":
                # Where a running gang's other replicas are: the solver may shrink it to start this one.
                add(packed(m, c, partial(pack, c, shrunk_room, cap, el, need, job.max_nodes)))
        out[j] = got
    return out


def shrunk_room(menus: Sequence[JobMenu], now: dict[int, Shares], pinned: np.ndarray, running_room: np.ndarray) -> np.ndarray:
    """``running_room`` plus what every running gang that may restart would leave at its fewest
    replicas, kept on its nodes in rank order (the placement its smaller counts are offered first),
    the rest given back: the room a gang that starts could have if the solver shrank the running
    ones. Without it a pending gang is offered only room that nothing running holds, so no running
    gang ever made way for one, however short (Pollux workload 4 under the oracle: four cifar10 gangs
    waited while two imagenet gangs held 40 of 64 GPUs)."""
    room = running_room.astype(np.float64, copy=True)
    for j, shares in now.items():
        m = menus[j]
        job = m.outlook.job
        if pinned[j] or not job.migratable or job.servers is not None or m.count is None or job.allocation is None:
            continue
        keep = int(m.count.min())
        need = np.array(
            [job.allocation.cpu_millis, job.allocation.gpus * MILLI_PER_GPU // m.gpu_unit, job.memory_mib], dtype=np.float64
        )
        for n, k in shares:
            held = min(k, keep)
            keep -= held
            room[:, n] += (k - held) * need
    return room


def reservation(
    menus: Sequence[JobMenu],
    gangs: np.ndarray,
    placed: dict[int, tuple[int, Shares]],
    eligible: Sequence[np.ndarray],
    running_room: np.ndarray,
    cap: np.ndarray,
    now_s: float,
    after_s: float,
) -> tuple[int, Shares] | None:
    """The oldest pending gang the greedy left waiting for at least ``after_s`` seconds, and the
    placement it reserves (its fewest-count packing into ``running_room``); None if there is none."""
    waiting = []
    for j in np.flatnonzero(gangs).tolist():
        job = menus[j].outlook.job
        if job.status == "pending" and j not in placed and job.submitted is not None and now_s - job.submitted >= after_s:
            waiting.append((job.submitted, job.id, j))
    for _, _, j in sorted(waiting):
        m = menus[j]
        need = per_replica(m)[:, 0]
        job = m.outlook.job
        c, el = job.fewest_replicas, eligible[j]
        shares = packed(m, c, partial(pack, c, running_room, cap, el, need, job.max_nodes))
        if shares is None:
            shares = packed(m, c, partial(pack, c, cap, cap, el, need, job.max_nodes))
        if shares is not None:
            return j, shares
    return None


def drain_seconds(
    shares: Shares,
    need: np.ndarray,
    cap: np.ndarray,
    running: Sequence[tuple[float, Shares, np.ndarray, np.ndarray]],
    fixed: np.ndarray | None = None,
) -> float:
    """Seconds from now until the reserved placement ``shares`` of replicas of ``need`` (and ``fixed``
    on each node) fits, the ``running`` jobs (predicted finish in seconds, their placement, their demand
    per replica and per node besides) leaving as they are predicted to finish: the *shadow time* of
    EASY backfilling. Jobs that end before it
    may use the reserved nodes without delaying the gang."""
    nodes = np.array([n for n, _ in shares], dtype=np.int64)
    extra = 0 if fixed is None else fixed
    want = np.stack([k * need + extra for _, k in shares], axis=1)  # (3, nodes of the reservation)
    free = cap[:, nodes].astype(np.float64).copy()
    leaving: list[tuple[float, int, np.ndarray]] = []
    for finish, placement, per, own in running:
        for n, k in placement:
            at = np.flatnonzero(nodes == n)
            if at.size:
                free[:, at[0]] -= k * per + own
                leaving.append((finish, int(at[0]), k * per + own))
    if (free >= want).all():
        return 0.0
    for finish, i, freed in sorted(leaving, key=lambda x: (x[0], x[1])):
        free[:, i] += freed
        if (free >= want).all():
            return finish
    return 0.0  # the running jobs alone never leave room (over-full nodes): no backfill


@dataclass(frozen=True)
class GangGreedy:
    """What the greedy needs to place gangs: per gang, its per-replica demands, where it runs, which
    per-replica levels it may hold there, and the nodes one replica may go to."""

    mask: np.ndarray
    per: dict[int, np.ndarray]
    now: dict[int, Shares]
    stay_ok: dict[int, np.ndarray]
    eligible: dict[int, np.ndarray]

    def fixed(self, m: JobMenu, j: int, shares: Shares) -> np.ndarray:
        """(3,) what each node of the gang's ``shares`` holds besides its workers (its servers)."""
        return node_fixed(m, shares)

    def stay(self, m: JobMenu, j: int, from_current: bool) -> tuple[int, Shares] | None:
        """The level and placement a running gang stays with (None: it may not hold any level there)."""
        ok = self.stay_ok[j]
        if not ok.any():
            return None
        cur = m.current_level % m.n_alloc if m.current_level is not None else None
        a = cur if from_current and cur is not None and ok[cur] else int(np.argmax(ok))
        shares = self.now[j]
        base = block_level(m, sum(k for _, k in shares), len(shares))
        return None if base is None else (base + a, shares)

    def place(self, m: JobMenu, j: int, free: np.ndarray, cap: np.ndarray, pinned: bool) -> tuple[int, int, Shares] | None:
        """(level, way, placement) of the fewest count at the lowest level, packed into ``free``."""
        job = m.outlook.job
        per = self.per[j]
        c, el, need = job.fewest_replicas, self.eligible[j], per[:, 0]
        shares = packed(m, c, partial(pack, c, free, cap, el, need, job.max_nodes))
        if shares is None:
            return None
        if j not in self.now:  # a gang that starts: over more nodes where the fewest are predicted slower
            fewest = shares
            shares = packed(m, c, partial(pack_wide, m, c, free, cap, el, need, fewest)) or shares
        if j in self.now and self.now[j][0][0] in dict(shares):
            shares = tuple(sorted(shares, key=lambda x: x[0] != self.now[j][0][0]))
        base = block_level(m, job.fewest_replicas, len(shares))
        ways = ways_in(m, shares, self.now.get(j, ()), 0, True, self.stay_ok.get(j, np.zeros(m.n_alloc, dtype=bool)), pinned)
        if base is None or not ways or (j in self.now and dict(shares) == dict(self.now[j])):
            return None
        return base, ways[0], shares


def gang_greedy(
    menus: Sequence[JobMenu], eligible: Sequence[np.ndarray], node_index: dict[str, int], pinned: np.ndarray
) -> GangGreedy:
    mask = gang_mask(menus)
    idx = np.flatnonzero(mask).tolist()
    now = {j: current_shares(menus[j], node_index) for j in idx if menus[j].outlook.job.status == "running"}
    return GangGreedy(
        mask=mask,
        per={j: per_replica(menus[j]) for j in idx},
        now=now,
        stay_ok={j: stay_allocs(menus[j], bool(pinned[j])) for j in now},
        eligible={j: eligible[j] for j in idx},
    )
