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
  same model converge later); searched on a geometric grid over :attr:`CurvePrior.warp_range`, the
  squared error multiplied by ``1 + WARP_PENALTY * (ln warp)^2`` to keep it near 1 unless the data
  insist; with fewer than :data:`FIT_POINTS` points it is 1 (stretched, offset and scaled, any
  reference passes through three points, so they cannot say there was a stretch);
- ``offset`` [value units] and ``scale`` [-] >= 0: weighted least squares, recent points weighing
  more. With ``same_task=True`` (the references are the same model and metric) ``R`` is in the
  job's units, the plateau's shift is pulled to 0 (:data:`PLATEAU_WEIGHT`) and ``scale`` towards 1
  (:data:`SCALE_WEIGHT`), so one or two points are enough (the offset absorbs the level, the
  reference supplies the shape).
  With ``same_task=False`` (nearest shape among other models) ``R`` is normalised to run from 1
  (its first epoch) to 0 (its best) and ``scale`` is free, which needs at least 3 points.

Every reference gets its best ``(warp, offset, scale)``; those whose penalised error is within
:data:`KEEP_FACTOR` of the best are averaged (equal weights) into one tabulated curve, all of them
below :data:`FIT_POINTS` points (which every reference fits). Beyond the end
of a reference the curve stays at its last value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import stdtrit

from models.changepoint import detect_drops

Arr = NDArray[np.float64]

#: Running-median window (epochs) applied to every reference before use.
SMOOTH_WINDOW = 5
#: Fewest warp values searched (geometric over the warp range, always including 1).
WARP_POINTS = 9
#: A stretch of the epoch axis multiplies the squared error by ``1 + WARP_PENALTY * (ln warp)^2``.
WARP_PENALTY = 1.0
#: Same-task prior: ridge pulling the plateau shift ``delta`` to 0, as a multiple of the total
#: weight (the shift is shrunk about ``1 + PLATEAU_WEIGHT`` times towards the references' plateau).
PLATEAU_WEIGHT = 3.0
#: Same-task prior: ridge pulling ``scale`` to 1, as a share of the data's own information on it.
SCALE_WEIGHT = 0.1
#: References whose penalised error is within this factor of the best one are averaged.
KEEP_FACTOR = 1.5
#: Points of the tabulated prior curve.
TABLE_POINTS = 512
#: The upper quantile of the 80 % band the spread is read at (``band`` is a standard deviation).
BAND_QUANTILE = 0.9
_BAND_Z = float(NormalDist().inv_cdf(BAND_QUANTILE))
#: Fewest points that can tell references apart or show a stretch of the epoch axis: each reference
#: is fitted with a stretch, an offset and a scale, so it passes through three points and only a
#: fourth leaves a misfit to compare. With fewer, no reference is stretched and the curve and its
#: band are every reference's.
FIT_POINTS = 4


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
    _prepared: dict[str, tuple[list[tuple[Arr, Arr, bool]], float]] = field(default_factory=dict, repr=False, compare=False)

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

    def prepared(self, sign: float) -> tuple[list[tuple[Arr, Arr, bool]], float]:
        """(epochs, smoothed monotone badness, has drops) per usable reference, and their median range."""
        key = "lower" if sign > 0 else "higher"
        if key not in self._prepared:
            self._prepared[key] = _prepare(self.references, sign, normalise=not self.same_task)
        return self._prepared[key]


def _prepare(refs: tuple[ReferenceCurve, ...], sign: float, *, normalise: bool) -> tuple[list[tuple[Arr, Arr, bool]], float]:
    """Per usable reference: epochs, smoothed monotone badness, and whether it has learning-rate drops."""
    out: list[tuple[Arr, Arr, bool]] = []
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
        stepped = bool(detect_drops(r))
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
        out.append((e, r, stepped))
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
    #: Standard deviation between the references at the end of the table (badness units): how much
    #: the earlier runs that fit the points disagree about where this one ends (the averaged ones;
    #: every reference below :data:`FIT_POINTS` points, which cannot tell them apart).
    spread_end: float
    #: The same disagreement at every epoch of the table.
    spread: Arr | None = None

    def at(self, k: Arr) -> Arr:
        return np.interp(k, self.epochs, self.z)


def new_draw_factor(n: int) -> float:
    """What turns the spread of ``n`` references (their standard deviation about their mean) into the
    band of one more run from the same population, as the band is read (``±1.2816 sd``, 80 %): the
    sample's standard deviation (``n - 1``), the mean's own error (``1 + 1/n``) and Student's ``t``
    with ``n - 1`` degrees of freedom instead of the normal quantile. 1 for a single reference (no
    spread to scale)."""
    if n < 2:
        return 1.0
    return math.sqrt(n / (n - 1) * (1.0 + 1.0 / n)) * float(stdtrit(n - 1, BAND_QUANTILE)) / _BAND_Z


def fit_prior(k: Arr, z: Arr, W: Arr, prior: CurvePrior, sign: float) -> list[PriorFit | None]:
    """For each weight row of ``W`` (zero = unseen), the prior curve fitted to ``(k, z)``.

    ``z`` is in badness units of the job's metric (``sign * value``). ``None`` for a row when the
    prior cannot say anything (no usable reference, or a shape-only prior with fewer than 3 points).
    """
    refs, _ = prior.prepared(sign)
    if not refs:
        return [None] * W.shape[0]
    lo, hi = prior.warp_range
    lo, hi = min(lo, 1.0), max(hi, 1.0)
    # About one grid point per 10 % of stretch, at least WARP_POINTS, always including 1.
    count = max(WARP_POINTS, math.ceil(math.log(hi / lo) / math.log(1.1)) + 1)
    warps = np.unique(np.concatenate([np.geomspace(lo, hi, count), [1.0]]))
    out: list[PriorFit | None] = []
    end = max(float(np.max(k)) if k.size else 1.0, max(float(e[-1]) for e, _, _ in refs) * hi) + 1.0
    grid = np.linspace(0.0, end, TABLE_POINTS)
    for w in W:
        seen = w > 0
        if not seen.any() or (not prior.same_task and int(seen.sum()) < 3):
            out.append(None)
            continue
        kk, zz, ww = k[seen], z[seen], w[seen] / w[seen].mean()
        best: list[tuple[float, float, float, float, float, int]] = []  # (objective, sse, warp, scale, offset, ref)
        sw = float(ww.sum())
        # Below FIT_POINTS points the points identify neither a stretch of the epoch axis nor one
        # reference among the others: stretched, offset and scaled, any reference passes through
        # them (a first value below the references' read as faster convergence ended runs epochs
        # early), so none is stretched and every one counts.
        few = int(seen.sum()) < FIT_POINTS
        for j, (e, r, stepped) in enumerate(refs):
            # y - delta - beta*x with x = R(k/warp) - R_end: beta stretches the gap to the reference's
            # plateau, delta moves the plateau itself (pulled to 0 for a same-task prior).
            # A stepped schedule fixes its drops in epochs: such a reference is not stretched.
            ws = np.ones(1) if (stepped or few) else warps
            x = np.stack([np.interp(kk / s, e, r) for s in ws]) - r[-1]  # (S, m)
            y = zz - (r[-1] if prior.same_task else 0.0)
            lam_d = PLATEAU_WEIGHT * sw if prior.same_task else 0.0
            sxx = (ww * x * x).sum(1)
            lam_b = SCALE_WEIGHT * sxx if prior.same_task else np.zeros_like(sxx)
            sx = (ww * x).sum(1)
            sy = float((ww * y).sum())
            sxy = (ww * x * y).sum(1)
            # Normal equations of  sum w (y - delta - beta x)^2 + lam_d delta^2 + lam_b (beta - 1)^2.
            a11, a12, a22 = sw + lam_d, sx, sxx + lam_b
            b1, b2 = sy, sxy + lam_b
            det = a11 * a22 - a12 * a12
            ok = det > 1e-12 * np.maximum(a11 * a22, 1e-300)
            beta = np.where(ok, (a11 * b2 - a12 * b1) / np.where(ok, det, 1.0), 1.0 if prior.same_task else 0.0)
            beta = np.maximum(beta, 0.0)
            delta = (sy - beta * sx) / a11
            sse = (ww * (y - delta[:, None] - beta[:, None] * x) ** 2).sum(1)
            objective = sse * (1.0 + WARP_PENALTY * np.log(ws) ** 2) + lam_d * delta**2 + lam_b * (beta - 1.0) ** 2
            i = int(np.argmin(objective))
            # As z = offset + beta * R(k / warp): offset = R_end + delta - beta * R_end (same task);
            # a normalised reference ends at 0, so there offset = delta.
            offset = float(delta[i] + ((1.0 - beta[i]) * r[-1] if prior.same_task else 0.0))
            best.append((float(objective[i]), float(sse[i]), float(ws[i]), float(beta[i]), offset, j))
        top = min(b[0] for b in best)
        keep = best if few else [b for b in best if b[0] <= KEEP_FACTOR * top + 1e-12]
        each = np.array([b[4] + b[3] * np.interp(grid / b[2], refs[b[5]][0], refs[b[5]][1]) for b in keep])
        curve = np.minimum.accumulate(each.mean(axis=0))
        # The band: how far the references that fit the points disagree, epoch by epoch (below
        # FIT_POINTS points, every reference: see ``few``).
        pool = each
        if few:
            # The job is one more run like the references, which its points cannot tell apart: its
            # spread is a prediction interval's, a new draw from the population they sample.
            spread = pool.std(axis=0) * new_draw_factor(pool.shape[0])
        else:
            spread = pool.std(axis=0)
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
                spread_end=float(spread[-1]),
                spread=spread,
            )
        )
    return out
