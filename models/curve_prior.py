"""A prior from similar past runs: fit a stretched and shifted copy of earlier curves to a job's prefix.

A real cluster has seen most models before (the same network trained last week with another batch
size, or by another user). Those finished curves know what no parametric family fitted to a short
prefix can: that ImageNet's accuracy jumps at epochs 30 and 60, where bert is after two epochs, how
far cifar10 still climbs. This module turns a library of such curves into one more candidate for
:func:`models.curves.fit_learning_curve`, which keeps it only if it forecasts the job's own later
points at least as well as the families (time-series cross-validation), or when the job has too few
points to cross-validate.

Each reference curve ``R`` (in badness units ``sign * value``: lower is better) is first smoothed
(running median over :data:`SMOOTH_WINDOW` epochs, against single noisy evaluations) and made
monotone (best so far: the prior predicts improvement, never a relapse). The job's prefix is then
fitted by

    ``z(k) = offset + scale * R(k / warp)``

- ``warp`` [-] > 0 stretches the epoch axis (a larger batch or another learning rate can make the
  same model converge later); searched on a geometric grid over :attr:`CurvePrior.warp_range`, with a
  penalty ``WARP_PENALTY * (ln warp)^2`` (in units of squared reference range per point) that keeps
  it near 1 unless the data insist;
- ``offset`` [value units] and ``scale`` [-] >= 0: weighted least squares, recent points weighing
  more. With ``same_task=True`` (the references are the same model and metric) ``R`` is in the
  job's units and ``scale`` is pulled towards 1 by a ridge worth :data:`PRIOR_POINTS` observations,
  so one or two points are enough (the offset absorbs the level, the reference supplies the shape).
  With ``same_task=False`` (nearest shape among other models) ``R`` is normalised to run from 1
  (its first epoch) to 0 (its best) and ``scale`` is free, which needs at least 3 points.

Every reference gets its best ``(warp, offset, scale)``; those whose penalised error is within
:data:`KEEP_FACTOR` of the best are averaged (equal weights) into one tabulated curve. Beyond the end
of a reference the curve stays at its last value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

Arr = NDArray[np.float64]

#: Running-median window (epochs) applied to every reference before use.
SMOOTH_WINDOW = 5
#: Fewest warp values searched (geometric over the warp range, always including 1).
WARP_POINTS = 9
#: Penalty on ``(ln warp)^2``, in squared reference ranges per unit of weight.
WARP_PENALTY = 0.5
#: Ridge pulling ``scale`` to 1 for same-task references, worth this many observations.
PRIOR_POINTS = 2.0
#: References whose penalised error is within this factor of the best one are averaged.
KEEP_FACTOR = 1.5
#: Points of the tabulated prior curve.
TABLE_POINTS = 512


@dataclass(frozen=True)
class ReferenceCurve:
    """One earlier run: its metric per epoch (same metric and direction as the job it informs)."""

    epochs: tuple[float, ...]
    values: tuple[float, ...]
    #: Free text to say where it came from (model, batch size); never used in the fit.
    label: str = ""
    #: Which way the reference's metric improves; ``None``: the same as the job's.
    direction: Literal["higher", "lower"] | None = None


@dataclass(frozen=True)
class CurvePrior:
    """A library of reference curves for one job.

    ``same_task``: the references are runs of the same model on the same metric (other batch sizes,
    earlier submissions), so their level and range carry over; ``False``: shapes only (nearest shape
    among other models), which needs at least 3 observed points.
    ``warp_range``: the slowest and fastest stretch of the epoch axis searched.
    """

    references: tuple[ReferenceCurve, ...]
    same_task: bool = True
    warp_range: tuple[float, float] = (0.67, 1.5)
    _prepared: dict[str, tuple[list[tuple[Arr, Arr]], float]] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def of(
        curves: Sequence[tuple[ArrayLike, ArrayLike]],
        *,
        same_task: bool = True,
        warp_range: tuple[float, float] = (0.67, 1.5),
        directions: Sequence[Literal["higher", "lower"] | None] | None = None,
    ) -> CurvePrior:
        """Build from ``[(epochs, values), ...]`` (and optionally each one's direction)."""
        refs = []
        for i, (e, v) in enumerate(curves):
            ea = np.asarray(e, dtype=float).ravel()
            va = np.asarray(v, dtype=float).ravel()
            m = min(ea.size, va.size)
            d = directions[i] if directions is not None else None
            refs.append(ReferenceCurve(tuple(float(x) for x in ea[:m]), tuple(float(x) for x in va[:m]), direction=d))
        return CurvePrior(tuple(refs), same_task=same_task, warp_range=warp_range)

    def prepared(self, sign: float) -> tuple[list[tuple[Arr, Arr]], float]:
        """(epochs, smoothed monotone badness) per usable reference, and their median range."""
        key = "lower" if sign > 0 else "higher"
        if key not in self._prepared:
            self._prepared[key] = _prepare(self.references, sign, normalise=not self.same_task)
        return self._prepared[key]


def _prepare(refs: tuple[ReferenceCurve, ...], sign: float, *, normalise: bool) -> tuple[list[tuple[Arr, Arr]], float]:
    out: list[tuple[Arr, Arr]] = []
    ranges: list[float] = []
    for ref in refs:
        e = np.asarray(ref.epochs, dtype=float)
        ref_sign = sign if ref.direction is None else (1.0 if ref.direction == "lower" else -1.0)
        r = ref_sign * np.asarray(ref.values, dtype=float)
        ok = np.isfinite(e) & np.isfinite(r) & (e >= 0)
        e, r = e[ok], r[ok]
        if e.size == 0:
            continue
        order = np.argsort(e, kind="stable")
        e, r = e[order], r[order]
        if r.size >= SMOOTH_WINDOW:
            half = SMOOTH_WINDOW // 2
            padded = np.concatenate([np.full(half, r[0]), r, np.full(half, r[-1])])
            r = np.median(np.lib.stride_tricks.sliding_window_view(padded, SMOOTH_WINDOW), axis=1)
        r = np.minimum.accumulate(r)
        span = float(r[0] - r[-1])
        if normalise:
            if not span > 0:
                continue
            r = (r - r[-1]) / span
        ranges.append(span)
        out.append((e, r))
    return out, (float(np.median(ranges)) if ranges else 0.0)


@dataclass(frozen=True)
class PriorFit:
    """The prior fitted to one weight row: a tabulated curve in badness units."""

    epochs: Arr
    z: Arr
    sse: float
    warp: float
    scale: float
    offset: float
    references: int
    #: Standard deviation between the averaged references at the end of the table (badness units):
    #: how much the earlier runs disagree about where this one ends.
    spread_end: float

    def at(self, k: Arr) -> Arr:
        return np.interp(k, self.epochs, self.z)


def fit_prior(k: Arr, z: Arr, W: Arr, prior: CurvePrior, sign: float) -> list[PriorFit | None]:
    """For each weight row of ``W`` (zero = unseen), the prior curve fitted to ``(k, z)``.

    ``z`` is in badness units of the job's metric (``sign * value``). ``None`` for a row when the
    prior cannot say anything (no usable reference, or a shape-only prior with fewer than 3 points).
    """
    refs, spread = prior.prepared(sign)
    if not refs:
        return [None] * W.shape[0]
    lo, hi = prior.warp_range
    lo, hi = min(lo, 1.0), max(hi, 1.0)
    # About one grid point per 10 % of stretch, at least WARP_POINTS, always including 1.
    count = max(WARP_POINTS, math.ceil(math.log(hi / lo) / math.log(1.1)) + 1)
    warps = np.unique(np.concatenate([np.geomspace(lo, hi, count), [1.0]]))
    unit = spread if spread > 0 else 1.0
    out: list[PriorFit | None] = []
    end = max(float(np.max(k)) if k.size else 1.0, max(float(e[-1]) for e, _ in refs) * hi) + 1.0
    grid = np.linspace(0.0, end, TABLE_POINTS)
    for w in W:
        seen = w > 0
        if not seen.any() or (not prior.same_task and int(seen.sum()) < 3):
            out.append(None)
            continue
        kk, zz, ww = k[seen], z[seen], w[seen] / w[seen].mean()
        best: list[tuple[float, float, float, float, float, int]] = []  # (objective, sse, warp, scale, offset, ref)
        for j, (e, r) in enumerate(refs):
            x = np.stack([np.interp(kk / s, e, r) for s in warps])  # (S, m)
            sw = ww.sum()
            mx = (ww * x).sum(1) / sw
            mz = float((ww * zz).sum() / sw)
            sxx = (ww * (x - mx[:, None]) ** 2).sum(1)
            sxz = (ww * (x - mx[:, None]) * (zz - mz)).sum(1)
            if prior.same_task:
                lam = PRIOR_POINTS * max(unit**2, 1e-300)
                beta = (sxz + lam) / (sxx + lam)
            else:
                beta = np.where(sxx > 0, sxz / np.where(sxx > 0, sxx, 1.0), 0.0)
            beta = np.maximum(beta, 0.0)
            alpha = mz - beta * mx
            sse = (ww * (zz - alpha[:, None] - beta[:, None] * x) ** 2).sum(1)
            objective = sse + WARP_PENALTY * np.log(warps) ** 2 * unit**2 * sw
            if prior.same_task:
                objective = objective + PRIOR_POINTS * (beta - 1.0) ** 2 * unit**2
            i = int(np.argmin(objective))
            best.append((float(objective[i]), float(sse[i]), float(warps[i]), float(beta[i]), float(alpha[i]), j))
        top = min(b[0] for b in best)
        keep = [b for b in best if b[0] <= KEEP_FACTOR * top + 1e-12 * unit**2]
        each = np.array([b[4] + b[3] * np.interp(grid / b[2], *refs[b[5]]) for b in keep])
        curve = np.minimum.accumulate(each.mean(axis=0))
        fitted = np.interp(kk, grid, curve)
        sse_row = float((w[seen] * (zz - fitted) ** 2).sum())
        out.append(
            PriorFit(
                epochs=grid,
                z=curve,
                sse=sse_row,
                warp=float(np.mean([b[2] for b in keep])),
                scale=float(np.mean([b[3] for b in keep])),
                offset=float(np.mean([b[4] for b in keep])),
                references=len(keep),
                spread_end=float(each[:, -1].std()),
            )
        )
    return out

