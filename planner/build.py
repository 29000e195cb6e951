"""Build the integer program from a snapshot: candidates, then options, then the warm start.

Steps, each a function below:

1. *menus* — per job, the allocation levels and their predicted finish / tier times (:mod:`planner.menu`),
   priced in integer cost units (:mod:`planner.objective`);
2. *eligibility* — per job, the nodes it may start or move to: schedulable, labels and GPU type
   matching, big enough for its smallest level;
3. *greedy* — a feasible plan over all eligible nodes (:mod:`planner.greedy`), twice: growing every
   job from its lowest level, and starting from the current allocation; the better is the warm start;
4. *candidates* — per job, its current node, the greedy plans' nodes, and the ``candidate_nodes`` eligible
   nodes with the most room left after the greedy plan: this pruning is what keeps the model small;
5. *options* — every (candidate node × level) that fits the node when empty, with the way in
   (stay / start / move), plus "wait" (pending) or "pause" (running, if it can checkpoint).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import partial

import numpy as np

from planner.config import PlannerConfig
from planner.devices import best_fit
from planner.gangs import (
    Shares,
    current_shares,
    drain_seconds,
    gang_greedy,
    gang_mask,
    gang_options,
    node_fixed,
    pack,
    pack_fixed,
    pack_onto,
    packed,
    per_replica,
    reservation,
    server_need,
    shrunk_room,
    stay_allocs,
)
from planner.gangs import candidates as gang_candidates
from planner.gangs import take as gang_take
from planner.greedy import GreedyChoice, greedy
from planner.menu import MOVE, START, STAY, JobMenu, build_menu, gpu_unit
from planner.objective import Pricing, price_menus
from planner.outlook import JobOutlook
from planner.problem import EXTRA_FIELDS, OPTION_FIELDS, WAIT_WAY, Problem, merge_options
from planner.snapshot import MILLI_PER_GPU, Job, Node, Snapshot


def eligibility(nodes: Sequence[Node], menus: Sequence[JobMenu], cap: np.ndarray) -> list[np.ndarray]:
    """Indices of nodes each job may be placed on (before looking at what is free); a gang's, the
    nodes one of its replicas may go to."""
    schedulable = np.array([n.schedulable for n in nodes], dtype=bool)
    cache: dict[tuple[tuple[str, ...] | None, tuple[tuple[str, str], ...]], np.ndarray] = {}
    # Jobs of one shape (constraints and smallest demand) share one read-only array: a pass over
    # every node per shape, not per job (jobs outnumber shapes many times over in large clusters).
    shapes: dict[tuple[object, ...], np.ndarray] = {}
    out: list[np.ndarray] = []
    for m in menus:
        job = m.outlook.job
        key = (job.gpu_type_key, tuple(sorted(job.node_selector.items())))
        least = per_replica(m)[:, 0] if m.count is not None else (m.dem_cpu[0], m.dem_gpu[0], m.dem_mem)
        shape = (key, int(least[0]), int(least[1]), int(least[2]))
        got = shapes.get(shape)
        if got is None:
            mask = cache.get(key)
            if mask is None:
                mask = schedulable.copy()
                if job.gpu_type is not None:
                    mask &= np.array([job.takes_gpu_type(n.gpu_type) for n in nodes], dtype=bool)
                for k, v in key[1]:
                    mask &= np.array([n.labels.get(k) == v for n in nodes], dtype=bool)
                cache[key] = mask
            fit = mask & (cap[0] >= shape[1]) & (cap[1] >= shape[2]) & (cap[2] >= shape[3])
            got = np.flatnonzero(fit)
            got.flags.writeable = False
            shapes[shape] = got
        out.append(got)
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


def gpu_phase_seconds(nodes: Sequence[Node], outlooks: Sequence[JobOutlook], config: PlannerConfig) -> float:
    """The phase model's length for GPU jobs: ``config.weights.gpu_phase_seconds`` when the cluster's
    GPUs are contended (the active GPU jobs' largest asks, each capped at the most a node holds, add
    up to more GPUs than the cluster has), else 0 (every job can hold its largest ask: an allocation
    is what the job keeps, held until done)."""
    total = sum(n.gpus for n in nodes)
    most = max((n.gpus for n in nodes), default=0)
    asked = 0  # milli-GPUs
    for o in outlooks:
        job = o.job
        if job.gpu_milli is not None:
            asked += job.gpu_milli
        elif job.max_gpus > 0:
            per = min(job.max_gpus, most // job.replicas) if job.replicas else 0
            asked += max(per, job.min_gpus) * job.replicas * MILLI_PER_GPU
    return config.weights.gpu_phase_seconds if asked > total * MILLI_PER_GPU else 0.0


def build_problem(snapshot: Snapshot, outlooks: Sequence[JobOutlook], config: PlannerConfig) -> tuple[Problem, Pricing]:
    nodes = snapshot.nodes
    N = len(nodes)
    node_index = {n.name: i for i, n in enumerate(nodes)}
    # GPUs in units of ``unit`` milli-GPUs (the aggregate relaxation of GPU fractions; whole GPUs
    # without them; :mod:`planner.devices` numbers the devices after the solve).
    unit = gpu_unit(o.job for o in outlooks)
    cap = np.array(
        [[n.cpu_millis for n in nodes], [n.gpus * MILLI_PER_GPU // unit for n in nodes], [n.memory_mib for n in nodes]],
        dtype=np.int64,
    ).reshape(3, N)
    warnings: list[str] = []

    interval = snapshot.settings.interval_seconds
    max_gpus = max((n.gpus for n in nodes), default=0)
    phase = gpu_phase_seconds(nodes, outlooks, config)
    menus = [build_menu(i, o, snapshot.time, interval, config, max_gpus, phase, unit) for i, o in enumerate(outlooks)]
    pricing = price_menus(menus, config, snapshot.time)

    current = np.array(
        [node_index[m.outlook.job.node] if m.outlook.job.node and m.outlook.job.status == "running" else -1 for m in menus],
        dtype=np.int64,
    )
    pinned = np.array([m.outlook.job.status == "running" and not m.outlook.job.migratable for m in menus], dtype=bool)
    for j, m in enumerate(menus):
        job = m.outlook.job
        if current[j] < 0 or job.allocation is None:
            continue
        node = nodes[int(current[j])]
        here = dict(job.shares()).get(node.name, job.replicas)  # a gang's replicas on rank 0's node
        for what, held, has in (
            ("millicores", job.allocation.cpu_millis * here, node.cpu_millis),
            ("GPUs", job.allocation.gpus * here, node.gpus),
        ):
            if held > has:
                warnings.append(
                    f"job {job.id}: holds {held} {what} on node {node.name}, which has {has} (a wrong reading?); "
                    "planned from its bounds, as a change to what fits"
                )
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
    gang = gang_mask(menus)
    for jj in np.flatnonzero(pinned):
        j = int(jj)
        m = menus[j]
        if gang[j]:
            need = per_replica(m)[:, int(np.argmax(stay_allocs(m, True)))]
            own = m.outlook.job.running_servers * server_need(m)
            for n, k in current_shares(m, node_index):
                forced[:, n] += k * need + own
            continue
        lv = int(np.argmax(stay_ok[j]))  # type: ignore[arg-type]
        forced[:, current[j]] += (m.dem_cpu[lv], m.dem_gpu[lv], m.dem_mem)
    over = np.flatnonzero((forced > cap).any(axis=0))
    for i in over:
        warnings.append(f"node {nodes[i].name}: jobs that cannot move already exceed its capacity; planned as is")
    cap = np.maximum(cap, forced)

    eligible = eligibility(nodes, menus, cap)
    budget = snapshot.settings.migration_budget

    def greedy_pair() -> tuple[GreedyChoice, GreedyChoice]:
        gangs = gang_greedy(menus, eligible, node_index, pinned) if gang.any() else None
        args = (menus, eligible, current, pinned, stay_ok, cap[0], cap[1], cap[2], budget)
        return greedy(*args, gangs=gangs), greedy(*args, from_current=True, gangs=gangs)

    g, g_cur = greedy_pair()
    reserved = np.zeros(0, dtype=np.int64)
    keeper = -1
    backfill = eligible  # the nodes each job's candidates come from (the reserved ones for backfill)
    shadow_q = 0
    if gang.any():
        reservation_of = gang_reservation(menus, gang, g, eligible, cap, snapshot.time, config.gang_reserve_seconds)
        if reservation_of is not None:
            keeper, shares = reservation_of
            reserved = np.array(sorted(n for n, _ in shares), dtype=np.int64)
            open_node = np.ones(N, dtype=bool)
            open_node[reserved] = False
            fixed = pack_fixed(menus[keeper], menus[keeper].outlook.job.fewest_replicas)
            shadow_s = _shadow(menus, g, shares, per_replica(menus[keeper])[:, 0], cap, fixed)
            shadow_q = int(shadow_s // pricing.quantum_seconds)
            # A job that can finish by the shadow time keeps the reserved nodes among its candidates.
            early = [j != keeper and _fastest_q(m) <= shadow_q for j, m in enumerate(menus)]
            backfill = [el if early[j] or j == keeper else el[open_node[el]] for j, el in enumerate(eligible)]
            eligible = [el if j == keeper else el[open_node[el]] for j, el in enumerate(eligible)]
            g, g_cur = greedy_pair()
            warnings.append(
                f"job {menus[keeper].outlook.job.id}: a gang that has waited "
                f"{snapshot.time - (menus[keeper].outlook.job.submitted or 0.0):.0f} s; nodes "
                + ", ".join(nodes[int(n)].name for n in reserved)
                + " take no other job's start or move until it starts"
                + (
                    f", except jobs predicted to end within {shadow_q * pricing.quantum_seconds:.0f} s, when its room "
                    "is predicted free (a reservation with backfill: see docs/planner.md)"
                    if shadow_q > 0
                    else " (a reservation: see docs/planner.md)"
                )
            )
    cand = _candidates(menus, backfill, current, pinned, g, cap, config.candidate_nodes, gang)
    for j, n in enumerate(g_cur.node.tolist()):
        if n >= 0 and n not in cand[j] and not gang[j]:
            cand[j].append(n)

    problem = _options(menus, cand, current, pinned, stay_ok, cap, pricing, node_index, budget)
    problem.reserved = reserved
    problem.reserved_for = menus[keeper].outlook.job.id if reserved.size else None
    problem.reserved_backfill_s = shadow_q * pricing.quantum_seconds if reserved.size else 0.0
    if gang.any():
        problem = _with_gangs(problem, menus, gang, backfill, node_index, pinned, (g, g_cur), cap)
    if reserved.size:
        problem = _late_off(problem, keeper, shadow_q)
    problem.hint = min((_hint_of(problem, g), _hint_of(problem, g_cur)), key=problem.objective)
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
    gang: np.ndarray | None = None,
) -> list[list[int]]:
    """Per job, its candidate nodes (see the module docstring; none for gangs, :mod:`planner.gangs`)."""
    free = _left_by(menus, g, cap)
    out: list[list[int]] = []
    # The ranking depends only on the job's eligible nodes, its smallest demand and how many nodes
    # it needs; jobs of one shape share it (one pass over the eligible nodes per shape, not per job).
    ranked: dict[tuple[object, ...], list[int]] = {}
    for j, m in enumerate(menus):
        nodes: list[int] = []
        if gang is not None and gang[j]:
            out.append(nodes)
            continue
        if current[j] >= 0:
            nodes.append(int(current[j]))
        if g.node[j] >= 0 and int(g.node[j]) not in nodes:
            nodes.append(int(g.node[j]))
        el = eligible[j]
        if not pinned[j] and extra > 0 and el.size:
            k = min(extra + len(nodes), el.size)
            shape = (id(el), int(m.dem_cpu[0]), int(m.dem_gpu[0]), int(m.dem_mem), k)
            best = ranked.get(shape)
            if best is None:
                best = _ranked(el, free, m, k)
                ranked[shape] = best
            for n in best:
                if len(nodes) >= extra + (1 if current[j] >= 0 else 0) + (1 if g.node[j] >= 0 else 0):
                    break
                if n not in nodes:
                    nodes.append(n)
        out.append(nodes)
    return out


def _left_by(menus: Sequence[JobMenu], g: GreedyChoice, cap: np.ndarray, running_only: bool = False) -> np.ndarray:
    """(3, N): what the greedy plan ``g`` leaves of ``cap`` (``running_only``: counting only the jobs
    that are running now)."""
    free = cap.astype(np.float64).copy()
    for j, m in enumerate(menus):
        n, lv = int(g.node[j]), int(g.level[j])
        if n < 0 or (running_only and m.outlook.job.status != "running"):
            continue
        if j in g.shares:
            shares = g.shares[j][1]
            gang_take(free, per_replica(m)[:, lv % m.n_alloc], shares, fixed=node_fixed(m, shares))
        else:
            free[:, n] -= (m.dem_cpu[lv], m.dem_gpu[lv], m.dem_mem)
    return free


def gang_reservation(
    menus: Sequence[JobMenu],
    gang: np.ndarray,
    g: GreedyChoice,
    eligible: Sequence[np.ndarray],
    cap: np.ndarray,
    now: float,
    after: float,
) -> tuple[int, Shares] | None:
    """:func:`planner.gangs.reservation` for the greedy plan ``g``."""
    return reservation(menus, gang, g.shares, eligible, _left_by(menus, g, cap, running_only=True), cap, now, after)


def _shadow(
    menus: Sequence[JobMenu],
    g: GreedyChoice,
    shares: Shares,
    need: np.ndarray,
    cap: np.ndarray,
    fixed: np.ndarray,
) -> float:
    """Seconds until the running jobs of the greedy plan ``g`` leave room for the reserved ``shares``
    (:func:`planner.gangs.drain_seconds`), each at its predicted finish where ``g`` keeps it."""
    running: list[tuple[float, Shares, np.ndarray, np.ndarray]] = []
    for j, m in enumerate(menus):
        n, lv, way = int(g.node[j]), int(g.level[j]), int(g.way[j])
        if n < 0 or m.outlook.job.status != "running":
            continue
        finish = float(m.finish_s[way, lv])
        if j in g.shares:
            at = g.shares[j][1]
            running.append((finish, at, per_replica(m)[:, lv % m.n_alloc], node_fixed(m, at)))
        else:
            own = np.array([m.dem_cpu[lv], m.dem_gpu[lv], m.dem_mem], dtype=np.int64)
            running.append((finish, ((n, 1),), own, np.zeros(3, dtype=np.int64)))
    return drain_seconds(shares, need, cap, running, fixed)


def _fastest_q(m: JobMenu) -> int:
    """The soonest finish, in quanta, of any start or move of job ``m``."""
    assert m.finish_q is not None
    return int(m.finish_q[START:].min()) if m.finish_q.size else 1 << 62


def _late_off(problem: Problem, keeper: int, shadow_q: int) -> Problem:
    """``problem`` without the starts and moves of jobs other than ``keeper`` onto its reserved nodes
    that are predicted to end after ``shadow_q`` (the backfill rule, :mod:`planner.gangs`)."""
    on_reserved = np.isin(problem.opt_node, problem.reserved)
    if problem.ext_opt.size:
        on_reserved[problem.ext_opt[np.isin(problem.ext_node, problem.reserved)]] = True
    drop = on_reserved & (problem.opt_way != STAY) & (problem.opt_job != keeper) & (problem.finish_q > shadow_q)
    if not drop.any():
        return problem
    out = problem.subset(np.arange(problem.n_jobs), np.flatnonzero(~drop))
    out.reserved, out.reserved_for, out.reserved_backfill_s = problem.reserved, problem.reserved_for, problem.reserved_backfill_s
    return out


def _with_gangs(
    problem: Problem,
    menus: Sequence[JobMenu],
    gang: np.ndarray,
    eligible: Sequence[np.ndarray],
    node_index: dict[str, int],
    pinned: np.ndarray,
    plans: tuple[GreedyChoice, GreedyChoice],
    cap: np.ndarray,
) -> Problem:
    """``problem`` with the gangs' placed options (:mod:`planner.gangs`) and their greedy hints."""
    now = {
        j: current_shares(menus[j], node_index) for j in np.flatnonzero(gang).tolist() if menus[j].outlook.job.status == "running"
    }
    g = plans[0]
    running_room = _left_by(menus, g, cap, running_only=True)
    cand = gang_candidates(
        menus,
        gang,
        eligible,
        now,
        [p.shares for p in plans],
        _left_by(menus, g, cap),
        running_room,
        cap,
        shrunk_room(menus, now, pinned, running_room),
    )
    add, add_job, extras = gang_options(menus, cand, now, pinned, cap).arrays(menus)
    merged, _ = merge_options(problem, add, add_job, extras)
    return merged


def _ranked(el: np.ndarray, free: np.ndarray, m: JobMenu, k: int) -> list[int]:
    """The ``k`` nodes of ``el`` with the most room left for ``m``'s smallest level (in multiples of
    it, on its scarcest resource), most first, ties by node index."""
    room = free[0, el] / max(int(m.dem_cpu[0]), 1)
    if m.dem_gpu[0] > 0:
        room = np.minimum(room, free[1, el] / m.dem_gpu[0])
    if m.dem_mem > 0:
        room = np.minimum(room, free[2, el] / m.dem_mem)
    top = np.argpartition(-room, k - 1)[:k] if k < el.size else np.arange(el.size)
    order = top[np.lexsort((el[top], -room[top]))]
    return [int(n) for n in el[order]]


def _options(
    menus: Sequence[JobMenu],
    cand: Sequence[Sequence[int]],
    current: np.ndarray,
    pinned: np.ndarray,
    stay_ok: Sequence[np.ndarray | None],
    cap: np.ndarray,
    pricing: Pricing,
    node_index: dict[str, int],
    budget: int,
) -> Problem:
    # Per job, which (node, way) rows it gets (a few each, in Python); then every (row, level) pair
    # of all jobs at once: which pairs are options, and what each costs and demands, gathered from
    # the menus' tables laid end to end.
    J = len(menus)
    sizes = np.array([m.cpu.size for m in menus], dtype=np.int64)
    start1 = np.concatenate(([0], np.cumsum(sizes)))[:-1]  # each job's first level in the (L,) tables
    row_job: list[int] = []
    row_node: list[int] = []
    row_way: list[int] = []
    row_kind: list[int] = []  # 0: stay (the levels it may hold), 1: restart in place, 2: start or move
    has_wait: list[bool] = []
    for j, m in enumerate(menus):
        assert m.finish_q is not None and m.cost is not None
        job: Job = m.outlook.job
        for n in cand[j]:
            if n == current[j]:
                row_job.append(j)
                row_node.append(n)
                row_way.append(STAY)
                row_kind.append(0)
                if job.migratable and not job.resizable:
                    row_job.append(j)  # restart in place with a new share
                    row_node.append(n)
                    row_way.append(MOVE)
                    row_kind.append(1)
            elif job.status == "running":
                if job.migratable:
                    row_job.append(j)
                    row_node.append(n)
                    row_way.append(MOVE)
                    row_kind.append(2)
            else:
                row_job.append(j)
                row_node.append(n)
                row_way.append(START)
                row_kind.append(2)
        has_wait.append(job.status == "pending" or job.migratable)  # the no-node option: wait, or pause
    r_job = np.asarray(row_job, dtype=np.int64)
    r_node = np.asarray(row_node, dtype=np.int64)
    r_way = np.asarray(row_way, dtype=np.int64)
    r_kind = np.asarray(row_kind, dtype=np.int64)
    # Every (row, level) pair, rows in order and each row's levels in order.
    per_row = sizes[r_job]
    p_row = np.repeat(np.arange(r_job.size, dtype=np.int64), per_row)
    p_job = r_job[p_row]
    p_level = np.arange(p_row.size, dtype=np.int64) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    p_node = r_node[p_row]
    p_kind = r_kind[p_row]
    p_at = start1[p_job] + p_level
    cat_cpu = np.concatenate([m.dem_cpu for m in menus]) if J else np.zeros(0, dtype=np.int64)
    cat_gpu = np.concatenate([m.dem_gpu for m in menus]) if J else np.zeros(0, dtype=np.int64)
    job_mem = np.array([m.dem_mem for m in menus], dtype=np.int64)
    # The level fits the node when it is empty.
    fit = (cat_cpu[p_at] <= cap[0, p_node]) & (cat_gpu[p_at] <= cap[1, p_node]) & (job_mem[p_job] <= cap[2, p_node])
    stay = p_kind < 2
    if stay.any():
        ok_flat = np.concatenate(
            [ok if ok is not None else np.zeros(int(sizes[j]), dtype=bool) for j, ok in enumerate(stay_ok)]
        ).astype(bool)
        ok = ok_flat[p_at]
        keep = np.where(p_kind == 0, ok & (fit | pinned[p_job]), np.where(p_kind == 1, fit & ~ok, fit))
    else:
        keep = fit
    sel = np.flatnonzero(keep)
    # The wait options go after each job's placed ones: a stable sort by job keeps that order.
    waits = np.flatnonzero(np.asarray(has_wait, dtype=bool)).astype(np.int64)
    all_job = np.concatenate((p_job[sel], waits))
    order = np.argsort(all_job, kind="stable")
    minus = np.full(waits.size, -1, dtype=np.int64)
    opt_node = np.concatenate((p_node[sel], minus))[order]
    way = np.concatenate((r_way[p_row[sel]], np.full(waits.size, WAIT_WAY, dtype=np.int64)))[order]
    opt_level = np.concatenate((p_level[sel], minus))[order]
    opt_job = all_job[order]
    counts = np.bincount(opt_job, minlength=J).astype(np.int64)
    job_start = np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).astype(np.int64)

    wait = way == WAIT_WAY
    at1 = np.where(wait, 0, start1[opt_job] + opt_level)
    at3 = np.where(wait, 0, 3 * start1[opt_job] + way * sizes[opt_job] + opt_level)  # in the (3, L) tables
    zero = np.zeros(1, dtype=np.int64)

    def gather(table: list[np.ndarray], at: np.ndarray, waiting: np.ndarray) -> np.ndarray:
        flat = np.concatenate([*table, zero], axis=None).astype(np.int64)  # each table flattened in C order
        return np.where(wait, waiting, flat[at])

    zeros = np.zeros(opt_job.size, dtype=np.int64)
    finish_q = gather(
        [m.finish_q for m in menus if m.finish_q is not None], at3, np.array([m.wait_q for m in menus], dtype=np.int64)[opt_job]
    )
    cost = gather(
        [m.cost for m in menus if m.cost is not None], at3, np.array([m.wait_cost for m in menus], dtype=np.int64)[opt_job]
    )
    dem_cpu = gather([m.dem_cpu for m in menus], at1, zeros)
    dem_gpu = gather([m.dem_gpu for m in menus], at1, zeros)
    dem_mem = np.where(wait, 0, np.array([m.dem_mem for m in menus], dtype=np.int64)[opt_job])
    running = np.array([m.outlook.job.status == "running" for m in menus], dtype=bool)
    running_of_option = running[opt_job]
    return Problem(
        node_names=list(node_index),
        cap_cpu=cap[0].copy(),
        cap_gpu=cap[1].copy(),
        cap_mem=cap[2].copy(),
        menus=list(menus),
        job_start=job_start,
        opt_job=opt_job,
        opt_node=opt_node,
        opt_level=opt_level,
        opt_way=way,
        dem_cpu=dem_cpu,
        dem_gpu=dem_gpu,
        dem_mem=dem_mem,
        moves=((way == MOVE) | (wait & running_of_option)).astype(np.int64),
        finish_q=finish_q,
        cost=cost,
        makespan_weight=pricing.makespan_weight,
        migration_budget=budget,
        quantum_seconds=pricing.quantum_seconds,
        hint=np.zeros(len(menus), dtype=np.int64),  # set by the caller from a greedy plan
    )


def _hint_of(problem: Problem, g: GreedyChoice) -> np.ndarray:
    """The option index of each job's greedy choice (every greedy choice is among the options; an
    unplaced one is (-1, -1, -1), which is exactly how the wait option is encoded)."""
    j = problem.opt_job
    match = (problem.opt_node == g.node[j]) & (problem.opt_way == g.way[j]) & (problem.opt_level == g.level[j])
    idx = np.flatnonzero(match)
    hint = np.full(problem.n_jobs, -1, dtype=np.int64)
    hint[problem.opt_job[idx[::-1]]] = idx[::-1]  # first match per job
    for k, (lv, shares) in g.shares.items():
        # A gang's option is also its placement: the one with the greedy's.
        count = sum(n for _, n in shares)
        opts = [o for o in problem.options_of(k) if problem.opt_level[o] == lv and problem.opt_way[o] == g.way[k]]
        hint[k] = next((o for o in opts if problem.shares_of(o, count) == shares), -1)
    assert (hint >= 0).all(), "a greedy choice is missing from the options"
    return hint


def widen(
    nodes: Sequence[Node],
    problem: Problem,
    choice: np.ndarray,
    extra: int,
    devices: Sequence[tuple[int, Sequence[int]]] = (),
    first: Collection[int] = (),
) -> tuple[Problem, np.ndarray]:
    """``problem`` with options for the room ``choice`` leaves idle, and ``choice`` in its indices.

    A job's candidate nodes are chosen before the solve, from the room the greedy plan leaves; a solve
    that moves or pauses a job frees room on a node that then is nobody else's candidate, and that room
    stays idle while jobs wait. So every job ``choice`` leaves without a node gets options on up to
    ``extra`` of the eligible nodes whose idle room holds its smallest level (most room first) where it
    has none yet; every gang it leaves without a node gets its counts packed into that room
    (:func:`_gangs_into`). Existing options keep their order (new ones go before each job's wait
    option); the answer is the same problem when no such node exists.

    ``devices`` (per node: devices no job uses, milli-GPUs used on each device by fractions; from
    :func:`planner.devices.pack_devices`): the room is then read device by device too, where the
    node's pool cannot tell. A job is offered only nodes where one device holds its fraction (or
    enough devices are free for its whole GPUs). The jobs ``first`` (those the packing left out)
    come first, largest fraction first, and for each the room and the device its first node offers
    it are counted as taken, so that they are offered different nodes rather than all the same few
    with the most room.
    """
    cap = problem.capacity()
    on = problem.opt_node[choice]
    room = cap - problem.usage(choice)
    gangs = gang_mask(problem.menus)
    held = _held(problem, on)
    with_gangs, position = _gangs_into(nodes, problem, np.flatnonzero((on < 0) & gangs), room, held)
    if with_gangs is not problem:
        problem, choice = with_gangs, position[choice]
    left_out = np.flatnonzero((on < 0) & ~gangs)
    if left_out.size == 0 or extra <= 0:
        return problem, choice
    # Each left-out job's smallest level; a node can take one only if its room holds the least of them.
    least = np.array(
        [[problem.menus[j].dem_cpu[0], problem.menus[j].dem_gpu[0], problem.menus[j].dem_mem] for j in left_out.tolist()],
        dtype=np.int64,
    ).reshape(-1, 3)
    hot = np.flatnonzero((room >= least.min(axis=0)[:, None]).all(axis=0))
    hot = hot[~np.isin(hot, held)]  # a waiting gang's reservation (planner.gangs)
    if hot.size == 0:
        return problem, choice
    sub_menus = [problem.menus[int(j)] for j in left_out]
    eligible = eligibility(nodes, sub_menus, cap)
    cand: list[list[int]] = []
    jobs: list[int] = []
    loads = [list(load) for _, load in devices]  # per node: milli-GPUs of fractions on each device
    free_devices = np.array([free for free, _ in devices], dtype=np.int64)  # per node: devices no job uses
    # Per node: the largest fraction one device can take (what best_fit needs to find a device).
    most = np.array([_most_milli(load, free) for load, free in zip(loads, free_devices.tolist(), strict=True)], dtype=np.int64)
    dev = bool(devices)
    order = list(range(left_out.size))
    if dev:
        room = room.copy()  # taken job after job below
        order.sort(key=lambda k: (int(left_out[k]) not in first, -(sub_menus[k].outlook.job.gpu_milli or 0), k))
    for k in order:
        j = int(left_out[k])
        el = np.intersect1d(eligible[k], hot, assume_unique=True)
        el = el[(least[k, :, None] <= room[:, el]).all(axis=0)]
        milli = sub_menus[k].outlook.job.gpu_milli
        whole = int(least[k, 1]) * sub_menus[k].gpu_unit // MILLI_PER_GPU if milli is None else 0
        if dev and el.size:
            el = el[most[el] >= milli] if milli else el[free_devices[el] >= whole]
        if el.size:
            el = el[~np.isin(el, problem.opt_node[problem.options_of(j)])]
        if el.size:
            jobs.append(j)
            cand.append(_ranked(el, room.astype(np.float64), sub_menus[k], min(extra, el.size)))
            if dev and j in first:
                n = cand[-1][0]
                room[:, n] -= least[k]
                d = best_fit(loads[n], milli, int(free_devices[n])) if milli else None
                if milli and d is not None:
                    free_devices[n] -= loads[n][d] == 0
                    loads[n][d] += milli
                else:
                    free_devices[n] -= whole
                most[n] = _most_milli(loads[n], int(free_devices[n]))
    if not jobs:
        return problem, choice
    sel = np.asarray(jobs, dtype=np.int64)
    menus = [problem.menus[j] for j in jobs]
    index = {name: i for i, name in enumerate(problem.node_names)}
    current = np.array(
        [index[m.outlook.job.node] if m.outlook.job.node and m.outlook.job.status == "running" else -1 for m in menus]
    )
    pinned = np.array([m.outlook.job.status == "running" and not m.outlook.job.migratable for m in menus], dtype=bool)
    pricing = Pricing(
        quantum_seconds=problem.quantum_seconds, makespan_weight=problem.makespan_weight, total_weight=0, qoe_unit=0.0
    )
    add = _options(menus, cand, current, pinned, [_stay_levels(m) for m in menus], cap, pricing, index, problem.migration_budget)
    new = np.flatnonzero(add.opt_node >= 0)
    arrays = {name: getattr(add, name)[new] for name in OPTION_FIELDS}
    no_extras = {name: np.zeros(0, dtype=np.int64) for name in EXTRA_FIELDS}
    wider, position = merge_options(problem, arrays, sel[add.opt_job[new]], no_extras)
    return wider, position[choice]


def _most_milli(load: Sequence[int], free: int) -> int:
    """The largest fraction (milli-GPUs) one device of a node can take: a whole free device, else the
    most room on a device fractions share; :func:`planner.devices.best_fit` finds a device exactly
    for the fractions up to it."""
    return MILLI_PER_GPU if free > 0 else max([MILLI_PER_GPU - x for x in load if 0 < x < MILLI_PER_GPU], default=0)


def _held(problem: Problem, on: np.ndarray) -> np.ndarray:
    """The nodes a reservation still holds after the solve: ``problem.reserved``, unless the gang they
    were held for has a node in the plan (``on``: each job's node, -1 waiting). It starts now, so what
    it leaves of them is idle room like any other (kept held, that room sat idle for the interval
    while jobs it fits waited beside it)."""
    if not problem.reserved.size or problem.reserved_for is None:
        return problem.reserved
    keeper = next((j for j, m in enumerate(problem.menus) if m.outlook.job.id == problem.reserved_for), None)
    return problem.reserved if keeper is None or on[keeper] < 0 else problem.reserved[:0]


def _gangs_into(
    nodes: Sequence[Node], problem: Problem, left_out: np.ndarray, room: np.ndarray, held: np.ndarray
) -> tuple[Problem, np.ndarray]:
    """``problem`` with placements for the gangs ``left_out`` packed into ``room``, and where each old
    option went (the identity when none is new).

    A gang's candidate placements are packed before the solve, into the room the greedy plan leaves;
    room the solve frees (a job paused or moved, a gang that took fewer nodes) is then nobody's
    candidate, and a waiting gang stays waiting next to it. So each count of each such gang is packed
    (:func:`planner.gangs.pack`; from its nodes first when it runs, :func:`planner.gangs.pack_onto`)
    into ``room`` on its eligible nodes, the nodes ``held`` for another gang left out.
    """
    same = np.arange(problem.n_options)
    if left_out.size == 0:
        return problem, same
    cap = problem.capacity()
    menus = problem.menus
    index = {name: i for i, name in enumerate(problem.node_names)}
    eligible = eligibility(nodes, [menus[j] for j in left_out.tolist()], cap)
    pinned = np.zeros(problem.n_jobs, dtype=bool)
    now: dict[int, Shares] = {}
    cand: dict[int, list[Shares]] = {}
    for k, j in enumerate(left_out.tolist()):
        m = menus[j]
        job = m.outlook.job
        assert m.count is not None
        if job.status == "running":
            now[j] = current_shares(m, index)
            pinned[j] = not job.migratable
        el = eligible[k]
        if held.size and problem.reserved_for != job.id:
            el = el[~np.isin(el, held)]
        need = per_replica(m)[:, 0]
        have = {
            frozenset(problem.shares_of(o, int(m.count[problem.opt_level[o]])))
            for o in problem.options_of(j)
            if problem.opt_node[o] >= 0
        }
        got: list[Shares] = []
        for c in sorted(set(m.count.tolist())):
            found = [packed(m, c, partial(pack, c, room, cap, el, need, job.max_nodes))]
            if j in now:
                found.insert(0, packed(m, c, partial(pack_onto, c, room, cap, el, need, job.max_nodes, now[j])))
            for s in found:
                if s is not None and frozenset(s) not in have:
                    have.add(frozenset(s))
                    got.append(s)
        if got:
            cand[j] = got
    if not cand:
        return problem, same
    add, add_job, extras = gang_options(menus, cand, now, pinned, cap).arrays(menus)
    if add_job.size == 0:
        return problem, same
    return merge_options(problem, add, add_job, extras)
