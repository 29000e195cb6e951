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
``cosine``         ``m = (1 + cos(pi * floor(t) / T)) / 2`` while ``floor(t) < T``, then 0 (torch
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
#: Sub-steps per epoch of the lag kernel (warm-up ramps change within an epoch).
SUBSTEPS = 8
#: A lagged rate looks this many lags back (the kernel's weight beyond is e^-6 = 0.25 %).
LAG_WINDOW = 6.0
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
            return np.where(e < T, 0.5 * (1.0 + np.cos(math.pi * e / max(T, 1e-12))), 0.0)
        w = min(float(self.warmup), T)
        ramp = t / w if w > 0 else np.ones_like(t)
        p = np.clip((t - w) / max(T - w, 1e-12), 0.0, 1.0)
        after = 0.5 * (1.0 + np.cos(math.pi * p)) if kind == "warmup_cosine" else 1.0 - p
        return np.where(t < w, ramp, np.where(t < T, after, 0.0))

    def integral(self, epochs: ArrayLike) -> Arr:
        """``S(k) = ∫_0^k m(t) dt`` in closed form (the cumulative rate, in epochs at the initial rate):
        exact for every kind, and as cheap at epoch 1e9 as at epoch 10."""
        t = np.maximum(np.asarray(epochs, dtype=float), 0.0)
        kind = self.kind
        if kind == "constant":
            return t
        if kind in ("step", "plateau"):
            if kind == "step":
                starts = np.ceil(np.asarray(self.milestones, dtype=float))  # floor(t) >= ms  <=>  t >= ceil(ms)
                levels = self.gamma ** np.arange(1, starts.size + 1)
            else:
                starts = np.asarray(self.drops, dtype=float)
                levels = np.maximum(self.factor ** np.arange(1, starts.size + 1), self.min_lr)
            bounds = np.concatenate([[0.0], starts, [np.inf]])
            rates = np.concatenate([[1.0], levels])
            lo, hi = bounds[:-1], bounds[1:]
            return (rates * (np.clip(t[..., None], lo, hi) - lo)).sum(-1)
        if kind == "exp":
            f = np.floor(t)
            g = self.gamma
            whole = f if g == 1.0 else (1.0 - g**f) / (1.0 - g)
            return whole + (t - f) * g**f
        T = float(self.max_epochs or 0.0)
        if kind == "cosine":
            # Epoch i < T trains at (1 + cos(i*theta)) / 2, theta = pi / T; the sum of the first F
            # cosines is sin(F*theta/2) * cos((F-1)*theta/2) / sin(theta/2).
            theta = math.pi / max(T, 1e-12)
            f = np.floor(t)
            active = math.ceil(T)

            def head(count: Arr) -> Arr:
                c = np.minimum(count, active)
                with np.errstate(all="ignore"):
                    cos_sum = np.where(c > 0, np.sin(c * theta / 2) * np.cos((c - 1) * theta / 2) / math.sin(theta / 2), 0.0)
                return 0.5 * c + 0.5 * cos_sum

            return head(f) + (t - f) * self.multiplier(f)
        w = min(float(self.warmup), T)
        u = np.minimum(t, T)
        ramp = np.minimum(u, w) ** 2 / (2.0 * w) if w > 0 else np.zeros_like(u)
        x = np.maximum(u - w, 0.0)
        span = max(T - w, 1e-12)
        if kind == "warmup_cosine":
            after = 0.5 * x + 0.5 * span / math.pi * np.sin(math.pi * x / span)
        else:
            after = x - x**2 / (2.0 * span)
        return ramp + after

    def cumulative(self, epochs: ArrayLike, *, lag: float = 0.0) -> tuple[Arr, Arr]:
        """At each epoch ``k`` (end of the ``k``-th epoch): ``S(k)`` (:meth:`integral`) and the rate the
        loss reflects at ``k``.

        The latter is the multiplier averaged over the epoch ending at ``k`` (a training loss is the
        mean over the epoch's batches) when ``lag == 0``, else followed with an exponential lag of
        ``lag`` epochs (``dr/dt = (m - r) / lag``, a kernel over the last ``LAG_WINDOW * lag`` epochs
        integrated with :data:`SUBSTEPS` sub-steps per epoch): a loss takes some steps to settle
        after the rate changes. ``k`` may be fractional and unsorted.
        """
        k = np.maximum(np.asarray(epochs, dtype=float), 0.0)
        S = self.integral(k)
        if lag <= 0.0:
            lo = np.maximum(k - 1.0, 0.0)
            width = k - lo
            with np.errstate(all="ignore"):
                now = np.where(width > 0, (S - self.integral(lo)) / np.where(width > 0, width, 1.0), 1.0)
            return S, np.where(width > 0, now, self.multiplier(np.zeros_like(k)))
        dt = 1.0 / SUBSTEPS
        back = (np.arange(int(math.ceil(LAG_WINDOW * lag * SUBSTEPS))) + 0.5) * dt  # sub-step midpoints, newest first
        kernel = np.exp(-back / lag)
        r = np.empty_like(k)
        # At a whole epoch of a schedule stepped once an epoch, the sub-steps of each earlier epoch share
        # one rate: the same sum with the kernel's weight gathered per epoch (SUBSTEPS times fewer rates).
        whole = (k == np.floor(k)) if self._stepped_per_epoch() else np.zeros(k.shape, dtype=bool)
        if whole.any():
            per_epoch = np.bincount(np.floor(back).astype(int), weights=kernel)
            ago = np.arange(per_epoch.size, dtype=float)
            at = k[whole][..., None] - 1.0 - ago  # the epoch each weight falls in; before 0: no weight
            r[whole] = self._kernel_mean(np.where(at >= 0, per_epoch, 0.0), at)
        if not whole.all():
            at = k[~whole][..., None] - back  # (n, J); before 0 the job had not started: no weight
            r[~whole] = self._kernel_mean(np.where(at >= 0, kernel, 0.0), at)
        return S, r

    def _stepped_per_epoch(self) -> bool:
        """Whether the rate is constant within every epoch ``[e, e+1)`` (the kinds stepped once an epoch)."""
        if self.kind == "plateau":
            return all(float(d).is_integer() for d in self.drops)
        return self.kind not in ("warmup_cosine", "warmup_linear")

    def _kernel_mean(self, weight: Arr, at: Arr) -> Arr:
        """The rate averaged over the times ``at`` with ``weight`` (each row); the first rate where no
        weight falls."""
        total = weight.sum(-1)
        m = self.multiplier(np.maximum(at, 0.0))
        first = float(self.multiplier(np.zeros(1))[0])
        return np.where(total > 0, (weight * m).sum(-1) / np.where(total > 0, total, 1.0), first)


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
