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

Both are fitted by *variable projection*: for a fixed non-linear parameter (``c`` for the hyperbola,
``r`` for the exponential) the others follow from a weighted linear least-squares solve, so a dense
grid over that one parameter finds the global optimum of the weighted squared error without a local
optimizer that can diverge. That keeps a fit at roughly a hundred microseconds, which matters when the
planner fits ten thousand jobs per interval.

Bounds (each one keeps a thin or noisy history from predicting the impossible):

- the plateau lies at most :data:`MAX_PLATEAU_GAP` times the observed range beyond the best point;
- a metric that has stayed within [0, 1] is a fraction (accuracy, F1, hit rate): its plateau stays
  within [0, 1]; a non-negative metric (loss, WER) keeps a non-negative plateau;
- the exponential's rate is at most :data:`MAX_RATE_PER_SPAN` e-foldings over the observed span, so
  a few early points cannot claim the curve is already flat.

The family is chosen by how well it predicts the *last* observed points from the earlier ones (a
hold-out at the end of the series), not by in-sample residual; with too few points to hold any out,
the hyperbola is used (it converges more slowly than an exponential fitted to the same few points).
The ``models`` issue extends this with
more families, learning-rate-drop handling and calibrated intervals; the interface stays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

Direction = Literal["higher", "lower"]

#: Fewer usable points than this and no curve is fitted ("cannot predict yet").
MIN_POINTS = 3
#: Hold out this share of the points (at least one) to choose the family, when there are enough.
HOLDOUT_SHARE = 0.25
MIN_POINTS_FOR_HOLDOUT = 6
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

    ``residual_std`` is the weighted RMS error in value units over the fitted points;
    ``holdout_error`` is the RMS error on the held-out tail when the family was chosen by hold-out
    (``None`` when the series was too short to hold anything out).
    """

    family: Literal["hyperbola", "exponential"]
    direction: Direction
    params: dict[str, float]
    residual_std: float
    holdout_error: float | None
    n_points: int
    first_epoch: float
    last_epoch: float
    last_value: float
    candidates: dict[str, float] = field(default_factory=dict)

    # -- the curve in z (badness) space ------------------------------------------------------
    def _z(self, k: NDArray[np.float64]) -> NDArray[np.float64]:
        p = self.params
        if self.family == "hyperbola":
            return p["c"] + 1.0 / (p["a"] * k + p["b"])
        return p["c"] + p["d"] * np.exp(-p["r"] * k)

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

    def epoch_reaching(self, target: float, *, shift: float = 0.0) -> float | None:
        """First epoch at which the curve reaches ``target``; ``None`` if the plateau is short of it.

        ``shift`` moves the curve by that many value units towards *worse* (positive) or better
        (negative); it is how the interval is computed. Epochs already observed count: a target
        the curve already passes at ``first_epoch`` returns ``first_epoch``.
        """
        zt = self._sign() * target - shift
        p = self.params
        c = p["c"]
        if zt <= c:
            return None
        if self.family == "hyperbola":
            k = (1.0 / (zt - c) - p["b"]) / p["a"]
        else:
            k = -math.log((zt - c) / p["d"]) / p["r"]
        span = max(self.last_epoch - self.first_epoch, 1.0)
        if not math.isfinite(k) or k > self.last_epoch + SEARCH_HORIZON_FACTOR * span:
            return None
        return max(k, self.first_epoch)

    def epoch_interval(self, target: float, z: float = INTERVAL_Z) -> tuple[float | None, float | None]:
        """(optimistic, pessimistic) epochs to ``target`` from a ``±z·residual_std`` band on the curve."""
        s = z * self.residual_std
        return self.epoch_reaching(target, shift=-s), self.epoch_reaching(target, shift=s)

    def convergence_epoch(self, tolerance: float) -> float:
        """First epoch at which improvement per epoch drops below ``tolerance`` (value units/epoch)."""
        p = self.params
        tol = max(tolerance, 1e-12)
        if self.family == "hyperbola":
            # |dz/dk| = a / (a*k + b)^2  < tol   <=>  k > (sqrt(a/tol) - b) / a
            k = (math.sqrt(p["a"] / tol) - p["b"]) / p["a"]
        else:
            # |dz/dk| = d*r*exp(-r*k) < tol   <=>  k > ln(d*r/tol) / r
            k = math.log(max(p["d"] * p["r"] / tol, 1.0)) / p["r"]
        return max(k, self.first_epoch)


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


def _fit_hyperbola(
    k: NDArray[np.float64], z: NDArray[np.float64], w: NDArray[np.float64], c_floor: float
) -> tuple[dict[str, float], float] | None:
    """Grid over the plateau ``c`` below every observation; ``1/(z-c) = a*k + b`` is linear."""
    zmin = float(z.min())
    span = float(z.max() - zmin)
    scale = span if span > 0 else max(abs(zmin), 1.0)
    # Gaps between the best observation and the plateau, from 0.1 % to MAX_PLATEAU_GAP ranges, and
    # never past the floor (a fraction above 1, a negative loss).
    top = min(MAX_PLATEAU_GAP * scale, zmin - c_floor) if math.isfinite(c_floor) else MAX_PLATEAU_GAP * scale
    if top <= 1e-9 * scale:
        return None
    lo = min(1e-3 * scale, top)
    gaps = lo * (top / lo) ** _UNIT  # geometric from lo to top
    c = zmin - gaps  # (G,)
    y = 1.0 / (z[None, :] - c[:, None])  # (G, n), all positive
    # Weighted linear regression of y on k for every grid row at once. Weighting by (z-c)^2 turns the
    # error in y back into the error in z to first order (dy = dz / (z-c)^2).
    ww = w[None, :] * (z[None, :] - c[:, None]) ** 2
    sw = ww.sum(1)
    mk = (ww * k).sum(1) / sw
    my = (ww * y).sum(1) / sw
    cov = (ww * (k - mk[:, None]) * (y - my[:, None])).sum(1)
    var = (ww * (k - mk[:, None]) ** 2).sum(1)
    a = np.where(var > 0, cov / np.where(var > 0, var, 1.0), 0.0)
    b = my - a * mk
    # Bounds: the curve must improve (a > 0) and start finite (b > 0).
    a = np.maximum(a, 1e-12)
    b = np.maximum(b, 1e-12)
    zhat = c[:, None] + 1.0 / (a[:, None] * k[None, :] + b[:, None])
    sse = (w[None, :] * (z[None, :] - zhat) ** 2).sum(1)
    sse = np.where(np.isfinite(sse), sse, np.inf)
    i = int(np.argmin(sse))
    if not math.isfinite(float(sse[i])):
        return None
    return {"a": float(a[i]), "b": float(b[i]), "c": float(c[i])}, float(sse[i])


def _fit_exponential(
    k: NDArray[np.float64], z: NDArray[np.float64], w: NDArray[np.float64], c_floor: float
) -> tuple[dict[str, float], float] | None:
    """Grid over the rate ``r``; ``z = c + d*exp(-r*k)`` is linear in ``(c, d)``."""
    span = max(float(k[-1] - k[0]), 1.0)
    r = (0.05 / span) * (MAX_RATE_PER_SPAN / 0.05) ** _UNIT  # geometric over rates, (G,)
    e = np.exp(-r[:, None] * (k[None, :] - k[0]))  # (G, n), shifted for conditioning
    sw = w.sum()
    me = (w * e).sum(1) / sw
    mz = float((w * z).sum() / sw)
    cov = (w * (e - me[:, None]) * (z - mz)).sum(1)
    var = (w * (e - me[:, None]) ** 2).sum(1)
    d0 = np.where(var > 0, cov / np.where(var > 0, var, 1.0), 0.0)
    d0 = np.maximum(d0, 0.0)  # the curve must improve: d > 0
    c = mz - d0 * me
    zhat = c[:, None] + d0[:, None] * e
    sse = (w[None, :] * (z[None, :] - zhat) ** 2).sum(1)
    zmin = float(z.min())
    allowed = (c >= c_floor) & (c >= zmin - MAX_PLATEAU_GAP * max(float(np.ptp(z)), 1e-12))
    sse = np.where(allowed & (d0 > 0), sse, np.inf)
    i = int(np.argmin(sse))
    if not math.isfinite(float(sse[i])):
        return None
    # Undo the shift: d*exp(-r*(k-k0)) = (d*exp(r*k0)) * exp(-r*k).
    d = float(d0[i] * math.exp(min(r[i] * k[0], 700.0)))
    return {"c": float(c[i]), "d": d, "r": float(r[i])}, float(sse[i])


_FITTERS = {"hyperbola": _fit_hyperbola, "exponential": _fit_exponential}


def _predict_z(family: str, params: dict[str, float], k: NDArray[np.float64]) -> NDArray[np.float64]:
    if family == "hyperbola":
        return params["c"] + 1.0 / (params["a"] * k + params["b"])
    return params["c"] + params["d"] * np.exp(-params["r"] * k)


def fit_learning_curve(epochs: ArrayLike, values: ArrayLike, direction: Direction) -> CurveFit | CannotPredict:
    """Fit the best family to ``(epoch, value)`` points.

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
    if direction == "higher" and v.min() >= 0.0 and v.max() <= 1.0:
        floor_z = -1.0  # a fraction cannot exceed 1
    elif direction == "lower" and v.min() >= 0.0:
        floor_z = 0.0  # a non-negative metric stays non-negative
    else:
        floor_z = -math.inf
    c_floor = (floor_z - shift) / scale
    with np.errstate(all="ignore"):
        return _fit(k, z, w, n, direction, v, shift, scale, c_floor)


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
) -> CurveFit | CannotPredict:
    holdout: dict[str, float] = {}
    if n >= MIN_POINTS_FOR_HOLDOUT:
        h = max(1, int(round(n * HOLDOUT_SHARE)))
        for name, fitter in _FITTERS.items():
            got = fitter(k[:-h], z[:-h], w[:-h], c_floor)
            if got is None:
                continue
            err = z[-h:] - _predict_z(name, got[0], k[-h:])
            holdout[name] = float(np.sqrt(np.mean(err**2)))

    # Refit on every point only the family the hold-out prefers (the other as a fallback); with too
    # few points to tell the families apart, the slower-converging hyperbola.
    order = [name for _, name in sorted((e, name) for name, e in holdout.items())] if holdout else ["hyperbola"]
    order += [name for name in _FITTERS if name not in order]
    fits: dict[str, tuple[dict[str, float], float]] = {}
    for name in order:
        got = _FITTERS[name](k, z, w, c_floor)
        if got is not None:
            fits[name] = got
            break
    if not fits:
        return CannotPredict("no family fits these points", n)
    family = next(iter(fits))
    params, sse = _to_value_units(family, fits[family][0], shift, scale), fits[family][1]
    dof = max(n - 3, 1)
    residual_std = scale * math.sqrt(sse / float(w.sum()) * n / dof)
    holdout = {name: scale * e for name, e in holdout.items()}
    return CurveFit(
        family=family,  # type: ignore[arg-type]
        direction=direction,
        params=params,
        residual_std=residual_std,
        holdout_error=holdout.get(family),
        n_points=n,
        first_epoch=float(k[0]),
        last_epoch=float(k[-1]),
        last_value=float(v[-1]),
        candidates=holdout if holdout else {name: scale * math.sqrt(s / float(w.sum())) for name, (_, s) in fits.items()},
    )


def _to_value_units(family: str, p: dict[str, float], shift: float, scale: float) -> dict[str, float]:
    """Map parameters fitted on ``u = (z - shift) / scale`` back to ``z``."""
    if family == "hyperbola":
        # z = shift + scale*(c + 1/(a k + b)) = (shift + scale c) + 1/((a/scale) k + b/scale)
        return {"a": p["a"] / scale, "b": p["b"] / scale, "c": shift + scale * p["c"]}
    return {"c": shift + scale * p["c"], "d": scale * p["d"], "r": p["r"]}
