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
    the critical one by shortest-first), so the batch ends no later than under the default; and so
    does a job whose pessimistic remaining work (``ShareJob.remaining_high``) would stretch its
    equal-split finish to that makespan (it may well be the one that ends last);
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
- **Then the values searched.** The weight over the epochs left is right for linear speed-ups;
  with concave ones and caps it starves a job too long (a linear-speed-up job at its minimum while
  a shorter but less scalable one takes most of the node). What an epoch of each job is worth is
  searched instead (:func:`_search_values`): the rest goes by ``value_j · Δrate_j`` with a constant
  value per job and milestone, started from the rule's own values and from the rollout's costates
  (:func:`_epoch_values`), each value scaled up and down while the rollout's objective (the integer
  program's: each job's finish, and its tier-1 time while it has an unreached tier 1 that is not
  only assumed) falls, no
  job ends later than the rule's makespan, the jobs that end the batch get no less now than the
  rule gives them, and a deadline job keeps its margin. The floors and reservations stay as they are.
  A change that cannot move any share of the current rollout is not rolled out (:data:`Moved`).

**The rollout.** The rule is applied now, then again at every predicted event (a job finishes, a
restarting job resumes), as the control loop re-plans when things change; the first allocation is
the plan, and the rollout's completion times are the plan's predictions (which therefore see that
capacity frees up when short jobs finish). Deterministic, O(events × jobs × steps): plain Python per
job (a node holds a handful), NumPy where one operation serves all the jobs of an event.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

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
#: The value search's first scaling of a job's value, and the finest it refines to (halving the
#: step in log scale while a sweep over the jobs finds nothing better).
SEARCH_STEP = 2.0
SEARCH_FINEST = 1.25
#: A job whose rate at its max share is at least this many times its rate at its min counts toward
#: the two the value search needs.
SENSITIVE = 1.25
#: Rule applications (rollout events) one plan's value searches may spend, over all nodes, when the
#: caller does not say (``PlannerConfig.split_search``): at about 50 us each, 0.1 s at most.
SEARCH_BUDGET = 2000
#: Jobs the rule's rollout ends within this share of its makespan (the last tenth) are not given less
#: now than the rule gives them, whatever the search finds (see ``_searched``).
TAIL_BAND = 0.9
#: A speed is proportional to the share when its rate per millicore varies by less than this over
#: the job's range.
LINEAR_TOLERANCE = 0.01


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
    #: Epochs to its finish on the pessimistic side of its prediction (None: ``remaining``): the
    #: tail guard protects a job that may well end last, not only the one the median says will.
    remaining_high: float | None = None
    #: An unreached tier-1 target: its time counts in the objective the value search lowers (at the
    #: finish when the curve does not say when), as the integer program's ``t1_j`` does.
    tier1_open: bool = False
    #: Epochs to tier 1 on the pessimistic side of the curve's band (None: not known): how much of a
    #: deadline job's margin the value search may spend.
    remaining_tier1_high: float | None = None
    #: Its speed is only assumed (nothing of its own observed, nothing borrowed): how long it runs is
    #: not known at all, so it may well end last, and the tail guard holds it at its equal share
    #: until its first report says how fast it trains.
    speed_assumed: bool = False
    #: Its work left is known: it runs to its ``max_epochs`` (no tier 2 that could end it sooner), so
    #: ``remaining`` is a count, not a prediction.
    work_known: bool = False


def _fixed_order_free(jobs: Sequence[ShareJob], rates: Sequence[np.ndarray]) -> bool:
    """Whether no order of the node's jobs can end its work later: every job with work left has a
    known amount of it (:attr:`ShareJob.work_known`), a speed that is not only assumed, and a speed
    proportional to its share over its whole range (a job below one core: the kernel time-slices
    it). Then the node's work takes the same time whoever goes first, as long as the jobs left can
    use the node (which the rollout checks: a job shortest-first would end past the equal split's
    makespan is guarded all the same)."""
    for j, r in zip(jobs, rates, strict=True):
        if j.remaining <= 0:
            continue
        if not j.work_known or j.speed_assumed or j.grid.size < 2:
            return False
        per_milli = r * (1.0 / np.maximum(j.grid, 1))
        top = float(per_milli.max())
        if not (math.isfinite(top) and top > 0) or top - float(per_milli.min()) > LINEAR_TOLERANCE * top:
            return False
    return True


@dataclass(frozen=True)
class NodeSplit:
    shares: np.ndarray  # (J,) millicores per replica, the plan's guarantees
    finish: np.ndarray  # (J,) seconds from now to the finish (inf: never)
    tier1: np.ndarray  # (J,) seconds from now to tier 1 (nan: no open tier 1)
    fair_finish: np.ndarray  # (J,) finish under the equal split, seconds from now (the tail guard's reference)


@functools.lru_cache(maxsize=4096)
def share_grid(lo: int, hi: int, min_step: int) -> np.ndarray:
    """Shares from ``lo`` to ``hi`` in equal steps of at least ``min_step`` (both ends exact).
    Read-only, and kept per (lo, hi, min_step): jobs started from one template share their bounds,
    and a plan asks for every placed job's grid."""
    if hi <= lo:
        grid = np.array([lo], dtype=np.int64)
    else:
        n = max(1, min(MAX_STEPS, (hi - lo) // max(min_step, 1)))
        grid = np.unique(np.round(np.linspace(lo, hi, n + 1)).astype(np.int64))
    grid.setflags(write=False)
    return grid


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    """``float(np.interp(x, xs, ys))`` for one point, by NumPy's own arithmetic (its C loop: the
    straight piece that holds ``x``, ``slope * (x - xs[i]) + ys[i]``, the ends held), without the
    cost of a NumPy call per job and event in the rollouts."""
    n = len(xs)
    if n == 1:
        return ys[0]
    if x != x:
        return x
    i = bisect_right(xs, x) - 1
    if i < 0:
        return ys[0]
    if i >= n - 1:
        return ys[-1]
    if xs[i] == x:
        return ys[i]
    slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
    y = slope * (x - xs[i]) + ys[i]
    if y != y:  # as NumPy does: an infinite slope's other end, or a flat piece
        y = slope * (x - xs[i + 1]) + ys[i + 1]
        if y != y and ys[i] == ys[i + 1]:
            y = ys[i]
    return y


class _Steps:
    """The marginal-value tables of a node's jobs as (jobs × steps) arrays, so that one NumPy
    operation serves every job of an event: step k (1 ... top) of job j is column k - 1, with its
    rate gain times the weight, its cost in millicores (all replicas) and the hold bonus's factor (at
    now = 0); padding costs 1 and gains 0."""

    def __init__(self, jobs: Sequence[ShareJob], rates: list[np.ndarray], top: list[int]) -> None:
        J = len(jobs)
        self.count = S = max(top)
        self.gain = np.zeros((J, S))
        self.cost = np.ones((J, S))
        self.hold = np.ones((J, S))
        for j, job in enumerate(jobs):
            n = top[j]
            if n == 0:
                continue
            self.gain[j, :n] = np.diff(rates[j]) * job.weight
            self.cost[j, :n] = np.diff(job.grid.astype(float)) * job.replicas
            if job.current is not None:
                self.hold[j, :n] = np.where(job.grid[1:] <= job.current, 1.0 + HOLD_BONUS, 1.0)
        self.floor_cost = np.maximum(self.cost, 1e-9)
        self.col = np.arange(S)
        self.in_range = self.col < np.array(top)[:, None]


class _Node:
    """One node's jobs as the rule and the rollouts read them, prepared once per split (the rule is
    re-applied at every event of every rollout): plain Python numbers for the per-job steps (a node
    holds a handful of jobs, where a NumPy call costs more than the arithmetic it does), and the
    marginal-value tables (:class:`_Steps`), built when the rule first needs them (a node whose jobs
    all fit at their max never does). Every figure the rule computes is the same float, from the same
    operations in the same order, as when each event rebuilt them from the ``ShareJob`` arrays."""

    def __init__(self, jobs: Sequence[ShareJob], rates: list[np.ndarray]) -> None:
        self.J = len(jobs)
        self.jobs, self.rates_arr = jobs, rates
        self.grid = [j.grid.tolist() for j in jobs]  # ints
        self.gridf = [[float(x) for x in g] for g in self.grid]
        self.rates = [r.tolist() for r in rates]
        self.top = [len(g) - 1 for g in self.grid]
        self.lo = [j.lo for j in jobs]
        self.hi = [j.hi for j in jobs]
        self.rep = [j.replicas for j in jobs]
        self.weight = [j.weight for j in jobs]
        self.blocked = [j.blocked for j in jobs]
        self.deadline = [j.deadline for j in jobs]
        self.assumed = [j.tier1_assumed for j in jobs]
        self.remaining = [j.remaining for j in jobs]
        self.remaining_tier1 = [j.remaining_tier1 for j in jobs]
        self.lo_arr = np.array(self.lo, dtype=float)
        self.hi_arr = np.array(self.hi, dtype=float)
        self.rep_arr = np.array(self.rep, dtype=float)

    @functools.cached_property
    def tables(self) -> _Steps:
        return _Steps(self.jobs, self.rates_arr, self.top)

    @functools.cached_property
    def monotone(self) -> list[bool]:
        """Per job: its rate never falls as its share grows (NaN compares false, as in NumPy)."""
        return [all(b >= a for a, b in pairwise(r)) for r in self.rates]

    def level_for_rate(self, j: int, need: float) -> int | None:
        """Lowest grid index whose rate reaches ``need`` (None: not even the max does)."""
        threshold = need * (1.0 - 1e-9)
        r = self.rates[j]
        if self.monotone[j] and threshold == threshold:
            k = bisect_left(r, threshold)
            return k if k < len(r) else None
        return next((k for k, x in enumerate(r) if x >= threshold), None)

    def shares(self, level: list[int], exact: list[float]) -> list[float]:
        """Each job's share: its grid step, or the exact share it holds between two steps."""
        return [(g[k] if k >= 0 else 0.0) if x != x else x for g, k, x in zip(self.gridf, level, exact, strict=True)]


def _rule(
    node: _Node,
    active: list[bool],
    left: list[float],
    left1: list[float],
    now: float,
    guard: list[float],
    floor: list[float],
    capacity: float,
    values: Values | None = None,
    moved: Moved | None = None,
) -> list[float]:
    """The share per job (0 for inactive) for one moment of the rollout; ``floor``: least share per
    job (the tail guard's), ``guard``: a finish time per job to reserve for (inf: none); ``values``:
    what an epoch of each job is worth toward its finish and toward its open tier 1 (None: its
    weight over the epochs left to its next milestone, the rule's own). Shares are
    grid steps, except a guarded job's floor, which is met exactly (between two steps, the step above
    may not fit for every guarded job: two tied long jobs would end apart, one of them late).
    ``moved`` (if given) is marked where a job's value could change its share here (:data:`Moved`)."""
    J = node.J
    idx = [j for j in range(J) if active[j]]
    if not idx:
        return [0.0] * J
    level = [-1] * J
    exact = [math.nan] * J  # a floor met between two grid steps (level: the step below it)
    for j in idx:
        level[j] = 0
    room = capacity - float(sum(node.grid[j][0] * node.rep[j] for j in idx))

    # Reservations: (class, key, job, level wanted). Class 0: deadlines; class 1: the tail guard
    # (its floor, or a finish time), after the deadlines as the profile orders them. A floor is met
    # exactly (as much of it as fits): rounded down to the grid it would leave a guarded job a little
    # below the equal split's pace at every moment, which adds up to a longer makespan than the
    # default's.
    wants: list[tuple[int, float, float, int, int, bool]] = []
    for j in idx:
        top, rmax = node.top[j], node.rates[j][-1]
        start = max(node.blocked[j] - now, 0.0)
        deadline = node.deadline[j]
        if deadline is not None and left1[j] > 0:
            span = deadline - now - start
            k = node.level_for_rate(j, left1[j] / span) if span > 0 else None
            if k is None and node.assumed[j] and deadline > now:
                k = top
            if k is not None and k > 0:
                wants.append((0, -node.weight[j], span, j, k, False))
        if floor[j] > 0:
            k = min(bisect_left(node.grid[j], floor[j] - 1e-6), top)
            if k > 0:
                wants.append((1, 0.0, -left[j] / rmax, j, k, True))
        if math.isfinite(guard[j]) and left[j] > 0:
            span = guard[j] - now - start
            k = node.level_for_rate(j, left[j] / span) if span > 0 else None
            k = top if k is None else k
            if k > 0:
                wants.append((1, 0.0, -left[j] / rmax, j, k, False))
    for cls, _, _, j, k, is_floor in sorted(wants):
        g, rep = node.gridf[j], node.rep[j]
        have = level[j]
        if k <= have:
            continue
        if is_floor:
            want = min(float(floor[j]), g[have] + room / rep)
            if want > g[have]:
                room -= (want - g[have]) * rep
                level[j] = bisect_right(g, want + 1e-6) - 1
                exact[j] = want if want > g[level[j]] + 1e-6 else math.nan
            continue
        # What it holds: its step, or a floor met between two steps (raised now by its guard).
        base = g[have] if math.isnan(exact[j]) else exact[j]
        extra = (g[k] - base) * rep
        if extra <= room + 1e-9:
            level[j], exact[j] = k, math.nan
            room -= extra
            continue
        if cls == 0 and not node.assumed[j]:
            continue  # a deadline share that does not fit would not meet the deadline either
        # The guard's, or an assumed deadline's: all the room there is.
        want = base + room / rep
        level[j] = bisect_right(g, want + 1e-6) - 1
        exact[j] = want if want > g[level[j]] + 1e-6 else math.nan
        room = 0.0

    # The rest by marginal value per millicore (made non-increasing per job: a concave envelope,
    # so every job's taken steps are a prefix and one global sort gives the greedy's answer). All
    # jobs at once: row j holds job j's steps (column k - 1: step k); those at or below its level
    # are +inf, which the running minimum passes over, and are left out of the sort.
    below = [j for j in idx if level[j] < node.top[j]]
    if not below or not room > 0:
        return node.shares(level, exact)
    # Every step left fits: each job takes all of them, as the best-first prefix below would, whatever
    # the values, so there is no order to find. (Summed in any order, a few hundred costs >= 0 are
    # within 1e-13 of each other, relatively: a total that fits with a 1e-12 margin fits in the
    # prefix's own order too. Nearer the room, the prefix below decides.)
    total = 0.0
    for j in below:  # from its share (its step, or an exact share between two: not NaN) to its top
        x, g = exact[j], node.gridf[j]
        total += (g[-1] - (g[level[j]] if x != x else x)) * node.rep[j]
    if total * (1.0 + 1e-12) <= room + 1e-9:
        for j in below:
            level[j], exact[j] = node.top[j], math.nan
            if moved is not None:
                moved[1][j] = True
        return node.shares(level, exact)
    tables = node.tables
    S = tables.count
    first_col, milestone = [S] * J, [1.0] * J
    for j in below:
        first_col[j] = level[j]
        if values is None:
            milestone[j] = max(left1[j] if left1[j] > 0 else left[j], 1e-9)
        else:  # gain = weight * rate / milestone = value * rate
            worth = values[0][j] + (values[1][j] if left1[j] > 0 else 0.0)
            milestone[j] = node.weight[j] / worth if worth > 0 else math.inf
    gain = tables.gain / np.array(milestone)[:, None]
    cost, floor_cost = tables.cost, tables.floor_cost
    patched = [j for j in below if not math.isnan(exact[j])]
    if patched:  # a job between two steps: its first step starts from its exact share
        cost, floor_cost = cost.copy(), floor_cost.copy()
        for j in patched:
            k0, g, r = level[j], node.gridf[j], node.rates[j]
            gain[j, k0] = (r[k0 + 1] - _interp(exact[j], g, r)) * node.weight[j] / milestone[j]
            cost[j, k0] = (g[k0 + 1] - exact[j]) * node.rep[j]
            floor_cost[j, k0] = max(cost[j, k0], 1e-9)
    if now == 0.0:
        gain = gain * tables.hold
    density = np.maximum(gain, 0.0) / floor_cost
    held = tables.col < np.array(first_col)[:, None]
    density[held] = math.inf
    density = np.minimum.accumulate(density, axis=1)
    # (NumPy's methods rather than its functions: the same operations, without a Python wrapper each.)
    steps = (tables.in_range & ~held).ravel().nonzero()[0]  # j * S + k - 1, in the order of (j, k)
    # Best first, ties to the lower job and step: a stable sort keeps the (j, k) order of ties.
    steps = steps[(-density.ravel()[steps]).argsort(kind="stable")]
    costs = cost.ravel()[steps]
    # The longest prefix that fits (the running total of costs, all >= 0, only grows).
    n = int(costs.cumsum().searchsorted(room + 1e-9, side="right"))
    counts = np.bincount(steps[:n] // S, minlength=J).tolist() if n else [0] * J
    for j, count in enumerate(counts):
        if count:
            level[j], exact[j] = level[j] + count, math.nan
    # What is left is less than any next step: part of the best next step, so the rollout
    # hands out all of the node as the kernel would (a few millicores kept back from a short
    # job make it, and the job waiting for its share, end later than under the equal split).
    share = node.shares(level, exact)
    rest = room - float(costs[:n].sum())
    for at in steps[n:].tolist():
        if rest <= 1e-6:
            break
        j, k = divmod(at, S)
        if k == level[j]:  # step k + 1: the job's next one
            exact[j] = share[j] + min(rest / node.rep[j], node.gridf[j][k + 1] - share[j])
            rest -= (exact[j] - share[j]) * node.rep[j]
            counts[j] += 1
    if moved is not None:
        for j in below:
            moved[0][j] = moved[0][j] or level[j] < node.top[j]
            moved[1][j] = moved[1][j] or counts[j] > 0
    return node.shares(level, exact)


def _equal_levels(node: _Node, active: list[bool], capacity: float) -> list[float]:
    """The equal split (every container the same weight, as the kernel does for Docker's default),
    water-filled between each job's min and max, as a (fractional) share per job."""
    share = [0.0] * node.J
    idx = [j for j in range(node.J) if active[j]]
    if not idx:
        return share
    lo, hi, rep = node.lo_arr[idx], node.hi_arr[idx], node.rep_arr[idx]
    # The common level L with sum(clip(L, lo, hi) * replicas) = capacity: that sum is linear between
    # the jobs' bounds, so it is found exactly on the segment where it crosses the capacity (all at
    # their max when the node holds them, all at their min when it cannot). (Bounds are whole
    # millicores: a set sorts them as np.unique would; minimum(maximum()) is np.clip's selection.)
    level = np.array(sorted({0.0, *(float(node.lo[j]) for j in idx), *(float(node.hi[j]) for j in idx)}))
    used = (np.minimum(np.maximum(level[:, None], lo), hi) * rep).sum(axis=1)
    k = int(np.searchsorted(used, capacity, side="right"))
    if k >= level.size:
        common = float(level[-1])
    elif k == 0:
        common = 0.0
    else:
        common = float(level[k - 1] + (capacity - used[k - 1]) * (level[k] - level[k - 1]) / (used[k] - used[k - 1]))
    for j in idx:
        share[j] = min(max(common, float(node.lo[j])), float(node.hi[j]))
    return share


Allocate = Callable[[list[bool], list[float], list[float], float], list[float]]
#: What an epoch of each job is worth toward its finish, and toward its tier 1 while that is open.
Values = tuple[list[float], list[float]]
#: Per job, whether a higher value (first list) or a lower one (second) could change its share at
#: some event of a rollout: it ended an event below its max where the marginal steps were handed
#: out, or it took one of them there (or the part of one left over at the end). The marginal steps
#: go in the order of their value per millicore, and scaling one job's values moves only its own
#: steps in that order, earlier or later; a job that took every step it has at every such event
#: keeps them all when it is worth more, one that took none still takes none when it is worth less,
#: so every share, and the rollout, stays the same.
Moved = tuple[list[bool], list[bool]]


@dataclass(frozen=True)
class Phase:
    """One stretch of a rollout between two events: each job's rate (epochs per second; 0 while it
    waits or restarts), which milestones (finish, tier 1) were open, and which it closed."""

    rate: list[float]
    open_finish: list[bool]
    open_tier1: list[bool]
    closed_finish: list[bool]
    closed_tier1: list[bool]


class SearchBudget:
    """Rule applications the value searches of one plan may still spend (a count, so the plan stays
    deterministic)."""

    def __init__(self, events: int) -> None:
        self.left = events


def _epoch_values(weight: list[float], weight1: list[float], phases: list[Phase]) -> Values:
    """What one more epoch of work toward each job's finish and toward its tier 1 costs the
    rollout's objective ``sum(weight_j * finish_j + weight1_j * tier1_j)``, per epoch.

    Read backwards from the end: a milestone that closes at the end of a phase, given one more epoch,
    keeps that phase going ``1 / rate`` seconds longer. That costs every milestone still open its
    weight per second, and gives every running job that much more progress toward its milestones
    still open, worth their own values (known: they close later). These are the costates of the
    fluid scheduling problem: where the split is optimal, each moment's shares maximise
    ``sum(value_j * rate_j)``, shortest-remaining-first generalised to concave speed-ups (for
    ``rate = share ** p`` and no caps, heSRPT's split; Berg et al., 2020), and the rule's weight over
    the epochs left is the linear case. A milestone the rollout leaves open is worth its weight at
    its job's last rate."""
    J = len(weight)
    values: Values = ([math.nan] * J, [math.nan] * J)
    weights = (weight, weight1)
    for ph in reversed(phases):
        closing = [(k, j) for k, closed in enumerate((ph.closed_finish, ph.closed_tier1)) for j in range(J) if closed[j]]
        if not closing:
            continue
        cost = gain = 0.0  # over the milestones open through the phase and still open after it
        for k, (opened, closed) in enumerate(((ph.open_finish, ph.closed_finish), (ph.open_tier1, ph.closed_tier1))):
            for j in range(J):
                if opened[j] and not closed[j]:
                    cost += weights[k][j]
                    if values[k][j] == values[k][j]:
                        gain += ph.rate[j] * values[k][j]
        for k, j in closing:
            if ph.rate[j] > 0:
                w = weights[k][j]
                values[k][j] = max(w + cost - gain, 1e-3 * w) / ph.rate[j]
    last: dict[int, float] = {}
    for ph in phases:
        last.update((j, r) for j, r in enumerate(ph.rate) if r > 0)
    for k in range(2):
        for j in range(J):
            if values[k][j] != values[k][j]:
                values[k][j] = weights[k][j] / last[j] if j in last else 0.0
    return values


Rollout = tuple[np.ndarray, np.ndarray, np.ndarray]


def _search_values(
    roll: Callable[[Values | None, list[Phase] | None, Moved | None], Rollout],
    objective: Callable[[Rollout], float],
    weights: Values,
    start: Values,
    base: Rollout,
    budget: SearchBudget,
    events: Callable[[], int],
) -> Rollout:
    """The rollout (finish, tier 1, first shares) of the best values found, or ``base`` (the rule's)
    when none beats it. From each start (``start``, the rule's values now, held constant; the
    costates of the rule's rollout), every job's values are scaled by ``SEARCH_STEP`` up, then
    down, keeping any change that lowers ``objective`` (infinite for a rollout that breaks a limit);
    a sweep that finds nothing halves the step (log scale) down to ``SEARCH_FINEST``. ``events()``
    counts the rule applications spent, which the budget bounds (each rollout is paid for when it ends).
    A change that cannot move any share of the current rollout (:data:`Moved`) is not rolled out: it
    would give that same rollout, so it is no better. It is charged what that rollout spent, as
    if rolled out, so that the search takes the same path within the same budget, only sooner."""
    J = len(start[0])

    def paid(values: Values | None, phases: list[Phase] | None = None) -> tuple[Rollout, Moved, int]:
        before = events()
        moved: Moved = ([False] * J, [False] * J)
        got = roll(values, phases, moved)
        used = events() - before
        budget.left -= used
        return got, moved, used

    best_cost, best = objective(base), base
    phases: list[Phase] = []
    paid(None, phases)
    for v0 in (start, _epoch_values(weights[0], weights[1], phases)):
        if budget.left <= 0:
            break
        cur = (list(v0[0]), list(v0[1]))
        found, moves, spends = paid(cur)
        cost = objective(found)
        step = math.log(SEARCH_STEP)
        while step > math.log(SEARCH_FINEST) and budget.left > 0:
            improved = False
            for j in range(J):
                for sign in (1.0, -1.0):
                    if budget.left <= 0:
                        break
                    if not moves[0 if sign > 0 else 1][j]:
                        budget.left -= spends
                        continue
                    k = math.exp(sign * step)
                    cand = (cur[0].copy(), cur[1].copy())
                    cand[0][j] *= k
                    cand[1][j] *= k
                    got, got_moves, got_spends = paid(cand)
                    c = objective(got)
                    if c < cost * (1.0 - 1e-9):
                        cur, cost, found, moves, spends, improved = cand, c, got, got_moves, got_spends, True
                        break
            if not improved:
                step /= 2.0
        if cost < best_cost * (1.0 - 1e-6):
            best_cost, best = cost, found
    return best


def _rollout(
    node: _Node,
    allocate: Allocate,
    trajectory: list[tuple[float, list[float]]] | None = None,
    breaks: list[float] | None = None,
    phases: list[Phase] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predicted (finish, tier-1 time) per job when ``allocate(active, left, left1, now)`` (a share
    per job) is re-applied at every event, and the first allocation; ``trajectory`` (if given)
    collects (time, shares) at every event; ``breaks``: more times (ascending) at which to re-apply
    it (where the equal split's trajectory, which the tail guard's floors follow, changes);
    ``phases`` (if given) collects each stretch between two events (:class:`Phase`)."""
    J = node.J
    left = [max(x, 0.0) for x in node.remaining]
    left1 = [x if x is not None else 0.0 for x in node.remaining_tier1]
    blocked = node.blocked
    last_start = max(blocked, default=0.0)
    finish = [math.inf if x > 0 else 0.0 for x in left]
    tier1 = [0.0 if (r1 is not None and x <= 0) else math.nan for r1, x in zip(node.remaining_tier1, left1, strict=True)]
    active = [x > 0 for x in left]
    first = [float(x) for x in node.lo]
    now = 0.0
    rate = [0.0] * J
    for event in range(MAX_EVENTS):
        if not any(active):
            break
        share = allocate(active, left, left1, now)
        if trajectory is not None:
            trajectory.append((now, [x if a else 0.0 for x, a in zip(share, active, strict=True)]))
        if event == 0:
            first = [x if a else f for x, a, f in zip(share, active, first, strict=True)]
        rate = [_interp(x, g, r) if a else 0.0 for x, g, r, a in zip(share, node.gridf, node.rates, active, strict=True)]
        soon = now + 1e-9
        running = [j for j in range(J) if active[j] and blocked[j] <= soon and rate[j] > 0]
        # Next event: a finish, a tier-1 crossing (the milestone changes), or a restart ending.
        # (``if x < dt: dt = x`` is ``dt = min(dt, x)``, without the call.)
        dt = math.inf
        for j in running:
            x = left[j] / rate[j]
            if x < dt:
                dt = x
            if left1[j] > 0:
                x = left1[j] / rate[j]
                if x < dt:
                    dt = x
        if last_start > soon:
            for j in range(J):
                if active[j] and blocked[j] > soon and blocked[j] - now < dt:
                    dt = blocked[j] - now
        if not math.isfinite(dt):
            break
        if breaks is not None:
            b = bisect_right(breaks, now + 1e-6)
            if b < len(breaks) and breaks[b] - now < dt:
                dt = breaks[b] - now
        if phases is not None:
            was_active, was_open1 = active.copy(), [x > 0 for x in left1]
        for j in running:
            done = rate[j] * dt
            if left1[j] > 0 and done >= left1[j] - 1e-9:
                tier1[j] = now + left1[j] / rate[j]
            left1[j] = max(left1[j] - done, 0.0)
            left[j] = max(left[j] - done, 0.0)
            if left[j] <= 1e-9:
                left[j] = 0.0
                finish[j] = now + dt
                active[j] = False
        if phases is not None:
            speed = [0.0] * J
            for j in running:
                speed[j] = rate[j]
            phases.append(
                Phase(
                    speed,
                    was_active,
                    was_open1,
                    [a and not b for a, b in zip(was_active, active, strict=True)],
                    [a and x <= 0 for a, x in zip(was_open1, left1, strict=True)],
                )
            )
        now += dt
    # Out of events: the rest finish at their last rates (late rather than early).
    for j in range(J):
        if active[j] and rate[j] > 0:
            start = now + max(blocked[j] - now, 0.0)
            finish[j] = start + left[j] / rate[j]
            if left1[j] > 0:
                tier1[j] = start + left1[j] / rate[j]
    return np.array(finish, dtype=float), np.array(tier1, dtype=float), np.array(first, dtype=float)


def split_node(
    jobs: Sequence[ShareJob],
    capacity: float,
    profile: str,
    makespan_slack: float | None = None,
    search: SearchBudget | None = None,
    reference: Sequence[ShareJob] | None = None,
) -> NodeSplit:
    """Shares for the jobs of one node (``capacity``: the CPU they may share, millicores; ``makespan_slack``:
    the mean-JCT profile's makespan budget over the reachable one, None: none; ``search``: what the
    value search may spend, shared by the nodes of one plan, None: ``SEARCH_BUDGET`` for this node
    alone; ``reference``: the same jobs as the equal split would run them, for the tail guard's
    reference, where ``jobs`` carry this plan's own bounds (a probe's cap or floor), None: ``jobs``);
    see the module docstring."""
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
    node = _Node(jobs, rates)
    path: list[tuple[float, list[float]]] = []
    # A node that holds every job with work left at its max: the equal split and the rule both give
    # each its max at every event (every step of every job fits, whatever its value), so both
    # rollouts run at the max, without the rule, and no guard can find a job late. The same floats
    # as the full path, in less time (most nodes of a GPU cluster are like this).
    ample = sum(j.hi * j.replicas for j in jobs if j.remaining > 0) <= capacity
    at_max = [float(j.hi) for j in jobs]
    # The equal split runs each job within its own min and max: a bound this plan sets for one
    # interval (a probe) is not the default's, and read as lasting the whole rollout it would make
    # the probed job look like the one that ends last, and guard it instead of the job that does.
    fair_node, fair_ample, fair_max = node, ample, at_max
    if reference is not None:
        fair_node = _Node(reference, [1.0 / np.maximum(j.seconds_per_epoch, 1e-12) for j in reference])
        fair_ample = sum(j.hi * j.replicas for j in reference if j.remaining > 0) <= capacity
        fair_max = [float(j.hi) for j in reference]
    fair, _, _ = _rollout(
        fair_node,
        (lambda *_: fair_max) if fair_ample else (lambda active, left, left1, now: _equal_levels(fair_node, active, capacity)),
        path,
    )
    times = [t for t, _ in path] if path else [0.0]
    fair_shares = [x for _, x in path] if path else [[0.0] * J]
    breaks = times if profile != MAKESPAN_FIRST else None  # the floors change where the equal split's shares do
    if ample:
        finish, tier1, first = _rollout(node, lambda *_: at_max, breaks=breaks)
        return _whole(jobs, first, finish, tier1, fair, capacity)
    finite = np.where(np.isfinite(fair), fair, -1.0)
    critical = finite >= finite.max() - 1e-6 if J else np.zeros(0, dtype=bool)
    # And every job that may well end last: its equal-split finish stretched by its pessimistic
    # remaining work over the median's reaches the median makespan.
    stretch = np.array([(j.remaining_high / j.remaining) if (j.remaining_high and j.remaining > 0) else 1.0 for j in jobs])
    critical = critical | ((finite > 0) & (finite * stretch >= finite.max() - 1e-6))
    # And every job whose speed is only assumed: its finish is a guess, so it may end last whatever
    # the guess says (the equal split is what it would get without FlowPlan).
    critical = critical | np.array([j.speed_assumed and j.remaining > 0 for j in jobs], dtype=bool)
    if _fixed_order_free(jobs, rates):
        # Every job's work is a known count at a speed proportional to its share: shortest-first
        # cannot end the node's work later, and holding the last job at its equal share only makes
        # the others wait (on the real engine, the search then gave the longest job most of the
        # node, since the guard ruled out shortest-first). A job the rollout shows ending past the
        # equal split's makespan (a job left alone at its cap) is still guarded below.
        critical = np.zeros(J, dtype=bool)
    guarded = critical.tolist()
    guard = np.full(J, math.inf)
    no_floor = [0.0] * J
    applied = [0]  # rule applications, for the value search's budget

    def allocator(values: Values | None = None, moved: Moved | None = None) -> Allocate:
        def allocate(active: list[bool], left: list[float], left1: list[float], now: float) -> list[float]:
            # Mean completion first: the critical job's share along the equal split's own trajectory
            # (not the equal share among the jobs still active here: shortest-first keeps long jobs
            # alive longer, which would keep that share small for longer and slow the critical path).
            applied[0] += 1
            floor = no_floor
            if profile != MAKESPAN_FIRST:
                at = fair_shares[max(bisect_right(times, now + 1e-6) - 1, 0)]
                # At most the job's own max here: the reference's may be higher (a probe's cap).
                floor = [
                    (min(float(at[j]), float(node.hi[j])) if at[j] > 0 else float(node.hi[j]))
                    if guarded[j] and active[j]
                    else 0.0
                    for j in range(J)
                ]
            return _rule(node, active, left, left1, now, guard.tolist(), floor, capacity, values, moved)

        return allocate

    allocate = allocator()

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
        guards = guard.tolist()

        def free_of_floors(active: list[bool], left: list[float], left1: list[float], now: float) -> list[float]:
            return _rule(node, active, left, left1, now, guards, no_floor, capacity)

        reach, _, _ = _rollout(node, free_of_floors)
        guard[:] = math.inf
        done = reach[np.isfinite(reach)]
        return float(done.max()) if done.size else math.inf

    if profile == MAKESPAN_FIRST:
        # Makespan first, lexicographically: every job is reserved only what meets the reachable
        # makespan, and the rest goes shortest-first, so short jobs still end early when it costs
        # the makespan nothing.
        guard[:] = reachable()
    finish, tier1, first = _rollout(node, allocate, breaks=breaks)
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
            finish, tier1, first = _rollout(node, allocate, breaks=breaks)
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
            guarded = critical.tolist()
            finish, tier1, first = _rollout(node, allocate, breaks=breaks)
    spend = SearchBudget(SEARCH_BUDGET) if search is None else search
    sensitive = sum(1 for j, r in zip(jobs, rates, strict=True) if j.remaining > 0 and r[-1] >= SENSITIVE * r[0])
    if spend.left > 0 and sensitive >= 2:
        # One job leaves nothing to search, nor do jobs whose speed hardly depends on their CPU
        # share (a GPU job's, mostly): whatever their values, they gain little from more. Two do:
        # the one that ends last is held to at least the equal split, and the rule gives the other
        # the rest by its weight over its epochs left, even where more CPU hardly speeds it up and
        # the long job would have used it (a short job that scales little beside one that scales).
        finish, tier1, first = _searched(jobs, node, allocator, breaks, (finish, tier1, first), spend, applied)
    return _whole(jobs, first, finish, tier1, fair, capacity)


def _searched(
    jobs: Sequence[ShareJob],
    node: _Node,
    allocator: Callable[[Values | None, Moved | None], Allocate],
    breaks: list[float] | None,
    base: Rollout,
    budget: SearchBudget,
    applied: list[int],
) -> Rollout:
    """The node's rollout with searched values (:func:`_search_values`): the objective is each job's
    weighted finish, plus its weighted tier-1 time while it has an unreached tier 1 (its finish when
    the curve does not say when; nothing when there is no curve yet: a tier 1 only assumed is assumed
    at the finish, which is counted already, and counted twice it took CPU from a job nearer its end
    for one just started); a rollout that ends a job later than the rule's makespan, leaves
    a job unfinished that the rule finished, gives a job that ends the batch less now than the rule
    does, or spends a deadline job's margin (below) does not count: the search trades completion
    times only."""
    w = np.array([float(j.weight) for j in jobs])
    reach1 = np.array([j.tier1_open and j.remaining_tier1 is not None and not j.tier1_assumed for j in jobs])
    at_finish1 = np.array([j.tier1_open and j.remaining_tier1 is None for j in jobs])
    weight = w * (1.0 + at_finish1)  # a tier 1 the curve cannot place counts at the finish
    ends = np.isfinite(base[0])
    limit = float(base[0][ends].max()) * (1.0 + 1e-3) + 1e-6 if ends.any() else math.inf

    # A job with an open tier-1 deadline keeps its margin against prediction error: the rule gives it
    # more than the share that meets the deadline by the median prediction, which the search would
    # spend on completion times (dqoes-qoe, 5 seeds: 9.6 of 12 deadlines met instead of 10.2). So
    # its tier 1 must come by the deadline even on the pessimistic side of its curve's band (that
    # many more epochs at the same pace), or, where the rule's rollout does not manage that or no
    # band is known, no later than the rule has it.
    due = np.full(len(jobs), math.inf)
    for i, j in enumerate(jobs):
        if j.deadline is None or not math.isfinite(base[1][i]):
            continue
        r1, high = j.remaining_tier1, j.remaining_tier1_high
        stretch = high / r1 if (high is not None and r1) else math.inf
        # No band (an infinite stretch; times 0 s to tier 1 it would be NaN): no later than the rule.
        fits = math.isfinite(stretch) and base[1][i] * stretch <= j.deadline + 1e-6
        due[i] = j.deadline / stretch if fits else base[1][i]
    kept = np.isfinite(due)

    # And the jobs that end the node's batch (the rule's rollout ends them within its last tenth) get
    # no less now than the rule gives them. The limit above is the rule's makespan from the present
    # state, taken afresh at every plan: a long job slowed now to be caught up later in the rollout
    # leaves the next plan's rule a later makespan, and so on (specon-4nodes, 5 seeds: makespan
    # 24m13s with the rule alone, 25m09s searched without this, 24m47s with it).
    tail = ends & (base[0] >= TAIL_BAND * (limit - 1e-6) / (1.0 + 1e-3))
    tail_share = base[2]

    def objective(rollout: Rollout) -> float:
        f, t1, first = rollout
        if not np.array_equal(np.isfinite(f), ends) or np.any(f[ends] > limit) or np.any(t1[kept] > due[kept] + 1e-6):
            return math.inf
        if np.any(first[tail] < tail_share[tail] - 1e-6):
            return math.inf
        f0 = np.where(ends, f, 0.0)
        t = np.where(reach1, np.where(np.isfinite(t1), t1, f0), 0.0)
        return float(np.dot(weight, f0) + np.dot(w, t))

    def roll(values: Values | None, phases: list[Phase] | None, moved: Moved | None) -> Rollout:
        return _rollout(node, allocator(values, moved), breaks=breaks, phases=phases)

    # The rule's own values now, held constant: its weight over the epochs left to each milestone.
    start = (
        [float(x) / max(j.remaining, 1e-9) for x, j in zip(weight, jobs, strict=True)],
        [float(x) / max(j.remaining_tier1 or 0.0, 1e-9) if x > 0 else 0.0 for x, j in zip(w * reach1, jobs, strict=True)],
    )
    weights = (weight.tolist(), (w * reach1).tolist())
    return _search_values(roll, objective, weights, start, base, budget, lambda: applied[0])


def _whole(
    jobs: Sequence[ShareJob], first: np.ndarray, finish: np.ndarray, tier1: np.ndarray, fair: np.ndarray, capacity: float
) -> NodeSplit:
    """The split of ``first`` (a share per job, exact) in whole millicores, every millicore handed out."""
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
