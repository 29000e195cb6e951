"""Turn a chosen option per job into the Plan contract: actions, predictions, reasons, explanations."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import cast

import numpy as np

from planner.build import eligibility
from planner.gangs import servers_on
from planner.menu import MOVE, STAY, JobMenu, guessed_tiers
from planner.plan import Action, Assignment, ObjectiveTerms, Predictions, Unserved
from planner.problem import WAIT_WAY, Problem
from planner.snapshot import MILLI_PER_GPU, Job, Node, Share
from planner.transitions import action_for, previous_placement


def duration(seconds: float | None) -> str:
    """Human duration: ``45 s``, ``12 min``, ``3.5 h``, ``2.1 d``."""
    if seconds is None or not math.isfinite(seconds):
        return "never"
    s = abs(seconds)
    if s < 90:
        txt = f"{s:.0f} s"
    elif s < 90 * 60:
        txt = f"{s / 60:.0f} min"
    elif s < 48 * 3600:
        txt = f"{s / 3600:.1f} h"
    else:
        txt = f"{s / 86400:.1f} d"
    return f"-{txt}" if seconds < 0 else txt


def cores(millis: int) -> str:
    return f"{millis / 1000:g} CPU"


def _fin(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _action(m: JobMenu, way: int, level: int, node: str | None) -> Action:
    """The transition's action (:func:`planner.transitions.action_for`); a way in that restarts the
    job on its own node (MOVE) is never the same allocation."""
    return action_for(m.outlook.job, node, way == STAY and level == m.current_level)


def _gang_action(m: JobMenu, way: int, level: int, node: str, shares: tuple[tuple[str, int], ...]) -> Action:
    """A gang's action: the same allocation is its per-replica share; the same shares, its replicas
    on the same nodes (:func:`planner.transitions.action_for`)."""
    job = m.outlook.job
    cur = job.allocation
    same = way == STAY and cur is not None and cur.cpu_limit_millis is None
    same = same and (int(m.cpu[level]), int(m.gpu[level])) == (cur.cpu_millis, cur.gpus)  # type: ignore[union-attr]
    return action_for(job, node, same, dict(shares) == dict(job.shares()))


def _predictions(m: JobMenu, way: int, level: int, now: float) -> Predictions:
    o = m.outlook
    t1d, t2d = o.tier1_deadline, o.tier2_deadline
    basis = f"{o.curve_note}; {o.speed_note or f'speed {o.speed.source} ({o.speed.n_observations} obs)'}"
    if o.tiers_assumed:
        basis += "; tiers assumed at the finish until a curve can be fitted"
    if way == WAIT_WAY:
        return Predictions(
            seconds_per_epoch=None,
            epoch=o.epoch,
            epochs_to_tier1=o.remaining_tier1,
            epochs_to_tier2=o.remaining_tier2,
            epochs_to_finish=o.remaining_finish,
            tier1_deadline=t1d,
            tier2_deadline=t2d,
            tier1_satisfied=False if t1d is not None else None,
            tier2_satisfied=False if t2d is not None else None,
            tier1_reached=o.tier1_reached,
            basis=basis + "; not running this interval",
        )
    t1 = float(m.t1_s[way, level])
    t2 = float(m.t2_s[way, level])
    return Predictions(
        seconds_per_epoch=float(m.seconds_per_epoch[level]),
        epoch=o.epoch,
        epochs_to_tier1=o.remaining_tier1,
        epochs_to_tier2=o.remaining_tier2,
        epochs_to_finish=o.remaining_finish,
        eta_tier1=(now + t1) if math.isfinite(t1) else None,
        eta_tier2=(now + t2) if math.isfinite(t2) else None,
        eta_finish=now + float(m.finish_s[way, level]),
        tier1_deadline=t1d,
        tier2_deadline=t2d,
        tier1_satisfied=None if m.t1_met[way, level] < 0 else bool(m.t1_met[way, level]),
        tier2_satisfied=None if m.t2_met[way, level] < 0 else bool(m.t2_met[way, level]),
        tier1_reached=o.tier1_reached,
        basis=basis,
    )


def explain(
    m: JobMenu,
    action: Action,
    node: str | None,
    level: int,
    pred: Predictions,
    now: float,
    why: str | None,
    cpu_millis: int | None = None,
    gpu_device: int | None = None,
    shares: Sequence[tuple[str, int]] = (),
) -> str:
    """One sentence per job: what it gets, when it finishes, its deadlines (``cpu_millis``: the
    share when the node's split changed the level's; ``gpu_device``: a fractional job's device;
    ``shares``: a gang's replicas per node)."""
    job = m.outlook.job
    parts: list[str] = []
    if node is not None:
        cpu = int(m.cpu[level]) if cpu_millis is None else cpu_millis
        alloc = cores(cpu) + (f" + {int(m.gpu[level])} GPU" if m.gpu[level] else "")
        if job.gpu_milli is not None and m.gpu[level]:
            alloc = cores(cpu) + f" + {job.gpu_milli / MILLI_PER_GPU:g} GPU (shared device {gpu_device})"
        count = sum(k for _, k in shares) if shares else job.replicas
        rep = f" x{count}" if count > 1 else ""
        verb = {
            "start": "starts on",
            "keep": "keeps",
            "resize": "resized to",
            "migrate": "moves to" if node != job.node else "restarts on",
            "deliver": "keeps",
        }.get(action, action)
        if action in ("keep", "deliver", "resize"):
            parts.append(f"{verb} {alloc}{rep} on {node}")
        else:
            parts.append(f"{verb} {node} with {alloc}{rep}")
        if len(shares) > 1:
            parts.append("replicas spread over " + ", ".join(f"{n} ({k})" for n, k in shares) + f", rank 0 on {node}")
        was = sum(k for _, k in job.shares())
        if shares and was and was != count:
            parts.append(f"{was} -> {count} replicas")
        if count < job.replicas:
            parts.append(f"runs {count} of its up to {job.replicas} replicas")
        if job.servers is not None and shares:
            per = servers_on(m, count, len(shares))
            each = f", {per} on each node" if len(shares) > 1 else ""
            parts.append(f"{per * len(shares)} parameter server(s) of {cores(job.servers.cpu_millis)}{each}")
        if m.outlook.remaining_finish <= 0:
            done = _done_reason(m)
            parts.append(f"has nothing left to learn ({done})")
            if job.status == "running" and done.startswith("reached max_epochs"):
                parts.append("left to end by itself (what a script does after its last epoch is not cut short)")
        elif pred.eta_finish is not None:
            parts.append(f"finishes in {duration(pred.eta_finish - now)}")
        if m.outlook.speed_basis in ("assumed", "borrowed"):
            one = " + 1 GPU" if job.max_gpus else ""
            t = m.outlook.speed.seconds_per_epoch(1000, 1 if job.max_gpus else 0)
            if m.outlook.speed_basis == "assumed":
                parts.append(f"speed not yet observed: assuming {t:.3g} s/epoch on 1 CPU{one}")
            else:
                parts.append("speed not yet observed: " + m.outlook.speed_note.removeprefix("speed "))
    else:
        verb = "paused" if action == "pause" else "waits"
        # A reason that already says "waits although ..." reads as it is ("waits: waits although" did not).
        parts.append(why if why and why.startswith(verb + " ") else verb + (f": {why}" if why else ""))
    for tier, eta, deadline, ok in (
        ("tier 1", pred.eta_tier1, pred.tier1_deadline, pred.tier1_satisfied),
        ("tier 2", pred.eta_tier2, pred.tier2_deadline, pred.tier2_satisfied),
    ):
        if deadline is None:
            continue
        if ok:
            parts.append(f"meets its {tier} deadline ({duration(deadline - (eta or now))} to spare)")
        elif deadline < now:
            parts.append(f"{tier} deadline already passed")
        elif eta is None and node is not None:
            parts.append(f"misses its {tier} deadline: the curve levels off short of the target")
        elif eta is not None and guessed_tiers(m.outlook):
            # The tier is only assumed at the finish: priced below any job's service (menu.guessed_tiers).
            late = duration(eta - deadline)
            parts.append(
                f"would miss its {tier} deadline by {late} were it reached only at the finish"
                " (no curve yet, so no job is paused for it)"
            )
        elif eta is not None:
            parts.append(f"would miss its {tier} deadline by {duration(eta - deadline)}")
        else:
            parts.append(f"misses its {tier} deadline while waiting")
    if m.outlook.tier1_reached and not job.delivered:
        parts.append("tier 1 reached: deliver the model now")
    return "; ".join(parts)


def _done_reason(m: JobMenu) -> str:
    job = m.outlook.job
    if job.target is not None and job.target.max_epochs is not None and m.outlook.epoch >= job.target.max_epochs:
        return f"reached max_epochs {job.target.max_epochs:g}"
    if m.outlook.tier2_reached:
        return "reached tier 2"
    return "its curve has converged"


def unserved_reason(
    m: JobMenu,
    nodes: list[Node],
    eligible_any: bool,
    room_on: str | None = None,
    reserved: str | None = None,
    room_left: str | None = None,
    backfill_s: float = 0.0,
) -> str:
    """Why a job has no node in the plan. ``room_on``: a node where one of its options fits the room
    the plan leaves (it waits by the solver's choice, not for lack of room); ``reserved``: the gang
    (job id) a reservation holds nodes for this interval (:func:`planner.gangs.reservation`), and
    ``backfill_s`` the time within which a job must be predicted to end to use them (0: none may);
    ``room_left``: a node whose room after the plan holds its minimum although none of its options
    is there (:class:`MinimumRoom`), so "the nodes it fits are full" would not be true."""
    job: Job = m.outlook.job
    per = int(m.count[0]) if m.count is not None and m.count.size else 1  # a gang's level 0: its fewest, all replicas
    need = (
        f"{cores(int(m.dem_cpu[0]) // per)}"
        + (f", {m.dem_gpu[0] // per * m.gpu_unit / MILLI_PER_GPU:g} GPU" if m.dem_gpu[0] else "")
        + (f", {m.dem_mem // per} MiB" if m.dem_mem else "")
    )
    if per > 1 or m.count is not None:
        need += f" per replica, {per} replica(s) at least"
    full = f"no room for its minimum ({need}) on any node it may use; the nodes it fits are full"
    if room_left is not None and job.status != "running":
        full = (
            f"waits although {room_left} has room for its minimum ({need}): that room was not among the "
            "placements it was offered this interval (the plan's other choices freed it or left it)"
        )
    if reserved == job.id:
        return f"no room yet for its minimum ({need}); the nodes it needs are reserved for it and take no other job until it fits"
    if not eligible_any and job.status != "running" and _fits_a_node(m, nodes):
        # It fits a node, but was offered none this interval: a reservation holds them, or (a gang)
        # no placement of its fewest replicas fits the room there is.
        if reserved is not None:
            held = f"are held this interval for {reserved}, a gang that has waited longer (a reservation"
            if backfill_s > 0:
                held += f"; only jobs predicted to end within {duration(backfill_s)} may use them, and this one is not"
            return f"the nodes that fit its minimum ({need}) {held}: see the plan's warnings)"
        return full
    if not eligible_any:
        reasons = []
        if job.gpu_type:
            reasons.append(f"GPU type {job.gpu_type_text()}")
        if job.node_selector:
            reasons.append("labels " + ",".join(f"{k}={v}" for k, v in sorted(job.node_selector.items())))
        what = " with " + " and ".join(reasons) if reasons else ""
        biggest = max(((n.cpu_millis, n.gpus) for n in nodes if n.schedulable), default=None)
        tail = (
            f"; the largest schedulable node has {cores(biggest[0])}, {biggest[1]} GPU" if biggest else "; no node is schedulable"
        )
        return f"no schedulable node{what} can hold its minimum ({need}){tail}"
    if job.status == "running":
        if m.outlook.remaining_finish <= 0:
            return f"it has nothing left to learn ({_done_reason(m)}); its {need} go to jobs still learning"
        return f"its {need} are worth more to other jobs this interval (deadlines, priorities or waiting work)"
    if room_on is not None:
        return (
            f"waits although {room_on} has room for its minimum ({need}): the plan predicts it ends sooner "
            "starting later with a larger share than starting now at that minimum"
        )
    return full


def _fits_a_node(m: JobMenu, nodes: list[Node]) -> bool:
    """Whether some schedulable node of the job's GPU type and labels could hold its minimum, empty."""
    job = m.outlook.job
    # A gang's minimum may spread: one replica must fit a node.
    per = int(m.count[0]) if m.count is not None and m.count.size else 1
    cpu, gpu, mem = int(m.dem_cpu[0]) // per, int(m.dem_gpu[0]) * m.gpu_unit // per, int(m.dem_mem) // per
    return any(
        n.schedulable
        and job.takes_gpu_type(n.gpu_type)
        and all(n.labels.get(k) == v for k, v in job.node_selector.items())
        and n.cpu_millis >= cpu
        and n.gpus * MILLI_PER_GPU >= gpu
        and (not n.memory_mib or n.memory_mib >= mem)
        for n in nodes
    )


class MinimumRoom:
    """Which node's room after the plan holds a waiting job's minimum although none of its options is
    there (:meth:`node`), for the explanation: "the nodes it fits are full" must be true when said.
    ``left``: (3, nodes), the capacity less the plan's usage. Answers are kept per shape of minimum
    and node filter, since many waiting jobs share them (a plan of 10,000 jobs)."""

    def __init__(self, problem: Problem, left: np.ndarray, nodes: Sequence[Node]) -> None:
        self.problem, self.left = problem, left
        by_name = {n.name: n for n in nodes}
        self.nodes = [by_name[name] for name in problem.node_names]  # in the problem's node order
        self._answers: dict[tuple[object, ...], str | None] = {}

    def node(self, m: JobMenu) -> str | None:
        """A node whose room holds the job's minimum, on a node it may use and not held for another
        gang (a gang: its fewest replicas over up to ``max_nodes`` such nodes; the one with the most
        room is named); None: none. Whole GPUs only: a fraction needs one device's room, which the
        node's pool cannot tell."""
        job, problem = m.outlook.job, self.problem
        if job.gpu_milli is not None or not problem.node_names:
            return None
        per = int(m.count[0]) if m.count is not None and m.count.size else 1
        need = (int(m.dem_cpu[0]) // per, int(m.dem_gpu[0]) // per, int(m.dem_mem) // per)
        held = tuple(problem.reserved.tolist()) if problem.reserved_for not in (None, job.id) else ()
        most = max(job.max_nodes, 1) if m.count is not None else 1
        key = (need, per, most, job.gpu_type_key, tuple(sorted(job.node_selector.items())), held)
        if key not in self._answers:
            want = np.array(need, dtype=np.int64)[:, None]
            ok = np.zeros(len(self.nodes), dtype=bool)
            ok[eligibility(self.nodes, [m], problem.capacity())[0]] = True  # the nodes it may use, as the build reads them
            ok[list(held)] = False
            ok &= (self.left >= want).all(axis=0)
            answer = None
            if ok.any():
                dims = [d for d in range(3) if need[d] > 0]
                if dims:
                    k = np.min(np.stack([self.left[d] // need[d] for d in dims]), axis=0)
                else:
                    k = np.full(ok.size, per, dtype=np.int64)
                k = np.where(ok, k, 0)
                order = np.argsort(-k, kind="stable")  # most room first, ties to the lower index
                if int(k[order[:most]].sum()) >= per:
                    answer = problem.node_names[int(order[0])]
            self._answers[key] = answer
        return self._answers[key]


def room_nodes(problem: Problem, choice: np.ndarray, left: np.ndarray | None = None) -> np.ndarray:
    """Per job: the node of its first placed option that fits the room ``choice`` leaves (its extra
    charges on other nodes included), else -1; ``left``: that room, if the caller has it. One pass over
    all options (a plan of 10,000 jobs)."""
    first = np.full(problem.n_jobs, -1, dtype=np.int64)
    if not problem.node_names:
        return first  # no node: no room anywhere
    left = problem.capacity() - problem.usage(choice) if left is None else left
    on = problem.opt_node
    dems = (problem.dem_cpu, problem.dem_gpu, problem.dem_mem)
    fits = (on >= 0) & np.all([d <= r[np.maximum(on, 0)] for d, r in zip(dems, left, strict=True)], axis=0)
    if problem.ext_opt.size:
        extra = (problem.ext_cpu, problem.ext_gpu, problem.ext_mem)
        short = ~np.all([d <= r[problem.ext_node] for d, r in zip(extra, left, strict=True)], axis=0)
        fits[problem.ext_opt[short]] = False
    ok = np.flatnonzero(fits)
    jobs, at = np.unique(problem.opt_job[ok], return_index=True)  # options are in job order: each job's first
    first[jobs] = on[ok[at]]
    return first


def decode(
    problem: Problem,
    choice: np.ndarray,
    now: float,
    nodes: list[Node],
    eligible_any: list[bool],
    devices: Mapping[int, int] | None = None,
    packed_out: Mapping[int, str] | None = None,
) -> tuple[list[Assignment], list[Unserved], ObjectiveTerms]:
    """The plan's assignments, unserved jobs and objective terms for ``choice``; ``devices`` (job
    index -> GPU device) and ``packed_out`` (job index -> why it lost its place to fragmentation)
    come from :func:`planner.devices.pack_devices`."""
    devices = devices or {}
    packed_out = packed_out or {}
    assignments: list[Assignment] = []
    unserved: list[Unserved] = []
    qoe = churn = completion = unserved_cost = 0
    t1_met = t1_miss = t2_met = t2_miss = migrations = resizes = 0
    lost_total = 0.0
    finish_seconds: list[float] = []
    fq_max = 0
    rooms: np.ndarray | None = None  # room_nodes, computed at the first job without a node
    for j, m in enumerate(problem.menus):
        o = int(choice[j])
        way = int(problem.opt_way[o])
        level = int(problem.opt_level[o])
        ni = int(problem.opt_node[o])
        node = problem.node_names[ni] if ni >= 0 else None
        job = m.outlook.job
        count, shares = job.replicas, cast(tuple[tuple[str, int], ...], ())
        if m.count is not None and node is not None:
            count = int(m.count[level])
            shares = tuple((problem.node_names[n], k) for n, k in problem.shares_of(o, count))
            action = _gang_action(m, way, level, node, shares)
        else:
            action = _action(m, way, level, node)
        pred = _predictions(m, way, level, now)
        deliver = bool(m.outlook.tier1_reached and not job.delivered and node is not None)
        if deliver and action == "keep":
            action = "deliver"
        why = None
        if node is None:
            if rooms is None:
                left = problem.capacity() - problem.usage(choice)
                rooms = room_nodes(problem, choice, left)
                minimum_room = MinimumRoom(problem, left, nodes)
            room_on = problem.node_names[int(rooms[j])] if job.status != "running" and rooms[j] >= 0 else None
            room_left = minimum_room.node(m) if room_on is None and job.status != "running" else None
            why = packed_out.get(j) or unserved_reason(
                m, nodes, eligible_any[j], room_on, problem.reserved_for, room_left, problem.reserved_backfill_s
            )
            unserved.append(Unserved(job=job.id, reason=why))
        assert m.qoe_cost is not None and m.churn_cost is not None and m.finish_q is not None
        if way == WAIT_WAY:
            unserved_cost += m.wait_unserved
            qoe += m.wait_qoe
            churn += m.wait_churn
            completion += m.wait_time_cost
            fq_max = max(fq_max, m.wait_q)
            finish_seconds.append(m.wait_finish_s)
            lost = job.checkpoint_seconds if job.status == "running" else 0.0
        else:
            qoe += int(m.qoe_cost[way, level])
            churn += int(m.churn_cost[way, level])
            assert m.time_cost is not None
            completion += int(m.time_cost[way, level])
            fq_max = max(fq_max, int(m.finish_q[way, level]))
            finish_seconds.append(float(m.finish_s[way, level]))
            lost = float(m.lost[way])
        lost_total += lost
        migrations += int(way == MOVE)
        resizes += int(action == "resize")
        if pred.tier1_satisfied is True:
            t1_met += 1
        elif pred.tier1_satisfied is False:
            t1_miss += 1
        if pred.tier2_satisfied is True:
            t2_met += 1
        elif pred.tier2_satisfied is False:
            t2_miss += 1
        prev = previous_placement(job)
        assignments.append(
            Assignment(
                job=job.id,
                node=node,
                cpu_millis=int(m.cpu[level]) if node is not None else 0,
                gpus=int(m.gpu[level]) if node is not None else 0,
                gpu_device=devices.get(j) if node is not None else None,
                replicas=count,
                placement=[Share(node=n, replicas=k) for n, k in shares] if len(shares) > 1 else None,
                servers=servers_on(m, count, len(shares)) if job.servers is not None and node is not None else None,
                action=action,
                deliver=deliver,
                previous=prev,
                lost_seconds=lost,
                predictions=pred,
                explanation=explain(m, action, node, level, pred, now, why, gpu_device=devices.get(j), shares=shares),
            )
        )
    makespan_cost = problem.makespan_weight * fq_max
    terms = ObjectiveTerms(
        total=float(unserved_cost + qoe + completion + churn + makespan_cost),
        unserved_cost=float(unserved_cost),
        qoe_cost=float(qoe),
        makespan_cost=float(makespan_cost),
        completion_cost=float(completion),
        churn_cost=float(churn),
        tier1_met=t1_met,
        tier1_missed=t1_miss,
        tier2_met=t2_met,
        tier2_missed=t2_miss,
        makespan_seconds=_fin(max(finish_seconds)) if finish_seconds else None,
        total_completion_seconds=float(sum(finish_seconds)),
        migrations=migrations,
        resizes=resizes,
        lost_seconds=lost_total,
    )
    return assignments, unserved, terms
