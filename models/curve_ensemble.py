"""A model-averaged learning curve in which each job's own history chooses: the saturating families
and two naive extrapolations, each weighted by how well it forecast the job's own later points in a
rolling-origin backtest (used by :func:`models.curves.fit_learning_curve` when no prior, schedule or
family restriction is given and there are at least :data:`MIN_ENSEMBLE_POINTS` points).

Why: one family chosen by cross-validation is confidently wrong when every family is wrong. On
training losses that keep falling nearly linearly for long stretches (the recorded runs of
``benchmarks/data/schedules/``) every saturating family levels off above the targets the run
reaches, while a straight line through the last points is close; on a curve that bends into a
plateau the line overshoots. Which one a job is cannot be known in general, but it can be tested on
the job itself: fit every member on the first ``o`` points, score its forecast of the points after,
for several ``o`` (a rolling-origin backtest, Tashman 2000), and weight the members by those errors
(forecast combination, Bates & Granger 1969: weights inversely proportional to each forecaster's
mean squared error, here raised to :data:`WEIGHT_POWER`).

Members, all in the standardised badness coordinate ``u`` of :mod:`models.curves`:

- the family the single-family fit would choose (among the four of :mod:`models.curve_families`,
  those within ``LATE_TOLERANCE`` of the best backtest error, the one with the most improvement
  left): it stands for the saturating shapes;
- ``line``: the least-squares line through the newest :data:`LINE_SHARE` of the points (at least
  :data:`MIN_LINE_POINTS`), ``u(k) = max(a + b*k, c)`` with ``b <= 0`` [u-units per epoch];
- ``log_line``: the same in log-epochs, ``u(k) = max(a + b*ln(k + 1), c)`` with ``b <= 0``
  [u-units per e-folding of ``k + 1``]: it slows down like ``1/k``.

Both lines end in a floor ``c`` [u-units]: the lowest plateau any family may have (the metric's
floor, a loss at 0 or an accuracy at 1, and at most ``MAX_PLATEAU_GAP`` observed ranges beyond the
best point, :mod:`models.curve_families`), so a line cannot promise a loss below what a saturating
curve is allowed to reach. A line that rises (the points got worse) is flat at their mean.

The backtest (:func:`backtest_origins`): origins from :data:`FIRST_ORIGIN_SHARE` of the points (at
least :data:`MIN_LINE_POINTS`, at most ``n - 1``) to the last but one, at most :data:`MAX_ORIGINS`
of them, evenly spread. A member's score is the root of its mean squared forecast error pooled over
every (origin, later point) pair. The origins are late (the newest fifth): a line refitted on the
early bend of a curve says nothing about the line through its newest points, which is the member
that forecasts; the backtest asks which member describes the job's *current* stretch.

The band: ``sd(h)^2 = residual^2 + (drift*g(h))^2 + spread^2``. ``residual`` is the noise of the
newest :data:`NOISE_SHARE` of the points about the averaged curve; ``drift`` how fast the averaged
curve's own backtest errors grew with the horizon ``h``; ``g(h) = h`` up to the longest horizon the
backtest measured and ``sqrt(H*h)`` beyond it (``CurveFit.drift_horizon``: a linear growth measured
over a few epochs is not extrapolated linearly for hundreds); ``spread`` the members' weighted
disagreement. The standard deviation is at most :data:`BAND_CAP_SHARE` of the observed range
(``CurveFit.band_cap``): a band stays within what the job has shown, rather than growing for ever.

Constants chosen on the 21 tuning runs (``digits_mlp``) of ``benchmarks/data/schedules/`` only;
the sweep is recorded in ``docs/models.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from models.curve_families import FAMILIES, MAX_PLATEAU_GAP, Fitted
from models.curves import (
    CV_ORIGINS,
    LATE_TOLERANCE,
    SEARCH_HORIZON_FACTOR,
    CurveFit,
    Direction,
)

Arr = NDArray[np.float64]

#: Share of the observed points (the newest) that the naive lines are fitted on.
LINE_SHARE = 0.25
#: The lines use at least this many points; the earliest backtest origin has at least this many.
MIN_LINE_POINTS = 3
#: Fewest points for the averaged curve: one backtest origin of :data:`MIN_LINE_POINTS` points and
#: one point to score.
MIN_ENSEMBLE_POINTS = MIN_LINE_POINTS + 1
#: The earliest backtest origin, as a share of the observed points (0.4, 0.6, 0.7, 0.8, 0.9 measured).
FIRST_ORIGIN_SHARE = 0.8
#: At most this many backtest origins (evenly spread); each costs one more row in every fit.
MAX_ORIGINS = 6
#: Share of the observed points (the newest, at least :data:`MIN_ENSEMBLE_POINTS`) whose residuals
#: about the averaged curve give its noise (``residual_std``).
NOISE_SHARE = 0.5
#: Member weight ``∝ backtest_rmse ** -WEIGHT_POWER``: 1, inverse RMS error (2, the inverse mean squared
#: error of Bates & Granger, measured worse on the tuning runs; 4 worse again).
WEIGHT_POWER = 1.0
#: A member's backtest error is floored at this share of the observed range (standardised units): a
#: member that forecast the held-out points perfectly by luck must not take all the weight.
CV_FLOOR = 1e-3
#: The band's standard deviation is at most this share of the observed range (value units).
BAND_CAP_SHARE = 1.0
#: Normal quantile of the band read for the epochs-to-target interval (``CurveFit.epoch_interval``):
#: chosen on the tuning runs so that it holds the true epoch about 80 % of the time; the band itself
#: stays at the usual quantile for values.
INTERVAL_Z = 0.8
#: Points of the tabulated curve beyond the last observation (geometric out to the search horizon).
TABLE_POINTS = 240


def _naive_line(basis: Callable[[Arr], Arr]) -> Callable[[Arr, Arr, Arr, float], list[Fitted]]:
    """A fitter (same signature as the families') of ``u = max(a + b*basis(k), c)`` on the newest
    points of each weight row; ``c`` is the lowest plateau a family may have on that row."""

    def fit(k: Arr, z: Arr, W: Arr, c_floor: float) -> list[Fitted]:
        out: list[Fitted] = []
        x_all = basis(k)
        for row in W:
            seen = np.flatnonzero(row > 0)
            if seen.size < 2:
                out.append(None)
                continue
            use = seen[-max(MIN_LINE_POINTS, math.ceil(LINE_SHARE * seen.size)) :]
            x, y = x_all[use], z[use]
            xm, ym = float(x.mean()), float(y.mean())
            var = float(((x - xm) ** 2).sum())
            b = float(((x - xm) * (y - ym)).sum()) / var if var > 0 else 0.0
            b = min(b, 0.0)  # a member extrapolates improvement or nothing, never a worsening
            a = ym - b * xm
            zs = z[seen]
            c = float(zs.min()) - MAX_PLATEAU_GAP * max(float(np.ptp(zs)), 1e-12)
            if math.isfinite(c_floor):
                c = max(c, c_floor)
            c = min(c, float(zs.min()))
            zhat = np.maximum(a + b * x_all[seen], c)
            out.append(({"a": a, "b": b, "c": c}, float((row[seen] * (z[seen] - zhat) ** 2).sum())))
        return out

    return fit


def _epochs(k: Arr) -> Arr:
    return k


def _log_epochs(k: Arr) -> Arr:
    return np.log(np.maximum(k, 0.0) + 1.0)


#: The naive members: name -> (fitter, basis).
NAIVE: dict[str, tuple[Callable[[Arr, Arr, Arr, float], list[Fitted]], Callable[[Arr], Arr]]] = {
    "line": (_naive_line(_epochs), _epochs),
    "log_line": (_naive_line(_log_epochs), _log_epochs),
}


#: The naive members that take part.
NAIVE_MEMBERS: tuple[str, ...] = ("line", "log_line")


def member_z(name: str, params: dict[str, float], k: Arr) -> Arr:
    """Member ``name``'s curve (standardised units) at epochs ``k`` (counted from the phase origin)."""
    if name in NAIVE:
        return np.maximum(params["a"] + params["b"] * NAIVE[name][1](np.asarray(k, dtype=float)), params["c"])
    return FAMILIES[name].z(params, np.asarray(k, dtype=float))


def member_fitters() -> dict[str, Callable[[Arr, Arr, Arr, float], list[Fitted]]]:
    """Every member's fitter: the families, then the naive lines."""
    return {**{name: fam.fit for name, fam in FAMILIES.items()}, **{name: NAIVE[name][0] for name in NAIVE_MEMBERS}}


def weights(cv: dict[str, float]) -> dict[str, float]:
    """Normalised member weights ``∝ cv ** -WEIGHT_POWER`` from backtest RMS errors (standardised
    units)."""
    raw = {name: max(err, CV_FLOOR) ** -WEIGHT_POWER for name, err in cv.items() if math.isfinite(err)}
    total = sum(raw.values())
    return {name: r / total for name, r in raw.items()}


def backtest_origins(n: int) -> list[int]:
    """Point counts the members are refitted on (each scored on the points after it): from
    :data:`FIRST_ORIGIN_SHARE` of ``n`` (at least :data:`MIN_LINE_POINTS`) to ``n - 1``, at most
    :data:`MAX_ORIGINS` of them, evenly spread."""
    first = min(max(MIN_LINE_POINTS, math.ceil(FIRST_ORIGIN_SHARE * n)), n - 1)
    if first >= n:
        return []
    every = np.arange(first, n)
    if every.size > MAX_ORIGINS:
        every = np.unique(np.round(np.linspace(first, n - 1, MAX_ORIGINS)).astype(int))
    return [int(o) for o in every]


def table_epochs(first: float, last: float, horizon: float, observed: Arr) -> Arr:
    """Epochs of the tabulated curve: the observed ones, then geometric steps out to ``horizon``."""
    ahead = last + (horizon - last + 1.0) ** np.linspace(0.0, 1.0, TABLE_POINTS) - 1.0
    return np.union1d(observed[observed >= first], ahead)


def mixture(members: dict[str, dict[str, float]], w: dict[str, float], k: Arr) -> tuple[Arr, Arr]:
    """(weighted mean, weighted standard deviation across members) of the members' curves at ``k``
    (counted from the phase origin). Every member is monotone and the weights are fixed, so the
    mean is monotone too."""
    names = [nm for nm in w if nm in members]
    total = sum(w[nm] for nm in names)
    curves = np.array([member_z(nm, members[nm], k) for nm in names])
    ww = np.array([w[nm] / total for nm in names])[:, None]
    mean = (ww * curves).sum(0)
    spread = np.sqrt((ww * (curves - mean) ** 2).sum(0))
    return mean, spread


def _backtest(fits: dict[str, list[Fitted]], origins: list[int], k: Arr, z: Arr) -> dict[str, float]:
    """Each member's backtest error: the RMS forecast error pooled over every (origin, later point)
    pair (standardised units). A member that failed to fit at some origin, or on every point, is
    left out."""
    out: dict[str, float] = {}
    for name, got in fits.items():
        if any(g is None for g in got):
            continue
        sq = [(z[o:] - member_z(name, g[0], k[o:])) ** 2 for o, g in zip(origins, got[:-1], strict=True) if g is not None]
        out[name] = float(np.sqrt(np.mean(np.concatenate(sq))))
    return out


def fit_ensemble(
    k: Arr,
    z: Arr,
    w: Arr,
    direction: Direction,
    v: Arr,
    shift: float,
    scale: float,
    c_floor: float,
    origin: float,
) -> CurveFit | None:
    """The model-averaged curve of one phase (``k`` counted from ``origin``, ``z`` standardised);
    ``None`` when the points are too few to backtest (the caller then picks one family)."""
    n = int(k.size)
    origins = backtest_origins(n)
    if n < MIN_ENSEMBLE_POINTS or not origins:
        return None
    seen = np.arange(n)[None, :] < np.array([*origins, n])[:, None]
    rows = np.where(seen, w, 0.0)
    fits: dict[str, list[Fitted]] = {name: fitter(k, z, rows, c_floor) for name, fitter in member_fitters().items()}
    cv = _backtest(fits, origins, k, z)
    # The families compete as in the single-family fit (models.curves): among those that forecast
    # about as well as the best, the one with the most improvement left; it stands for them all.
    fam_cv = {name: e for name, e in cv.items() if name in FAMILIES}
    if not fam_cv:
        return None
    best = min(fam_cv.values())
    plateau = {name: full[0]["c"] for name in fam_cv if (full := fits[name][-1]) is not None}
    close = [name for name in sorted(plateau) if fam_cv[name] <= LATE_TOLERANCE * best]
    family = min(close, key=lambda name: (plateau[name], name))
    wt = weights({name: e for name, e in cv.items() if name == family or name in NAIVE})
    # The members' parameters at each backtest origin, then on every point.
    at: list[dict[str, dict[str, float]]] = [{} for _ in range(len(origins) + 1)]
    for name in wt:
        for j, one in enumerate(fits[name]):
            if one is not None:
                at[j][name] = one[0]
    # The averaged curve's own backtest errors and their horizons: how fast the band widens.
    errs_h: list[tuple[Arr, Arr]] = []
    for j, o in enumerate(origins):
        errs_h.append((z[o:] - mixture(at[j], wt, k[o:])[0], k[o:] - k[o - 1]))
    err_all = np.concatenate([e for e, _ in errs_h])
    h_all = np.concatenate([h for _, h in errs_h])
    # The noise about the curve, from the newest points (the stretch every member describes; the
    # lines were not fitted on the early bend and would count it as noise).
    recent = slice(n - max(MIN_ENSEMBLE_POINTS, math.ceil(NOISE_SHARE * n)), n)
    resid = (z - mixture(at[-1], wt, k)[0])[recent]
    sd_u = math.sqrt(float((resid**2).sum()) / max(resid.size - 2, 1))
    drift_u = math.sqrt(float(np.mean(np.maximum(err_all**2 - sd_u**2, 0.0) / np.maximum(h_all, 1.0) ** 2)))
    drift = scale * drift_u
    own = scale * float(np.sqrt(np.mean(err_all**2)))
    # The band never exceeds a share of what the job has shown (value units; ``scale`` is the range).
    cap = max(BAND_CAP_SHARE * scale, scale * sd_u)
    first = float(k[0] + origin)
    span = max(float(k[-1] - k[0]), 1.0)
    horizon = float(k[-1] + origin) + SEARCH_HORIZON_FACTOR * span
    # The refits whose spread gives the convergence interval: the origins nearest the usual
    # cross-validation shares (refits on a handful of early points say little about convergence).
    late = sorted({min(range(len(origins)), key=lambda j: (abs(origins[j] - n * f), j)) for f in CV_ORIGINS})

    def build(members: dict[str, dict[str, float]], upto: int) -> CurveFit:
        last = float(k[upto - 1] + origin)
        grid = table_epochs(first, last, horizon, k[:upto] + origin)
        mean_u, spread_u = mixture(members, wt, grid - origin)
        zz = shift + scale * mean_u
        params = {"c": float(zz[-1]), **{f"w_{name}": float(x) for name, x in wt.items()}}
        return CurveFit(
            family="ensemble",
            direction=direction,
            params=params,
            residual_std=scale * sd_u,
            drift_std=drift,
            holdout_error=own,
            n_points=upto,
            first_epoch=first,
            last_epoch=last,
            last_value=float(v[v.size - n + upto - 1]),
            candidates={name: scale * e for name, e in cv.items()},
            # The table is in absolute epochs; origin only says where the fitted phase starts.
            origin=origin,
            table=(tuple(grid.tolist()), tuple(zz.tolist())),
            spread=tuple((scale * spread_u).tolist()),
            interval_z=INTERVAL_Z,
            band_cap=cap,
            drift_horizon=float(h_all.max()),
        )

    main = build(at[-1], n)
    return replace(main, variants=tuple(build(at[j], origins[j]) for j in late))
