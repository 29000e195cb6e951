"""Learning-rate schedules: the rate a job trains at, as a multiplier of its initial rate, over time.

A schedule tells the curve model what no prefix of a learning curve can: that the rate will drop
tenfold at epoch 30, or reach zero at the last planned epoch. :mod:`models.schedule_curve` turns it
into the time axis of the fit (the *cumulative* rate) and a term for the rate itself.

Time ``t`` is in epochs, continuous: ``t`` in ``[e, e+1)`` is the ``(e+1)``-th epoch. The multiplier
``m(t)`` (rate / initial rate) of each kind, stepped the way its usual implementation steps it:

``constant``       ``m = 1``.
``step``           ``m = gamma ** #{milestones <= floor(t)}`` (torch ``MultiStepLR`` stepped once an
                   epoch: milestone 30 means the 31st epoch trains at the lower rate).
``exp``            ``m = gamma ** floor(t)`` (torch ``ExponentialLR``, once an epoch).
``cosine``         ``m = (1 + cos(pi * floor(t) / T)) / 2`` for ``t < T``, 0 after (torch
                   ``CosineAnnealingLR(T_max=T)``, once an epoch); ``T`` = the planned epochs.
``warmup_cosine``  ``m = t / w`` for ``t < w``, then ``(1 + cos(pi * (t - w) / (T - w))) / 2``, 0 after
                   ``T`` (Hugging Face ``get_cosine_schedule_with_warmup``, stepped every batch).
``warmup_linear``  ``m = t / w`` for ``t < w``, then ``(T - t) / (T - w)``, 0 after ``T`` (Hugging Face
                   ``get_linear_schedule_with_warmup``).
``plateau``        torch ``ReduceLROnPlateau``: ``m`` is multiplied by ``factor`` after ``patience``
                   epochs without a new best (relative threshold 1e-4), never below ``min_lr``
                   (here a fraction of the initial rate). When the drops happen depends on the
                   curve, so they are passed in (``drops``): found in the observed history and
                   simulated on the forecast by :mod:`models.schedule_curve`.

Parameters and units: ``milestones`` [epoch], ``gamma`` [-] in (0, 1], ``warmup`` [epoch],
``max_epochs`` = ``T`` [epoch] (the planned epochs), ``factor`` [-] in (0, 1), ``patience`` [epoch],
``min_lr`` [-] (fraction of the initial rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

Arr = NDArray[np.float64]
ScheduleKind = Literal["constant", "step", "exp", "cosine", "warmup_cosine", "warmup_linear", "plateau"]
SCHEDULE_KINDS: tuple[str, ...] = ("constant", "step", "exp", "cosine", "warmup_cosine", "warmup_linear", "plateau")
#: Kinds that anneal over the planned epochs and cannot be evaluated without them.
NEEDS_MAX_EPOCHS: tuple[str, ...] = ("cosine", "warmup_cosine", "warmup_linear")
#: Sub-steps per epoch used to integrate the multiplier (warm-up ramps change within an epoch).
SUBSTEPS = 8
#: torch ``ReduceLROnPlateau``'s default relative threshold for "a new best".
PLATEAU_THRESHOLD = 1e-4


@dataclass(frozen=True)
class LRSchedule:
    """A declared learning-rate schedule (see the module docstring for each kind's formula)."""

    kind: ScheduleKind
    milestones: tuple[float, ...] = ()
    gamma: float = 1.0
    warmup: float = 0.0
    max_epochs: float | None = None
    factor: float = 0.1
    patience: int = 10
    min_lr: float = 0.0
    #: ``plateau`` only: the first epochs (``t``) trained at each lower rate, known or simulated.
    drops: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULE_KINDS:
            raise ValueError(f"unknown schedule kind {self.kind!r}")
        if self.kind in NEEDS_MAX_EPOCHS and self.max_epochs is None:
            raise ValueError(f"a '{self.kind}' schedule anneals over the planned epochs: it needs max_epochs")

    @property
    def end(self) -> float:
        """Epoch after which the rate is 0 (``inf`` for kinds that never reach 0)."""
        return float(self.max_epochs) if self.kind in NEEDS_MAX_EPOCHS and self.max_epochs is not None else math.inf

    def with_drops(self, drops: Sequence[float]) -> LRSchedule:
        return replace(self, drops=tuple(float(d) for d in drops))

    def multiplier(self, epochs: ArrayLike) -> Arr:
        """``m(t)``: the rate at training time ``t`` (epochs) as a multiplier of the initial rate."""
        t = np.maximum(np.asarray(epochs, dtype=float), 0.0)
        e = np.floor(t)
        kind = self.kind
        if kind == "constant":
            return np.ones_like(t)
        if kind == "step":
            n = np.zeros_like(t)
            for ms in self.milestones:
                n += e >= ms
            return self.gamma**n
        if kind == "exp":
            return self.gamma**e
        if kind == "plateau":
            n = np.zeros_like(t)
            for d in self.drops:
                n += t >= d
            return np.maximum(self.factor**n, self.min_lr)
        T = float(self.max_epochs or 0.0)
        if kind == "cosine":
            return np.where(t < T, 0.5 * (1.0 + np.cos(math.pi * np.minimum(e, T) / max(T, 1e-12))), 0.0)
        w = min(float(self.warmup), T)
        ramp = t / w if w > 0 else np.ones_like(t)
        p = np.clip((t - w) / max(T - w, 1e-12), 0.0, 1.0)
        after = 0.5 * (1.0 + np.cos(math.pi * p)) if kind == "warmup_cosine" else 1.0 - p
        return np.where(t < w, ramp, np.where(t < T, after, 0.0))

    def cumulative(self, epochs: ArrayLike, *, lag: float = 0.0) -> tuple[Arr, Arr]:
        """At each epoch ``k`` (end of the ``k``-th epoch): ``S(k) = ∫_0^k m(t) dt`` (the cumulative rate,
        in epochs at the initial rate) and the rate the loss reflects at ``k``.

        The latter is the multiplier averaged over the epoch ending at ``k`` (a training loss is the
        mean over the epoch's batches) when ``lag == 0``, else followed with an exponential lag of
        ``lag`` epochs (``dr/dt = (m - r) / lag``): a loss takes some steps to settle after the rate
        changes. Both are integrated with :data:`SUBSTEPS` sub-steps per epoch; ``k`` may be
        fractional and unsorted.
        """
        k = np.maximum(np.asarray(epochs, dtype=float), 0.0)
        if k.size == 0:
            return np.zeros(0), np.zeros(0)
        top = float(k.max())
        n_steps = int(math.ceil(top * SUBSTEPS)) + 1
        dt = 1.0 / SUBSTEPS
        mid = (np.arange(n_steps) + 0.5) * dt
        m = self.multiplier(mid)
        grid = np.arange(n_steps + 1) * dt
        s = np.concatenate([[0.0], np.cumsum(m) * dt])
        S = np.interp(k, grid, s)
        if lag <= 0.0:
            lo = np.interp(np.maximum(k - 1.0, 0.0), grid, s)
            width = np.maximum(k - np.maximum(k - 1.0, 0.0), 1e-12)
            now = np.where(k > 0, (S - lo) / width, float(self.multiplier(np.zeros(1))[0]))
            return S, now
        from scipy.signal import lfilter

        a = math.exp(-dt / lag)
        # r_{i+1} = a*r_i + (1-a)*m_i, starting at r_0 = m_0: a first-order filter.
        r = np.concatenate([[m[0]], lfilter([1.0 - a], [1.0, -a], m, zi=[a * m[0]])[0]])
        return S, np.interp(k, grid, r)


def plateau_drops(z: ArrayLike, epochs: ArrayLike, patience: int, factor: float, min_lr: float) -> list[float]:
    """Epochs at which torch's ``ReduceLROnPlateau`` (mode ``min``, relative threshold 1e-4, no
    cool-down) would have lowered the rate, given the monitored values ``z`` (lower is better) reported
    at the ends of ``epochs``: each drop is the first epoch ``t`` trained at the lower rate."""
    best = math.inf
    bad = 0
    lr = 1.0
    out: list[float] = []
    for k, v in zip(np.asarray(epochs, dtype=float), np.asarray(z, dtype=float), strict=False):
        if v < best * (1.0 - PLATEAU_THRESHOLD) if best > 0 else v < best * (1.0 + PLATEAU_THRESHOLD):
            best, bad = float(v), 0
        else:
            bad += 1
        if bad > patience:
            new = max(lr * factor, min_lr)
            if lr - new > 1e-12:
                out.append(float(k))
                lr = new
            bad = 0
    return out
