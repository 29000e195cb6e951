"""Speed models: seconds per epoch as a function of the allocation.

The model is linear in its parameters, each non-negative and in seconds per epoch::

    t(cores, gpus) = serial + cpu_work / cores + gpu_work / gpus          (gpus >= 1)
    t(cores, 0)    = serial + (cpu_work + GPU_ON_CPU_SLOWDOWN * gpu_work) / cores

``serial``   [s/epoch]: work no extra resource speeds up (synchronisation, I/O, Python overhead);
``cpu_work`` [core·s/epoch]: work spread over the CPU share (one core = 1000 millicores);
``gpu_work`` [GPU·s/epoch]: work spread over the GPUs.

For a CPU-only job this is Amdahl's law, ``t = t1 * (f + (1 - f) / cores)`` with serial fraction
``f = serial / t1``. Parameters are fitted by non-negative least squares on relative error (each
observation row divided by its measured time, so a 10 s epoch counts as much as a 1,000 s one),
together with *prior rows*: pseudo-observations drawn from a prior curve scaled to the data. With
no observations the prior alone answers; with one it fixes the scale and the prior fixes the shape;
with many the data outweighs the prior.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

#: Prior serial fraction of a CPU-only job (Amdahl's f); a typical data-parallel CPU trainer.
PRIOR_CPU_SERIAL_FRACTION = 0.10
#: Prior split of a GPU job's epoch at one GPU and one core: serial / CPU-bound / GPU-bound.
PRIOR_GPU_SPLIT = (0.05, 0.10, 0.85)
#: How much slower GPU work runs when a GPU job is given no GPU (rough: one core vs one GPU).
GPU_ON_CPU_SLOWDOWN = 20.0
#: Weight of each prior row relative to one observation.
PRIOR_WEIGHT = 0.25
#: Seconds per epoch at one core (one GPU for GPU jobs) assumed when nothing was observed.
DEFAULT_EPOCH_SECONDS = 60.0


@dataclass(frozen=True)
class SpeedObservation:
    """One measured epoch time at an allocation."""

    cpu_millis: int
    gpus: int
    seconds_per_epoch: float


@dataclass(frozen=True)
class SpeedModel:
    """Fitted speed model; see the module docstring for the formula."""

    serial: float
    cpu_work: float
    gpu_work: float
    n_observations: int
    #: "prior" (nothing observed), "scaled-prior" (one distinct allocation) or "fitted".
    source: str
    #: Root-mean-square relative error on the observations (``None`` without observations).
    relative_rmse: float | None = None

    def seconds_per_epoch(self, cpu_millis: int, gpus: int) -> float:
        cores = max(cpu_millis, 1) / 1000.0
        if gpus >= 1:
            return self.serial + self.cpu_work / cores + self.gpu_work / gpus
        return self.serial + (self.cpu_work + GPU_ON_CPU_SLOWDOWN * self.gpu_work) / cores

    def seconds_per_epoch_many(self, cpu_millis: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        cores = np.maximum(cpu_millis, 1) / 1000.0
        g = np.asarray(gpus, dtype=float)
        with np.errstate(divide="ignore"):
            gpu_term = np.where(g >= 1, self.gpu_work / np.maximum(g, 1), GPU_ON_CPU_SLOWDOWN * self.gpu_work / cores)
        return self.serial + self.cpu_work / cores + gpu_term


def _features(cpu_millis: float, gpus: float) -> list[float]:
    cores = max(cpu_millis, 1.0) / 1000.0
    if gpus >= 1:
        return [1.0, 1.0 / cores, 1.0 / gpus]
    return [1.0, 1.0 / cores, GPU_ON_CPU_SLOWDOWN / cores]


def _prior(uses_gpu: bool, scale: float) -> tuple[float, float, float]:
    if uses_gpu:
        s, c, g = PRIOR_GPU_SPLIT
        return s * scale, c * scale, g * scale
    f = PRIOR_CPU_SERIAL_FRACTION
    return f * scale, (1.0 - f) * scale, 0.0


def fit_speed_model(
    observations: Sequence[SpeedObservation], *, uses_gpu: bool, default_epoch_seconds: float = DEFAULT_EPOCH_SECONDS
) -> SpeedModel:
    """Fit :class:`SpeedModel` to observations (non-finite or non-positive times are ignored)."""
    obs = [o for o in observations if math.isfinite(o.seconds_per_epoch) and o.seconds_per_epoch > 0 and o.cpu_millis > 0]
    if not obs:
        s, c, g = _prior(uses_gpu, default_epoch_seconds)
        return SpeedModel(s, c, g, 0, "prior")

    # Scale the prior so that it passes through the geometric mean of the observations.
    unit = SpeedModel(*_prior(uses_gpu, 1.0), 0, "prior")
    ratios = [o.seconds_per_epoch / unit.seconds_per_epoch(o.cpu_millis, o.gpus) for o in obs]
    scale = float(np.exp(np.mean(np.log(ratios))))
    prior = SpeedModel(*_prior(uses_gpu, scale), 0, "prior")
    distinct = {(o.cpu_millis, o.gpus) for o in obs}
    if len(distinct) == 1:
        # One allocation says nothing about the shape: the prior scaled through it is the answer.
        rel1 = [(prior.seconds_per_epoch(o.cpu_millis, o.gpus) - o.seconds_per_epoch) / o.seconds_per_epoch for o in obs]
        return SpeedModel(
            prior.serial, prior.cpu_work, prior.gpu_work, len(obs), "scaled-prior", float(np.sqrt(np.mean(np.square(rel1))))
        )

    rows: list[list[float]] = []
    rhs: list[float] = []
    for o in obs:
        f = _features(o.cpu_millis, o.gpus)
        rows.append([x / o.seconds_per_epoch for x in f])
        rhs.append(1.0)
    # Prior rows at a spread of allocations around the observed ones, so the shape is pinned
    # where the data says nothing.
    ref_cpu = float(np.median([o.cpu_millis for o in obs]))
    ref_gpu = max(1, int(np.median([o.gpus for o in obs]))) if uses_gpu else 0
    for mult in (0.25, 1.0, 4.0):
        for gmult in (0.5, 1.0, 2.0) if uses_gpu else (0.0,):
            cpu = ref_cpu * mult
            gpu = max(1, round(ref_gpu * gmult)) if uses_gpu else 0
            t = prior.seconds_per_epoch(int(cpu), gpu)
            f = _features(cpu, gpu)
            rows.append([PRIOR_WEIGHT * x / t for x in f])
            rhs.append(PRIOR_WEIGHT)
    a = np.array(rows)
    b = np.array(rhs)
    if not uses_gpu:
        a = a[:, :2]
    theta, _ = nnls(a, b)
    serial, cpu_work = float(theta[0]), float(theta[1])
    gpu_work = float(theta[2]) if uses_gpu else 0.0
    model = SpeedModel(serial, cpu_work, gpu_work, len(obs), "fitted" if len(distinct) > 1 else "scaled-prior")
    if model.seconds_per_epoch(int(ref_cpu), ref_gpu) <= 0:
        # Degenerate fit (all-zero parameters); the scaled prior is the honest answer.
        model = SpeedModel(prior.serial, prior.cpu_work, prior.gpu_work, len(obs), "scaled-prior")
    rel = [(model.seconds_per_epoch(o.cpu_millis, o.gpus) - o.seconds_per_epoch) / o.seconds_per_epoch for o in obs]
    return SpeedModel(
        model.serial,
        model.cpu_work,
        model.gpu_work,
        model.n_observations,
        model.source,
        float(np.sqrt(np.mean(np.square(rel)))),
    )
