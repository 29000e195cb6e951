"""How a data-parallel job's epoch time changes with its replica count and its spread over nodes.

The per-replica speed model (:class:`models.speed.SpeedModel`) says how fast one epoch goes at a
CPU share and GPU count *per replica*, at the counts the job was observed with. A gang that may run
with fewer replicas (``min_replicas``) or over several nodes (``max_nodes``) needs the rest: the
epoch time at ``r`` replicas on ``n`` nodes relative to what the per-replica model averages over.

Each replica keeps its local batch, so an epoch of ``D`` samples is ``D / (r * b)`` steps and the
epoch time is proportional to ``step(n, r) / r``, with the step time in Pollux's form
(:func:`models.placement.predict_steps`; compute normalised to 1 s per step)::

    factor(r, n) = (step(n, r) / r) / reference

``reference`` is the geometric mean of ``step(n_i, r_i) / r_i`` over the observations the
per-replica model was fitted to (``step(1, R) / R``, the job's own count on one node, without any),
so the factor is exactly 1 where the per-replica model stands.

Parameters (relative to the compute time of one step, :data:`PRIOR`): the median over the six models
of the Pollux artifact's measured step tables (``adaptdl-osdi21/traces/*/placements.csv`` and
``scalability.csv``, each fitted with :func:`models.placement.table_prior` and divided by its compute
time at the median local batch; rounded): intra-node all-reduce 0.2, inter-node 0.85, overlap
exponent 2, and one per-replica term (beyond two replicas) for both links, 0.05, between the medians
of the intra-node (0.09) and inter-node (0.02) fits: fitted apart, per model, they made 16 replicas
on one node slower than over four at four models of six (an extrapolation: the testbed's nodes held
four GPUs), which no network does. A spread is never predicted faster than one node with as many
replicas (:func:`_per_step`), fitted parameters included. A job observed at two or more (count, nodes)
shapes gets its own fit (:func:`models.placement.fit_placement_model`, MAP with this prior scaled to
its observations), so its spread penalty comes from its own epochs when it has them.

**The node count.** The form has one inter-node link: every spread over two or more nodes with as
many replicas is the same step. The measured tables say otherwise: over exactly two nodes every
model of the six is slower than the form (by 6-32 %, median 19 %), over three and more nodes the
models scatter around it both ways, their median within 3 % (:func:`models.placement.node_factors`).
So the step over ``n >= 2`` nodes is the form's times a *node factor* (:data:`NODE_FACTORS`, the
median over the six models; log-linear in ``n`` between the measured counts, the last one beyond). A
job's own epochs over ``n`` nodes move its factor there towards what they show, as ``k``
observations against :data:`NODE_PRIOR_WEIGHT` for the prior (the form is fitted to its epochs with
the prior's factors taken out, so the two do not count the same slowness twice).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from models.placement import (
    PlacementObservation,
    PlacementParams,
    PlacementSpeedModel,
    even_placement,
    fit_placement_model,
    predict_steps,
)
from models.speed import PSForm, PSSpeedModel, PSSpeedObservation, fit_ps_speed_model

#: The prior's parameters in seconds per step for a compute time of one second (module docstring).
PRIOR = PlacementParams(
    compute_base=1.0,
    compute_per_sample=0.0,
    intra_base=0.2,
    intra_per_replica=0.05,
    inter_base=0.85,
    inter_per_replica=0.05,
    overlap=2.0,
)


#: Step over ``n`` nodes over the form's (module docstring): the median over the six models of the
#: Pollux artifact of :func:`models.placement.node_factors`, rounded (``tests/test_planner_gangs.py``
#: computes it again from ``../shared/data``).
NODE_FACTORS: dict[int, float] = {2: 1.19, 3: 0.97, 4: 0.99, 6: 0.99, 8: 1.01, 12: 0.99, 16: 1.0}
#: Observations at a node count that weigh as much as the prior's factor there.
NODE_PRIOR_WEIGHT = 2.0


def node_factor(nodes: np.ndarray, factors: dict[int, float]) -> np.ndarray:
    """The node factor at each node count: 1 on one node, ``factors`` where given, log-linear in the
    node count between two given counts, the nearest given one outside them."""
    n = np.asarray(nodes, dtype=float)
    if not factors:
        return np.ones_like(n)
    at = np.array(sorted(factors), dtype=float)
    val = np.log(np.array([factors[int(k)] for k in at]))
    out = np.exp(np.interp(np.log(np.maximum(n, 1.0)), np.log(at), val))
    return np.asarray(np.where(n >= 2, out, 1.0), dtype=float)


@dataclass(frozen=True)
class GangShape:
    """One observed epoch of the whole job: ``replicas`` on ``nodes`` nodes took ``relative`` times
    what the per-replica model predicts at its CPU/GPU share (any positive scale; only ratios count)."""

    replicas: int
    nodes: int
    relative: float
    servers: int | None = None  # parameter-server jobs: the servers in all


@dataclass(frozen=True)
class GangScaling:
    """Epoch-time factor by replica count and node count (module docstring)."""

    params: np.ndarray  # the placement formula's parameters (models.placement.NAMES order)
    reference: float  # step(n, r) / r the per-replica model stands for
    source: str  # "prior" or "fitted+prior"
    nodes: dict[int, float] = field(default_factory=lambda: dict(NODE_FACTORS))  # node factors (module docstring)

    def factor(self, replicas: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Multiply the per-replica model's epoch time by this for ``replicas`` on ``nodes`` nodes."""
        return self.per_step(replicas, nodes) / self.reference

    def per_step(self, replicas: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """``step(n, r) / r`` of the fitted form (any scale: only ratios mean anything)."""
        r = np.maximum(np.asarray(replicas, dtype=float), 1.0)
        n = np.clip(np.asarray(nodes, dtype=float), 1.0, r)
        return _per_step(self.params, r, n, self.nodes)


def _per_step(params: np.ndarray, replicas: np.ndarray, nodes: np.ndarray, factors: dict[int, float]) -> np.ndarray:
    """``step / replicas``, the node factor included; a spread is never faster than the same count
    on one node (the slowest link bounds the all-reduce; the form's two links, fitted apart, could
    say otherwise at counts no node holds)."""
    r = np.asarray(replicas, dtype=float)
    n = np.asarray(nodes, dtype=float)
    ones = np.ones_like(r)
    step, _ = predict_steps(params, n, r, ones)
    packed, _ = predict_steps(params, ones, r, ones)
    step = step * node_factor(n, factors)
    return np.asarray(np.where(n > 1, np.maximum(step, packed), step) / r, dtype=float)


def gang_scaling(replicas: int, shapes: Sequence[GangShape]) -> GangScaling:
    """The scaling of a job of ``replicas`` replicas given its observed ``shapes`` (may be empty)."""
    prior = PRIOR.as_array()
    usable = [s for s in shapes if s.relative > 0 and math.isfinite(s.relative) and 1 <= s.nodes <= s.replicas]
    if not usable:
        ref = float(_per_step(prior, np.array([replicas]), np.array([1]), NODE_FACTORS)[0])
        return GangScaling(prior, ref, "prior")
    r = np.array([s.replicas for s in usable], dtype=float)
    n = np.array([s.nodes for s in usable], dtype=float)
    seen = np.array([s.relative for s in usable], dtype=float)
    params = prior
    factors = dict(NODE_FACTORS)
    source = "prior"
    if len({(s.replicas, s.nodes) for s in usable}) >= 2:
        # Observed step times up to a common scale: the epoch's relative time times the count, with
        # the prior's node factors taken out (the form is fitted to what the node count does not explain).
        step = seen * r / node_factor(n, NODE_FACTORS)
        scale = float(np.exp(np.mean(np.log(step) - np.log(_per_step(prior, r, n, {}) * r))))
        scaled = prior.copy()
        scaled[:6] = np.maximum(prior[:6] * scale, 1e-8)
        base = PlacementSpeedModel(PlacementParams(*(float(x) for x in scaled)), 0, "prior")
        obs = [PlacementObservation(even_placement(int(a), int(b)), 1.0, float(t)) for b, a, t in zip(r, n, step, strict=True)]
        params = fit_placement_model(obs, prior=base).params.as_array()
        # What is left at each node count moves its factor, as that many observations against the prior's weight.
        left = np.log(seen * r) - np.log(predict_steps(params, n, r, np.ones_like(r))[0] * node_factor(n, NODE_FACTORS))
        for c in np.unique(n[n >= 2]).astype(int).tolist():
            at = n == c
            k = float(at.sum())
            factors[c] = float(
                node_factor(np.array([c]), NODE_FACTORS)[0] * np.exp(k / (k + NODE_PRIOR_WEIGHT) * left[at].mean())
            )
        source = "fitted+prior"
    ref = float(np.exp(np.mean(np.log(_per_step(params, r, n, factors)))))
    return GangScaling(params, ref, source, factors)


#: Parameter-server jobs get the fewest servers per node whose epoch is within this of the fastest.
SERVER_TOLERANCE = 0.03


@dataclass(frozen=True)
class PSScaling:
    """Epoch-time factor of a parameter-server job by worker count and node count, its servers placed
    as Optimus places them: the same number on each node that holds workers
    (:meth:`servers_per_node`), so ``s = per node x nodes``; the factor is the job's
    :class:`models.speed.PSSpeedModel` at ``(w, s)`` over ``reference``, what the per-replica model
    stands for (as :class:`GangScaling`'s)."""

    model: PSSpeedModel
    reference: float
    source: str
    lo: int  # servers in all, at least
    hi: int  # servers in all, at most

    def servers_per_node(self, replicas: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Servers on each of ``nodes`` worker nodes at ``replicas`` workers: the fewest whose epoch time
        is within :data:`SERVER_TOLERANCE` of the fastest with ``lo..hi`` servers in all, and never
        more than on one node (so a packing that leaves room for one node's servers has room for a
        wider spread's); 0 where ``nodes`` exceeds ``hi`` (no spread that wide)."""
        w = np.maximum(np.asarray(replicas, dtype=np.int64), 1)
        n = np.maximum(np.asarray(nodes, dtype=np.int64), 1)
        out = np.zeros(np.broadcast(w, n).shape, dtype=np.int64)
        for i, (wi, ni) in enumerate(np.broadcast(w, n)):
            out.flat[i] = _per_node(self, int(wi), int(ni))
        return out

    def per_step(self, replicas: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """The model's epoch time at ``replicas`` workers with their servers over ``nodes`` nodes."""
        w = np.maximum(np.asarray(replicas, dtype=float), 1.0)
        n = np.maximum(np.asarray(nodes, dtype=float), 1.0)
        s = np.maximum(self.servers_per_node(w.astype(np.int64), n.astype(np.int64)), 1) * n
        return np.asarray(self.model.seconds_per_epoch_many(w, s), dtype=float)

    def factor(self, replicas: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Multiply the per-replica model's epoch time by this for ``replicas`` workers on ``nodes`` nodes."""
        return self.per_step(replicas, nodes) / self.reference


@functools.lru_cache(maxsize=1 << 16)
def _per_node(scaling: PSScaling, w: int, n: int) -> int:
    """:meth:`PSScaling.servers_per_node` for one worker count and node count (cached: the packers ask
    for the same few again and again)."""
    top = scaling.hi // n
    if n > 1:
        top = min(top, _per_node(scaling, w, 1))
    least = max(1, -(-scaling.lo // n))
    if top < least:
        return 0
    sigma = np.arange(least, top + 1, dtype=float)
    t = scaling.model.seconds_per_epoch_many(np.full(sigma.size, float(w)), sigma * n)
    return least + int(np.argmax(t <= t.min() * (1.0 + SERVER_TOLERANCE)))


def ps_scaling(replicas: int, lo: int, hi: int, form: PSForm, shapes: Sequence[GangShape]) -> PSScaling:
    """The scaling of a parameter-server job of at most ``replicas`` workers and ``[lo, hi]`` servers,
    given its observed ``shapes`` (each with its servers in all; may be empty): the ``form``'s prior
    (:func:`models.speed.fit_ps_speed_model`), fitted to the observations when there are any."""
    usable = [s for s in shapes if s.relative > 0 and math.isfinite(s.relative) and s.servers is not None]
    obs = [PSSpeedObservation(s.replicas, int(s.servers or 1), s.relative) for s in usable]
    model = fit_ps_speed_model(obs, form, default_epoch_seconds=1.0)
    source = "prior" if not obs else ("scaled-prior" if model.source == "scaled-prior" else "fitted+prior")
    shell = PSScaling(model, 1.0, source, lo, hi)
    if obs:
        w = np.array([o.workers for o in obs], dtype=float)
        s = np.array([o.servers for o in obs], dtype=float)
        ref = float(np.exp(np.mean(np.log(model.seconds_per_epoch_many(w, s)))))
    else:
        ref = float(shell.per_step(np.array([replicas]), np.array([1]))[0])
    return PSScaling(model, ref, source, lo, hi)
