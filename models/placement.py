"""Data-parallel step time as a function of a placement: how many replicas, on how many nodes.

A *placement* is the replicas a job runs on each node, e.g. ``(4, 4, 2)``: 10 replicas on 3 nodes.
Each replica processes ``local_batch`` samples per step and the replicas all-reduce their gradients
every step. The form is Pollux's throughput model (Qiao et al., OSDI 2021, section 3.2; the AdaptDL
``PerfParams``), without gradient accumulation::

    compute(b)  = alpha_c + beta_c * b                                   (b = local batch)
    network(N, K) = 0                                  if K == 1
                  = alpha_r + beta_r * max(K - 2, 0)   if N == 1, K >= 2   (intra-node all-reduce)
                  = alpha_n + beta_n * max(K - 2, 0)   if N >= 2          (inter-node all-reduce)
    step(N, K, b) = (compute^gamma + network^gamma)^(1 / gamma)
    throughput  = K * b / step                                           [samples/s]

with ``N`` nodes and ``K`` replicas. Parameters (:class:`PlacementParams`), all in seconds per step:

- ``compute_base`` (alpha_c) [s] and ``compute_per_sample`` (beta_c) [s/sample]: the forward and
  backward pass of one replica, linear in its local batch;
- ``intra_base`` (alpha_r) [s], ``intra_per_replica`` (beta_r) [s/replica]: the all-reduce when every
  replica is on one node; ``beta`` is the retrogression of a ring all-reduce beyond two replicas;
- ``inter_base`` (alpha_n) [s], ``inter_per_replica`` (beta_n) [s/replica]: the same once any two
  replicas are on different nodes (the slowest link bounds a ring all-reduce);
- ``overlap`` (gamma, in [1, 10]) [-]: how much of the all-reduce hides behind the backward pass;
  1 = none (step = compute + network), 10 ~ full (step ~ max(compute, network)).

Only ``N == 1`` vs ``N >= 2`` and ``K`` enter: two placements with the same node and replica counts
are predicted the same (``(2, 2)`` and ``(3, 1)``). On the measured tables placements with the same
``N``, ``K`` and local batch differ by 2-4 % (:func:`noise_floor`), but the node count matters beyond
``N >= 2``: for every model two-node placements are slower than three- and four-node ones with as
many replicas, which one inter-node link cannot express (``docs/models.md``, "Speed across placements").

What a job reports (:class:`PlacementObservation`): its placement, local batch, step time and, when
known, the part of the step spent waiting for the all-reduce (``sync_seconds``; then
``step - sync`` is the compute time, as in the tables and the Pollux simulator).

Fitting (:func:`fit_placement_model`): bounded least squares (``scipy.optimize.least_squares``,
trust-region reflective) on the log of the step time and of the compute time (where the sync time is
known), the positive parameters in log space, as AdaptDL's ``fit_perf_params`` (root-mean-square
log error). Two kinds of knowledge fill what the observations leave open:

- **A prior model** (``prior=``, e.g. :func:`table_prior` of the model's measured tables): a MAP
  estimate. Each log-parameter is pulled towards the prior's with weight
  ``NOISE_LOG_SD / PRIOR_LOG_SD`` (the noise of one logged step time against how far another cluster
  may differ from the measured one), ``overlap`` likewise with ``PRIOR_OVERLAP_SD``. Many observations
  outweigh the prior; none give the prior back (``source="prior"``).
- **No prior** (a model never measured): the parameters the data cannot identify are held, as
  AdaptDL does, and named in :attr:`PlacementSpeedModel.held`: one local batch -> ``compute_base``
  held at half the mean compute time; no multi-replica one-node observation -> the intra-node link
  free (1e-8 s); no observation with more than 2 replicas on a link -> its ``*_per_replica`` free.
  One departure from AdaptDL, which also treats an unseen inter-node link as free: with no multi-node
  observation the inter-node link is assumed *as slow as the intra-node one* seen, not free, so a
  spread the job never ran is never predicted faster than what it did run. ``overlap`` is pulled to 1
  (no overlap) with weight ``NOISE_LOG_SD / PRIOR_OVERLAP_SD`` (AdaptDL regularises it the same way).

Input is checked, not filtered: a non-finite or non-positive step time or local batch, a sync time
that is negative or not below the step time, an empty placement or a negative count raises
:class:`PlacementError` naming the observation, the field and the value.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
from scipy.optimize import least_squares

from models.step_tables import MeasuredStep

Placement = tuple[int, ...]

#: Standard deviation of the log of one step time around the form: its relative RMSE when fitted on
#: all of a model's measured rows is 10-13 % (placements alike in nodes and replicas differ by 2-4 %).
NOISE_LOG_SD = 0.1
#: Standard deviation of a log-parameter of the prior: another cluster, driver or batch may be
#: e-fold (2.7x) faster or slower than the measured one.
PRIOR_LOG_SD = 1.0
#: Standard deviation of the overlap exponent around the prior's (or around 1 without a prior).
PRIOR_OVERLAP_SD = 1.0
#: A "free" link or term [s]: AdaptDL's lower bound, also the lower bound of every positive parameter.
FREE = 1e-8
#: Upper bound of every positive parameter [s or s/sample]: far above any real step.
LARGEST = 1e6
OVERLAP_BOUNDS = (1.0, 10.0)

NAMES = (
    "compute_base",
    "compute_per_sample",
    "intra_base",
    "intra_per_replica",
    "inter_base",
    "inter_per_replica",
    "overlap",
)
#: Index of ``overlap`` in :data:`NAMES` (the one parameter fitted directly, not in log space).
GAMMA = 6


class PlacementError(ValueError):
    """An observation, placement or query the placement model cannot use (message names the field)."""


@dataclass(frozen=True)
class PlacementParams:
    """Parameters of the module docstring's formula (seconds per step unless said otherwise)."""

    compute_base: float
    compute_per_sample: float
    intra_base: float
    intra_per_replica: float
    inter_base: float
    inter_per_replica: float
    overlap: float

    def as_array(self) -> np.ndarray:
        return np.array([getattr(self, f.name) for f in fields(self)], dtype=float)


@dataclass(frozen=True)
class PlacementObservation:
    """What a data-parallel job reports: where it ran, its local batch, its step and sync times [s]."""

    placement: Placement
    local_batch: float
    step_seconds: float
    sync_seconds: float | None = None


def placement_shape(placement: Sequence[int], field: str = "placement") -> tuple[int, int]:
    """(nodes, replicas) of a placement; nodes holding 0 replicas do not count."""
    try:
        counts = [int(c) for c in placement]
    except (TypeError, ValueError):
        raise PlacementError(f"{field}: expected replica counts per node, got {placement!r}") from None
    if any(c < 0 for c in counts) or any(int(c) != c for c in placement):
        raise PlacementError(f"{field}: replica counts must be whole and >= 0, got {tuple(placement)!r}")
    used = [c for c in counts if c > 0]
    if not used:
        raise PlacementError(f"{field}: no replica on any node, got {tuple(placement)!r}")
    return len(used), sum(used)


def _check_batch(value: float, field: str) -> float:
    if not (isinstance(value, numbers.Real) and math.isfinite(value) and value > 0):
        raise PlacementError(f"{field}: local batch must be a positive finite number, got {value!r}")
    return float(value)


def predict_steps(
    params: np.ndarray, nodes: np.ndarray, replicas: np.ndarray, batch: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(step, compute) [s] of the formula for arrays of node counts, replica counts and local batches."""
    a_c, b_c, a_r, b_r, a_n, b_n, gamma = params
    compute = a_c + b_c * batch
    extra = np.maximum(replicas - 2.0, 0.0)
    network = np.where(nodes > 1, a_n + b_n * extra, a_r + b_r * extra)
    ratio = np.where(replicas > 1, network / compute, 0.0)
    # compute * (1 + ratio^gamma)^(1/gamma): the p-norm, without overflow for large gamma.
    return compute * np.power(1.0 + np.power(ratio, gamma), 1.0 / gamma), compute


@dataclass(frozen=True)
class PlacementSpeedModel:
    """Fitted placement model; formula and fitting in the module docstring."""

    params: PlacementParams
    n_observations: int
    #: "prior" (nothing observed: the prior itself), "fitted" (observations alone) or
    #: "fitted+prior" (observations with a prior model).
    source: str
    #: Root-mean-square relative error of the step time on the observations (``None`` without any).
    relative_rmse: float | None = None
    #: Parameters the observations could not identify, with the value they were held at and why.
    held: tuple[str, ...] = ()

    def step_seconds(self, placement: Sequence[int], local_batch: float) -> float:
        """Seconds per optimizer step of ``placement`` at ``local_batch`` samples per replica."""
        nodes, replicas = placement_shape(placement)
        batch = _check_batch(local_batch, "local_batch")
        step, _ = predict_steps(self.params.as_array(), *(np.array([float(x)]) for x in (nodes, replicas, batch)))
        return float(step[0])

    def step_seconds_many(self, nodes: np.ndarray, replicas: np.ndarray, local_batch: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`step_seconds` on node counts, replica counts and local batches."""
        n, k, b = (np.asarray(x, dtype=float) for x in (nodes, replicas, local_batch))
        if not np.all((n >= 1) & (k >= n) & np.isfinite(b) & (b > 0)):
            raise PlacementError("nodes, replicas, local_batch: need 1 <= nodes <= replicas and a positive finite batch")
        return predict_steps(self.params.as_array(), n, k, b)[0]

    def compute_seconds(self, local_batch: float) -> float:
        """Seconds of one replica's forward and backward pass at ``local_batch``."""
        b = _check_batch(local_batch, "local_batch")
        return self.params.compute_base + self.params.compute_per_sample * b

    def sync_seconds(self, placement: Sequence[int], local_batch: float) -> float:
        """Seconds of the step spent waiting for the all-reduce (what the overlap did not hide)."""
        return self.step_seconds(placement, local_batch) - self.compute_seconds(local_batch)

    def throughput(self, placement: Sequence[int], local_batch: float) -> float:
        """Samples per second of the whole job: replicas x local batch / step time."""
        _, replicas = placement_shape(placement)
        return replicas * float(local_batch) / self.step_seconds(placement, local_batch)


def _rel_rmse(pred: np.ndarray, seen: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square((pred - seen) / seen))))


def _validated(observations: Sequence[PlacementObservation]) -> np.ndarray:
    """Rows (nodes, replicas, batch, step, sync or NaN); raises on the first bad observation."""
    rows: list[tuple[float, ...]] = []
    for i, o in enumerate(observations):
        where = f"observations[{i}]"
        nodes, replicas = placement_shape(o.placement, f"{where}.placement")
        batch = _check_batch(o.local_batch, f"{where}.local_batch")
        step = o.step_seconds
        if not (isinstance(step, numbers.Real) and math.isfinite(step) and step > 0):
            raise PlacementError(f"{where}.step_seconds: must be a positive finite number, got {step!r}")
        sync = o.sync_seconds
        if sync is not None and not (isinstance(sync, numbers.Real) and math.isfinite(sync) and 0 <= sync < step):
            raise PlacementError(f"{where}.sync_seconds: must be finite, >= 0 and below step_seconds ({step}), got {sync!r}")
        rows.append((nodes, replicas, batch, float(step), math.nan if sync is None else float(sync)))
    return np.array(rows, dtype=float).reshape(-1, 5)


def _compute_seen(rows: np.ndarray) -> np.ndarray:
    """Compute time of each row: step - sync where the sync is known, the step itself for one replica
    (no all-reduce), else NaN."""
    _, k, _, step, sync = rows.T
    return np.where(np.isnan(sync), np.where(k == 1, step, np.nan), step - np.nan_to_num(sync))


def _start(rows: np.ndarray) -> np.ndarray:
    """A starting point from the data alone: compute half fixed, half per sample; links from the sync seen."""
    n, k, b, step, _ = rows.T
    seen = _compute_seen(rows)
    compute = np.where(np.isnan(seen), 0.7 * step, seen)
    c0 = float(np.median(compute))
    intra = (n == 1) & (k > 1)
    inter = n > 1
    a_r = float(np.median(step[intra] - compute[intra])) if intra.any() else 0.1 * c0
    a_n = float(np.median(step[inter] - compute[inter])) if inter.any() else a_r
    a_r, a_n = max(a_r, 1e-3 * c0), max(a_n, 1e-3 * c0)
    return np.array([c0 / 2, c0 / 2 / float(np.median(b)), a_r, a_r / 10, a_n, a_n / 10, 1.0])


def _held(rows: np.ndarray) -> tuple[dict[int, float], list[str], bool]:
    """Parameters the rows cannot identify (no prior): index -> held value, reasons, inter tied to intra."""
    n, k, b, step, _ = rows.T
    held: dict[int, float] = {}
    why: list[str] = []
    if len(np.unique(b)) == 1:
        seen = _compute_seen(rows)
        known = seen[~np.isnan(seen)]
        held[0] = float(np.mean(known if known.size else step)) / 2
        why.append(f"compute_base={held[0]:.3g} s (one local batch: half the compute time)")
    intra = (n == 1) & (k > 1)
    if not intra.any():
        held[2] = held[3] = FREE
        why.append("intra_base, intra_per_replica free (no multi-replica one-node observation)")
    elif not (intra & (k > 2)).any():
        held[3] = FREE
        why.append("intra_per_replica free (no one-node observation with more than 2 replicas)")
    inter = n > 1
    tie = not inter.any()
    if tie:
        why.append("inter_base, inter_per_replica = the intra-node ones (no multi-node observation)")
    elif not (inter & (k > 2)).any():
        held[5] = FREE
        why.append("inter_per_replica free (no multi-node observation with more than 2 replicas)")
    if not (k > 1).any():
        held[GAMMA] = 1.0
        why.append("overlap=1 (no multi-replica observation)")
    return held, why, tie


def fit_placement_model(
    observations: Sequence[PlacementObservation],
    *,
    prior: PlacementSpeedModel | None = None,
) -> PlacementSpeedModel:
    """Fit :class:`PlacementSpeedModel` to a job's observations, with ``prior`` where the model is known.

    Raises :class:`PlacementError` on a bad observation, or with neither observations nor a prior.
    """
    rows = _validated(observations)
    if rows.shape[0] == 0:
        if prior is None:
            raise PlacementError("observations: none, and no prior model to fall back on")
        return PlacementSpeedModel(prior.params, 0, "prior", None, prior.held)
    n, k, b, step, _ = rows.T
    seen = _compute_seen(rows)
    has_compute = ~np.isnan(seen)

    if prior is not None:
        x0 = prior.params.as_array()
        held: dict[int, float] = {}
        why: list[str] = []
        tie = False
        centre, sd = x0.copy(), np.array([PRIOR_LOG_SD] * GAMMA + [PRIOR_OVERLAP_SD])
    else:
        x0 = _start(rows)
        held, why, tie = _held(rows)
        centre, sd = np.array([math.nan] * GAMMA + [1.0]), np.array([math.inf] * GAMMA + [PRIOR_OVERLAP_SD])
    for i, v in held.items():
        x0[i] = v
    x0[:GAMMA] = np.maximum(x0[:GAMMA], FREE)
    free = [i for i in range(GAMMA + 1) if i not in held and not (tie and i in (4, 5))]

    def full(z: np.ndarray) -> np.ndarray:
        theta = x0.copy()
        for j, i in enumerate(free):
            theta[i] = z[j] if i == GAMMA else math.exp(z[j])
        if tie:
            theta[4], theta[5] = theta[2], theta[3]
        return theta

    def residuals(z: np.ndarray) -> np.ndarray:
        theta = full(z)
        pred_step, pred_compute = predict_steps(theta, n, k, b)
        parts = [np.log(pred_step / step), np.log(pred_compute[has_compute] / seen[has_compute])]
        # The prior (or, without one, the pull of the overlap towards 1), as NOISE_LOG_SD / sd.
        pull = [
            NOISE_LOG_SD / sd[i] * (z[j] - (centre[i] if i == GAMMA else math.log(centre[i])))
            for j, i in enumerate(free)
            if math.isfinite(sd[i])
        ]
        return np.concatenate([*parts, np.array(pull)])

    lo = np.array([OVERLAP_BOUNDS[0] if i == GAMMA else math.log(FREE) for i in free])
    hi = np.array([OVERLAP_BOUNDS[1] if i == GAMMA else math.log(LARGEST) for i in free])
    z0 = np.clip(np.array([x0[i] if i == GAMMA else math.log(x0[i]) for i in free]), lo + 1e-9, hi - 1e-9)
    z = least_squares(residuals, z0, bounds=(lo, hi), method="trf").x if free else z0
    theta = full(z)
    pred, _ = predict_steps(theta, n, k, b)
    source = "fitted+prior" if prior is not None else "fitted"
    params = PlacementParams(*(float(x) for x in theta))
    return PlacementSpeedModel(params, int(rows.shape[0]), source, _rel_rmse(pred, step), tuple(why))


def even_placement(nodes: int, replicas: int) -> Placement:
    """``replicas`` spread as evenly as possible over ``nodes`` (what ``scalability.csv`` rows stand for)."""
    if not 1 <= nodes <= replicas:
        raise PlacementError(f"nodes: need 1 <= nodes <= replicas ({replicas}), got {nodes}")
    q, r = divmod(replicas, nodes)
    return tuple([q + 1] * r + [q] * (nodes - r))


def table_observations(steps: Sequence[MeasuredStep]) -> list[PlacementObservation]:
    """Measured table rows as observations; rows with an unusable time are left out (tables are data)."""
    out = []
    for s in steps:
        if not (math.isfinite(s.step_seconds) and s.step_seconds > 0 and s.local_batch > 0 and 1 <= s.nodes <= s.replicas):
            continue
        sync = s.sync_seconds if math.isfinite(s.sync_seconds) and 0 <= s.sync_seconds < s.step_seconds else None
        placement = s.placement if s.placement is not None else even_placement(s.nodes, s.replicas)
        out.append(PlacementObservation(placement, float(s.local_batch), s.step_seconds, sync))
    return out


def table_prior(steps: Sequence[MeasuredStep]) -> PlacementSpeedModel:
    """The model fitted to a model's measured tables: the prior for jobs of that model."""
    return fit_placement_model(table_observations(steps))


def node_factors(steps: Sequence[MeasuredStep], model: PlacementSpeedModel | None = None) -> dict[int, float]:
    """Per node count of two or more, the measured step times over the form's (``model``, default
    :func:`table_prior` of ``steps``): the geometric mean of the ratio over the rows with that many
    nodes. The form has one inter-node link, so it prices every spread alike; this is what the node
    count adds (on the Pollux tables, two nodes 6-32 % slower than the form, three and more 0.91-1.10
    times it, the median within 3 %: ``docs/models.md``)."""
    rows = [s for s in steps if math.isfinite(s.step_seconds) and s.step_seconds > 0 and 1 <= s.nodes <= s.replicas]
    if not rows:
        return {}
    params = (model or table_prior(rows)).params.as_array()
    n, k, b, t = (
        np.array([getattr(s, f) for s in rows], dtype=float) for f in ("nodes", "replicas", "local_batch", "step_seconds")
    )
    ratio = np.log(t / predict_steps(params, n, k, b)[0])
    return {int(c): float(np.exp(np.mean(ratio[n == c]))) for c in np.unique(n) if c >= 2}


def noise_floor(steps: Sequence[MeasuredStep]) -> float:
    """Median relative deviation of a measured step time from the median of its (nodes, replicas, batch) group.

    What no model in (nodes, replicas, local batch) alone can beat; groups of one row are skipped.
    """
    groups: dict[tuple[int, int, int], list[float]] = {}
    for s in steps:
        if math.isfinite(s.step_seconds) and s.step_seconds > 0:
            groups.setdefault((s.nodes, s.replicas, s.local_batch), []).append(s.step_seconds)
    devs = [abs(t - m) / t for ts in groups.values() if len(ts) > 1 for m in [float(np.median(ts))] for t in ts]
    return float(np.median(devs)) if devs else math.nan
