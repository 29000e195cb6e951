"""Learning-curve families: their formulas, fits and closed forms (used by :mod:`models.curves`).

Every family is written in the *badness* coordinate ``z`` (lower is better) of :mod:`models.curves`,
and fitted by variable projection: for fixed non-linear parameters (a grid) the rest follow from a
weighted linear least-squares solve, for many weight rows (cross-validation origins) at once.
The parameters of each family are documented in :mod:`models.curves`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Arr = NDArray[np.float64]

#: The plateau lies at most this many observed ranges beyond the best observation.
MAX_PLATEAU_GAP = 2.0
#: The exponential decays at most this many e-foldings over the observed epoch span.
MAX_RATE_PER_SPAN = 5.0
#: Grid sizes of the one-dimensional searches (plateau for the hyperbola, rate for the exponential).
GRID_POINTS = 48
_UNIT = np.linspace(0.0, 1.0, GRID_POINTS)


Fitted = tuple[dict[str, float], float] | None  # (parameters, weighted SSE), or no fit


def _observed_stats(z: Arr, obs: NDArray[np.bool_]) -> tuple[Arr, Arr]:
    """Per weight row: the best (lowest) observed z and the observed range."""
    zmin = np.where(obs, z, np.inf).min(1)
    zmax = np.where(obs, z, -np.inf).max(1)
    return zmin, zmax - zmin


def _pick(sse: Arr, params: dict[str, Arr]) -> list[Fitted]:
    """Best grid row per weight row (``sse`` and every parameter are (O, G) arrays)."""
    rows = np.arange(sse.shape[0])
    best = np.argmin(sse, axis=1)
    err = sse[rows, best].tolist()
    picked = {name: v[rows, best].tolist() for name, v in params.items()}
    return [({name: got[o] for name, got in picked.items()}, e) if math.isfinite(e) else None for o, e in enumerate(err)]


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
    # Weighted moments as matrix products (no (O, G, n) temporaries for a shared (G, n) basis):
    # the fit and its squared error follow from sums of w, w·b, w·b², w·z, w·z², w·b·z.
    Wz = W * z
    if basis.ndim == 2:
        s_b, s_bb, s_bz = W @ basis.T, W @ (basis * basis).T, Wz @ basis.T
    else:
        s_b = (W[:, None, :] * basis).sum(2)
        s_bb = (W[:, None, :] * basis * basis).sum(2)
        s_bz = (Wz[:, None, :] * basis).sum(2)
    sw = W.sum(1)[:, None]
    s_z = Wz.sum(1)[:, None]
    s_zz = (Wz * z).sum(1)[:, None]
    mb, mz = s_b / sw, s_z / sw
    cov = s_bz - sw * mb * mz
    var = s_bb - sw * mb * mb
    d = np.where(var > 0, cov / np.where(var > 0, var, 1.0), 0.0)
    d = np.maximum(d, 0.0)  # the curve must improve: d > 0
    c = mz - d * mb
    sse = s_zz - 2 * c * s_z - 2 * d * s_bz + c * c * sw + 2 * c * d * s_b + d * d * s_bb
    sse = np.maximum(sse, 0.0)
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


#: Log-power grid: midpoint epochs ``m`` (geometric, relative to the last observed epoch) and
#: steepness exponents ``alpha``.
_LOGPOWER_M = np.geomspace(0.05, 4.0, 10)
_LOGPOWER_ALPHA = np.array([0.3, 0.6, 1.0, 1.5, 2.5, 4.0])


def _fit_log_power(k: Arr, z: Arr, W: Arr, c_floor: float) -> list[Fitted]:
    """Grid over ``(m, alpha)``; ``z = c + d / (1 + (k/m)^alpha)`` is linear in ``(c, d)``."""
    top = max(float(k[-1]), 1.0)
    m = np.repeat(_LOGPOWER_M * top, _LOGPOWER_ALPHA.size)
    alpha = np.tile(_LOGPOWER_ALPHA, _LOGPOWER_M.size)
    basis = 1.0 / (1.0 + (np.maximum(k, 0.0)[None, :] / m[:, None]) ** alpha[:, None])
    c, d, sse = _linear_plateau_fit(basis, z, W, c_floor)
    shape = c.shape
    return _pick(sse, {"c": c, "d": d, "m": np.broadcast_to(m, shape), "alpha": np.broadcast_to(alpha, shape)})


@dataclass(frozen=True)
class _Family:
    """One curve family: its fit, its formula, and the closed forms the predictions need."""

    fit: Callable[[Arr, Arr, Arr, float], list[Fitted]]  # (k, z, weight rows, floor) -> one fit per row
    z: Callable[[dict[str, float], Arr], Arr]  # the curve in badness units
    epoch_at: Callable[[dict[str, float], float], float]  # epoch where z = zt (for zt > c)
    flat_from: Callable[[dict[str, float], float], float]  # first epoch with |dz/dk| < tol
    rescale: Callable[[dict[str, float], float, float], dict[str, float]]  # params for z = shift + scale*u
    #: Each weight row's fit depends on that row alone, bit for bit (elementwise arithmetic and sums
    #: along the points axis), so rows may be fitted in separate calls. Not so for the families
    #: fitted through matrix products (BLAS gives bits that depend on how many rows share the call).
    separable: bool = False


def _hyperbola_flat(p: dict[str, float], tol: float) -> float:
    # |dz/dk| = a / (a*k + b)^2 < tol  <=>  k > (sqrt(a/tol) - b) / a
    return (math.sqrt(p["a"] / tol) - p["b"]) / p["a"]


def _exponential_flat(p: dict[str, float], tol: float) -> float:
    # |dz/dk| = d*r*exp(-r*k) < tol  <=>  k > ln(d*r/tol) / r
    return math.log(max(p["d"] * p["r"] / tol, 1.0)) / p["r"]


def _power_flat(p: dict[str, float], tol: float) -> float:
    # |dz/dk| = d*alpha*(k+1)^-(alpha+1) < tol  <=>  k+1 > (d*alpha/tol)^(1/(alpha+1))
    return (p["d"] * p["alpha"] / tol) ** (1.0 / (p["alpha"] + 1.0)) - 1.0


def _log_power_rate(p: dict[str, float], k: float) -> float:
    """|dz/dk| of the log-power curve at epoch ``k``."""
    x = max(k, 0.0) / p["m"]
    xa = x ** p["alpha"]
    head = x ** (p["alpha"] - 1.0) if x > 0 else (1.0 if p["alpha"] == 1 else 0.0)
    return p["d"] * p["alpha"] / p["m"] * head / (1.0 + xa) ** 2


def _log_power_flat(p: dict[str, float], tol: float) -> float:
    # The rate rises until x^alpha = (alpha-1)/(alpha+1) (for alpha > 1), then falls for ever: bisect
    # on the falling side for the first epoch with rate < tol.
    a = p["alpha"]
    lo = p["m"] * ((a - 1.0) / (a + 1.0)) ** (1.0 / a) if a > 1.0 else 0.0
    if _log_power_rate(p, lo) < tol:
        return lo
    hi = max(lo, p["m"])
    while _log_power_rate(p, hi) >= tol:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _log_power_rate(p, mid) < tol else (mid, hi)
    return hi


def _log_power_epoch_at(p: dict[str, float], zt: float) -> float:
    # zt = c + d / (1 + (k/m)^alpha)  <=>  k = m * (d / (zt - c) - 1)^(1/alpha)
    ratio = p["d"] / (zt - p["c"]) - 1.0
    return p["m"] * ratio ** (1.0 / p["alpha"]) if ratio > 0 else 0.0


FAMILIES: dict[str, _Family] = {
    "hyperbola": _Family(
        fit=_fit_hyperbola,
        z=lambda p, k: p["c"] + 1.0 / (p["a"] * k + p["b"]),
        epoch_at=lambda p, zt: (1.0 / (zt - p["c"]) - p["b"]) / p["a"],
        flat_from=_hyperbola_flat,
        # z = shift + scale*(c + 1/(a k + b)) = (shift + scale c) + 1/((a/scale) k + b/scale)
        rescale=lambda p, sh, sc: {"a": p["a"] / sc, "b": p["b"] / sc, "c": sh + sc * p["c"]},
        separable=True,
    ),
    "exponential": _Family(
        fit=_fit_exponential,
        z=lambda p, k: p["c"] + p["d"] * np.exp(-p["r"] * k),
        epoch_at=lambda p, zt: -math.log((zt - p["c"]) / p["d"]) / p["r"],
        flat_from=_exponential_flat,
        rescale=lambda p, sh, sc: {"c": sh + sc * p["c"], "d": sc * p["d"], "r": p["r"]},
        separable=True,
    ),
    "power": _Family(
        fit=_fit_power,
        z=lambda p, k: p["c"] + p["d"] * (np.asarray(k) + 1.0) ** (-p["alpha"]),
        epoch_at=lambda p, zt: ((zt - p["c"]) / p["d"]) ** (-1.0 / p["alpha"]) - 1.0,
        flat_from=_power_flat,
        rescale=lambda p, sh, sc: {"c": sh + sc * p["c"], "d": sc * p["d"], "alpha": p["alpha"]},
    ),
    "log_power": _Family(
        fit=_fit_log_power,
        z=lambda p, k: p["c"] + p["d"] / (1.0 + (np.maximum(np.asarray(k, dtype=float), 0.0) / p["m"]) ** p["alpha"]),
        epoch_at=_log_power_epoch_at,
        flat_from=_log_power_flat,
        rescale=lambda p, sh, sc: {"c": sh + sc * p["c"], "d": sc * p["d"], "m": p["m"], "alpha": p["alpha"]},
    ),
}
