"""What one job was offered, and what meeting its tier-1 deadline would take, worked out after the fact.

A plan keeps only what each job got. Storing every job's runners-up in every plan made plan JSON
2.3x bigger and planning about 10 % slower, for the few jobs anyone ever asks about, so
``flowplan explain`` asks here instead. From the snapshot a plan answered, and the plan, the
planner's own steps run again (outlooks, then menus, candidate nodes and options in
:func:`planner.build.build_problem`; no solve) and one job's options are read off:

- each option (on the candidate nodes the planner built before the solve, and on the node the plan
  gave the job if the refill found it there after the solve): its node, CPU and GPUs per replica,
  how it gets there (``stay``, ``start``, ``move``, or no node: ``wait`` / ``pause``), the time
  that way loses, the predicted epoch time, and the time to tier 1 and to the finish, and whether
  the tier-1 deadline is met;
- how much it needs beyond what the plan left free on that node once the other jobs had their
  guarantees (shares add up to the node, so more CPU always comes from someone), and who holds it;
- the smallest option (fewest GPUs, then least CPU) that meets the tier-1 deadline.

Times are for the allocation *held* until done: ``lost + remaining epochs x epoch time``. Deadlines
are judged on exactly that in the planner (:func:`planner.menu.build_menu`), so "meets" here and in
the planner agree. The plan's own times come from the node's share rollout (shares pass on when jobs
finish) and are sooner. Where GPUs are contended the planner prices a GPU job's finish with the
phase model instead; this module still shows the held time, the one deadlines rest on.

The job's remaining epochs are taken from the plan, so the figures agree with it even where the
planner that made it had curve priors that ``config`` here lacks. Pure like the planner: no clock,
no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from planner.build import build_problem
from planner.config import PlannerConfig
from planner.menu import WAYS, gpu_demand_milli
from planner.outlook import build_outlook, task_curves, with_progress
from planner.plan import Assignment, Plan, assigned_shares
from planner.problem import WAIT_WAY
from planner.snapshot import MILLI_PER_GPU, Snapshot

__all__ = ["Holder", "JobOptions", "Option", "job_options", "pareto"]


@dataclass(frozen=True)
class Holder:
    """Another job the plan placed on a node: what it was given there, and its own tier-1 margin."""

    job: str
    cpu_millis: int  # all replicas
    gpus: int
    memory_mib: int
    tier1_spare_s: float | None  # plan's tier-1 ETA to its deadline (negative: misses); None: no open deadline


@dataclass(frozen=True)
class Option:
    """One way the planner could have served the job (per replica; times in seconds from the plan's time)."""

    node: str | None
    way: str  # stay, start, move, wait or pause
    cpu_millis: int
    gpus: int
    replicas: int
    lost_seconds: float
    seconds_per_epoch: float | None
    tier1_s: float | None  # None: no tier 1 left, or never reached
    finish_s: float | None  # None: no node (waits)
    tier1_met: bool | None  # None: no open tier-1 deadline
    short_cpu_millis: int = 0  # beyond what the plan leaves free on the node (0: none)
    short_gpus: int = 0
    short_memory_mib: int = 0
    holders: tuple[Holder, ...] = ()  # the other jobs on that node in the plan
    nodes: int = 1  # the nodes its replicas are on (a gang spread from ``node``)

    @property
    def fits(self) -> bool:
        """Fits beside what the plan gave the other jobs on its node."""
        return self.short_cpu_millis <= 0 and self.short_gpus <= 0 and self.short_memory_mib <= 0


@dataclass(frozen=True)
class JobOptions:
    job: str
    time: float
    given: Option  # what the plan gave it, priced the same way
    options: tuple[Option, ...]  # every option the planner weighed, soonest finish first, waiting last
    tier1_deadline_s: float | None  # from the plan's time; None: no open tier-1 deadline
    epochs_to_tier1: float | None
    to_meet: Option | None  # the smallest option meeting the tier-1 deadline; None: none does (or no deadline)


def _held(lost: float, remaining: float | None, spe: float | None) -> float | None:
    if remaining is None or spe is None or not math.isfinite(spe):
        return None
    return lost + remaining * spe


def _way_of(a: Assignment) -> str:
    if a.action in ("keep", "resize", "deliver"):
        return "stay"
    return a.action if a.action in ("start", "pause", "wait") else "move"


def job_options(snapshot: Snapshot, plan: Plan, job_id: str, config: PlannerConfig | None = None) -> JobOptions:
    """The options of ``job_id`` in ``plan`` (which answered ``snapshot``); see the module docstring.

    Raises ``KeyError`` when the job has no assignment in the plan or is not in the snapshot.
    """
    config = config or PlannerConfig()
    given = next((a for a in plan.assignments if a.job == job_id), None)
    if given is None:
        raise KeyError(job_id)
    jobs = {j.id: j for j in snapshot.jobs}
    if job_id not in jobs:
        raise KeyError(job_id)
    p = given.predictions
    outlooks = []
    curves = task_curves(snapshot)
    for j in snapshot.jobs:
        if j.status == "finished":
            continue
        o = with_progress(build_outlook(j, snapshot.settings, config, curves.get(j.task or ""), snapshot.time), snapshot.time)
        if j.id == job_id and p.epochs_to_finish is not None:
            # The plan's own remaining epochs: its planner may have had curve priors this one lacks.
            o = replace(
                o, remaining_tier1=p.epochs_to_tier1, remaining_tier2=p.epochs_to_tier2, remaining_finish=p.epochs_to_finish
            )
        outlooks.append(o)
    problem, _ = build_problem(snapshot, outlooks, config)
    index = next(i for i, m in enumerate(problem.menus) if m.outlook.job.id == job_id)
    menu = problem.menus[index]
    job = menu.outlook.job
    now = snapshot.time
    deadline = None if menu.outlook.tier1_deadline is None else menu.outlook.tier1_deadline - now
    rem1 = menu.outlook.remaining_tier1 if not menu.outlook.tier1_reached else None

    # What the plan leaves free on each node once the other jobs have what it gave them.
    nodes = {n.name: n for n in snapshot.nodes}
    # GPUs in milli-GPUs, as the planner counts them (a fraction takes its gpu_milli); shown as GPUs.
    free = {n.name: [n.cpu_millis, n.gpus * MILLI_PER_GPU, n.memory_mib] for n in snapshot.nodes}
    on_node: dict[str, list[Holder]] = {}
    for a in plan.assignments:
        if a.job == job_id or a.node is None or a.node not in free:
            continue
        other = jobs.get(a.job)
        q = a.predictions
        spare = None
        if q.tier1_deadline is not None and not q.tier1_reached:
            spare = (q.tier1_deadline - q.eta_tier1) if q.eta_tier1 is not None else -math.inf
        for name, count in assigned_shares(a):  # a spread gang holds room on each of its nodes
            if name not in free:
                continue
            mem = (other.memory_mib if other is not None else 0) * count
            used = (a.cpu_millis * count, a.gpus * count, mem)
            milli = int(gpu_demand_milli(other.gpu_milli if other is not None else None, np.array([a.gpus]), count)[0])
            free[name] = [f - u for f, u in zip(free[name], (used[0], milli, mem), strict=True)]
            on_node.setdefault(name, []).append(Holder(a.job, used[0], used[1], mem, spare))

    def option(
        node: str | None,
        way: str,
        cpu: int,
        gpus: int,
        lost: float,
        level: int | None = None,
        rest: Sequence[tuple[str, int]] = (),
        count: int | None = None,
    ) -> Option:
        """``rest``: the nodes beside ``node`` a spread gang's replicas go to, with how many; ``count``:
        its replicas in all, where no ``level`` says (the plan's own assignment)."""
        spe = None if node is None else float(menu.outlook.speed.seconds_per_epoch(cpu, gpus))
        replicas = job.replicas if count is None else count
        if node is not None and level is not None and menu.count is not None:
            # A gang's level is also a count and a node count: its epoch time is the menu's.
            spe, replicas = float(menu.seconds_per_epoch[level]), int(menu.count[level])
        t1 = _held(lost, rem1, spe)
        met = None if deadline is None else (t1 is not None and t1 <= deadline)
        short = (0, 0, 0)
        holders: tuple[Holder, ...] = ()
        if node is not None and node in free:
            # What each of its nodes lacks for the replicas there, added up.
            lacks = [0, 0, 0]
            for name, k in [(node, replicas - sum(k for _, k in rest)), *rest]:
                if name not in free:
                    continue
                milli = int(gpu_demand_milli(job.gpu_milli, np.array([gpus]), k)[0])
                need = (cpu * k, milli, job.memory_mib * k)
                for i, (n, f) in enumerate(zip(need, free[name], strict=True)):
                    lacks[i] += max(0, int(n - f))
            short = (lacks[0], -(-lacks[1] // MILLI_PER_GPU), lacks[2])  # whole GPUs short, rounded up
            holders = tuple(h for name in [node, *(n for n, _ in rest)] for h in on_node.get(name, []))
        return Option(
            node=node,
            way=way,
            cpu_millis=cpu,
            gpus=gpus,
            replicas=replicas,
            lost_seconds=lost,
            seconds_per_epoch=spe,
            tier1_s=t1,
            finish_s=_held(lost, menu.outlook.remaining_finish, spe),
            tier1_met=met,
            short_cpu_millis=short[0],
            short_gpus=short[1],
            short_memory_mib=short[2],
            holders=holders,
            nodes=1 + len(rest) if node is not None else 1,
        )

    opts: list[Option] = []
    for k in problem.options_of(index):
        n, way, level = int(problem.opt_node[k]), int(problem.opt_way[k]), int(problem.opt_level[k])
        if n < 0 or way == WAIT_WAY:
            pausing = job.status == "running"
            opts.append(option(None, "pause" if pausing else "wait", 0, 0, float(job.checkpoint_seconds) if pausing else 0.0))
            continue
        name = problem.node_names[n]
        if name not in nodes:
            continue
        on = problem.ext_opt == k
        rest = [(problem.node_names[int(e)], int(r)) for e, r in zip(problem.ext_node[on], problem.ext_reps[on], strict=True)]
        opts.append(option(name, WAYS[way], int(menu.cpu[level]), int(menu.gpu[level]), float(menu.lost[way]), level, rest))
    given_way = _way_of(given)
    if given.node is not None and given.node in nodes and given_way in WAYS and given.node not in {x.node for x in opts}:
        # The plan's node is not among the candidates built before the solve: the refill gave it after
        # (``planner.build.widen``: room a move freed, offered at every level of the job's menu).
        w = WAYS.index(given_way)
        for level in range(menu.cpu.size):
            opts.append(option(given.node, given_way, int(menu.cpu[level]), int(menu.gpu[level]), float(menu.lost[w]), level))
    opts.sort(key=lambda x: (x.finish_s is None, x.finish_s or 0.0, x.gpus, x.cpu_millis, x.node or ""))
    meeting = [x for x in opts if x.tier1_met]
    to_meet = min(meeting, key=lambda x: (x.gpus, x.cpu_millis, not x.fits, x.tier1_s or 0.0)) if meeting else None
    cpu, gpus = (given.cpu_millis, given.gpus) if given.node else (0, 0)
    given_opt = option(
        given.node, given_way, cpu, gpus, given.lost_seconds, rest=assigned_shares(given)[1:], count=given.replicas
    )
    if menu.count is not None and given.node is not None and given.predictions.seconds_per_epoch is not None:
        # A gang's count and spread: the plan's epoch time, not the per-replica model's.
        spe = given.predictions.seconds_per_epoch
        t1 = _held(given.lost_seconds, rem1, spe)
        given_opt = replace(
            given_opt,
            replicas=given.replicas,
            seconds_per_epoch=spe,
            tier1_s=t1,
            finish_s=_held(given.lost_seconds, menu.outlook.remaining_finish, spe),
            tier1_met=None if deadline is None else (t1 is not None and t1 <= deadline),
        )
    return JobOptions(
        job=job_id,
        time=now,
        given=given_opt,
        options=tuple(opts),
        tier1_deadline_s=deadline,
        epochs_to_tier1=rem1,
        to_meet=to_meet,
    )


def pareto(options: tuple[Option, ...] | list[Option]) -> list[Option]:
    """The options no other on the same node beats: none there with no more CPU, no more GPUs (over
    all its replicas: a gang's counts differ) and no later finish, and better in one of them.
    Waiting/pausing is kept. Order is kept."""
    out = []
    for x in options:
        if x.node is None or x.finish_s is None:
            out.append(x)
            continue
        beaten = any(
            y is not x
            and y.node == x.node
            and y.finish_s is not None
            and y.cpu_millis * y.replicas <= x.cpu_millis * x.replicas
            and y.gpus * y.replicas <= x.gpus * x.replicas
            and y.finish_s <= x.finish_s
            and (
                y.cpu_millis * y.replicas < x.cpu_millis * x.replicas
                or y.gpus * y.replicas < x.gpus * x.replicas
                or y.finish_s < x.finish_s
            )
            for y in options
        )
        if not beaten:
            out.append(x)
    return out
