"""Per-job menus: the allocation levels a job may get and what each would cost, before any node is chosen.

A *level* is one (CPU share, GPU count) pair per replica. Its cost depends on the node only through
*how* the job gets there, so every level is priced for three ways in:

- ``stay``:  a running job keeps its node (keep, or resize live — no time lost);
- ``start``: a pending job starts (``restart_seconds`` of start-up);
- ``move``:  a running job checkpoints and restarts (``checkpoint_seconds + restart_seconds``).

Costs are integers (the IP objective needs them): see :mod:`planner.objective` for the units.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from models.gang_speed import GangScaling, PSScaling
from planner.config import PlannerConfig
from planner.gang_levels import gang_levels, is_gang, node_block
from planner.outlook import JobOutlook
from planner.progress import since_checkpoint
from planner.snapshot import MILLI_PER_GPU, Job

STAY, START, MOVE = 0, 1, 2
WAYS = ("stay", "start", "move")


def _spread(lo: int, hi: int, n: int, step: int) -> list[int]:
    """``n`` values from ``lo`` to ``hi`` spaced geometrically, rounded to ``step``, ends kept exact."""
    if lo >= hi or n <= 1:
        return [lo] if n <= 1 or lo >= hi else [lo, hi]
    out = {lo, hi}
    ratio = (hi / lo) ** (1.0 / (n - 1))
    for i in range(1, n - 1):
        v = int(round(lo * ratio**i / step) * step)
        if lo < v < hi:
            out.add(v)
    return sorted(out)


def cpu_levels(lo: int, hi: int, current: int | None, config: PlannerConfig) -> list[int]:
    levels = set(_spread(lo, hi, config.cpu_levels, config.cpu_step_millis))
    if current is not None and lo <= current <= hi:
        levels.add(current)
    return sorted(levels)


def gpu_levels(lo: int, hi: int, current: int | None, config: PlannerConfig, room: int | None = None) -> list[int]:
    """GPU counts per replica a job may get: every whole number from ``lo`` to ``hi`` (capped at
    ``room``, the most any node could hold), or, when that is more than ``config.gpu_levels``, the
    ends and counts spread geometrically between them (always with the current count)."""
    if hi == 0:
        return [0]
    top = max(lo, min(hi, room)) if room is not None else hi
    if top - lo + 1 <= config.gpu_levels:
        levels = list(range(lo, top + 1))
    else:
        levels = sorted({lo, top, *_spread(max(lo, 1), top, config.gpu_levels, 1)})
    if current is not None and lo <= current <= hi and current not in levels:
        levels = sorted({*levels, current})
    return levels


def gpu_unit(jobs: Iterable[Job]) -> int:
    """The unit of the GPU row, in milli-GPUs: the largest that divides every demand and capacity
    (a whole GPU when no job is fractional, so a snapshot without fractions gives the integer
    program the same coefficients, and the same plan, as before fractions existed; else the
    greatest common divisor of 1,000 and every ``gpu_milli``, e.g. 20 for 460 and 500)."""
    return math.gcd(MILLI_PER_GPU, *(j.gpu_milli for j in jobs if j.gpu_milli is not None))


def gpu_demand_milli(gpu_milli: int | None, gpus: np.ndarray, replicas: int | np.ndarray) -> np.ndarray:
    """GPU demand in milli-GPUs for GPU counts ``gpus`` per replica: 1000 a whole GPU, or the job's
    ``gpu_milli`` for its one (shared) GPU; the planner's capacities are in the same unit."""
    if gpu_milli is not None:
        return np.where(gpus > 0, gpu_milli, 0).astype(np.int64)
    return (gpus * MILLI_PER_GPU * replicas).astype(np.int64)


@dataclass
class JobMenu:
    """Levels of one job and their predictions/costs for each way in (arrays indexed [way, level])."""

    index: int
    outlook: JobOutlook
    weight: int
    cpu: np.ndarray  # (L,) millicores per replica
    gpu: np.ndarray  # (L,) GPUs per replica (a count: a fractional job's is 1, its speed is the 1-GPU speed)
    n_cpu: int  # levels form a grid: level = gpu_index * n_cpu + cpu_index
    dem_cpu: np.ndarray  # (L,) total over replicas
    dem_gpu: np.ndarray  # (L,) GPU demand over replicas, in units of ``gpu_unit`` milli-GPUs
    dem_mem: int
    seconds_per_epoch: np.ndarray  # (L,)
    lost: np.ndarray  # (3,) seconds lost per way in
    finish_s: np.ndarray  # (3, L) seconds from now to finish
    t1_s: np.ndarray  # (3, L) seconds from now to tier 1 (nan: no tier / unreachable)
    t2_s: np.ndarray
    t1_met: np.ndarray  # (3, L) int: 1 met, 0 missed, -1 no deadline
    t2_met: np.ndarray
    current_level: int | None  # running jobs: the level equal to the current allocation, if on the menu
    wait_finish_s: float  # estimated finish if left unplaced this interval
    t1_slack_s: float | None = None  # seconds from now to the tier-1 deadline (None: no open deadline)
    phase_seconds: float = 0.0  # > 0: priced with the phase model (see PlannerConfig.weights.gpu_phase_seconds)
    #: Milli-GPUs per unit of ``dem_gpu`` (and of the problem's GPU capacities): see :func:`gpu_unit`.
    gpu_unit: int = MILLI_PER_GPU
    # Filled in by :func:`price_menus` once the horizon is known.
    finish_q: np.ndarray | None = None  # (3, L)
    cost: np.ndarray | None = None  # (3, L)
    qoe_cost: np.ndarray | None = None
    churn_cost: np.ndarray | None = None
    wait_q: int = 0
    wait_cost: int = 0
    completion_weight: int = 1  # c_j: the completion term's weight (see planner.objective)
    time_cost: np.ndarray | None = None  # (3, L) completion term (finish and time to tier 1)
    wait_time_cost: int = 0
    wait_qoe: int = 0
    wait_unserved: int = 0
    wait_churn: int = 0
    #: Gangs (:func:`planner.gangs.is_gang`): the levels repeat the per-replica grid (``n_alloc``
    #: levels) once per (replica count, node count) block: ``count`` and ``nodes`` (a level of
    #: :func:`planner.gang_levels.node_levels`; 1: on one node) per level, and ``dem_*`` are for the
    #: level's count (``dem_mem`` for the fewest); ``scaling``: the epoch-time factor by count and
    #: node count. ``None`` / 0 for every other job.
    count: np.ndarray | None = None
    nodes: np.ndarray | None = None
    scaling: GangScaling | PSScaling | None = None
    n_alloc: int = 0
    gang_note: str = ""


def guessed_tiers(outlook: JobOutlook) -> bool:
    """A CPU-only job whose tiers are only assumed: no curve yet and none read off earlier runs, so
    each tier is "by the finish", the pessimistic guess. Its deadlines are priced below any job's
    service (``objective.price_menus``): the guess may steer where the job goes and what it gets,
    never who runs. A GPU job's count is the program's own decision (changing it later is a
    restart), so a GPU job's guessed deadline is priced in full."""
    return outlook.tiers_assumed and outlook.job.max_gpus == 0


def build_menu(
    index: int,
    outlook: JobOutlook,
    now: float,
    interval: float,
    config: PlannerConfig,
    max_node_gpus: int | None = None,
    phase_seconds: float = 0.0,
    gpu_unit: int = MILLI_PER_GPU,
) -> JobMenu:
    job = outlook.job
    cur = job.allocation if job.status == "running" else None
    cpus = cpu_levels(job.min_cpu_millis, job.max_cpu_millis, cur.cpu_millis if cur else None, config)
    gang = gang_levels(outlook, config) if is_gang(job) else None
    per_node = job.replicas if gang is None else -(-job.fewest_replicas // job.max_nodes)
    room = None if max_node_gpus is None else max_node_gpus // per_node
    gpus = gpu_levels(job.min_gpus, job.max_gpus, cur.gpus if cur else None, config, room)
    cpu = np.array(cpus * len(gpus), dtype=np.int64)  # np.tile and np.repeat of the lists, built as lists
    gpu = np.array([g for g in gpus for _ in cpus], dtype=np.int64)
    spe = (outlook.speed if gang is None else gang.speed).seconds_per_epoch_many(cpu, gpu)
    reps: int | np.ndarray = job.replicas
    n_alloc = 0
    if gang is not None:
        n_alloc = cpu.size
        blocks = len(gang.count)
        reps = np.repeat(gang.count, n_alloc)
        nodes = np.repeat(gang.nodes, n_alloc)
        spe = np.tile(spe, blocks) * gang.scaling.factor(reps, nodes)
        cpu, gpu = np.tile(cpu, blocks), np.tile(gpu, blocks)
    current_level = None
    if cur is not None and cur.cpu_limit_millis is None:  # a capped job's every option drops the cap
        same = (cpu == cur.cpu_millis) & (gpu == cur.gpus)
        if gang is not None:
            shares = job.shares()
            count = sum(k for _, k in shares)
            same &= (reps == count) & (nodes == node_block(gang.nodes[gang.count == count], len(shares)))
        hit = same.nonzero()[0]
        current_level = int(hit[0]) if hit.size else None
    # A restart loses checkpoint + restart time and the work since the last checkpoint: jobs
    # checkpoint at every epoch end and every ``checkpoint_every_seconds``, so at most the shorter
    # of the two (at the speed it trains now) is done again. For a CPU-only job whose reports show
    # when it last checkpointed, that much; otherwise on average half of it. (GPU jobs keep the
    # average: under the phase model a job just restarted looked cheap to pause, and one was left
    # paused beside a free GPU on Pollux's workload 6; docs/planner.md.)
    redo = 0.0
    if cur is not None:
        period = float(outlook.speed.seconds_per_epoch(cur.cpu_millis, cur.gpus))
        if gang is not None:
            period = float(gang.speed.seconds_per_epoch(cur.cpu_millis, cur.gpus)) * gang.current_factor
        since = since_checkpoint(job, now, period) if job.max_gpus == 0 else None
        if job.checkpoint_every_seconds is not None:
            period = min(period, job.checkpoint_every_seconds)
        if not math.isfinite(period):
            redo = 0.0
        elif since is None:
            redo = 0.5 * period
        else:
            redo = min(since, period)
    lost = np.array([0.0, job.restart_seconds, job.checkpoint_seconds + job.restart_seconds + redo])

    tau = phase_seconds if job.max_gpus > 0 else 0.0
    fast = float(spe.min()) if spe.size else math.inf
    if not (tau > 0 and math.isfinite(fast) and fast > 0):
        tau = 0.0

    # Under the phase model a job below its fastest level is priced as getting that level after the
    # phase. A job that cannot resize live gets it only by a restart, which that price must count:
    # a shrink is a round trip (this restart and the one back), not a single move.
    switch = np.zeros(spe.size)
    if tau > 0 and not job.resizable:
        every = spe if job.checkpoint_every_seconds is None else np.minimum(spe, job.checkpoint_every_seconds)
        slower = spe > fast * (1.0 + 1e-9)
        redo_there = 0.5 * np.where(np.isfinite(every), every, 0.0)
        switch = np.where(slower, job.checkpoint_seconds + job.restart_seconds + redo_there, 0.0)

    def done_at(rem: float) -> np.ndarray:
        """Seconds from now until ``rem`` epochs are done, per (way, level): the level held until
        done, or (``tau`` > 0) held for ``tau`` seconds and the fastest level after that."""
        held = lost[:, None] + rem * spe[None, :]
        if tau <= 0:
            return held
        ran = np.maximum(tau - lost, 0.0)[:, None] / spe[None, :]  # epochs done within the phase
        phased = np.maximum(tau, lost)[:, None] + np.maximum(rem - ran, 0.0) * fast
        # ... plus the restart to the fastest level, except where that would price the level no
        # better than waiting for the phase (which also ends at the fastest level): a job that does
        # little in the phase at a level that fits is not left waiting for it (work conservation).
        waited = max(tau, interval) + float(lost[MOVE]) + rem * fast
        round_trip = phased + switch[None, :]
        phased = np.where(round_trip < waited, round_trip, phased)
        return np.where(held <= tau, held, np.minimum(held, phased))

    finish_s = done_at(outlook.remaining_finish)

    def tier(rem: float | None, deadline: float | None) -> tuple[np.ndarray, np.ndarray]:
        if rem is None:
            t = held = np.full((3, cpu.size), np.nan)
        else:
            t = done_at(rem)
            held = lost[:, None] + rem * spe[None, :]
        if deadline is None:
            met = np.full((3, cpu.size), -1, dtype=np.int64)
        else:
            # A deadline is judged with the level held (the phase model's "fastest later" is a
            # guess about others' completions; a deadline is not staked on it).
            met = (held <= deadline - now).astype(np.int64)  # NaN (unreachable) compares False: missed
        return t, met

    t1_s, t1_met = tier(outlook.remaining_tier1, outlook.tier1_deadline)
    t1_slack = None if outlook.tier1_deadline is None else outlook.tier1_deadline - now
    t2_s, t2_met = tier(outlook.remaining_tier2, outlook.tier2_deadline)
    # Waiting one interval and then getting the slowest level: pessimistic on purpose, so that the
    # planner prefers running a job slowly to leaving capacity idle (work conservation).
    wait_finish = interval + float(finish_s[MOVE].max())
    if tau > 0:
        # In a contended cluster a GPU job that waits makes no progress for the phase, then runs
        # at its fastest level (the same assumption as every other option of the phase model).
        wait_finish = max(tau, interval) + float(lost[MOVE]) + outlook.remaining_finish * fast
    weight = max(1, int(round(job.priority * config.weights.priority_scale)))
    return JobMenu(
        index=index,
        outlook=outlook,
        weight=weight,
        cpu=cpu,
        gpu=gpu,
        n_cpu=len(cpus),
        dem_cpu=cpu * reps,
        dem_gpu=gpu_demand_milli(job.gpu_milli, gpu, reps) // gpu_unit,
        dem_mem=job.memory_mib * (job.replicas if gang is None else job.fewest_replicas),
        seconds_per_epoch=spe,
        lost=lost,
        finish_s=finish_s,
        t1_s=t1_s,
        t2_s=t2_s,
        t1_met=t1_met,
        t2_met=t2_met,
        current_level=current_level,
        wait_finish_s=wait_finish,
        t1_slack_s=t1_slack,
        phase_seconds=tau,
        gpu_unit=gpu_unit,
        count=None if gang is None else reps,  # type: ignore[arg-type]
        nodes=None if gang is None else nodes,
        scaling=None if gang is None else gang.scaling,
        n_alloc=n_alloc,
        gang_note="" if gang is None else gang.note,
    )
