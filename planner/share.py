"""The continuous CPU split of each node: who gets which share of the node, seeing completions.

The integer program decides *placements* and GPU counts (and whether a job runs at all). What each
placed job then gets of its node's CPU is decided here, per node, by a rule that sees that jobs
finish and hand their share on:

- **Shares are weights, and they add up to the node.** Every CPU of the node is handed out (up to
  each job's ``max_cpu_millis``): no node has free CPU while a placed job is below its max (work
  conservation). Applied as weights (``cpu.weight`` / ``--cpu-shares`` / requests), the shares are
  what each job gets while all are busy; a job that finishes or idles hands its share on at once.
- **Deadlines first** (before the tail guard's floors too). A job with an open tier-1 deadline it can still meet is reserved the
  smallest share that reaches tier 1 in time at a constant rate (higher priority, then less slack,
  first). A deadline that cannot be met even at the job's max reserves nothing (the capacity goes
  where it still buys something), unless its tier 1 is only assumed (no curve yet): then it gets
  its max, or all the room there is, until a curve can tell.
- **Then the tail guard**, by objective profile:

  - ``deadlines>mean-jct>makespan``: the job that would finish last under the equal split (what
    the kernel gives Docker's default) keeps at least its share *along that split's own
    trajectory*, so the batch's critical path is never slower than the default's; and so does any
    other job the rollout shows ending after that split's makespan (a long job held back behind
    the critical one by shortest-first), so the batch ends no later than under the default;
  - ``deadlines>makespan>mean-jct``, lexicographically: a first rollout reserves every job what
    finishes it by the node's makespan lower bound (the slowest job alone at its max, or the total
    work at each job's most efficient share over the node; longest first when that does not fit),
    which gives the makespan reachable here; the plan then reserves every job only what meets
    *that* makespan, so short jobs still end early when it costs the makespan nothing.
- **The rest by marginal value.** What is left goes in small steps to the job whose next step buys
  the most: ``w_j · Δrate_j / W_j`` — priority weight times the epochs per second the step adds,
  over the epochs left to the job's next milestone (tier 1 while it is open, else its finish).
  With linear speed-ups this is shortest-remaining-first with caps, the rule that minimises mean
  completion time; with concave ones (Amdahl) it balances like heSRPT (Berg et al., 2020): small
  jobs get more, nobody is cut to nothing while its step still buys much. A step a job already
  holds is worth ``HOLD_BONUS`` more to it (hysteresis). Jobs with nothing left keep their minimum.

**The rollout.** The rule is applied now, then again at every predicted event (a job finishes, a
restarting job resumes), as the control loop re-plans when things change; the first allocation is
the plan, and the rollout's completion times are the plan's predictions (which therefore see that
capacity frees up when short jobs finish). Pure numpy, deterministic, O(events × jobs × steps).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: Most share steps per job between its min and max (the step is at least ``min_step`` millicores).
MAX_STEPS = 48
#: Hysteresis: a step a job already holds is worth this much more to it, so near-equal jobs do not
#: swap the lead on every re-plan as their predictions wobble (which would undo shortest-first).
HOLD_BONUS = 0.25
#: Rollout events simulated per node (each is one re-application of the rule); later completions
#: are extrapolated at the last rates.
MAX_EVENTS = 64
MAKESPAN_FIRST = "deadlines>makespan>mean-jct"


@dataclass(frozen=True)
class ShareJob:
    """One placed job whose CPU share the split decides (figures per replica unless said)."""

    lo: int  # least share (millicores): the job's min, or what the plan must guarantee it
    hi: int  # most share: the job's max (or its cap)
    replicas: int
    weight: float  # priority weight
    seconds_per_epoch: np.ndarray  # at each share of ``grid``
    grid: np.ndarray  # shares (millicores), ascending, lo ... hi
    remaining: float  # epochs to its finish
    remaining_tier1: float | None  # epochs to tier 1 while open and reachable, else None
    deadline: float | None  # seconds from now to the tier-1 deadline (open deadlines only)
    blocked: float  # seconds before it trains (start-up, restart)
    current: int | None = None  # the share it holds now (running jobs staying on the node)
    #: Tier 1 only assumed (no curve yet): a deadline it seems unable to meet still gets its max,
    #: since nothing is known yet to say it cannot.
    tier1_assumed: bool = False


@dataclass(frozen=True)
class NodeSplit:
    shares: np.ndarray  # (J,) millicores per replica, the plan's guarantees
    finish: np.ndarray  # (J,) seconds from now to the finish (inf: never)
    tier1: np.ndarray  # (J,) seconds from now to tier 1 (nan: no open tier 1)
    fair_finish: np.ndarray  # (J,) finish under the equal split, seconds from now (the tail guard's reference)


def share_grid(lo: int, hi: int, min_step: int) -> np.ndarray:
    """Shares from ``lo`` to ``hi`` in equal steps of at least ``min_step`` (both ends exact)."""
    if hi <= lo:
        return np.array([lo], dtype=np.int64)
    n = max(1, min(MAX_STEPS, (hi - lo) // max(min_step, 1)))
    return np.unique(np.round(np.linspace(lo, hi, n + 1)).astype(np.int64))


def _level_for_rate(rates: np.ndarray, need: float) -> int | None:
    """Lowest grid index whose rate reaches ``need`` (None: not even the max does)."""
    ok = np.flatnonzero(rates >= need * (1.0 - 1e-9))
    return int(ok[0]) if ok.size else None


def _rule(
    jobs: Sequence[ShareJob],
    rates: list[np.ndarray],
    active: np.ndarray,
    left: np.ndarray,
    left1: np.ndarray,
    now: float,
    guard: np.ndarray,
    floor: np.ndarray,
    capacity: float,
) -> np.ndarray:
    """The share per job (0 for inactive) for one moment of the rollout; ``floor``: least share per
    job (the tail guard's), ``guard``: a finish time per job to reserve for (inf: none). Shares are
    grid steps, except a guarded job's floor, which is met exactly (between two steps, the step above
    may not fit for every guarded job: two tied long jobs would end apart, one of them late)."""
    J = len(jobs)
    level = np.full(J, -1, dtype=np.int64)
    exact = np.full(J, math.nan)  # a floor met between two grid steps (level: the step below it)
    idx = np.flatnonzero(active)
    if idx.size == 0:
        return np.zeros(J)
    level[idx] = 0
    room = capacity - float(sum(jobs[j].grid[0] * jobs[j].replicas for j in idx.tolist()))

    # Reservations: (class, key, job, level wanted). Class 0: deadlines; class 1: the tail guard
    # (its floor, or a finish time), after the deadlines as the profile orders them. A floor is met
    # exactly (as much of it as fits): rounded down to the grid it would leave a guarded job a little
    # below the equal split's pace at every moment, which adds up to a longer makespan than the
    # default's.
    wants: list[tuple[int, float, float, int, int, bool]] = []
    for j in idx.tolist():
        job, r = jobs[j], rates[j]
        start = max(job.blocked - now, 0.0)
        if job.deadline is not None and left1[j] > 0:
            span = job.deadline - now - start
            k = _level_for_rate(r, left1[j] / span) if span > 0 else None
            if k is None and job.tier1_assumed and job.deadline > now:
                k = len(job.grid) - 1
            if k is not None and k > 0:
                wants.append((0, -job.weight, span, j, k, False))
        if floor[j] > 0:
            k = min(int(np.searchsorted(job.grid, floor[j] - 1e-6, side="left")), len(job.grid) - 1)
            if k > 0:
                wants.append((1, 0.0, -left[j] / r[-1], j, k, True))
        if math.isfinite(guard[j]) and left[j] > 0:
            span = guard[j] - now - start
            k = _level_for_rate(r, left[j] / span) if span > 0 else None
            k = len(job.grid) - 1 if k is None else k
            if k > 0:
                wants.append((1, 0.0, -left[j] / r[-1], j, k, False))
    for cls, _, _, j, k, is_floor in sorted(wants):
        g = jobs[j].grid
        have = int(level[j])
        if k <= have:
            continue
        if is_floor:
            want = min(float(floor[j]), float(g[have]) + room / jobs[j].replicas)
            if want > g[have]:
                room -= (want - float(g[have])) * jobs[j].replicas
                level[j] = int(np.searchsorted(g, want + 1e-6, side="right")) - 1
                exact[j] = want if want > g[level[j]] + 1e-6 else math.nan
            continue
        # What it holds: its step, or a floor met between two steps (raised now by its guard).
        base = float(g[have]) if math.isnan(exact[j]) else float(exact[j])
        extra = (float(g[k]) - base) * jobs[j].replicas
        if extra <= room + 1e-9:
            level[j], exact[j] = k, math.nan
            room -= extra
            continue
        if cls == 0 and not jobs[j].tier1_assumed:
            continue  # a deadline share that does not fit would not meet the deadline either
        # The guard's, or an assumed deadline's: all the room there is.
        want = base + room / jobs[j].replicas
        level[j] = int(np.searchsorted(g, want + 1e-6, side="right")) - 1
        exact[j] = want if want > g[level[j]] + 1e-6 else math.nan
        room = 0.0

    # The rest by marginal value per millicore (made non-increasing per job: a concave envelope,
    # so every job's taken steps are a prefix and one global sort gives the greedy's answer).
    js, ks, dens, costs = [], [], [], []
    for j in idx.tolist():
        job, r = jobs[j], rates[j]
        k0 = int(level[j])
        if k0 >= len(job.grid) - 1:
            continue
        milestone = left1[j] if left1[j] > 0 else left[j]
        base_share, base_rate = job.grid[k0].astype(float), r[k0]
        if not math.isnan(exact[j]):
            base_share, base_rate = exact[j], float(np.interp(exact[j], job.grid, r))
        gain = np.diff(np.concatenate(([base_rate], r[k0 + 1 :]))) * job.weight / max(milestone, 1e-9)
        if job.current is not None and now == 0.0:
            gain = gain * np.where(job.grid[k0 + 1 :] <= job.current, 1.0 + HOLD_BONUS, 1.0)
        cost = np.diff(np.concatenate(([base_share], job.grid[k0 + 1 :].astype(float)))) * job.replicas
        d = np.minimum.accumulate(np.maximum(gain, 0.0) / np.maximum(cost, 1e-9))
        js.append(np.full(d.size, j))
        ks.append(np.arange(k0 + 1, k0 + 1 + d.size))
        dens.append(d)
        costs.append(cost)
    if js and room > 0:
        jj, kk, dd, cc = (np.concatenate(a) for a in (js, ks, dens, costs))
        order = np.lexsort((kk, jj, -dd))
        taken = np.cumsum(cc[order]) <= room + 1e-9
        for j, k in zip(jj[order][taken].tolist(), kk[order][taken].tolist(), strict=True):
            if k > level[j]:
                level[j], exact[j] = k, math.nan
        # What is left is less than any next step: part of the best next step, so the rollout
        # hands out all of the node as the kernel would (a few millicores kept back from a short
        # job make it, and the job waiting for its share, end later than under the equal split).
        share = _shares(jobs, level, exact)
        rest = room - float(np.sum(cc[order][taken]))
        for j, k in zip(jj[order][~taken].tolist(), kk[order][~taken].tolist(), strict=True):
            if rest <= 1e-6:
                break
            if k == level[j] + 1:
                exact[j] = share[j] + min(rest / jobs[j].replicas, float(jobs[j].grid[k]) - share[j])
                rest -= (exact[j] - share[j]) * jobs[j].replicas
    return _shares(jobs, level, exact)


def _shares(jobs: Sequence[ShareJob], level: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Each job's share: its grid step, or the exact share it holds between two steps."""
    share = np.array([float(job.grid[int(k)]) if k >= 0 else 0.0 for job, k in zip(jobs, level, strict=True)])
    return np.where(np.isnan(exact), share, exact)


def _equal_levels(jobs: Sequence[ShareJob], active: np.ndarray, capacity: float) -> np.ndarray:
    """The equal split (every container the same weight, as the kernel does for Docker's default),
    water-filled between each job's min and max, as a (fractional) share per job."""
    J = len(jobs)
    share = np.zeros(J)
    idx = np.flatnonzero(active)
    if idx.size == 0:
        return share
    lo = np.array([jobs[j].lo for j in idx.tolist()], dtype=float)
    hi = np.array([jobs[j].hi for j in idx.tolist()], dtype=float)
    rep = np.array([jobs[j].replicas for j in idx.tolist()], dtype=float)
    # The common level L with sum(clip(L, lo, hi) * replicas) = capacity: that sum is linear between
    # the jobs' bounds, so it is found exactly on the segment where it crosses the capacity (all at
    # their max when the node holds them, all at their min when it cannot).
    level = np.unique(np.concatenate(([0.0], lo, hi)))
    used = (np.clip(level[:, None], lo, hi) * rep).sum(axis=1)
    k = int(np.searchsorted(used, capacity, side="right"))
    if k >= level.size:
        common = float(level[-1])
    elif k == 0:
        common = 0.0
    else:
        common = float(level[k - 1] + (capacity - used[k - 1]) * (level[k] - level[k - 1]) / (used[k] - used[k - 1]))
    share[idx] = np.clip(common, lo, hi)
    return share


def _rollout(
    jobs: Sequence[ShareJob],
    rates: list[np.ndarray],
    allocate: Callable[[np.ndarray, np.ndarray, np.ndarray, float], np.ndarray],
    trajectory: list[tuple[float, np.ndarray]] | None = None,
    breaks: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predicted (finish, tier-1 time) per job when ``allocate(active, left, left1, now)`` (a share
    per job) is re-applied at every event, and the first allocation; ``trajectory`` (if given)
    collects (time, shares) at every event; ``breaks``: more times at which to re-apply it (where the
    equal split's trajectory, which the tail guard's floors follow, changes)."""
    J = len(jobs)
    left = np.array([max(j.remaining, 0.0) for j in jobs])
    left1 = np.array([j.remaining_tier1 if j.remaining_tier1 is not None else 0.0 for j in jobs])
    blocked = np.array([j.blocked for j in jobs])
    finish = np.where(left > 0, math.inf, 0.0)
    tier1 = np.array([0.0 if (j.remaining_tier1 is not None and left1[i] <= 0) else math.nan for i, j in enumerate(jobs)])
    active = left > 0
    first = np.array([float(j.lo) for j in jobs])
    now = 0.0
    rate = np.zeros(J)
    for event in range(MAX_EVENTS):
        if not active.any():
            break
        share = allocate(active, left, left1, now)
        if trajectory is not None:
            trajectory.append((now, np.where(active, share, 0.0)))
        if event == 0:
            first = np.where(active, share, first)
        rate = np.zeros(J)
        for j in np.flatnonzero(active).tolist():
            rate[j] = float(np.interp(share[j], jobs[j].grid, rates[j]))
        running = active & (blocked <= now + 1e-9) & (rate > 0)
        # Next event: a finish, a tier-1 crossing (the milestone changes), or a restart ending.
        dt = math.inf
        for j in np.flatnonzero(running).tolist():
            dt = min(dt, left[j] / rate[j])
            if left1[j] > 0:
                dt = min(dt, left1[j] / rate[j])
        for j in np.flatnonzero(active & (blocked > now + 1e-9)).tolist():
            dt = min(dt, blocked[j] - now)
        if not math.isfinite(dt):
            break
        if breaks is not None:
            later = breaks[breaks > now + 1e-6]
            if later.size and later[0] - now < dt:
                dt = float(later[0] - now)
        for j in np.flatnonzero(running).tolist():
            done = rate[j] * dt
            if left1[j] > 0 and done >= left1[j] - 1e-9:
                tier1[j] = now + left1[j] / rate[j]
            left1[j] = max(left1[j] - done, 0.0)
            left[j] = max(left[j] - done, 0.0)
            if left[j] <= 1e-9:
                left[j] = 0.0
                finish[j] = now + dt
                active[j] = False
        now += dt
    # Out of events: the rest finish at their last rates (late rather than early).
    for j in np.flatnonzero(active).tolist():
        if rate[j] > 0:
            start = now + max(blocked[j] - now, 0.0)
            finish[j] = start + left[j] / rate[j]
            if left1[j] > 0:
                tier1[j] = start + left1[j] / rate[j]
    return finish, tier1, first


def split_node(jobs: Sequence[ShareJob], capacity: float, profile: str, makespan_slack: float | None = None) -> NodeSplit:
    """Shares for the jobs of one node (``capacity``: the CPU they may share, millicores; ``makespan_slack``:
    the mean-JCT profile's makespan budget over the reachable one, None: none); see the module docstring."""
    J = len(jobs)
    if J == 0:
        return NodeSplit(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0))
    rates = [1.0 / np.maximum(j.seconds_per_epoch, 1e-12) for j in jobs]
    # Jobs with nothing left (at their max_epochs, about to end) keep their minimum; the rollout
    # shares out the rest.
    capacity = capacity - sum(j.lo * j.replicas for j in jobs if j.remaining <= 0)

    # The tail guard. Mean completion time first: the job that would finish last under the equal
    # split (the kernel's default) keeps at least its equal share at every moment, so the batch's
    # critical path is never slower than the default's while the others go shortest-first.
    # Makespan first: every job is reserved what finishes it by the node's makespan lower bound.
    path: list[tuple[float, np.ndarray]] = []
    fair, _, _ = _rollout(jobs, rates, lambda active, left, left1, now: _equal_levels(jobs, active, capacity), path)
    times = np.array([t for t, _ in path]) if path else np.zeros(1)
    fair_shares = np.stack([x for _, x in path]) if path else np.zeros((1, J))
    breaks = times if profile != MAKESPAN_FIRST else None  # the floors change where the equal split's shares do
    finite = np.where(np.isfinite(fair), fair, -1.0)
    critical = finite >= finite.max() - 1e-6 if J else np.zeros(0, dtype=bool)
    guard = np.full(J, math.inf)

    def allocate(active: np.ndarray, left: np.ndarray, left1: np.ndarray, now: float) -> np.ndarray:
        # Mean completion first: the critical job's share along the equal split's own trajectory
        # (not the equal share among the jobs still active here: shortest-first keeps long jobs
        # alive longer, which would keep that share small for longer and slow the critical path).
        floor = np.zeros(J)
        if profile != MAKESPAN_FIRST:
            at = fair_shares[max(int(np.searchsorted(times, now + 1e-6, side="right")) - 1, 0)]
            floor = np.where(critical & active, np.where(at > 0, at, [j.hi for j in jobs]), 0.0)
        return _rule(jobs, rates, active, left, left1, now, guard, floor, capacity)

    def reachable(target: float | None = None) -> float:
        # Every job reserved what finishes it by ``target`` (default: the node's makespan lower
        # bound, the slowest job alone at its max or the total work at each job's most efficient
        # share over the node; longest first when that does not fit), no floors: a makespan
        # reachable here.
        if target is None:
            left0 = [max(j.remaining, 0.0) for j in jobs]
            alone = max((j.blocked + w / r[-1] for j, w, r in zip(jobs, left0, rates, strict=True) if w > 0), default=0.0)
            work = sum(float(np.min(j.grid * j.replicas / r)) * w for j, r, w in zip(jobs, rates, left0, strict=True) if w > 0)
            target = max(alone, work / max(capacity, 1.0))
        guard[:] = target
        zero = np.zeros(J)

        def free_of_floors(active: np.ndarray, left: np.ndarray, left1: np.ndarray, now: float) -> np.ndarray:
            return _rule(jobs, rates, active, left, left1, now, guard, zero, capacity)

        reach, _, _ = _rollout(jobs, rates, free_of_floors)
        guard[:] = math.inf
        done = reach[np.isfinite(reach)]
        return float(done.max()) if done.size else math.inf

    if profile == MAKESPAN_FIRST:
        # Makespan first, lexicographically: every job is reserved only what meets the reachable
        # makespan, and the rest goes shortest-first, so short jobs still end early when it costs
        # the makespan nothing.
        guard[:] = reachable()
    finish, tier1, first = _rollout(jobs, rates, allocate, breaks=breaks)
    if profile != MAKESPAN_FIRST and makespan_slack is not None and J > 1:
        # Mean completion first within a makespan budget: a job that would end past (1 + slack)
        # times the reachable makespan is reserved what ends it there (if that is sooner than the
        # equal split's makespan, which the floors below hold anyway), one more job a round.
        # The makespan-first profile's: the lower bound's rollout, then one that aims at what it reached.
        reach = reachable()
        budget = min(reach, reachable(reach)) * (1.0 + makespan_slack)
        for _ in range(J if budget < float(finite.max()) else 0):
            late = np.isfinite(finish) & (finish > budget * (1.0 + 1e-3) + 1e-6) & ~np.isfinite(guard)
            if not late.any():
                break
            guard[late] = budget
            finish, tier1, first = _rollout(jobs, rates, allocate, breaks=breaks)
    if profile != MAKESPAN_FIRST:
        # Nobody past the equal split's makespan: a job that shortest-first would push past it
        # (another long job held back behind the critical one, which then ends last) is guarded
        # too, and the rule rolled out again; each round guards at least one more job.
        limit = float(finite.max()) * (1.0 + 1e-3) + 1e-6
        for _ in range(J):
            late = np.isfinite(fair) & (finish > limit) & ~critical
            if not late.any():
                break
            critical = critical | late
            finish, tier1, first = _rollout(jobs, rates, allocate, breaks=breaks)
    level = np.array([int(np.searchsorted(j.grid, f)) for j, f in zip(jobs, first, strict=True)])
    # Whole millicores: each exact share rounded down, a millicore more to the largest remainders
    # (a guarded job's floor is met, not missed by a fraction), then whatever the grid left over.
    shares = np.floor(first + 1e-6).astype(np.int64)
    spare = int(capacity - sum(int(x) * j.replicas for x, j in zip(shares, jobs, strict=True)))
    for j in np.argsort(-(first - shares), kind="stable").tolist():
        if first[j] - shares[j] <= 1e-6 or spare < jobs[j].replicas:
            continue
        if shares[j] < jobs[j].hi:
            shares[j] += 1
            spare -= jobs[j].replicas
    shares = _hand_out_rest(jobs, shares, capacity, level)
    return NodeSplit(shares=shares, finish=finish, tier1=tier1, fair_finish=fair)


def _hand_out_rest(jobs: Sequence[ShareJob], shares: np.ndarray, capacity: float, level: np.ndarray) -> np.ndarray:
    """Whatever the grid's steps left over goes, to the millicore, to jobs below their max (highest
    level first): no CPU stays free while a placed job could use it."""
    rest = int(capacity - sum(int(s) * j.replicas for s, j in zip(shares, jobs, strict=True)))
    if rest <= 0:
        return shares
    out = shares.copy()
    for j in sorted(range(len(jobs)), key=lambda i: (-int(level[i]), i)):
        job = jobs[j]
        add = min(job.hi - int(out[j]), rest // job.replicas)
        if add > 0:
            out[j] += add
            rest -= add * job.replicas
        if rest <= 0:
            break
    return out
