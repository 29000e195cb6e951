"""A gang's menu dimensions: which replica counts it is offered, and how fast each count and spread runs.

A *gang* here is a job the planner must choose a count or a placement for: ``min_replicas`` below
``replicas``, or ``max_nodes`` above 1 (:func:`is_gang`). Every other job is planned exactly as
before. A gang's menu (:func:`planner.menu.build_menu`) repeats its per-replica (CPU, GPU) grid once
per *block* (replica count, node count): the counts are a small geometric set over [min_replicas,
replicas] like the GPU levels (``PlannerConfig.replica_levels``, plus the count it runs with), each
on one node and, when the job may spread, over 2, 3, 4, then 6, 8, 12, ... nodes up to the count
and ``max_nodes`` (:func:`node_levels`: the step time depends on the node count, most between two
nodes and three, :mod:`models.gang_speed`); a placement over a node count between two levels is
priced at the level below it. The epoch time of a block is the per-replica speed
model's times :class:`models.gang_speed.GangScaling`'s factor, fitted from the job's own epochs at
other counts and spreads (``SpeedPoint.replicas`` / ``.nodes``) when it has them, else the prior.

The per-replica model (:func:`planner.progress.job_speed`) is fitted on every observed epoch whatever
its count; where those epochs span two or more (count, nodes) shapes, it is fitted again for the
gang, on each epoch scaled to the job's full count on one node by the fitted factor, so a count seen
at another CPU/GPU share is not taken for that share's speed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from models.gang_speed import GangScaling, GangShape, PSScaling, gang_scaling, ps_scaling
from models.speed import SpeedObservation, fit_speed_model
from planner.config import PlannerConfig
from planner.outlook import JobOutlook, SpeedLike
from planner.snapshot import Job, SpeedPoint


def is_gang(job: Job) -> bool:
    """Does the planner choose this job's count or placement (else: all ``replicas`` on one node)?"""
    return job.max_nodes > 1 or job.fewest_replicas < job.replicas or job.servers is not None


@dataclass(frozen=True)
class GangLevels:
    count: np.ndarray  # (B,) replicas per block
    nodes: np.ndarray  # (B,) nodes per block (a level of node_levels; 1: packed on one node)
    scaling: GangScaling | PSScaling
    speed: SpeedLike  # the per-replica model the factor multiplies
    current_factor: float  # the scaling at the count and spread it runs with (1 if not running)
    note: str


def count_levels(job: Job, config: PlannerConfig) -> list[int]:
    """Replica counts offered: min, max, the current count, and a geometric spread between."""
    lo, hi = job.fewest_replicas, job.replicas
    out = {lo, hi}
    n = max(config.replica_levels, 2)
    if hi > lo and n > 2:
        ratio = (hi / lo) ** (1.0 / (n - 1))
        out.update(v for v in (int(round(lo * ratio**i)) for i in range(1, n - 1)) if lo < v < hi)
    running = sum(k for _, k in job.shares())
    if running and lo <= running <= hi:
        out.add(running)
    return sorted(out)


def node_levels(count: int, max_nodes: int) -> list[int]:
    """Node counts a block of ``count`` replicas is priced at: 1, then 2, 3 and 4, then 6, 8, 12, 16,
    ... (each 1.5 or 4/3 times the one before), up to ``min(count, max_nodes)``, which is always one."""
    hi = min(count, max_nodes)
    out = [n for n in (1, 2, 3, 4) if n <= hi]
    n = 4
    while n < hi:
        n = n * 3 // 2 if n & (n - 1) == 0 else n * 4 // 3  # 4 -> 6 -> 8 -> 12 -> 16 -> 24 -> 32 ...
        out.append(min(n, hi))
    return sorted(set(out))


def node_block(levels: list[int] | np.ndarray, nodes: int) -> int:
    """The node level a placement over ``nodes`` nodes is priced at: the largest level not above it."""
    return int(max((n for n in levels if n <= nodes), default=1))


def _shapes(outlook: JobOutlook) -> list[GangShape]:
    """The job's observed epochs as (count, nodes, relative to the per-replica model)."""
    job = outlook.job
    out = []
    for p in job.speed:
        model = float(outlook.speed.seconds_per_epoch(p.cpu_millis, p.gpus))
        if model > 0 and math.isfinite(model):
            servers = None if job.servers is None else (p.servers or job.fewest_servers(p.nodes) * p.nodes)
            out.append(GangShape(p.replicas or job.replicas, p.nodes, p.seconds_per_epoch / model, servers))
    if not job.speed and outlook.speed_basis == "observed" and job.status == "running":
        # Fitted from its recent history, at the count and spread it runs with.
        shares = job.shares()
        servers = None if job.servers is None else job.running_servers * len(shares)
        out.append(GangShape(sum(k for _, k in shares), len(shares), 1.0, servers))
    return out


def _refit(job: Job, full: float, at: Callable[[SpeedPoint], float]) -> SpeedLike:
    """The per-replica model refitted on the job's epochs, each scaled from its shape (``at``: the
    scaling's time there) to the reference shape (``full``)."""
    obs = [SpeedObservation(p.cpu_millis, p.gpus, p.seconds_per_epoch * full / at(p)) for p in job.speed]
    return fit_speed_model(obs, uses_gpu=job.max_gpus > 0)


def _ps_levels(outlook: JobOutlook, shapes: list[GangShape]) -> tuple[PSScaling, SpeedLike, float]:
    """A parameter-server job's scaling, the per-replica model it multiplies (refitted on its epochs
    scaled to the full count on one node, as :func:`gang_levels` does for data-parallel gangs), and
    the factor at the count, node count and servers it runs with."""
    job = outlook.job
    role = job.servers
    assert role is not None
    scaling = ps_scaling(job.replicas, role.min, role.max, role.form, shapes)
    speed: SpeedLike = outlook.speed
    if scaling.source != "prior" and job.speed:
        full = float(scaling.per_step(np.array([job.replicas]), np.array([1]))[0])
        model = scaling.model
        speed = _refit(
            job,
            full,
            lambda p: model.seconds_per_epoch(p.replicas or job.replicas, p.servers or job.fewest_servers(p.nodes) * p.nodes),
        )
        scaling = replace(scaling, reference=full)
    shares = job.shares()
    current = 1.0
    if shares:
        count = sum(k for _, k in shares)
        current = scaling.model.seconds_per_epoch(count, job.running_servers * len(shares)) / scaling.reference
    return scaling, speed, current


#: The widest count range searched for the fastest count (:func:`fastest_count`); wider ones keep the
#: geometric levels only.
FASTEST_SPAN = 256


def fastest_count(job: Job, scaling: GangScaling | PSScaling) -> int:
    """The fewest replicas at which ``scaling`` predicts the job's fastest epoch, over every count it may
    run with and every node level of each (a parameter-server job's only where its servers can be
    placed); the job's ``replicas`` where the range is wider than :data:`FASTEST_SPAN`."""
    lo, hi = job.fewest_replicas, job.replicas
    if hi - lo > FASTEST_SPAN:
        return hi
    shapes = [(w, n) for w in range(lo, hi + 1) for n in node_levels(w, job.max_nodes)]
    w = np.array([c for c, _ in shapes], dtype=np.int64)
    n = np.array([k for _, k in shapes], dtype=np.int64)
    t = np.asarray(scaling.per_step(w, n), dtype=float)
    if isinstance(scaling, PSScaling):
        t = np.where(scaling.servers_per_node(w, n) > 0, t, np.inf)
    if not np.isfinite(t).any():
        return hi
    return int(w[int(np.argmin(t))])


def gang_levels(outlook: JobOutlook, config: PlannerConfig) -> GangLevels:
    """A gang's blocks (count, node level) and the scaling that prices them: the counts of
    :func:`count_levels` and the count its scaling predicts fastest (:func:`fastest_count`: a gang
    whose speed peaks below its ``replicas`` is offered its peak, which the geometric levels may
    step over), each over its node levels."""
    job = outlook.job
    shapes = _shapes(outlook)
    if job.servers is not None:
        ps, ps_speed, ps_current = _ps_levels(outlook, shapes)
        count, nodes = _blocks(job, config, ps)
        return GangLevels(count, nodes, ps, ps_speed, ps_current, f"workers/servers scaling {ps.source} ({job.servers.form})")
    scaling = gang_scaling(job.replicas, shapes)
    speed: SpeedLike = outlook.speed
    if scaling.source != "prior" and job.speed:
        # Each epoch at its count and spread, scaled to the full count on one node; the refit stands there.
        full = float(scaling.per_step(np.array([job.replicas]), np.array([1]))[0])
        dp = scaling
        speed = _refit(job, full, lambda p: float(dp.per_step(np.array([p.replicas or job.replicas]), np.array([p.nodes]))[0]))
        scaling = replace(scaling, reference=full)
    shares = job.shares()
    current = 1.0
    if shares:
        current = float(scaling.factor(np.array([sum(k for _, k in shares)]), np.array([len(shares)]))[0])
    note = f"count/spread scaling {scaling.source}"
    count, nodes = _blocks(job, config, scaling)
    return GangLevels(count, nodes, scaling, speed, current, note)


def _blocks(job: Job, config: PlannerConfig, scaling: GangScaling | PSScaling) -> tuple[np.ndarray, np.ndarray]:
    """(count, nodes) of each block: every count level (and the fastest count) over its node levels."""
    counts = sorted(set(count_levels(job, config)) | {fastest_count(job, scaling)})
    blocks = [(c, n) for c in counts for n in node_levels(c, job.max_nodes)]
    return np.array([c for c, _ in blocks], dtype=np.int64), np.array([n for _, n in blocks], dtype=np.int64)
