"""Speed models: seconds per epoch as a function of the allocation.

Two families, each fitted from observed epoch times, each with a documented prior that answers when
there are few observations (0, 1 or 2) and that keeps every prediction positive and finite.

Data-parallel (one replica, a CPU share and 0..G GPUs on one node): :class:`SpeedModel`
---------------------------------------------------------------------------------------

Linear in its four parameters, each non-negative::

    t(c, g) = serial + cpu_work / c + gpu_work / g + sync * log2(g)                       (g >= 1)
    t(c, 0) = serial / min(c, 1) + cpu_work / c + gpu_work * max(GPU_ON_CPU_SLOWDOWN / c, 1)

with ``c = cpu_millis / 1000`` cores (at least 0.001) and ``g`` GPUs. Units and meaning:

- ``serial``   [s/epoch]: work that no extra resource speeds up (I/O waits, Python overhead);
- ``cpu_work`` [core·s/epoch]: work spread over the CPU share (data loading, augmentation);
- ``gpu_work`` [GPU·s/epoch]: work spread over the GPUs (forward/backward passes);
- ``sync``     [s/epoch per doubling of the GPUs]: synchronisation cost of data-parallel training that
  grows with the GPU count: the latency part of a tree / recursive-doubling all-reduce takes
  ``log2(g)`` rounds, and waiting for the slowest of ``g`` replicas grows about as ``log g``.

For a CPU-only job this is Amdahl's law, ``t = t1 * (f / min(c, 1) + (1 - f) / c)`` with serial
fraction ``f = serial / t1`` (``t1 = serial + cpu_work``, the time on one core): the serial part runs
on one thread, which a share below one core slows in proportion (a CPU weight or quota of half a core
gives that thread half the time). Shape in the GPU count: with
``sync > 0``, ``t`` falls while ``g < g* = ln(2) * gpu_work / sync`` and *rises* (slowly) after it
(:attr:`SpeedModel.best_gpus`); more GPUs than ``g*`` are real waste, which the planner sees and will not
choose. ``t`` is non-increasing in the CPU share everywhere and in ``g`` for ``0 <= g <= g*``
(``t(c, 0) >= t(c, 1)`` because GPU work on CPUs never runs faster than on one GPU: the
``max(.., 1)``). ``GPU_ON_CPU_SLOWDOWN`` says how much slower GPU work runs on one core than on one GPU.
``fit_speed_model(..., with_sync=False)`` fits the three-parameter model (``sync = 0``).

Why ``log2(g)`` and not Optimus' ``(g - 1) / g`` (ring all-reduce) or a term linear in ``g``: measured on
the Pollux step-time tables (``benchmarks/bench_speed.py``, fit on 1, 2, 4 replicas), ``(g - 1) / g``
is, for ``g >= 1``, a combination of the ``serial`` and ``1/g`` columns (it cannot be told apart from
them and adds nothing but the option of ``t`` rising with ``g``), and a linear term, fitted on a few
noisy small-``g`` points, extrapolates badly (p90 error up to 3.3x at 6-64 replicas, against at most
1x for ``log2``); ``log2`` is identifiable, gives the model an optimum, and grows slowly past it.

Fitting: non-negative least squares (``scipy.optimize.nnls``) on *relative* error (each observation
row divided by its measured time, so a 10 s epoch counts as much as a 1,000 s one), together with
*prior rows*: pseudo-observations from the prior shape scaled through the observations (geometric
mean), at a spread of allocations around the observed ones, each weighing ``PRIOR_WEIGHT`` of one
observation (shrinking as ``1 / n`` beyond ``PRIOR_FULL_WEIGHT_UP_TO`` distinct allocations). No
observations: the prior at ``default_epoch_seconds`` on one core (one core + one GPU for GPU jobs).
One distinct allocation: the prior scaled through it (it says nothing about shape). Two or more:
fitted, the prior only filling in what the data leave open.

A CPU-only job's two parameters are fitted differently: its serial fraction ``f`` is the mode of a
posterior on a grid (:func:`_fit_cpu`), the observations' log times with Gaussian noise of
``CPU_TIME_NOISE`` (relative) and a logit-normal prior around ``PRIOR_CPU_SERIAL_FRACTION`` of spread
``PRIOR_CPU_LOGIT_SD``; ``t1`` follows in closed form. Prior rows at a quarter and four times the
observed shares (the rule above) have more leverage on the slope than observations a factor 1.5
apart: a job measured at 21.97 s an epoch on 2.6 and on 4 cores (no speed-up at all) was fitted at
18.6 s on 4 cores and 42.6 s on one, the prior's Amdahl curve, and the planner kept giving it CPU it
could not use. The posterior lets observations far enough apart decide the shape, and the prior
decide it when they are close together (or at one allocation) compared with their noise.

Parameter-server jobs (``w`` workers, ``s`` servers): :class:`PSSpeedModel`
-------------------------------------------------------------------------

One interface (``seconds_per_epoch(workers, servers)``, ``theta``, ``source``, ``relative_rmse``) over
two forms, chosen with ``fit_ps_speed_model(observations, form=...)``; ``w`` and ``s`` are clamped to
at least 1 (a parameter-server job has both):

``"optimus"`` (Peng et al., EuroSys 2018), time per step, here per epoch (every θ is multiplied by
the steps per epoch, so all are in seconds per epoch)::

    t(w, s) = θ0 * M / w + θ1 + θ2 * w / s + θ3 * w + θ4 * s,    θ >= 0

``θ0`` [s/epoch per sample of batch]: computation, ``M`` the (global) batch size (``batch_size``,
default 1, then ``θ0*M`` is one coefficient); ``θ1`` [s/epoch]: constant overhead; ``θ2``: push/pull of
the parameters, bottlenecked by the servers' bandwidth; ``θ3``: per-worker overhead at the servers;
``θ4``: per-server overhead. Fitted by NNLS on relative error with prior rows, as above.

``"coach"`` (Coach, Umeå University thesis 2021), speed in epochs per second::

    h(w, s) = -θ2 * (w - θ0)^2 - θ3 * (s - θ1)^2 + θ4,    t = 1 / max(h, COACH_MIN_SPEED_FRACTION * θ4)

``θ0``, ``θ1`` [workers, servers]: the fastest allocation; ``θ2`` [epochs/s per worker²], ``θ3``
[epochs/s per server²]: curvature (>= 0); ``θ4`` [epochs/s] (> 0): the peak speed. A concave quadratic
goes negative far from its peak; the speed is floored at ``COACH_MIN_SPEED_FRACTION`` of the peak
there, so times stay finite (and large: the planner will not choose such allocations). Fitted by
bounded least squares (``scipy.optimize.least_squares``, trust-region reflective) on the relative
error of the speed, with the same kind of prior rows.

Priors of the parameter-server forms (shape only; the scale comes from the observations, or from
``default_epoch_seconds`` at one worker and one server with none): Optimus ``PRIOR_OPTIMUS_SPLIT`` at
(1, 1), whose best allocation is 9 workers and 4 servers, 3.1x faster than (1, 1);
Coach: peak at ``max(PRIOR_COACH_PEAK, 2 x the largest observed)`` workers / servers (a scheduler grows
a job from small, so observations are assumed below the peak), a single worker at the peak server count
runs at ``PRIOR_COACH_EDGE_SPEED[0]`` of the peak and a single server at the peak worker count at
``PRIOR_COACH_EDGE_SPEED[1]``. These are deliberately pessimistic about scaling: the planner should not
hand a wide gang to a job it has never seen scale.

Observations with a non-finite or non-positive time, or a non-positive CPU share / worker or server
count, are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import least_squares, nnls

#: Prior serial fraction of a CPU-only job (Amdahl's f); a typical data-parallel CPU trainer.
PRIOR_CPU_SERIAL_FRACTION = 0.10
#: Prior split of a GPU job's epoch at one GPU and one core: serial / CPU-bound / GPU-bound
#: (fractions of t(1 core, 1 GPU)).
PRIOR_GPU_SPLIT = (0.05, 0.10, 0.85)
#: Prior synchronisation cost per doubling of the GPU count, as a fraction of t(1 core, 1 GPU); with
#: the split above the prior's 8 GPUs are 3.2x faster than one and its best GPU count is
#: ln(2) * 0.85 / 0.02 ~ 29.
PRIOR_GPU_SYNC_FRACTION = 0.02
#: How much slower GPU work runs on one core than on one GPU (when a GPU job is given no GPU).
GPU_ON_CPU_SLOWDOWN = 20.0
#: Relative noise (standard deviation of log seconds per epoch) of one observed CPU-only epoch time:
#: what a CPU-only job's fit expects its observations to scatter by (:func:`_fit_cpu`).
CPU_TIME_NOISE = 0.05
#: Spread of the prior on a CPU-only job's serial fraction, as a standard deviation of its logit
#: around ``logit(PRIOR_CPU_SERIAL_FRACTION)``: two of them span f = 0.002-0.86, from trainers that
#: scale on every core to ones bound by a single thread.
PRIOR_CPU_LOGIT_SD = 2.0
#: The serial fractions a CPU-only job's posterior is evaluated at (evenly spaced logits).
CPU_FRACTION_GRID = 1.0 / (1.0 + np.exp(-np.linspace(-7.0, 7.0, 281)))
#: Weight of each prior row relative to one observation ...
PRIOR_WEIGHT = 0.25
#: ... with up to this many distinct observed allocations; beyond, it shrinks as 1 / (distinct count),
#: so that plentiful data are not pulled towards the prior's shape.
PRIOR_FULL_WEIGHT_UP_TO = 4
#: Seconds per epoch at one core (one GPU for GPU jobs; one worker + one server for PS jobs)
#: assumed when nothing was observed.
DEFAULT_EPOCH_SECONDS = 60.0

#: Optimus prior: (θ0*M, θ1, θ2, θ3, θ4) as fractions of t(1 worker, 1 server).
PRIOR_OPTIMUS_SPLIT = (0.90, 0.03, 0.04, 0.002, 0.02)
#: Coach prior: smallest assumed peak (workers, servers).
PRIOR_COACH_PEAK = (8.0, 4.0)
#: Coach prior: speed at 1 worker (at the peak server count) and at 1 server (at the peak worker
#: count), as fractions of the peak speed. The form is additive, so 1 worker + 1 server runs at
#: 0.45 + 0.85 - 1 = 0.30 of the peak (about the Optimus prior's gain from (1, 1) to its best).
PRIOR_COACH_EDGE_SPEED = (0.45, 0.85)
#: Floor of the Coach speed, as a fraction of its peak θ4 (keeps times finite far from the peak).
COACH_MIN_SPEED_FRACTION = 0.02

PSForm = Literal["optimus", "coach"]


def _rel_rmse(pred: Sequence[float] | np.ndarray, seen: Sequence[float] | np.ndarray) -> float:
    p = np.asarray(pred, dtype=float)
    s = np.asarray(seen, dtype=float)
    with np.errstate(over="ignore"):  # absurd inputs (1e300 s per epoch) give inf: the worst fit, as it should
        return float(np.sqrt(np.mean(np.square((p - s) / s))))


# --------------------------------------------------------------------------------------------------
# Data-parallel: CPU share and GPUs
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpeedObservation:
    """One measured epoch time [s] at an allocation (CPU share in millicores, GPU count)."""

    cpu_millis: int
    gpus: int
    seconds_per_epoch: float


@dataclass(frozen=True)
class SpeedModel:
    """Fitted data-parallel speed model; see the module docstring for the formula and units."""

    serial: float
    cpu_work: float
    gpu_work: float
    n_observations: int
    #: "prior" (nothing observed), "scaled-prior" (one distinct allocation) or "fitted"; the planner
    #: marks a model fitted to similar jobs' speeds "borrowed" (:func:`planner.progress.job_speed`).
    source: str
    #: Root-mean-square relative error on the observations (``None`` without observations).
    relative_rmse: float | None = None
    #: Synchronisation cost [s/epoch] per doubling of the GPU count.
    sync: float = 0.0

    def seconds_per_epoch(self, cpu_millis: float, gpus: float) -> float:
        cores = max(cpu_millis, 1) / 1000.0
        if gpus >= 1:
            return self.serial + self.cpu_work / cores + self.gpu_work / gpus + self.sync * math.log2(gpus)
        return self.serial / min(cores, 1.0) + self.cpu_work / cores + self.gpu_work * max(GPU_ON_CPU_SLOWDOWN / cores, 1.0)

    def seconds_per_epoch_many(self, cpu_millis: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        cores = np.maximum(np.asarray(cpu_millis, dtype=float), 1.0) / 1000.0
        g = np.asarray(gpus, dtype=float)
        on = g >= 1
        # Each form only where some allocation takes it (a job's levels are mostly all on GPUs or
        # all on CPUs): the same figures as both computed and one picked per allocation.
        if on.all():
            return self.cpu_work / cores + self._on_gpu(g)
        if not on.any():
            return self.cpu_work / cores + self._on_cpu(cores)
        return self.cpu_work / cores + np.where(on, self._on_gpu(np.maximum(g, 1.0)), self._on_cpu(cores))

    def _on_gpu(self, gpus: np.ndarray) -> np.ndarray:
        """The serial and GPU terms at ``gpus`` >= 1 (``seconds_per_epoch``'s first form)."""
        return self.serial + self.gpu_work / gpus + self.sync * np.log2(gpus)

    def _on_cpu(self, cores: np.ndarray) -> np.ndarray:
        """The serial and GPU-work terms without a GPU (``seconds_per_epoch``'s second form)."""
        return self.serial / np.minimum(cores, 1.0) + self.gpu_work * np.maximum(GPU_ON_CPU_SLOWDOWN / cores, 1.0)

    @property
    def best_gpus(self) -> float:
        """GPU count g* = ln(2) * gpu_work / sync beyond which more GPUs make an epoch slower (inf without sync)."""
        if self.sync <= 0:
            return math.inf
        return max(1.0, math.log(2.0) * self.gpu_work / self.sync)

    @property
    def serial_fraction(self) -> float:
        """Amdahl's serial fraction on one core (and one GPU for GPU jobs): serial / t(1000, 1)."""
        t1 = self.serial + self.cpu_work + self.gpu_work
        return self.serial / t1 if t1 > 0 else 0.0


def _features(cpu_millis: float, gpus: float) -> list[float]:
    cores = max(cpu_millis, 1.0) / 1000.0
    if gpus >= 1:
        return [1.0, 1.0 / cores, 1.0 / gpus, math.log2(gpus)]
    return [1.0 / min(cores, 1.0), 1.0 / cores, max(GPU_ON_CPU_SLOWDOWN / cores, 1.0), 0.0]


def _fit_cpu(obs: Sequence[SpeedObservation]) -> tuple[float, float]:
    """A CPU-only job's ``(serial, cpu_work)`` from observations at two or more distinct shares: the
    serial fraction ``f`` maximising the posterior over :data:`CPU_FRACTION_GRID` (module docstring),
    ``t1`` the geometric mean of what each observation says it is at that ``f``."""
    cores = np.maximum(np.array([o.cpu_millis for o in obs], dtype=float), 1.0) / 1000.0
    logt = np.log(np.array([o.seconds_per_epoch for o in obs], dtype=float))
    f = CPU_FRACTION_GRID[:, None]
    shape = np.log(f / np.minimum(cores, 1.0) + (1.0 - f) / cores)  # log(t / t1) at each f, each share
    log_t1 = (logt - shape).mean(axis=1)
    sse = ((logt - shape - log_t1[:, None]) ** 2).sum(axis=1)
    f0 = PRIOR_CPU_SERIAL_FRACTION
    logit = np.log(CPU_FRACTION_GRID / (1.0 - CPU_FRACTION_GRID))
    cost = sse / (2.0 * CPU_TIME_NOISE**2) + (logit - math.log(f0 / (1.0 - f0))) ** 2 / (2.0 * PRIOR_CPU_LOGIT_SD**2)
    i = int(np.argmin(cost))  # the first of equals: deterministic
    t1 = float(np.exp(log_t1[i]))
    frac = float(CPU_FRACTION_GRID[i])
    return frac * t1, (1.0 - frac) * t1


def _prior(uses_gpu: bool, scale: float, with_sync: bool = True) -> tuple[float, float, float, float]:
    """Prior (serial, cpu_work, gpu_work, sync) with t(1 core[, 1 GPU]) = scale."""
    if uses_gpu:
        s, c, g = PRIOR_GPU_SPLIT
        return s * scale, c * scale, g * scale, (PRIOR_GPU_SYNC_FRACTION * scale if with_sync else 0.0)
    f = PRIOR_CPU_SERIAL_FRACTION
    return f * scale, (1.0 - f) * scale, 0.0, 0.0


def _model(theta: Sequence[float], n: int, source: str, rmse: float | None = None) -> SpeedModel:
    serial, cpu_work, gpu_work, sync = (float(x) for x in theta)
    return SpeedModel(serial, cpu_work, gpu_work, n, source, rmse, sync)


def _prior_weight(n_distinct: int) -> float:
    return PRIOR_WEIGHT * min(1.0, PRIOR_FULL_WEIGHT_UP_TO / max(n_distinct, 1))


def _usable(o: SpeedObservation) -> bool:
    return math.isfinite(o.seconds_per_epoch) and o.seconds_per_epoch > 0 and o.cpu_millis > 0 and o.gpus >= 0


def fit_speed_model(
    observations: Sequence[SpeedObservation],
    *,
    uses_gpu: bool,
    default_epoch_seconds: float = DEFAULT_EPOCH_SECONDS,
    with_sync: bool = True,
) -> SpeedModel:
    """Fit :class:`SpeedModel` to observations (see the module docstring; bad observations are ignored).

    ``uses_gpu=False``: a CPU-only job (``gpu_work = sync = 0``); ``with_sync=False``: no sync term.
    """
    sync_on = uses_gpu and with_sync
    obs = [o for o in observations if _usable(o)]
    if not obs:
        return _model(_prior(uses_gpu, default_epoch_seconds, sync_on), 0, "prior")

    # Scale the prior so that it passes through the geometric mean of the observations.
    unit = _model(_prior(uses_gpu, 1.0, sync_on), 0, "prior")
    ratios = np.array([o.seconds_per_epoch / unit.seconds_per_epoch(o.cpu_millis, o.gpus) for o in obs])
    # A ratio of 0 or inf (an observation far outside what the unit prior can express) says nothing
    # about the scale; without any finite one, the unit prior's own scale.
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    scale = float(np.exp(np.mean(np.log(ratios)))) if ratios.size else 1.0
    prior_theta = _prior(uses_gpu, scale, sync_on)
    prior = _model(prior_theta, 0, "prior")
    times = [o.seconds_per_epoch for o in obs]
    distinct = {(o.cpu_millis, o.gpus) for o in obs}
    if len(distinct) == 1:
        # One allocation says nothing about the shape: the prior scaled through it is the answer.
        pred = [prior.seconds_per_epoch(o.cpu_millis, o.gpus) for o in obs]
        return _model(prior_theta, len(obs), "scaled-prior", _rel_rmse(pred, times))

    if not uses_gpu:
        serial, cpu_work = _fit_cpu(obs)
        model = _model((serial, cpu_work, 0.0, 0.0), len(obs), "fitted")
        pred = [model.seconds_per_epoch(o.cpu_millis, o.gpus) for o in obs]
        return _model((serial, cpu_work, 0.0, 0.0), len(obs), "fitted", _rel_rmse(pred, times))

    rows: list[list[float]] = []
    rhs: list[float] = []
    for o in obs:
        rows.append([x / o.seconds_per_epoch for x in _features(o.cpu_millis, o.gpus)])
        rhs.append(1.0)
    # Prior rows at a spread of allocations around the observed ones, so the shape is pinned
    # where the data says nothing (GPU counts up to 4x the median, where a sync cost shows).
    pw = _prior_weight(len(distinct))
    ref_cpu = float(np.median([o.cpu_millis for o in obs]))
    ref_gpu = max(1, int(np.median([o.gpus for o in obs]))) if uses_gpu else 0
    for mult in (0.25, 1.0, 4.0):
        for gmult in (0.5, 1.0, 4.0) if uses_gpu else (0.0,):
            cpu = ref_cpu * mult
            gpu = max(1, round(ref_gpu * gmult)) if uses_gpu else 0
            t = prior.seconds_per_epoch(cpu, gpu)
            rows.append([pw * x / t for x in _features(cpu, gpu)])
            rhs.append(pw)
    a = np.array(rows)
    b = np.array(rhs)
    n_params = 4 if sync_on else 3 if uses_gpu else 2
    theta, _ = nnls(a[:, :n_params], b)
    full = [float(x) for x in theta] + [0.0] * (4 - n_params)
    model = _model(full, len(obs), "fitted")
    if not model.seconds_per_epoch(ref_cpu, ref_gpu) > 0:
        # Degenerate fit (all-zero parameters); the scaled prior is the honest answer.
        model = _model(prior_theta, len(obs), "scaled-prior")
    pred = [model.seconds_per_epoch(o.cpu_millis, o.gpus) for o in obs]
    return _model((model.serial, model.cpu_work, model.gpu_work, model.sync), len(obs), model.source, _rel_rmse(pred, times))


# --------------------------------------------------------------------------------------------------
# Parameter-server jobs: workers and servers
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PSSpeedObservation:
    """One measured epoch time [s] of a parameter-server job at ``workers`` workers and ``servers`` servers."""

    workers: int
    servers: int
    seconds_per_epoch: float


@dataclass(frozen=True)
class PSSpeedModel:
    """Fitted parameter-server speed model, ``form`` "optimus" or "coach"; formulas in the module docstring."""

    form: PSForm
    #: (θ0, θ1, θ2, θ3, θ4) of the form, in the units of the module docstring.
    theta: tuple[float, float, float, float, float]
    n_observations: int
    #: "prior" (nothing observed), "scaled-prior" (one distinct allocation) or "fitted"; the planner
    #: marks a model fitted to similar jobs' speeds "borrowed" (:func:`planner.progress.job_speed`).
    source: str
    #: Root-mean-square relative error of seconds per epoch on the observations (``None`` without any).
    relative_rmse: float | None = None
    #: Batch size M of the Optimus form (1: θ0 is the whole computation coefficient).
    batch_size: float = 1.0

    def seconds_per_epoch_many(self, workers: np.ndarray, servers: np.ndarray) -> np.ndarray:
        w = np.maximum(np.asarray(workers, dtype=float), 1.0)
        s = np.maximum(np.asarray(servers, dtype=float), 1.0)
        t0, t1, t2, t3, t4 = self.theta
        if self.form == "optimus":
            return t0 * self.batch_size / w + t1 + t2 * w / s + t3 * w + t4 * s
        h = -t2 * (w - t0) ** 2 - t3 * (s - t1) ** 2 + t4
        return 1.0 / np.maximum(h, COACH_MIN_SPEED_FRACTION * t4)

    def seconds_per_epoch(self, workers: float, servers: float) -> float:
        return float(self.seconds_per_epoch_many(np.array([workers]), np.array([servers]))[0])

    def epochs_per_second(self, workers: float, servers: float) -> float:
        return 1.0 / self.seconds_per_epoch(workers, servers)


def _theta5(x: Sequence[float] | np.ndarray) -> tuple[float, float, float, float, float]:
    return (float(x[0]), float(x[1]), float(x[2]), float(x[3]), float(x[4]))


def _optimus_features(w: float, s: float, batch_size: float) -> list[float]:
    w, s = max(w, 1.0), max(s, 1.0)
    return [batch_size / w, 1.0, w / s, w, s]


def _ps_prior(form: PSForm, seconds_11: float, peak: tuple[float, float], batch_size: float) -> PSSpeedModel:
    """Prior model with t(1 worker, 1 server) = seconds_11."""
    if form == "optimus":
        f0, f1, f2, f3, f4 = PRIOR_OPTIMUS_SPLIT
        theta = (f0 / batch_size, f1, f2, f3, f4)
        unit = PSSpeedModel(form, theta, 0, "prior", batch_size=batch_size)
        k = seconds_11 / unit.seconds_per_epoch(1, 1)
        return PSSpeedModel(form, _theta5([x * k for x in theta]), 0, "prior", None, batch_size)
    pw, ps = peak
    ew, es = PRIOR_COACH_EDGE_SPEED
    # Unit peak speed; curvatures from the edge speeds; then scale so that t(1, 1) = seconds_11.
    c2 = (1.0 - ew) / (pw - 1.0) ** 2 if pw > 1 else 0.0
    c3 = (1.0 - es) / (ps - 1.0) ** 2 if ps > 1 else 0.0
    unit = PSSpeedModel(form, (pw, ps, c2, c3, 1.0), 0, "prior")
    k = unit.seconds_per_epoch(1, 1) / seconds_11  # speeds scale inversely with times
    return PSSpeedModel(form, (pw, ps, c2 * k, c3 * k, k), 0, "prior", None, batch_size)


def _scaled(model: PSSpeedModel, factor: float) -> PSSpeedModel:
    """The same shape with every time multiplied by ``factor``."""
    t = model.theta
    if model.form == "optimus":
        theta = _theta5([x * factor for x in t])
    else:
        theta = (t[0], t[1], t[2] / factor, t[3] / factor, t[4] / factor)
    return PSSpeedModel(model.form, theta, model.n_observations, model.source, model.relative_rmse, model.batch_size)


def _coach_speed(theta: np.ndarray, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    return -theta[2] * (w - theta[0]) ** 2 - theta[3] * (s - theta[1]) ** 2 + theta[4]


def fit_ps_speed_model(
    observations: Sequence[PSSpeedObservation],
    form: PSForm = "optimus",
    *,
    batch_size: float = 1.0,
    default_epoch_seconds: float = DEFAULT_EPOCH_SECONDS,
) -> PSSpeedModel:
    """Fit a parameter-server speed model of ``form`` ("optimus" or "coach"); see the module docstring."""
    if form not in ("optimus", "coach"):
        raise ValueError(f"unknown parameter-server speed form {form!r} (expected 'optimus' or 'coach')")
    if not (math.isfinite(batch_size) and batch_size > 0):
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    obs = [
        o
        for o in observations
        if math.isfinite(o.seconds_per_epoch) and o.seconds_per_epoch > 0 and o.workers >= 1 and o.servers >= 1
    ]
    peak = PRIOR_COACH_PEAK
    if obs:
        peak = (max(peak[0], 2.0 * max(o.workers for o in obs)), max(peak[1], 2.0 * max(o.servers for o in obs)))
    if not obs:
        return _ps_prior(form, default_epoch_seconds, peak, batch_size)

    unit = _ps_prior(form, 1.0, peak, batch_size)
    times = np.array([o.seconds_per_epoch for o in obs])
    w = np.array([float(o.workers) for o in obs])
    s = np.array([float(o.servers) for o in obs])
    scale = float(np.exp(np.mean(np.log(times / unit.seconds_per_epoch_many(w, s)))))
    prior = _scaled(unit, scale)
    distinct = {(o.workers, o.servers) for o in obs}
    if len(distinct) == 1:
        rmse = _rel_rmse(prior.seconds_per_epoch_many(w, s), times)
        return PSSpeedModel(form, prior.theta, len(obs), "scaled-prior", rmse, batch_size)

    # Prior pseudo-observations around the observed allocations.
    ref_w = float(np.median(w))
    ref_s = float(np.median(s))
    grid = [(max(1.0, round(ref_w * wm)), max(1.0, round(ref_s * sm))) for wm in (0.5, 1.0, 2.0) for sm in (0.5, 1.0, 2.0)]
    prior_w = np.array([g[0] for g in grid])
    prior_s = np.array([g[1] for g in grid])
    pwt = _prior_weight(len(distinct))
    prior_t = prior.seconds_per_epoch_many(prior_w, prior_s)

    if form == "optimus":
        rows = [[x / t for x in _optimus_features(wi, si, batch_size)] for wi, si, t in zip(w, s, times, strict=True)]
        rows += [
            [pwt * x / t for x in _optimus_features(wi, si, batch_size)]
            for wi, si, t in zip(prior_w, prior_s, prior_t, strict=True)
        ]
        rhs = [1.0] * len(obs) + [pwt] * len(prior_w)
        theta, _ = nnls(np.array(rows), np.array(rhs))
        fitted = PSSpeedModel(form, _theta5(theta), len(obs), "fitted", None, batch_size)
    else:
        # Work in units where the observed speeds are O(1): curvatures and peak scale by 1/scale.
        y = 1.0 / (times / scale)
        prior_y = 1.0 / (prior_t / scale)
        x0 = np.array(prior.theta, dtype=float)
        x0[2:] *= scale

        def residuals(theta: np.ndarray) -> np.ndarray:
            r_obs = (_coach_speed(theta, w, s) - y) / y
            r_prior = pwt * (_coach_speed(theta, prior_w, prior_s) - prior_y) / prior_y
            return np.concatenate([r_obs, r_prior])

        lo = np.array([0.0, 0.0, 0.0, 0.0, 1e-9])
        hi = np.array([np.inf] * 5)
        res = least_squares(residuals, np.clip(x0, lo + 1e-12, None), bounds=(lo, hi), method="trf")
        th = res.x.copy()
        th[2:] /= scale
        fitted = PSSpeedModel(form, _theta5(th), len(obs), "fitted", None, batch_size)

    pred = fitted.seconds_per_epoch_many(w, s)
    if not (np.isfinite(pred).all() and (pred > 0).all()):
        fitted = PSSpeedModel(form, prior.theta, len(obs), "scaled-prior", None, batch_size)
        pred = fitted.seconds_per_epoch_many(w, s)
    return PSSpeedModel(form, fitted.theta, len(obs), fitted.source, _rel_rmse(pred, times), batch_size)
