"""A model-averaged learning curve: the cross-validated family and two naive extrapolations, each
weighted by how well it forecast the job's own later points (used by
:func:`models.curves.fit_learning_curve` when no prior, schedule or family restriction is given and
there are enough points to cross-validate).

Why: one family chosen by cross-validation is confidently wrong when every family is wrong. On
training losses that keep falling nearly linearly for long stretches (the recorded runs of
``benchmarks/data/schedules/``) every saturating family levels off above the targets the run
reaches, and the chosen one says "unreachable" (``python benchmarks/schedule_curves.py --why``),
while a straight line through the last points is close. Averaging the members, with weights from the
time-series cross-validation that used to pick one, moves the weight to whichever member forecast
the job's own held-out points best and keeps some on the others (forecast combination, Bates &
Granger 1969: weights inversely proportional to each forecaster's mean squared error).

Members, all in the standardised badness coordinate ``u`` of :mod:`models.curves`:

- the family the single-family fit would choose (among the four of :mod:`models.curve_families`,
  those within ``LATE_TOLERANCE`` of the best cross-validated error, the one with the most
  improvement left): it stands for the saturating shapes;
- ``line``: the least-squares line through the newest :data:`LINE_SHARE` of the points (at least
  :data:`MIN_LINE_POINTS`), ``u(k) = a + b*k`` with ``b <= 0`` [u-units per epoch];
- ``log_line``: the same in log-epochs, ``u(k) = a + b*ln(k + 1)`` with ``b <= 0`` [u-units per
  e-folding of ``k + 1``]: it slows down like ``1/k`` and never levels off.

Both lines stop at the metric's floor (a loss at 0, an accuracy at 1): their parameter ``c`` is that
floor (``-inf`` when there is none). A line that rises (the points got worse) is flat at their mean.

A member's weight is the product of two pieces of evidence from the job's own points:

1. *prior*: inversely proportional to its cross-validated error (the mean over the forecast origins
   at ``CV_ORIGINS`` of its RMS error on every point after each, leads up to 40 % of the history):
   Bates & Granger's inverse mean squared error (:data:`WEIGHT_POWER`); below
   :data:`MIN_BACKTEST_POINTS` points, where those errors rest on two origins and a handful of
   points, the inverse RMS error (:data:`SHORT_WEIGHT_POWER`), which shrinks noisy error differences
   toward equal weights;
2. *likelihood*, from :data:`MIN_BACKTEST_POINTS` points on: a rolling-origin backtest on the
   newest points (origins from :data:`FIRST_ORIGIN_SHARE` of them to the last but one, Tashman
   2000), which asks which member describes the job's *current* stretch. Its leads are short, so its
   error differences are judged against the error level of the longer-lead cross-validation: the
   factor is ``exp(-(mse_i - mse_best) / (2 * s2))``, ``mse`` the members' backtest mean squared
   errors and ``s2`` the best member's cross-validated mean squared error (or the points' own noise
   variance, :func:`noise_variance`, if larger), i.e. a Gaussian likelihood of one effective
   observation (the backtest's pairs share their later points) whose variance is what the members
   cannot forecast at the longer leads. Differences within that
   level barely move the weights (the backtest is uninformative there: few points, members within
   the noise of each other); a member that forecast the newest stretch far worse than the best
   loses its weight. Shorter histories keep the prior alone: a backtest of one or two one-step
   forecasts says nothing about the horizon being predicted.

Scoring the members on the newest stretch alone, with inverse-error weights (branch ``backtest``,
issue 13), moved weight to the lines on noisy curves that level off (the members forecast the next
few noisy points about equally well) and regressed on the project's shared-data curves; scoring
each member at a lead comparable to the extrapolation (error at the last point from origins at half
to two thirds of the history) punished the lines for the early bend of curves that are straight
later and regressed on the schedule runs. Both are recorded in ``docs/models.md``.
The averaged curve is tabulated out to the search horizon of :class:`models.curves.CurveFit`
(``table``). Its band adds the members' weighted disagreement (``spread``) to the residual and drift
terms of every curve; its epochs-to-target interval reads the band at :data:`INTERVAL_Z`, calibrated
on the tuning runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.typing import NDArray

from models.curve_families import FAMILIES, Fitted
from models.curves import (
    CV_ORIGINS,
    LATE_TOLERANCE,
    MIN_POINTS,
    MIN_POINTS_FOR_HOLDOUT,
    SEARCH_HORIZON_FACTOR,
    CurveFit,
    Direction,
    LazyFits,
    horizon_drift,
)

Arr = NDArray[np.float64]

#: Share of the observed points (the newest) that the naive lines are fitted on.
LINE_SHARE = 1.0 / 3.0
#: The lines use at least this many points.
MIN_LINE_POINTS = 3
#: Prior member weight ``∝ cv_rmse ** -WEIGHT_POWER``: 2 is inverse mean squared error (Bates & Granger).
WEIGHT_POWER = 2.0
#: The same below :data:`MIN_BACKTEST_POINTS` points: 1, the inverse RMS error (flatter weights for
#: error estimates from a handful of points).
SHORT_WEIGHT_POWER = 1.0
#: A member's cross-validated error is floored at this share of the observed range (standardised
#: units): a member that forecast the held-out points perfectly by luck must not take all the weight.
CV_FLOOR = 1e-3
#: Normal quantile of the band read for the epochs-to-target interval (``CurveFit.epoch_interval``):
#: chosen on the tuning runs so that it holds the true epoch about 80 % of the time (split conformal
#: calibration, ``docs/models.md``); the band itself stays at the usual quantile for values.
INTERVAL_Z = 1.0
#: Fewest points for the backtest likelihood (below: the prior weights alone).
MIN_BACKTEST_POINTS = 10
#: The earliest backtest origin, as a share of the observed points: the newest fifth is held out.
FIRST_ORIGIN_SHARE = 0.8
#: At most this many backtest origins (evenly spread); each costs one more row in every fit.
MAX_ORIGINS = 6
#: Points of the tabulated curve beyond the last observation (geometric out to the search horizon).
TABLE_POINTS = 240


def _epochs(k: Arr) -> Arr:
    return k


def _log_epochs(k: Arr) -> Arr:
    return np.log(np.maximum(k, 0.0) + 1.0)


#: The naive members: name -> basis (``u = a + b*basis(k)``).
NAIVE: dict[str, Callable[[Arr], Arr]] = {"line": _epochs, "log_line": _log_epochs}


#: The naive members that take part.
NAIVE_MEMBERS: tuple[str, ...] = ("line", "log_line")


def fit_lines(k: Arr, z: Arr, W: Arr, c_floor: float) -> dict[str, list[Fitted]]:
    """Each naive member's fit (:data:`NAIVE_MEMBERS`, one per weight row, as the families' fitters
    return them): the least-squares ``u = a + b*basis(k)`` through the newest points of the row, then
    its weighted squared error over every point of the row.

    The members share each row's points, so they are fitted together; a row that holds a prefix of
    the points (every row of :func:`fit_ensemble`) is read through slices instead of index arrays.
    Every sum is numpy's own over the same elements as one fit per member and row would take.
    """
    c = c_floor if math.isfinite(c_floor) else -math.inf
    bases = {name: NAIVE[name](k) for name in NAIVE_MEMBERS}
    out: dict[str, list[Fitted]] = {name: [] for name in NAIVE_MEMBERS}
    add = np.add.reduce
    for row in W:
        seen = np.flatnonzero(row > 0)
        m = int(seen.size)
        if m < 2:
            for got in out.values():
                got.append(None)
            continue
        take = max(MIN_LINE_POINTS, math.ceil(LINE_SHARE * m))
        use: slice | NDArray[np.intp]
        every: slice | NDArray[np.intp]
        if int(seen[-1]) == m - 1:  # the first m points
            use, every = slice(max(m - take, 0), m), slice(0, m)
        else:
            use, every = seen[-take:], seen
        y = z[use]
        ym = float(add(y)) / y.size
        dy = y - ym
        z_seen, w_seen = z[every], row[every]
        for name, x_all in bases.items():
            x = x_all[use]
            xm = float(add(x)) / x.size
            dx = x - xm
            var = float(add(dx**2))
            b = float(add(dx * dy)) / var if var > 0 else 0.0
            b = min(b, 0.0)  # a member extrapolates improvement or nothing, never a worsening
            a = ym - b * xm
            zhat = np.maximum(a + b * x_all[every], c)
            out[name].append(({"a": a, "b": b, "c": c}, float(add(w_seen * (z_seen - zhat) ** 2))))
    return out


def member_z(name: str, params: dict[str, float], k: Arr) -> Arr:
    """Member ``name``'s curve (standardised units) at epochs ``k`` (counted from the phase origin)."""
    if name in NAIVE:
        return np.maximum(params["a"] + params["b"] * NAIVE[name](np.asarray(k, dtype=float)), params["c"])
    return FAMILIES[name].z(params, np.asarray(k, dtype=float))


def weights(cv: dict[str, float], power: float = WEIGHT_POWER) -> dict[str, float]:
    """Normalised member weights ``∝ cv ** -power`` from cross-validated RMS errors (standardised
    units)."""
    raw = {name: max(err, CV_FLOOR) ** -power for name, err in cv.items() if math.isfinite(err)}
    total = sum(raw.values())
    return {name: r / total for name, r in raw.items()}


def backtest_origins(n: int) -> list[int]:
    """Point counts the members are refitted on in the backtest (each scored on the points after
    it): from :data:`FIRST_ORIGIN_SHARE` of ``n`` to ``n - 1``, at most :data:`MAX_ORIGINS` of them,
    evenly spread; none below :data:`MIN_BACKTEST_POINTS` points."""
    if n < MIN_BACKTEST_POINTS:
        return []
    every = np.arange(min(math.ceil(FIRST_ORIGIN_SHARE * n), n - 1), n)
    if every.size > MAX_ORIGINS:
        every = np.unique(np.round(np.linspace(every[0], n - 1, MAX_ORIGINS)).astype(int))
    return [int(o) for o in every]


def noise_variance(z: Arr) -> float:
    """Variance of the points' own noise (standardised units) from the second differences of the
    newest half: for white noise of variance ``s^2`` about a locally straight curve,
    ``E[(z[t+1] - 2 z[t] + z[t-1])^2] = 6 s^2``."""
    recent = z[len(z) // 2 :]
    return float(np.mean(np.diff(recent, 2) ** 2)) / 6.0 if recent.size >= 3 else 0.0


def backtest_likelihood(backtest_rmse: dict[str, float], cv_rmse: dict[str, float], noise: float) -> dict[str, float]:
    """Each member's likelihood factor ``exp(-(mse_i - mse_best) / (2 * s2))`` from its backtest RMS
    error (standardised units). ``s2``: the smallest cross-validated mean squared error, or the
    points' noise variance ``noise`` if larger (differences within the noise cannot be told apart),
    floored at ``CV_FLOOR**2``. Members without a backtest error get none (they are left out)."""
    mse = {name: e**2 for name, e in backtest_rmse.items() if math.isfinite(e)}
    if not mse:
        return {}
    s2 = max(min((e**2 for e in cv_rmse.values() if math.isfinite(e)), default=0.0), noise, CV_FLOOR**2)
    best = min(mse.values())
    return {name: math.exp(-(m - best) / (2.0 * s2)) for name, m in mse.items()}


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


def _mean(a: Arr) -> float:
    """``float(np.mean(a))`` of a 1-D float array (the same sum and division) without its wrapper."""
    return float(np.add.reduce(a)) / a.size


def _backtest(fits: dict[str, list[Fitted]], origins: list[int], k: Arr, z: Arr) -> dict[str, float]:
    """Each member's backtest error: the RMS forecast error pooled over every (origin, later point)
    pair (standardised units); a member that failed to fit at some origin is left out."""
    out: dict[str, float] = {}
    for name, got in fits.items():
        sq = [(z[o:] - member_z(name, g[0], k[o:])) ** 2 for o, g in zip(origins, got, strict=True) if g is not None]
        if len(sq) == len(origins):
            out[name] = math.sqrt(_mean(np.concatenate(sq)))
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
    ``None`` when the points are too few to cross-validate (the caller then picks one family)."""
    n = int(k.size)
    origins = [o for o in sorted({int(round(n * f)) for f in CV_ORIGINS}) if MIN_POINTS + 1 <= o < n]
    if n < MIN_POINTS_FOR_HOLDOUT or not origins:
        return None
    bt_origins = backtest_origins(n)
    late = [o for o in bt_origins if o not in origins]
    seen = np.arange(n)[None, :] < np.array([*origins, n, *late])[:, None]
    rows = np.where(seen, w, 0.0)
    # The rows: one per cross-validation origin, every point, then the backtest's own origins. Only
    # the chosen family is backtested: a family whose rows are fitted independently (``separable``)
    # gets the backtest's rows once it is chosen; the others take every row in one call as always
    # (their matrix products give bits that depend on the rows sharing the call).
    n_cv = len(origins) + 1
    every: dict[str, list[Fitted]] = {
        name: fam.fit(k, z, rows[:n_cv] if fam.separable else rows, c_floor) for name, fam in FAMILIES.items()
    }
    every.update(fit_lines(k, z, rows, c_floor))
    fits = {name: got[:n_cv] for name, got in every.items()}
    # Each member's forecast error from every origin on the points after it: the mean over origins
    # of the RMS error (standardised units).
    cv: dict[str, float] = {}
    for name, got in fits.items():
        if any(g is None for g in got):
            continue
        rms = []
        for o, g in zip(origins, got[:-1], strict=True):
            assert g is not None
            rms.append(math.sqrt(_mean((z[o:] - member_z(name, g[0], k[o:])) ** 2)))
        cv[name] = _mean(np.array(rms))
    # The families compete as in the single-family fit (models.curves): among those that forecast
    # about as well as the best, the one with the most improvement left; it stands for them all.
    fam_cv = {name: e for name, e in cv.items() if name in FAMILIES}
    if not fam_cv:
        return None
    best = min(fam_cv.values())
    plateau = {name: full[0]["c"] for name in fam_cv if (full := fits[name][-1]) is not None}
    close = [name for name in sorted(plateau) if fam_cv[name] <= LATE_TOLERANCE * best]
    family = min(close, key=lambda name: (plateau[name], name))
    power = WEIGHT_POWER if bt_origins else SHORT_WEIGHT_POWER
    wt = weights({name: e for name, e in cv.items() if name == family or name in NAIVE}, power)
    if bt_origins:
        if len(every[family]) < len(rows):
            every[family] = every[family] + FAMILIES[family].fit(k, z, rows[n_cv:], c_floor)
        at_origin = {name: dict(zip([*origins, n, *late], every[name], strict=True)) for name in wt}
        bt = _backtest({name: [at_origin[name][o] for o in bt_origins] for name in wt}, bt_origins, k, z)
        like = backtest_likelihood(bt, {name: cv[name] for name in wt}, noise_variance(z))
        raw = {name: wt[name] * like[name] for name in wt if name in like}
        total = sum(raw.values())
        if total > 0.0:
            wt = {name: x / total for name, x in raw.items()}
    # The members' parameters at each cross-validation origin, then on every point.
    at: list[dict[str, dict[str, float]]] = [{} for _ in range(len(origins) + 1)]
    for name in wt:
        for j, one in enumerate(fits[name]):
            if one is not None:
                at[j][name] = one[0]
    # The averaged curve's own forecast errors and their horizons: how fast the band widens.
    errs_h: list[tuple[Arr, Arr]] = []
    own: list[float] = []
    for j, o in enumerate(origins):
        err = z[o:] - mixture(at[j], wt, k[o:])[0]
        errs_h.append((err, k[o:] - k[o - 1]))
        own.append(math.sqrt(_mean(err**2)))
    err_all = np.concatenate([e for e, _ in errs_h])
    h_all = np.concatenate([h for _, h in errs_h])
    dof = max(n - 3, 1)
    resid = z - mixture(at[-1], wt, k)[0]
    sd_u = math.sqrt(float((w * resid**2).sum()) / float(w.sum()) * n / dof)
    drift = scale * horizon_drift(err_all, h_all, sd_u)
    # The band never exceeds what the job has shown: its standard deviation is at most the observed
    # range (value units; ``scale`` is that range), or the noise if that is larger.
    cap = max(scale, scale * sd_u)
    span = max(float(k[-1] - k[0]), 1.0)
    tab = _Tabulate(
        k=k,
        v=v,
        wt=wt,
        direction=direction,
        shift=shift,
        scale=scale,
        origin=origin,
        first=float(k[0] + origin),
        horizon=float(k[-1] + origin) + SEARCH_HORIZON_FACTOR * span,
        n=n,
        residual_std=scale * sd_u,
        drift_std=drift,
        holdout_error=scale * float(np.mean(own)),
        candidates={name: scale * e for name, e in cv.items()},
        band_cap=cap,
    )
    # The cross-validation refits are read only by ``convergence_interval``: tabulated on first use.
    variants = LazyFits(partial(_tabulate_variants, tab, tuple(at[:-1]), tuple(origins)), len(origins))
    return tab.curve(at[-1], n, variants)


@dataclass(frozen=True)
class _Tabulate:
    """What tabulating the averaged curve of one phase needs, for the fit and (later, on demand) its
    cross-validation refits: module-level and plain data, so that a fit pickles without its tables."""

    k: Arr
    v: Arr
    wt: dict[str, float]
    direction: Direction
    shift: float
    scale: float
    origin: float
    first: float
    horizon: float
    n: int
    residual_std: float
    drift_std: float
    holdout_error: float
    candidates: dict[str, float]
    band_cap: float

    def curve(self, members: dict[str, dict[str, float]], upto: int, variants: Sequence[CurveFit] = ()) -> CurveFit:
        """The averaged curve of ``members`` (fitted on the first ``upto`` points), tabulated."""
        k, origin = self.k, self.origin
        last = float(k[upto - 1] + origin)
        grid = table_epochs(self.first, last, self.horizon, k[:upto] + origin)
        mean_u, spread_u = mixture(members, self.wt, grid - origin)
        zz = self.shift + self.scale * mean_u
        params = {"c": float(zz[-1]), **{f"w_{name}": float(x) for name, x in self.wt.items()}}
        return CurveFit(
            family="ensemble",
            direction=self.direction,
            params=params,
            residual_std=self.residual_std,
            drift_std=self.drift_std,
            holdout_error=self.holdout_error,
            n_points=upto,
            first_epoch=self.first,
            last_epoch=last,
            last_value=float(self.v[self.v.size - self.n + upto - 1]),
            candidates=dict(self.candidates),
            # The table is in absolute epochs; origin only says where the fitted phase starts.
            origin=origin,
            table=(tuple(grid.tolist()), tuple(zz.tolist())),
            spread=tuple((self.scale * spread_u).tolist()),
            interval_z=INTERVAL_Z,
            band_cap=self.band_cap,
            variants=variants,
        )


def _tabulate_variants(
    tab: _Tabulate, at: tuple[dict[str, dict[str, float]], ...], origins: tuple[int, ...]
) -> tuple[CurveFit, ...]:
    """The averaged curve refitted at each cross-validation origin (:class:`models.curves.LazyFits`)."""
    return tuple(tab.curve(members, o) for members, o in zip(at, origins, strict=True))
