"""Apply the per-node CPU split (:mod:`planner.share`) to the integer program's decoded plan.

After the solve, every node's placed jobs whose share may change — pending jobs starting there,
jobs migrating there, running jobs that resize live — share what the others leave of the node's
CPU by :func:`planner.share.split_node`. Jobs that stay and cannot resize live keep what they have.
The assignments get the split's shares as their guarantees, the action that follows (``keep`` when
the share is unchanged, else ``resize``), and the rollout's predictions (which see completions).
A CPU job whose speed-up was never observed (its speeds all at one share) may be held at half that
share, or, where it cannot be probed lower, given twice it, for one interval so that the next plan
can fit it (:func:`_probe_share`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from models import SpeedModel
from planner.config import PlannerConfig
from planner.decode import explain
from planner.menu import MOVE, STAY, JobMenu
from planner.objective import MAX_HORIZON_SECONDS
from planner.plan import Assignment, ObjectiveTerms
from planner.problem import WAIT_WAY, Problem
from planner.progress import observed_speeds
from planner.share import TAIL_BAND, NodeSplit, SearchBudget, ShareJob, share_grid, split_node


def _speed_assumed(m: JobMenu) -> bool:
    """A CPU-only job planned on the assumed speed (nothing of its own observed, nothing borrowed): the
    tail guard holds it at its equal share until its first report (:attr:`ShareJob.speed_assumed`)."""
    return m.outlook.speed_basis == "assumed" and m.outlook.job.max_gpus == 0


def _share_job(
    m: JobMenu, way: int, level: int, config: PlannerConfig, cap: int | None = None, floor: int | None = None
) -> ShareJob:
    """``cap``: the most share this plan may give it, ``floor`` the least (a probe, :func:`_probes`),
    else its max and its min."""
    o = m.outlook
    job = o.job
    hi = job.max_cpu_millis if cap is None else min(cap, job.max_cpu_millis)
    lo = job.min_cpu_millis if floor is None else min(max(floor, job.min_cpu_millis), hi)
    grid = share_grid(lo, hi, config.cpu_step_millis)
    spe = o.speed.seconds_per_epoch_many(grid, np.full(grid.size, int(m.gpu[level])))
    # An open tier 1 counts even when it is only assumed (no curve yet: tier 1 by the finish, the
    # pessimistic guess): a new job's deadline is reserved for from its first plan, not ignored.
    open1 = o.job.target is not None and not o.tier1_reached and o.remaining_tier1 is not None
    deadline = None
    if open1 and m.t1_slack_s is not None:
        deadline = float(m.t1_slack_s)
    return ShareJob(
        lo=lo,
        hi=hi,
        replicas=job.replicas,
        weight=float(m.weight),
        seconds_per_epoch=np.asarray(spe, dtype=float),
        grid=grid,
        remaining=float(o.remaining_finish),
        remaining_high=float(o.remaining_finish_high) if o.remaining_finish_high is not None else None,
        remaining_tier1=float(o.remaining_tier1) if open1 and o.remaining_tier1 is not None else None,
        deadline=deadline,
        blocked=float(m.lost[way]),
        current=job.allocation.cpu_millis if (way == STAY and job.allocation is not None) else None,
        tier1_assumed=bool(open1 and o.tiers_assumed),
        tier1_open=bool(o.job.target is not None and not o.tier1_reached),
        remaining_tier1_high=float(o.remaining_tier1_high) if (open1 and o.remaining_tier1_high is not None) else None,
        speed_assumed=_speed_assumed(m),
        work_known=bool(job.target is not None and job.target.max_epochs is not None and job.target.tier2 is None),
    )


#: A CPU-only job's speed-up is known from its own speeds once they span this ratio of shares at
#: or above one core (below one core every serial fraction gives the same linear speed-up).
PROBE_SPAN = 1.5
#: A probe costs one interval at a lower share; it is worth it only to a job with at least this many
#: intervals left at the share it was seen at, over which what it learns pays.
PROBE_INTERVALS = 4.0


def _probe_share(m: JobMenu, way: int, interval: float) -> tuple[int, int] | None:
    """The share to give ``m``'s job for one interval so that its speed-up can be fitted, and the
    highest share it was seen at, or ``None``. Below that share the probe is a cap, above it a floor.

    A running CPU-only job whose own speeds were all seen at about one share (spanning less than
    :data:`PROBE_SPAN` at or above one core) has a speed-up that only the prior says (a serial
    fraction of 0.1: it scales well). Held at that share for its whole run (its max, say, as the
    shortest job), it would never show that it does not scale, and the CPU it cannot use would stay
    with it. Half of the highest share it was seen at (at least one core and its min) tells the two
    apart in one interval: a job that scales loses part of one interval's progress, which the jobs
    beside it gain (the caller probes only where they can use the CPU); one that does not is given
    what it can use from the next plan on. A job that cannot be probed lower (seen only below
    :data:`PROBE_SPAN` cores, at its min beside longer-looking jobs, say, where half would be below
    one core and every serial fraction gives the same linear speed-up there; or seen only at its min)
    is given twice its highest share (at least two cores, at most its max) instead. Not for a job
    with an open deadline (its reservation comes first) or too little left to run for the knowledge
    to pay."""
    o = m.outlook
    job = o.job
    if way != STAY or job.status != "running" or job.allocation is None or job.max_gpus > 0 or m.t1_slack_s is not None:
        return None
    if not isinstance(o.speed, SpeedModel) or o.speed.source not in ("scaled-prior", "fitted"):
        return None  # not planned with a model of its own speeds (the oracle's true speed, say)
    shares = [s.cpu_millis for s in observed_speeds(job) if s.gpus == 0]
    if not shares:
        return None
    top = max(shares)
    if top / max(min(shares), 1000) >= PROBE_SPAN:
        return None  # its speed-up is fitted from its own speeds
    probe = max(job.min_cpu_millis, 1000, round(top / 2))
    if top / probe < PROBE_SPAN:
        probe = min(job.max_cpu_millis, 2 * max(top, 1000))  # seen too low to probe lower: probe higher
        if probe / max(top, 1000) < PROBE_SPAN:
            return None  # its max is too close to what it was seen at for a higher share to tell anything
    left = o.remaining_finish * o.speed.seconds_per_epoch(top, 0)
    return (probe, top) if left >= PROBE_INTERVALS * interval else None


def _probes(
    problem: Problem,
    choice: np.ndarray,
    jobs: list[int],
    share_jobs: list[ShareJob],
    capacity: int,
    interval: float,
    split: NodeSplit,
) -> dict[int, tuple[int, int]]:
    """Position in ``jobs`` -> (probe share, highest share seen), for the jobs of one node that
    :func:`_probe_share` picks. A probe below what it was seen at is a cap: only for a job that does
    not end the node's batch (``split``: the split's rollout without probes; a job it ends within the
    last tenth, ``TAIL_BAND``, is given no less now than the rule gives it, as in the value search: a
    probe there would lengthen the makespan by what it costs), and whose freed CPU the others there
    can take (their maxima cover what the probe leaves of the node): where nobody could use it, a
    lower guarantee changes nothing the job really gets. A probe above is a floor: only where the
    split gives the job less and the others' minimums leave room for it."""
    his = [s.hi * s.replicas for s in share_jobs]
    los = [s.lo * s.replicas for s in share_jobs]
    done = split.finish[np.isfinite(split.finish)]
    tail = TAIL_BAND * float(done.max()) if done.size else math.inf
    out: dict[int, tuple[int, int]] = {}
    for i, j in enumerate(jobs):
        got = _probe_share(problem.menus[j], int(problem.opt_way[choice[j]]), interval)
        if got is None:
            continue
        probe, seen = got
        if probe > seen:
            if int(split.shares[i]) < probe and sum(los) - los[i] + probe * share_jobs[i].replicas <= capacity:
                out[i] = got
                los[i] = probe * share_jobs[i].replicas
            continue
        if not split.finish[i] < tail or probe >= share_jobs[i].hi:
            continue
        if sum(his) - his[i] >= capacity - probe * share_jobs[i].replicas:
            out[i] = got
            his[i] = probe * share_jobs[i].replicas
    return out


def _by_node(problem: Problem, choice: np.ndarray) -> tuple[list[list[int]], np.ndarray]:
    """Per node: the jobs whose share the split decides, and the CPU the others hold there."""
    N = len(problem.node_names)
    flexible: list[list[int]] = [[] for _ in range(N)]
    fixed = np.zeros(N, dtype=np.int64)
    for j, m in enumerate(problem.menus):
        o = int(choice[j])
        n, way = int(problem.opt_node[o]), int(problem.opt_way[o])
        if n < 0 or way == WAIT_WAY:
            continue
        job = m.outlook.job
        if m.count is not None:
            # A gang keeps the level's share on every node it is on (one share for all its replicas).
            fixed[n] += int(problem.dem_cpu[o])
            for e in problem.extras_of(o):
                fixed[int(problem.ext_node[e])] += int(problem.ext_cpu[e])
        elif way == STAY and not job.resizable:
            fixed[n] += int(problem.dem_cpu[o])
        else:
            flexible[n].append(j)
    return flexible, fixed


def _node_jobs(problem: Problem, choice: np.ndarray, jobs: list[int], config: PlannerConfig) -> list[ShareJob]:
    return [
        _share_job(problem.menus[j], int(problem.opt_way[choice[j]]), int(problem.opt_level[choice[j]]), config) for j in jobs
    ]


class _RolloutPrice:
    """Choices priced the way the split sees them: each node's rollout (the rule, without the value
    search), each job's completion weight times its finish, plus the makespan weight times the
    batch's makespan (the program's own price of time). Rollouts are cached by node and jobs."""

    def __init__(
        self, problem: Problem, profile: str, config: PlannerConfig, node_cpu: Sequence[int], makespan_slack: float | None
    ) -> None:
        self.problem, self.profile, self.config, self.makespan_slack = problem, profile, config, makespan_slack
        self.capacity = [min(int(c), int(r)) for c, r in zip(problem.cap_cpu, node_cpu, strict=True)]
        self.seen: dict[tuple[int, tuple[int, ...], tuple[int, ...], int], tuple[float, float]] = {}

    def node_cost(self, c: np.ndarray, n: int, jobs: list[int], free: int) -> tuple[float, float]:
        """(the completion terms of the node's jobs, the node's makespan) under the rule's rollout."""
        if not jobs:
            return 0.0, 0.0
        key = (n, tuple(jobs), tuple(int(c[j]) for j in jobs), free)
        if key not in self.seen:
            shares = _node_jobs(self.problem, c, jobs, self.config)
            if sum(s.lo * s.replicas for s in shares) > free:
                self.seen[key] = (math.inf, math.inf)
            else:
                split = split_node(shares, free, self.profile, self.makespan_slack, SearchBudget(0))
                fin = np.where(np.isfinite(split.finish), split.finish, MAX_HORIZON_SECONDS)
                weights = np.array([float(self.problem.menus[j].completion_weight) for j in jobs])
                self.seen[key] = (float(np.dot(weights, fin)), float(fin.max()))
        return self.seen[key]

    def cluster(self, c: np.ndarray) -> tuple[list[list[int]], np.ndarray, list[float], float]:
        """The split jobs and fixed CPU per node under ``c``, each node's rollout makespan, and the
        latest finish of the placed jobs the split does not decide (as the program has it)."""
        problem = self.problem
        flexible, fixed = _by_node(problem, c)
        spans = [self.node_cost(c, n, flexible[n], self.capacity[n] - int(fixed[n]))[1] for n in range(len(problem.node_names))]
        split_jobs = {i for f in flexible for i in f}
        held = [
            int(problem.finish_q[c[i]]) for i in range(len(problem.menus)) if problem.opt_node[c[i]] >= 0 and i not in split_jobs
        ]
        return flexible, fixed, spans, max(held, default=0) * problem.quantum_seconds

    def costs(
        self,
        state: tuple[list[list[int]], np.ndarray, list[float], float],
        nodes: tuple[int, int],
        choices: Sequence[np.ndarray],
    ) -> list[float]:
        """The price of each of ``choices``, which differ from ``state``'s choice only on ``nodes``."""
        flexible, fixed, spans, held_span = state
        # The rest of the cluster's makespan: the other nodes' rollouts (a node without a split job: its
        # jobs' finish as the program has it).
        rest = max([held_span, *(span for n, span in enumerate(spans) if n not in nodes)])
        out = []
        for c in choices:
            fl, _ = _by_node(self.problem, c)
            total, span = 0.0, rest
            for n in nodes:
                t, sp = self.node_cost(c, n, fl[n], self.capacity[n] - int(fixed[n]))
                total, span = total + t, max(span, sp)
            out.append(total + self.problem.makespan_weight * span)
        return out


def moves_checked(
    problem: Problem,
    choice: np.ndarray,
    profile: str,
    config: PlannerConfig,
    node_cpu: Sequence[int],
    makespan_slack: float | None = None,
) -> tuple[np.ndarray, dict[int, str]]:
    """``choice`` with every CPU-only job's migration that the split's rollout says does not pay
    turned back into staying where it is, and for each job kept home that way, why (for its
    explanation).

    The program prices an allocation as held until the job is done, so a move to a node where the
    job's level is larger looks like a gain in completion times and makespan even where the split
    would have given it as much at home once its neighbours end (specon-4nodes, seed 2: a long job
    moved at 557 s, lost 246 s of work and ended alone at 1,729 s; the batch ends at 1,419 s without
    the move). So
    each such move is checked the way the split sees it: the two nodes' rollouts (the rule, without
    the value search) with the move and without it, priced as the program prices time (each job's
    completion weight times its finish, plus the makespan weight times the batch's makespan), and
    the move is kept only if it gains more than ``migration_margin`` times the job's weight times
    the seconds it loses (the program's own hysteresis for a move). Not checked: a move onto or off a
    node with an open tier-1 deadline (the program may have made it for QoE, which this price does
    not hold), a gang's, a GPU job's, a job's that cannot resize live (at home it holds its level
    until done, as the program prices it), a restart in place, and one whose undoing does not fit
    (the job's minimum, or its memory, at home)."""
    menus = problem.menus
    movers = [
        j
        for j, m in enumerate(menus)
        if int(problem.opt_way[choice[j]]) == MOVE
        and _split_mover(m)
        and m.outlook.job.node in problem.node_names
        and problem.node_names[int(problem.opt_node[choice[j]])] != m.outlook.job.node
    ]
    notes: dict[int, str] = {}
    if not movers:
        return choice, notes
    choice = choice.copy()
    names = problem.node_names
    price = _RolloutPrice(problem, profile, config, node_cpu, makespan_slack)
    state = price.cluster(choice)  # again only after a move is undone
    for j in movers:
        m = menus[j]
        home = names.index(str(m.outlook.job.node))
        away = int(problem.opt_node[choice[j]])
        stays = [o for o in problem.options_of(j) if int(problem.opt_way[o]) == STAY and int(problem.opt_node[o]) == home]
        if not stays:
            continue
        back = choice.copy()
        back[j] = min(stays, key=lambda o: (int(problem.dem_cpu[o]), o))
        if int(problem.usage(back)[2][home]) > int(problem.cap_mem[home]):
            continue
        flexible = state[0]
        if any(menus[i].t1_slack_s is not None for i in (*flexible[home], *flexible[away])):
            continue  # the move may make room for a deadline, which the rollout's price does not hold
        moved, stayed = price.costs(state, (home, away), (choice, back))
        if not math.isfinite(stayed):
            continue
        if stayed - moved <= config.weights.migration_margin * m.weight * float(m.lost[MOVE]):
            choice = back
            state = price.cluster(choice)
            notes[j] = (
                f"stays: a move to {names[away]} was weighed, and the two nodes' share rollouts say it would not pay "
                f"for the {float(m.lost[MOVE]):.0f} s it loses (checkpoint, restart, work since the last checkpoint)"
            )
    return choice, notes


def _split_mover(m: JobMenu) -> bool:
    """A job whose move the split's rollouts can price: CPU-only, not a gang, no open deadline,
    resizable live, running on a node of the problem."""
    job = m.outlook.job
    return m.count is None and job.max_gpus == 0 and m.t1_slack_s is None and job.resizable and job.node is not None


def _max_cpu(m: JobMenu) -> int:
    return m.outlook.job.max_cpu_millis * m.outlook.job.replicas


#: At most this many moves to idle CPU are priced in one plan (counted, not timed: plans stay
#: deterministic; each costs two nodes' rollouts).
ROOM_MOVES_PRICED = 32


def moves_to_room(
    problem: Problem,
    choice: np.ndarray,
    profile: str,
    config: PlannerConfig,
    node_cpu: Sequence[int],
    makespan_slack: float | None = None,
    notes: dict[int, str] | None = None,
) -> tuple[np.ndarray, dict[int, str]]:
    """``choice`` with CPU-only jobs moved from nodes whose split cannot give every job its max to
    nodes where CPU would sit idle, where the split's rollouts say the move pays, and why (added to
    ``notes``).

    The program never moves a CPU-only job unless it must (``cpu_jobs_move_when_forced``: its "held
    until done" levels overstate a move's gain), so a node emptied by finished jobs stayed empty while
    two long jobs shared another at half their max each (a held-out workload: the oracle ended the
    batch 3.7 % after Docker's default, which had placed the last job better from the start). Each
    candidate, a running job staying on a node whose flexible jobs' maxima exceed its free CPU, to a
    node with CPU no job there can use (its option there with the least guarantee, which must fit
    beside what is placed), is priced like :func:`moves_checked`'s: kept if the two nodes' rollouts
    gain more than ``migration_margin`` times the job's weight times the seconds it loses. The best
    move is made, then the next, within the migration budget and :data:`ROOM_MOVES_PRICED`
    pricings."""
    notes = dict(notes or {})
    menus = problem.menus
    names = problem.node_names
    budget = problem.migration_budget - int(problem.moves[choice].sum())
    if budget <= 0:
        return choice, notes
    price = _RolloutPrice(problem, profile, config, node_cpu, makespan_slack)  # rollouts only once a move is priced
    priced = 0
    cap = problem.capacity()
    while budget > 0 and priced < ROOM_MOVES_PRICED:
        flexible, fixed = _by_node(problem, choice)
        free = [price.capacity[n] - int(fixed[n]) for n in range(len(names))]
        want = [sum(_max_cpu(menus[j]) for j in flexible[n]) for n in range(len(names))]
        rooms = {n for n in range(len(names)) if free[n] > want[n]}
        crowded = [
            n for n in range(len(names)) if want[n] > free[n] and not any(menus[i].t1_slack_s is not None for i in flexible[n])
        ]
        pairs: list[tuple[int, int, int]] = []  # (job, its node, option)
        for n in crowded:
            for j in flexible[n]:
                m = menus[j]
                if int(problem.opt_way[choice[j]]) != STAY or not _split_mover(m) or not m.outlook.job.migratable:
                    continue
                if m.outlook.job.node != names[n]:
                    continue
                best: dict[int, int] = {}
                for o in problem.options_of(j):
                    to = int(problem.opt_node[o])
                    if int(problem.opt_way[o]) != MOVE or to not in rooms:
                        continue
                    if any(menus[i].t1_slack_s is not None for i in flexible[to]):
                        continue
                    if to not in best or int(problem.dem_cpu[o]) < int(problem.dem_cpu[best[to]]):
                        best[to] = o
                pairs.extend((j, n, o) for o in best.values())
        if not pairs:
            break
        state = price.cluster(choice)
        top: tuple[float, int, int] | None = None
        spare = [f - w for f, w in zip(free, want, strict=True)]  # the roomiest node first
        for j, home, o in sorted(pairs, key=lambda p: (-spare[int(problem.opt_node[p[2]])], p)):
            if priced >= ROOM_MOVES_PRICED:
                break
            away = int(problem.opt_node[o])
            moved = choice.copy()
            moved[j] = o
            if (problem.usage(moved)[:, away] > cap[:, away]).any():
                continue
            priced += 1
            after, before = price.costs(state, (home, away), (moved, choice))
            m = menus[j]
            gain = before - after - config.weights.migration_margin * m.weight * float(m.lost[MOVE])
            if math.isfinite(after) and gain > 0 and (top is None or gain > top[0]):
                top = (gain, j, o)
        if top is None:
            break
        _, j, o = top
        choice = choice.copy()
        choice[j] = o
        budget -= 1
        notes[j] = (
            f"moves: {names[int(problem.opt_node[o])]} has CPU no job there can use, and the two nodes' share rollouts "
            f"say the move pays for the {float(menus[j].lost[MOVE]):.0f} s it loses"
        )
    return choice, notes


def apply_split(
    problem: Problem,
    choice: np.ndarray,
    assignments: list[Assignment],
    terms: ObjectiveTerms,
    now: float,
    profile: str,
    config: PlannerConfig,
    node_cpu: Sequence[int],
    makespan_slack: float | None = None,
    notes: Mapping[int, str] | None = None,
    interval: float = math.inf,
) -> tuple[list[Assignment], ObjectiveTerms]:
    """The assignments with every node's CPU split (see the module docstring); ``node_cpu``: each
    node's real CPU (the problem's may be raised where jobs that cannot move overfill a node);
    ``makespan_slack``: the snapshot's ``Settings.makespan_slack``; ``notes``: a sentence per job
    to add to its explanation (:func:`moves_checked`'s); ``interval``: the snapshot's
    ``Settings.interval_seconds``, what a probe of a job's speed-up costs (:func:`_probe_share`;
    ``inf``: none)."""
    N = len(problem.node_names)
    flexible, fixed = _by_node(problem, choice)
    out = list(assignments)
    notes = dict(notes or {})
    search = SearchBudget(config.split_search)  # shared by the nodes, in node order
    for n in range(N):
        jobs = flexible[n]
        if not jobs:
            continue
        capacity = min(int(problem.cap_cpu[n]), int(node_cpu[n])) - int(fixed[n])
        share_jobs = _node_jobs(problem, choice, jobs, config)
        if sum(s.lo * s.replicas for s in share_jobs) > capacity:
            continue  # an overfull node the plan could not relieve: keep the program's levels
        split = split_node(share_jobs, capacity, profile, makespan_slack, search)
        probes = _probes(problem, choice, jobs, share_jobs, capacity, interval, split)
        if probes:
            unprobed = list(share_jobs)
            for i, (probe, seen) in probes.items():
                j = jobs[i]
                up = probe > seen
                share_jobs[i] = _share_job(
                    problem.menus[j],
                    int(problem.opt_way[choice[j]]),
                    int(problem.opt_level[choice[j]]),
                    config,
                    cap=None if up else probe,
                    floor=probe if up else None,
                )
                bound, seen_at = ("at least", "up to") if up else ("at most", "at")
                probing = (
                    f"probing its speed-up: {bound} {probe / 1000:g} CPU this interval "
                    f"(its speed seen only {seen_at} {seen / 1000:g})"
                )
                notes[j] = f"{notes[j]}; {probing}" if j in notes else probing
            split = split_node(share_jobs, capacity, profile, makespan_slack, search, reference=unprobed)
        for i, j in enumerate(jobs):
            out[j] = _rewrite(
                problem.menus[j], problem, int(choice[j]), out[j], int(split.shares[i]), split.finish[i], split.tier1[i], now
            )
    for j, note in notes.items():
        out[j] = out[j].model_copy(update={"explanation": f"{out[j].explanation}; {note}"})
    return out, _terms(terms, out, now)


def _rewrite(
    m: JobMenu, problem: Problem, option: int, a: Assignment, share: int, finish: float, tier1: float, now: float
) -> Assignment:
    job = m.outlook.job
    way, level = int(problem.opt_way[option]), int(problem.opt_level[option])
    action = a.action
    if way == STAY and job.allocation is not None:
        same = (share, a.gpus, None) == (job.allocation.cpu_millis, job.allocation.gpus, job.allocation.cpu_limit_millis)
        action = "keep" if same else "resize"
        if a.deliver and action == "keep":
            action = "deliver"
    p = a.predictions
    eta_finish = float(now + finish) if math.isfinite(finish) else None
    eta1 = float(now + tier1) if math.isfinite(tier1) else p.eta_tier1
    sat1 = p.tier1_satisfied
    if p.tier1_deadline is not None and math.isfinite(tier1):
        sat1 = bool(now + tier1 <= p.tier1_deadline)
    eta2 = p.eta_tier2
    r2, rf = m.outlook.remaining_tier2, m.outlook.remaining_finish
    if eta_finish is not None and r2 is not None and rf > 0:
        eta2 = float(now + finish * min(r2 / rf, 1.0))  # the rollout tracks the finish; tier 2 on the way there
    sat2 = p.tier2_satisfied
    if p.tier2_deadline is not None and eta2 is not None:
        sat2 = bool(eta2 <= p.tier2_deadline)
    spe = float(m.outlook.speed.seconds_per_epoch(share, a.gpus))
    pred = p.model_copy(
        update={
            "seconds_per_epoch": spe,
            "eta_finish": eta_finish if eta_finish is not None else p.eta_finish,
            "eta_tier1": eta1,
            "eta_tier2": eta2,
            "tier1_satisfied": sat1,
            "tier2_satisfied": sat2,
            "basis": p.basis + "; completion times from the node's share rollout (shares pass on when jobs finish)",
        }
    )
    text = explain(m, action, a.node, level, pred, now, None, cpu_millis=share, gpu_device=a.gpu_device)
    if share < job.max_cpu_millis:
        text += f"; guaranteed {share / 1000:g} CPU, more when others idle (up to {job.max_cpu_millis / 1000:g})"
    else:  # nothing more to take when others idle: the guarantee is already its max
        text += f"; guaranteed {share / 1000:g} CPU, its max"
    if _speed_assumed(m) and share < job.max_cpu_millis:  # the tail guard's floor for a job whose speed is a guess
        text += "; held at its equal share or more until its first report (until then its speed, and so its length, is a guess)"
    return a.model_copy(update={"cpu_millis": share, "action": action, "predictions": pred, "explanation": text})


def _terms(terms: ObjectiveTerms, assignments: Sequence[Assignment], now: float) -> ObjectiveTerms:
    etas = [a.predictions.eta_finish for a in assignments if a.node is not None]
    known = [e - now for e in etas if e is not None]
    preds = [a.predictions for a in assignments]
    return terms.model_copy(
        update={
            "tier1_met": sum(p.tier1_satisfied is True for p in preds),
            "tier1_missed": sum(p.tier1_satisfied is False for p in preds),
            "tier2_met": sum(p.tier2_satisfied is True for p in preds),
            "tier2_missed": sum(p.tier2_satisfied is False for p in preds),
            "makespan_seconds": max(known) if known else terms.makespan_seconds,
            "resizes": sum(a.action == "resize" for a in assignments),
        }
    )
