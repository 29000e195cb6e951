"""Learning-curve ("loss-growth") models: fit a metric against epochs, predict when a target is reached.

Every family is written in a *badness* coordinate ``z`` that decreases as training improves:
``z = value`` when lower is better (loss, WER) and ``z = -value`` when higher is better (accuracy, F1).
Fitting and prediction happen in ``z``; values are converted back at the edges.

Families (``k`` is the epoch, every parameter named in :class:`CurveFit.params`):

``hyperbola`` (Optimus, EuroSys 2018)
    ``z(k) = c + 1 / (a*k + b)``
    ``a`` [1/(z-unit * epoch)] > 0: how fast the curve bends towards its plateau;
    ``b`` [1/z-unit] > 0: sets the starting value ``z(0) = c + 1/b``;
    ``c`` [z-unit]: the plateau, the value approached as ``k -> inf``.

``exponential``
    ``z(k) = c + d * exp(-r*k)``
    ``c`` [z-unit]: the plateau; ``d`` [z-unit] > 0: the gap to the plateau at epoch 0;
    ``r`` [1/epoch] > 0: decay rate.

``power`` (power law, the usual shape of deep-learning curves)
    ``z(k) = c + d * (k + 1)^(-alpha)``
    ``c`` [z-unit]: the plateau; ``d`` [z-unit] > 0: the gap to the plateau at epoch 0;
    ``alpha`` [-] > 0: the decay exponent (small = slow, long-tailed improvement).

All are fitted by *variable projection*: for a fixed non-linear parameter (``c`` for the hyperbola,
``r`` or ``alpha`` for the others) the rest follow from a weighted linear least-squares solve, so a
dense grid over that one parameter finds the global optimum of the weighted squared error without a
local optimizer that can diverge. A fit takes well under a millisecond, which matters when the
planner fits ten thousand jobs per interval.

Bounds (each one keeps a thin or noisy history from predicting the impossible):

- the plateau lies at most :data:`MAX_PLATEAU_GAP` times the observed range beyond the best point;
- a metric that has stayed within [0, 1] is a fraction (accuracy, F1, hit rate): its plateau stays
  within [0, 1]; a non-negative metric (loss, WER) keeps a non-negative plateau;
- the exponential's rate is at most :data:`MAX_RATE_PER_SPAN` e-foldings over the observed span, so
  a few early points cannot claim the curve is already flat.

The family is chosen by *time-series cross-validation*: from forecast origins at 60% and 80%
of the observed points, each family is fitted on the points before and scored on predicting every
point after. Among the families within :data:`LATE_TOLERANCE` of the best score, the one with the
most improvement left wins: on the measured curves the usual failure is a plateau predicted too
early (``benchmarks/bench_curves.py``, ``docs/models.md``). With fewer than
:data:`MIN_POINTS_FOR_HOLDOUT` points the power law is used. Learning-rate drops and calibrated
intervals are still to come (the models issue); the interface stays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

Direction = Literal["higher", "lower"]
Arr = NDArray[np.float64]

#: Fewer usable points than this and no curve is fitted ("cannot predict yet").
MIN_POINTS = 3
#: Forecast origins (shares of the observed points) of the time-series cross-validation that picks
#: the family, used when there are at least MIN_POINTS_FOR_HOLDOUT points.
CV_ORIGINS = (0.6, 0.8)
MIN_POINTS_FOR_HOLDOUT = 6
#: Families whose cross-validated error is within this factor of the best count as equally good;
#: among them the one with the most improvement left wins.
LATE_TOLERANCE = 1.25
#: The family used when there are too few points to cross-validate.
DEFAULT_FAMILY = "power"
#: Recency weighting: the newest point weighs ``1``, the oldest ``RECENCY_FLOOR``; later epochs tell
#: more about where the curve is heading than the noisy first ones.
RECENCY_FLOOR = 0.3
#: Normal quantile used for the default interval (~80 % two-sided).
INTERVAL_Z = 1.2816
#: The plateau lies at most this many observed ranges beyond the best observation.
MAX_PLATEAU_GAP = 2.0
#: The exponential decays at most this many e-foldings over the observed epoch span.
MAX_RATE_PER_SPAN = 5.0
#: Grid sizes of the one-dimensional searches (plateau for the hyperbola, rate for the exponential).
GRID_POINTS = 48
_UNIT = np.linspace(0.0, 1.0, GRID_POINTS)
#: Search horizon when solving for a target epoch: this many times the observed span (then "unreachable").
SEARCH_HORIZON_FACTOR = 1000.0


@dataclass(frozen=True)
class CannotPredict:
    """Why no curve could be fitted (too few points, no variation, non-finite values)."""

    reason: str
    n_points: int = 0


@dataclass(frozen=True)
class CurveFit:
    """A fitted learning curve with its diagnostics.

    ``residual_std`` is the weighted RMS error in value units over the fitted points; ``drift_std``
    how much the forecast error grows per epoch of horizon, estimated from the cross-validation
    (the band at epoch ``k`` is ``sqrt(residual_std² + (drift_std·(k - last_epoch))²)``);
    ``holdout_error`` is the family's cross-validated forecast error (RMS, value units) when the family
    was chosen by time-series cross-validation
    (``None`` when the series was too short to hold anything out).
    """

    family: Literal["hyperbola", "exponential", "power"]
    direction: Direction
    params: dict[str, float]
    residual_std: float
    #: Growth of the forecast error per epoch beyond the last observation (value units per epoch).
    drift_std: float
    holdout_error: float | None
    n_points: int
    first_epoch: float
    last_epoch: float
    last_value: float
    candidates: dict[str, float] = field(default_factory=dict)
    #: The metric's natural range, as inferred for the fit ([0, 1] for fractions, [0, inf) for
    #: non-negative metrics); band ends are clipped to it.
    value_range: tuple[float, float] = (-math.inf, math.inf)

    # -- the curve in z (badness) space ------------------------------------------------------
    def _z(self, k: NDArray[np.float64]) -> NDArray[np.float64]:
        return FAMILIES[self.family].z(self.params, k)

    def _sign(self) -> float:
        return 1.0 if self.direction == "lower" else -1.0

    # -- public predictions ------------------------------------------------------------------
    @property
    def plateau(self) -> float:
        """The value the curve approaches as epochs grow without bound."""
        return self._sign() * self.params["c"]

    def predict(self, epochs: ArrayLike) -> NDArray[np.float64]:
        """Predicted metric value at each epoch."""
        k = np.asarray(epochs, dtype=float)
        return self._sign() * self._z(k)

    def reaches(self, target: float) -> bool:
        """Whether the fitted curve ever gets to ``target`` (strictly better than the plateau)."""
        return self._sign() * target > self.params["c"]

    def band(self, epochs: ArrayLike) -> NDArray[np.float64]:
        """Standard deviation of the prediction at each epoch: the residual spread, growing with the
        distance beyond the last observed epoch."""
        h = np.maximum(np.asarray(epochs, dtype=float) - self.last_epoch, 0.0)
        return np.sqrt(self.residual_std**2 + (self.drift_std * h) ** 2)

    def interval_at(self, epochs: ArrayLike, z: float = INTERVAL_Z) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(low, high) of the ``±z`` band at each epoch, clipped to the metric's natural range."""
        mid, sd = self.predict(epochs), self.band(epochs)
        lo, hi = self.value_range
        return np.clip(mid - z * sd, lo, hi), np.clip(mid + z * sd, lo, hi)

    def epoch_reaching(self, target: float, *, quantile_z: float = 0.0) -> float | None:
        """First epoch at which the curve reaches ``target``; ``None`` if it never does.

        ``quantile_z`` reads the curve at that many standard deviations of its band towards worse
        (positive: pessimistic) or better (negative: optimistic); 0 is the median prediction. Epochs
        already observed count: a target the curve already passes at ``first_epoch`` returns it.
        """
        zt = self._sign() * target
        span = max(self.last_epoch - self.first_epoch, 1.0)
        horizon = self.last_epoch + SEARCH_HORIZON_FACTOR * span
        if quantile_z == 0.0 or (self.drift_std == 0.0 and self.residual_std == 0.0):
            if zt <= self.params["c"]:
                return None
            k = FAMILIES[self.family].epoch_at(self.params, zt)
            if not math.isfinite(k) or k > horizon:
                return None
            return max(k, self.first_epoch)

        # With a band that widens over the horizon there is no closed form: scan, then bisect.
        def gap(kk: NDArray[np.float64]) -> NDArray[np.float64]:
            return self._z(kk) + quantile_z * self.band(kk) - zt

        grid = self.first_epoch + (horizon - self.first_epoch + 1.0) ** np.linspace(0.0, 1.0, 600) - 1.0
        below = np.flatnonzero(gap(grid) <= 0)
        if below.size == 0:
            return None
        i = int(below[0])
        if i == 0:
            return self.first_epoch
        lo, hi = float(grid[i - 1]), float(grid[i])
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            if gap(np.array([mid]))[0] <= 0:
                hi = mid
            else:
                lo = mid
        return hi

    def epoch_interval(self, target: float, z: float = INTERVAL_Z) -> tuple[float | None, float | None]:
        """(optimistic, pessimistic) epochs to ``target`` at ``±z`` standard deviations of the band."""
        return self.epoch_reaching(target, quantile_z=-z), self.epoch_reaching(target, quantile_z=z)

    def convergence_epoch(self, tolerance: float) -> float:
        """First epoch at which improvement per epoch drops below ``tolerance`` (value units/epoch)."""
        k = FAMILIES[self.family].flat_from(self.params, max(tolerance, 1e-12))
        return max(k, self.first_epoch) if math.isfinite(k) else self.first_epoch


def _clean(epochs: ArrayLike, values: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    k = np.asarray(epochs, dtype=float).ravel()
    v = np.asarray(values, dtype=float).ravel()
    n = min(k.size, v.size)
    k, v = k[:n], v[:n]
    ok = np.isfinite(k) & np.isfinite(v) & (k >= 0)
    k, v = k[ok], v[ok]
    order = np.argsort(k, kind="stable")
    k, v = k[order], v[order]
    # Repeated epochs (a re-reported point): keep the last report of each epoch.
    if k.size:
        keep = np.append(k[1:] != k[:-1], True)
        k, v = k[keep], v[keep]
    return k, v


def _recency_weights(k: NDArray[np.float64]) -> NDArray[np.float64]:
    if k.size < 2 or k[-1] == k[0]:
        return np.ones_like(k)
    return RECENCY_FLOOR + (1.0 - RECENCY_FLOOR) * (k - k[0]) / (k[-1] - k[0])


Fitted = tuple[dict[str, float], float] | None  # (parameters, weighted SSE), or no fit


def _observed_stats(z: Arr, obs: NDArray[np.bool_]) -> tuple[Arr, Arr]:
    """Per weight row: the best (lowest) observed z and the observed range."""
    zmin = np.where(obs, z, np.inf).min(1)
    zmax = np.where(obs, z, -np.inf).max(1)
    return zmin, zmax - zmin


def _pick(sse: Arr, params: dict[str, Arr]) -> list[Fitted]:
    """Best grid row per weight row (``sse`` and every parameter are (O, G) arrays)."""
    out: list[Fitted] = []
    for o in range(sse.shape[0]):
        i = int(np.argmin(sse[o]))
        if not math.isfinite(float(sse[o, i])):
            out.append(None)
        else:
            out.append(({name: float(v[o, i]) for name, v in params.items()}, float(sse[o, i])))
    return out


def _fit_hyperbola(k: Arr, z: Arr, W: Arr, c_floor: float) -> list[Fitted]:
    """Grid over the plateau ``c`` below every observation; ``1/(z-c) = a*k + b`` is linear.

    ``W`` holds one row of weights per fit (zero for points a fit must not see); every array below
    carries that row axis first, then the grid axis.
    """
    obs = W > 0
    zmin, span = _observed_stats(z, obs)
    scale = np.where(span > 0, span, np.maximum(np.abs(zmin), 1.0))
    # Gaps between the best observation and the plateau, from 0.1 % to MAX_PLATEAU_GAP ranges, and
    # never past the floor (a fraction above 1, a negative loss).
    top = np.minimum(MAX_PLATEAU_GAP * scale, zmin - c_floor) if math.isfinite(c_floor) else MAX_PLATEAU_GAP * scale
    usable = top > 1e-9 * scale
    top = np.where(usable, top, scale)
    lo = np.minimum(1e-3 * scale, top)
    gaps = lo[:, None] * (top / lo)[:, None] ** _UNIT[None, :]  # (O, G), geometric from lo to top
    c = zmin[:, None] - gaps
    diff = np.where(obs[:, None, :], z[None, None, :] - c[:, :, None], 1.0)  # (O, G, n), > 0 where seen
    y = 1.0 / diff
    # Weighted linear regression of y on k for every grid row at once. Weighting by (z-c)^2 turns the
    # error in y back into the error in z to first order (dy = dz / (z-c)^2).
    ww = W[:, None, :] * diff**2
    sw = ww.sum(2)
    mk = (ww * k).sum(2) / sw
    my = (ww * y).sum(2) / sw
    cov = (ww * (k - mk[..., None]) * (y - my[..., None])).sum(2)
    var = (ww * (k - mk[..., None]) ** 2).sum(2)
    a = np.where(var > 0, cov / np.where(var > 0, var, 1.0), 0.0)
    b = my - a * mk
    # Bounds: the curve must improve (a > 0) and start finite (b > 0).
    a = np.maximum(a, 1e-12)
    b = np.maximum(b, 1e-12)
    zhat = c[..., None] + 1.0 / (a[..., None] * k + b[..., None])
    sse = (W[:, None, :] * (z - zhat) ** 2).sum(2)
    sse = np.where(np.isfinite(sse) & usable[:, None], sse, np.inf)
    return _pick(sse, {"a": a, "b": b, "c": c})


def _linear_plateau_fit(basis: Arr, z: Arr, W: Arr, c_floor: float) -> tuple[Arr, Arr, Arr]:
    """For every weight row and grid row, the weighted least-squares ``z ≈ c + d·basis`` with ``d >= 0``.

    ``basis`` is (G, n) or (O, G, n). Returns ``(c, d, sse)`` as (O, G) arrays; combinations whose
    plateau breaks a bound get ``sse = inf``.
    """
    Wg = W[:, None, :]
    sw = W.sum(1)[:, None]
    mb = (Wg * basis).sum(2) / sw
    mz = ((W * z).sum(1) / W.sum(1))[:, None]
    cov = (Wg * (basis - mb[..., None]) * (z - mz[..., None])).sum(2)
    var = (Wg * (basis - mb[..., None]) ** 2).sum(2)
    d = np.where(var > 0, cov / np.where(var > 0, var, 1.0), 0.0)
    d = np.maximum(d, 0.0)  # the curve must improve: d > 0
    c = mz - d * mb
    sse = (Wg * (z - (c[..., None] + d[..., None] * basis)) ** 2).sum(2)
    zmin, span = _observed_stats(z, W > 0)
    allowed = (c >= c_floor) & (c >= (zmin - MAX_PLATEAU_GAP * np.maximum(span, 1e-12))[:, None]) & (d > 0)
    return c, d, np.where(allowed, sse, np.inf)


def _fit_exponential(k: Arr, z: Arr, W: Arr, c_floor: float) -> list[Fitted]:
    """Grid over the rate ``r``; ``z = c + d*exp(-r*k)`` is linear in ``(c, d)``."""
    last = np.where(W > 0, k, -np.inf).max(1)
    span = np.maximum(last - k[0], 1.0)
    r = (0.05 / span)[:, None] * (MAX_RATE_PER_SPAN / 0.05) ** _UNIT[None, :]  # (O, G), geometric over rates
    e = np.exp(-r[..., None] * (k - k[0]))  # (O, G, n), shifted for conditioning
    c, d0, sse = _linear_plateau_fit(e, z, W, c_floor)
    # Undo the shift: d*exp(-r*(k-k0)) = (d*exp(r*k0)) * exp(-r*k).
    d = d0 * np.exp(np.minimum(r * k[0], 700.0))
    return _pick(sse, {"c": c, "d": d, "r": r})


#: Power-law exponents searched (``z = c + d·(k+1)^-alpha``), from very slow to fast decay.
_ALPHAS = 0.05 * (4.0 / 0.05) ** _UNIT


def _fit_power(k: Arr, z: Arr, W: Arr, c_floor: float) -> list[Fitted]:
    """Grid over the exponent ``alpha``; ``z = c + d*(k+1)^-alpha`` is linear in ``(c, d)``."""
    basis = (k[None, :] + 1.0) ** (-_ALPHAS[:, None])
    c, d, sse = _linear_plateau_fit(basis, z, W, c_floor)
    return _pick(sse, {"c": c, "d": d, "alpha": np.broadcast_to(_ALPHAS, c.shape)})


@dataclass(frozen=True)
class _Family:
    """One curve family: its fit, its formula, and the closed forms the predictions need."""

    fit: Callable[[Arr, Arr, Arr, float], list[Fitted]]  # (k, z, weight rows, floor) -> one fit per row
    z: Callable[[dict[str, float], Arr], Arr]  # the curve in badness units
    epoch_at: Callable[[dict[str, float], float], float]  # epoch where z = zt (for zt > c)
    flat_from: Callable[[dict[str, float], float], float]  # first epoch with |dz/dk| < tol
    rescale: Callable[[dict[str, float], float, float], dict[str, float]]  # params for z = shift + scale*u


def _hyperbola_flat(p: dict[str, float], tol: float) -> float:
    # |dz/dk| = a / (a*k + b)^2 < tol  <=>  k > (sqrt(a/tol) - b) / a
    return (math.sqrt(p["a"] / tol) - p["b"]) / p["a"]


def _exponential_flat(p: dict[str, float], tol: float) -> float:
    # |dz/dk| = d*r*exp(-r*k) < tol  <=>  k > ln(d*r/tol) / r
    return math.log(max(p["d"] * p["r"] / tol, 1.0)) / p["r"]


def _power_flat(p: dict[str, float], tol: float) -> float:
    # |dz/dk| = d*alpha*(k+1)^-(alpha+1) < tol  <=>  k+1 > (d*alpha/tol)^(1/(alpha+1))
    return (p["d"] * p["alpha"] / tol) ** (1.0 / (p["alpha"] + 1.0)) - 1.0


FAMILIES: dict[str, _Family] = {
    "hyperbola": _Family(
        fit=_fit_hyperbola,
        z=lambda p, k: p["c"] + 1.0 / (p["a"] * k + p["b"]),
        epoch_at=lambda p, zt: (1.0 / (zt - p["c"]) - p["b"]) / p["a"],
        flat_from=_hyperbola_flat,
        # z = shift + scale*(c + 1/(a k + b)) = (shift + scale c) + 1/((a/scale) k + b/scale)
        rescale=lambda p, sh, sc: {"a": p["a"] / sc, "b": p["b"] / sc, "c": sh + sc * p["c"]},
    ),
    "exponential": _Family(
        fit=_fit_exponential,
        z=lambda p, k: p["c"] + p["d"] * np.exp(-p["r"] * k),
        epoch_at=lambda p, zt: -math.log((zt - p["c"]) / p["d"]) / p["r"],
        flat_from=_exponential_flat,
        rescale=lambda p, sh, sc: {"c": sh + sc * p["c"], "d": sc * p["d"], "r": p["r"]},
    ),
    "power": _Family(
        fit=_fit_power,
        z=lambda p, k: p["c"] + p["d"] * (np.asarray(k) + 1.0) ** (-p["alpha"]),
        epoch_at=lambda p, zt: ((zt - p["c"]) / p["d"]) ** (-1.0 / p["alpha"]) - 1.0,
        flat_from=_power_flat,
        rescale=lambda p, sh, sc: {"c": sh + sc * p["c"], "d": sc * p["d"], "alpha": p["alpha"]},
    ),
}


def _predict_z(family: str, params: dict[str, float], k: NDArray[np.float64]) -> NDArray[np.float64]:
    return FAMILIES[family].z(params, k)


def fit_learning_curve(
    epochs: ArrayLike, values: ArrayLike, direction: Direction, *, families: tuple[str, ...] | None = None
) -> CurveFit | CannotPredict:
    """Fit the best family to ``(epoch, value)`` points.

    ``families`` restricts the choice (names from :data:`FAMILIES`); by default all compete.

    Non-finite points and negative epochs are dropped. Returns :class:`CannotPredict` (never raises)
    when fewer than :data:`MIN_POINTS` usable points remain or the values do not vary.
    """
    k, v = _clean(epochs, values)
    n = int(k.size)
    if n < MIN_POINTS:
        return CannotPredict(f"only {n} usable point(s); need {MIN_POINTS}", n)
    with np.errstate(all="ignore"):
        unchanged = float(np.ptp(v)) <= 1e-12 * max(1.0, float(np.abs(v).max()))
    if unchanged:
        return CannotPredict("the metric has not changed", n)
    sign = 1.0 if direction == "lower" else -1.0
    # Fit in standardised units (z = shift + scale * u) so huge or tiny metrics stay well conditioned;
    # parameters are mapped back to value units at the end.
    with np.errstate(all="ignore"):
        shift = float(np.mean(sign * v))
        scale = float(np.ptp(v))
    if not (math.isfinite(shift) and math.isfinite(scale)):
        return CannotPredict("values too large to fit", n)
    z = (sign * v - shift) / scale
    w = _recency_weights(k)

    # Choose the family on the held-out tail when there are enough points.
    # Natural bounds of the metric, as a floor on the plateau in z (badness) units.
    value_range = (-math.inf, math.inf)
    if v.min() >= 0.0 and v.max() <= 1.0:
        value_range = (0.0, 1.0)  # a fraction (accuracy, F1, hit rate)
    elif v.min() >= 0.0:
        value_range = (0.0, math.inf)  # a non-negative metric (loss, WER)
    if direction == "higher" and value_range[1] == 1.0:
        floor_z = -1.0  # a fraction cannot exceed 1
    elif direction == "lower" and v.min() >= 0.0:
        floor_z = 0.0  # a non-negative metric stays non-negative
    else:
        floor_z = -math.inf
    c_floor = (floor_z - shift) / scale
    chosen = {name: FAMILIES[name].fit for name in (families or tuple(FAMILIES))}
    with np.errstate(all="ignore"):
        got = _fit(k, z, w, n, direction, v, shift, scale, c_floor, chosen)
    return replace(got, value_range=value_range) if isinstance(got, CurveFit) else got


def _fit(
    k: NDArray[np.float64],
    z: NDArray[np.float64],
    w: NDArray[np.float64],
    n: int,
    direction: Direction,
    v: NDArray[np.float64],
    shift: float,
    scale: float,
    c_floor: float,
    fitters: dict[str, Callable[[Arr, Arr, Arr, float], list[Fitted]]],
) -> CurveFit | CannotPredict:
    # Time-series cross-validation: from several forecast origins, fit on the points before and score
    # the prediction of every point after (RMS, badness units).
    cv: dict[str, float] = {}
    forecast: dict[str, tuple[Arr, Arr]] = {}  # per family: forecast errors and their horizons
    full: dict[str, Fitted] = {}  # per family: the fit on every point
    origins = [o for o in sorted({int(round(n * f)) for f in CV_ORIGINS}) if MIN_POINTS + 1 <= o < n]
    if n >= MIN_POINTS_FOR_HOLDOUT and origins:
        # One weight row per forecast origin (points after it unseen), plus one with every point:
        # each family is fitted for all of them in a single call.
        seen = np.arange(n)[None, :] < np.array([*origins, n])[:, None]
        rows = np.where(seen, w, 0.0)
        for name, fitter in fitters.items():
            *got, full[name] = fitter(k, z, rows, c_floor)
            if any(g is None for g in got):
                continue
            errs: list[float] = []
            pairs: list[tuple[Arr, Arr]] = []
            for o, g in zip(origins, got, strict=True):
                assert g is not None
                err = z[o:] - _predict_z(name, g[0], k[o:])
                errs.append(float(np.sqrt(np.mean(err**2))))
                pairs.append((err, k[o:] - k[o - 1]))
            cv[name] = float(np.mean(errs))
            forecast[name] = (np.concatenate([e for e, _ in pairs]), np.concatenate([h for _, h in pairs]))

    # Among the families that forecast about as well as the best (within LATE_TOLERANCE), take the
    # one with the most improvement left: measured on real curves, the usual failure is a plateau
    # reached too early, not too late. Too few points to cross-validate: the power law.
    fallback = DEFAULT_FAMILY if DEFAULT_FAMILY in fitters else next(iter(fitters))
    order = sorted(cv, key=lambda nm: (cv[nm], nm)) if cv else [fallback]
    fits: dict[str, tuple[dict[str, float], float]] = {}
    if cv:
        best = cv[order[0]]
        close = {nm: f for nm in order if cv[nm] <= LATE_TOLERANCE * best and (f := full.get(nm)) is not None}
        if close:
            latest = min(close, key=lambda nm: (close[nm][0]["c"], nm))  # lowest plateau in badness units
            fits = {latest: close[latest]}
    order += [name for name in fitters if name not in order]
    for name in order if not fits else ():
        one = full[name] if name in full else fitters[name](k, z, w[None, :], c_floor)[0]
        if one is not None:
            fits[name] = one
            break
    if not fits:
        return CannotPredict("no family fits these points", n)
    family = next(iter(fits))
    params, sse = _to_value_units(family, fits[family][0], shift, scale), fits[family][1]
    dof = max(n - 3, 1)
    sd_u = math.sqrt(sse / float(w.sum()) * n / dof)
    residual_std = scale * sd_u
    # How fast forecast errors grow with the horizon, from the cross-validation of this family:
    # err^2 ~ sd^2 + (drift * h)^2, so drift^2 = mean(max(err^2 - sd^2, 0) / h^2).
    drift = 0.0
    if family in forecast:
        err, h = forecast[family]
        drift = scale * math.sqrt(float(np.mean(np.maximum(err**2 - sd_u**2, 0.0) / np.maximum(h, 1.0) ** 2)))
    cv_value_units = {name: scale * e for name, e in cv.items()}
    return CurveFit(
        family=family,  # type: ignore[arg-type]
        direction=direction,
        params=params,
        residual_std=residual_std,
        drift_std=drift,
        holdout_error=cv_value_units.get(family),
        n_points=n,
        first_epoch=float(k[0]),
        last_epoch=float(k[-1]),
        last_value=float(v[-1]),
        candidates=cv_value_units or {name: scale * math.sqrt(s / float(w.sum())) for name, (_, s) in fits.items()},
    )


def _to_value_units(family: str, p: dict[str, float], shift: float, scale: float) -> dict[str, float]:
    """Map parameters fitted on ``u = (z - shift) / scale`` back to ``z``."""
    return FAMILIES[family].rescale(p, shift, scale)
