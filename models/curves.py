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

``log_power`` (Domhan et al., IJCAI 2015: ``a / (1 + (x / e^b)^c)``, here with a plateau)
    ``z(k) = c + d / (1 + (k/m)^alpha)``
    ``c`` [z-unit]: the plateau; ``d`` [z-unit] > 0: the gap to the plateau at epoch 0;
    ``m`` [epoch] > 0: the epoch at which half of that gap is gone (``e^b`` in Domhan's form);
    ``alpha`` [-] > 0: steepness; S-shaped in log-epochs for ``alpha > 1`` (slow start, then fast).

All are fitted by *variable projection* (``models/curve_families.py``): for fixed non-linear
parameters (``c`` for the hyperbola, ``r`` or ``alpha`` for the others, ``(m, alpha)`` for the
log-power) the rest follow from a weighted linear least-squares solve, so a dense grid finds the
global optimum of the weighted squared error without a local optimizer that can diverge. A fit takes
about a millisecond, which matters when the planner fits thousands of jobs per interval.

``prior`` (optional, :mod:`models.curve_prior`): curves of earlier runs of the same model (or shapes
of other models), stretched and shifted onto the job's points; it competes in the same
cross-validation. Learning-rate drops (:mod:`models.changepoint`) can restrict the families to the
newest phase (``after_drop=True``; off by default, see ``docs/models.md`` for why).

Bounds (each one keeps a thin or noisy history from predicting the impossible):

- the plateau lies at most :data:`MAX_PLATEAU_GAP` times the observed range beyond the best point;
- a metric that has stayed within [0, 1] is a fraction (accuracy, F1, hit rate): its plateau stays
  within [0, 1]; a non-negative metric (loss, WER) keeps a non-negative plateau;
- the exponential's rate is at most :data:`MAX_RATE_PER_SPAN` e-foldings over the observed span, so
  a few early points cannot claim the curve is already flat.

The family is chosen by *time-series cross-validation*: from forecast origins at 60% and 80%
of the observed points, each family is fitted on the points before and scored on predicting every
point after. Among the candidates within :data:`LATE_TOLERANCE` of the best score, the one with the
most improvement left wins: on the measured curves the usual failure is a plateau predicted too
early (``benchmarks/bench_curves.py``, ``docs/models.md``). With fewer than
:data:`MIN_POINTS_FOR_HOLDOUT` points the prior is used if there is one, else the power law. The
prediction band widens with the horizon at the rate measured by the cross-validation; the
convergence epoch gets an interval from the refits at the cross-validation origins.

With no prior, no schedule and no ``families`` restriction, and enough points to cross-validate, the
result is the *model-averaged* curve of :mod:`models.curve_ensemble` (family ``"ensemble"``): the
family chosen above averaged with two naive extrapolations (a line in epochs and in log-epochs),
weighted by their cross-validated errors (and, from 10 points, a backtest on the newest points),
so that a job whose curve no family describes is not declared to have levelled off
(``docs/models.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import stdtrit

from models.changepoint import detect_drops
from models.curve_families import FAMILIES, Fitted
from models.curve_prior import BAND_QUANTILE, CurvePrior, PriorFit, fit_prior, new_draw_factor
from models.schedule import LRSchedule

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
#: Search horizon when solving for a target epoch: this many times the observed span (then "unreachable").
SEARCH_HORIZON_FACTOR = 1000.0


@dataclass(frozen=True)
class CannotPredict:
    """Why no curve could be fitted (too few points, no variation, non-finite values)."""

    reason: str
    n_points: int = 0


@dataclass(frozen=True)
class _Piece:
    """One straight piece ``[k0, k1)`` of a tabulated curve (and of its spread), for scalar evaluation.

    ``z_at`` and ``spread_at`` repeat np.interp's arithmetic for a point inside the piece
    (``slope * (k - k0) + z0``), so they give the same floats as the array path.
    """

    k0: float
    k1: float
    z0: float
    z_slope: float
    s0: float | None
    s_slope: float | None

    def holds(self, k: float) -> bool:
        return self.k0 <= k < self.k1

    def z_at(self, k: float) -> float:
        return self.z_slope * (k - self.k0) + self.z0

    def spread_at(self, k: float) -> float | None:
        return None if self.s_slope is None or self.s0 is None else self.s_slope * (k - self.k0) + self.s0


@dataclass(frozen=True)
class _Tables:
    """A tabulated curve as arrays: epochs, badness, and the ensemble's spread (``None`` without one)."""

    epochs: NDArray[np.float64]
    z: NDArray[np.float64]
    spread: NDArray[np.float64] | None

    def piece(self, lo: float, hi: float) -> _Piece | None:
        """The straight piece holding ``[lo, hi]``; ``None`` when a table epoch lies inside, the
        interval reaches past the table, or a value is not finite (then numpy evaluates)."""
        j = int(np.searchsorted(self.epochs, lo, side="right")) - 1
        if j < 0 or j + 1 >= self.epochs.size or hi > self.epochs[j + 1]:
            return None
        k0, k1 = float(self.epochs[j]), float(self.epochs[j + 1])
        z0, z1 = float(self.z[j]), float(self.z[j + 1])
        s0 = s1 = None
        if self.spread is not None:
            s0, s1 = float(self.spread[j]), float(self.spread[j + 1])
        values = [k0, k1, z0, z1] + ([s0, s1] if s0 is not None and s1 is not None else [])
        if not all(math.isfinite(x) for x in values) or k1 <= k0:
            return None
        z_slope = (z1 - z0) / (k1 - k0)
        s_slope = (s1 - s0) / (k1 - k0) if s0 is not None and s1 is not None else None
        if not math.isfinite(z_slope) or (s_slope is not None and not math.isfinite(s_slope)):
            return None
        return _Piece(k0, k1, z0, z_slope, s0, s_slope)


class LazyFits(Sequence["CurveFit"]):
    """A sequence of fits built on first use: ``count`` of them, by ``build()`` (a picklable callable,
    e.g. a :func:`functools.partial` of a module-level function), each with ``changes`` applied
    (:func:`dataclasses.replace`).

    Why: the cross-validation refits of the model-averaged curve (``CurveFit.variants``) are read only
    by :meth:`CurveFit.convergence_interval`, while tabulating them cost a third of the fit; the planner
    fits every job on each cold call and never reads them. The length is known without building; a
    pickle carries the recipe, not the tables (the planner's fit processes send fits back pickled).
    """

    __slots__ = ("_build", "_changes", "_count", "_got")

    def __init__(self, build: Callable[[], tuple[CurveFit, ...]], count: int, changes: dict[str, Any] | None = None):
        self._build = build
        self._count = count
        self._changes = dict(changes or {})
        self._got: tuple[CurveFit, ...] | None = None

    def _fits(self) -> tuple[CurveFit, ...]:
        if self._got is None:
            got = self._build()
            if self._changes:
                got = tuple(replace(x, **self._changes) for x in got)
            self._got = got
        return self._got

    def replaced(self, **changes: Any) -> LazyFits:
        """The same fits with ``changes`` applied to each (still built on first use)."""
        return LazyFits(self._build, self._count, {**self._changes, **changes})

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> CurveFit: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[CurveFit, ...]: ...
    def __getitem__(self, i: int | slice) -> CurveFit | tuple[CurveFit, ...]:
        return self._fits()[i]

    def __iter__(self) -> Iterator[CurveFit]:
        return iter(self._fits())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # like a list: equal by content, built on demand

    def __repr__(self) -> str:
        return f"LazyFits({self._count} fits, {'built' if self._got is not None else 'not built yet'})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (LazyFits, (self._build, self._count, self._changes))


@dataclass(frozen=True)
class CurveFit:
    """A fitted learning curve with its diagnostics.

    ``residual_std`` is the weighted RMS error in value units over the fitted points; ``drift_std``
    how much the forecast error grows per epoch of horizon, estimated from the cross-validation
    (the band at epoch ``k`` is ``sqrt(residual_std² + (drift_std·(k - last_epoch))²)``);
    ``holdout_error`` is the family's cross-validated forecast error (RMS, value units) when the family
    was chosen by time-series cross-validation
    (``None`` when the series was too short to hold anything out).

    When learning-rate drops were detected (``drops``, the first epoch of each new phase) the curve
    describes the newest phase only: the family is evaluated at ``k - origin`` (``origin`` is the last
    epoch before that phase; 0 without drops) and ``first_epoch``/``n_points`` refer to that phase.
    Family ``"prior"`` is a curve taken from earlier runs (:mod:`models.curve_prior`), tabulated in
    ``table`` as (epochs, badness); ``params`` then holds its ``warp``, ``scale``, ``offset`` and
    plateau ``c``. ``variants`` are the same family refitted at each cross-validation origin: their
    spread gives :meth:`convergence_interval` (the model-averaged curve builds them on first use,
    :class:`LazyFits`).
    """

    family: Literal["hyperbola", "exponential", "power", "log_power", "prior", "schedule", "ensemble"]
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
    #: Epoch before the newest phase (the family sees ``k - origin``); 0 when no drop was seen.
    origin: float = 0.0
    #: First epoch of every new phase found by :func:`models.changepoint.detect_drops`; for the
    #: ``schedule`` family, the epochs at which the declared (or, for ``plateau``, simulated) rate drops.
    drops: tuple[float, ...] = ()
    #: Tabulated curve (epochs, badness) for the ``prior`` and ``schedule`` families; ``None`` for parametric families.
    table: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    #: The chosen family refitted at the cross-validation origins (empty when not cross-validated).
    variants: Sequence[CurveFit] = ()
    #: For the ``ensemble`` family: the members' weighted disagreement (value units, one per
    #: ``table`` epoch), added to the band; ``None`` otherwise.
    spread: tuple[float, ...] | None = None
    #: Normal quantile of the band that :meth:`epoch_interval` reads by default (two-sided ~80 % at
    #: :data:`INTERVAL_Z`; the ensemble carries its own, calibrated on the tuning runs).
    interval_z: float = INTERVAL_Z
    #: Largest standard deviation of the band (value units), whatever the horizon; ``None``: no cap.
    #: The ensemble's band is bounded by the observed range (:mod:`models.curve_ensemble`).
    band_cap: float | None = None

    # -- the curve in z (badness) space ------------------------------------------------------
    def _z(self, k: NDArray[np.float64], tab: _Tables | None = None) -> NDArray[np.float64]:
        k = np.asarray(k, dtype=float)
        if self.table is not None:
            tab = tab or self._tables()
            return np.interp(k, tab.epochs, tab.z)
        return FAMILIES[self.family].z(self.params, np.maximum(k - self.origin, 0.0))

    def _tables(self) -> _Tables:
        """``table`` and ``spread`` as arrays (callers that evaluate many times convert them once)."""
        assert self.table is not None
        spread = np.asarray(self.spread, dtype=float) if self.spread is not None else None
        return _Tables(np.asarray(self.table[0], dtype=float), np.asarray(self.table[1], dtype=float), spread)

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

    def band(self, epochs: ArrayLike, tab: _Tables | None = None) -> NDArray[np.float64]:
        """Standard deviation of the prediction at each epoch: the residual spread, growing with the
        distance beyond the last observed epoch, at most :attr:`band_cap`."""
        k = np.asarray(epochs, dtype=float)
        h = np.maximum(k - self.last_epoch, 0.0)
        with np.errstate(over="ignore"):  # huge metrics: an infinite variance, then the cap
            var = np.float64(self.residual_std) ** 2 + (self.drift_std * h) ** 2
            if self.spread is not None and self.table is not None:
                tab = tab or self._tables()
                assert tab.spread is not None
                var = var + np.interp(k, tab.epochs, tab.spread) ** 2
        sd = np.sqrt(var)
        return sd if self.band_cap is None else np.minimum(sd, self.band_cap)

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
        exact = quantile_z == 0.0 or (self.drift_std == 0.0 and self.residual_std == 0.0 and self.spread is None)
        if exact and self.table is None:
            if zt <= self.params["c"]:
                return None
            k = FAMILIES[self.family].epoch_at(self.params, zt) + self.origin
            if not math.isfinite(k) or k > horizon:
                return None
            return max(k, self.first_epoch)
        q = 0.0 if exact else quantile_z
        tab = self._tables() if self.table is not None else None

        # A tabulated curve, or a band that widens over the horizon: no closed form; scan, then bisect.
        def gap(kk: NDArray[np.float64]) -> NDArray[np.float64]:
            return self._z(kk, tab) + q * self.band(kk, tab) - zt

        grid = self.first_epoch + (horizon - self.first_epoch + 1.0) ** np.linspace(0.0, 1.0, 600) - 1.0
        if tab is not None:  # the steps of a tabulated curve must not fall between grid points
            grid = np.union1d(grid, tab.epochs[(tab.epochs > self.first_epoch) & (tab.epochs < horizon)])
        below = np.flatnonzero(gap(grid) <= 0)
        if below.size == 0:
            return None
        i = int(below[0])
        if i == 0:
            return self.first_epoch
        lo, hi = float(grid[i - 1]), float(grid[i])
        # Between two neighbouring grid points a tabulated curve is one straight piece (every table
        # epoch is a grid point): the bisection evaluates it with scalar arithmetic, the same
        # operations in the same order as np.interp and band (so the same bits), elsewhere with numpy.
        piece = tab.piece(lo, hi) if tab is not None else None
        res2 = self.residual_std**2
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            if piece is not None and piece.holds(mid):
                dh = self.drift_std * max(mid - self.last_epoch, 0.0)
                s = piece.spread_at(mid)
                sd = math.sqrt(res2 + dh * dh + s * s) if s is not None else math.sqrt(res2 + dh * dh)
                g = piece.z_at(mid) + q * sd - zt
            else:
                g = float(gap(np.array([mid]))[0])
            if g <= 0:
                hi = mid
            else:
                lo = mid
        return hi

    def epoch_seen(self, target: float, *, quantile_z: float = 0.0, cadence: float = 1.0) -> float | None:
        """When the job's *reports* (every ``cadence`` epochs after :attr:`last_epoch`) will show
        ``target``, as the planner reads its tiers; ``None``: never (within the search horizon).

        Away from the median (``quantile_z`` != 0) the crossing of the band's quantile
        (:meth:`epoch_reaching`) is shown by the report after it: its epoch on the report grid, never
        on the median's wrong side. The median itself is the smooth crossing: a noisy series shows a
        target by the first report after its crossing or before (``docs/models.md``, "Seen, not
        crossed": read on the grid, or where a noisy series first passes, the median was further off
        on the held-out runs)."""
        median = self.epoch_reaching(target)
        return median if quantile_z == 0.0 else self._seen(target, quantile_z, cadence, median)

    def _seen(self, target: float, quantile_z: float, cadence: float, median: float | None) -> float | None:
        """:meth:`epoch_seen` away from the median, given the median (the smooth crossing)."""
        step = max(float(cadence), 1e-6)
        k = self.epoch_reaching(target, quantile_z=quantile_z)
        if k is not None:
            k = self.last_epoch + step * max(math.ceil((k - self.last_epoch) / step - 1e-9), 1)
        if k is None or median is None:
            return k
        return max(k, median) if quantile_z > 0 else min(k, median)

    def seen_interval(self, target: float, z: float | None = None, *, cadence: float = 1.0) -> tuple[float | None, float | None]:
        """(optimistic, pessimistic) :meth:`epoch_seen` of ``target`` at ``-z`` and ``z`` (default
        :attr:`interval_z`): :meth:`epoch_interval` read at the reports that will show its ends."""
        z = self.interval_z if z is None else z
        median = self.epoch_reaching(target)  # once, for both ends
        return self._seen(target, -z, cadence, median), self._seen(target, z, cadence, median)

    def epoch_interval(self, target: float, z: float | None = None) -> tuple[float | None, float | None]:
        """(optimistic, pessimistic) epochs to ``target`` at ``±z`` standard deviations of the band
        (default :attr:`interval_z`); the pessimistic end is ``None`` when that side never gets there."""
        z = self.interval_z if z is None else z
        return self.epoch_reaching(target, quantile_z=-z), self.epoch_reaching(target, quantile_z=z)

    def convergence_epoch(self, tolerance: float) -> float:
        """First epoch at which improvement per epoch drops below ``tolerance`` (value units/epoch)
        and stays below it."""
        tol = max(tolerance, 1e-12)
        if self.table is not None:
            e, zz = np.asarray(self.table[0]), np.asarray(self.table[1])
            rate = -np.diff(zz) / np.maximum(np.diff(e), 1e-12)
            steep = np.flatnonzero(rate >= tol)
            k = float(e[steep[-1] + 1]) if steep.size else float(e[0])
        else:
            k = FAMILIES[self.family].flat_from(self.params, tol) + self.origin
        return max(k, self.first_epoch) if math.isfinite(k) else self.first_epoch

    def convergence_interval(self, tolerance: float) -> tuple[float | None, float | None]:
        """(earliest, latest) convergence epoch over the fit and its cross-validation refits.

        ``(None, None)`` when the series was too short to cross-validate: there is nothing to measure
        the spread with.
        """
        if not self.variants:
            return None, None
        got = [self.convergence_epoch(tolerance), *(v.convergence_epoch(tolerance) for v in self.variants)]
        return min(got), max(got)


#: The newest reports whose spacing says how often a job reports (:func:`report_cadence`).
CADENCE_POINTS = 16


def report_cadence(epochs: ArrayLike) -> float:
    """Epochs between a series' newest reports (the median positive gap of the newest
    :data:`CADENCE_POINTS`; 1 with fewer than two): where :meth:`CurveFit.epoch_seen` reads a report.
    Read on the whole series, before any thinning for the fit."""
    k = np.asarray(epochs, dtype=float).ravel()
    gaps = np.diff(k[-CADENCE_POINTS:])
    gaps = gaps[gaps > 0]
    return float(np.median(gaps)) if gaps.size else 1.0


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


def _predict_z(family: str, params: dict[str, float], k: NDArray[np.float64]) -> NDArray[np.float64]:
    return FAMILIES[family].z(params, k)


def _natural_range(v: Arr) -> tuple[float, float]:
    """[0, 1] for a fraction (accuracy, F1, hit rate), [0, inf) for a non-negative metric (loss, WER)."""
    if v.size and v.min() >= 0.0 and v.max() <= 1.0:
        return (0.0, 1.0)
    if v.size and v.min() >= 0.0:
        return (0.0, math.inf)
    return (-math.inf, math.inf)


def fit_learning_curve(
    epochs: ArrayLike,
    values: ArrayLike,
    direction: Direction,
    *,
    families: tuple[str, ...] | None = None,
    prior: CurvePrior | None = None,
    after_drop: bool = False,
    schedule: LRSchedule | None = None,
) -> CurveFit | CannotPredict:
    """Fit the best family to ``(epoch, value)`` points.

    ``families`` restricts the choice (names from :data:`FAMILIES`); by default all compete.
    ``prior`` (optional): curves of similar earlier runs (:class:`models.curve_prior.CurvePrior`); it
    competes with the families in the cross-validation, is used alone when there are too few points
    to cross-validate, and lets a same-task prior predict from 1-2 points. ``None`` (the default)
    keeps the prior-free behaviour. ``after_drop``: look for learning-rate drops
    (:mod:`models.changepoint`) and fit only the newest phase; off by default because, measured on
    the real curves, the newest phase alone cannot foresee the *next* drop and predicted worse than
    the whole history (``docs/models.md``); the detected drops are then listed in ``CurveFit.drops``.

    ``schedule`` (optional): the job's declared learning-rate schedule (:mod:`models.schedule`).
    Any kind but ``constant`` (which tells nothing a prefix does not) switches to the schedule-aware
    curve of :mod:`models.schedule_curve`, which predicts the drops and the annealed end the
    families cannot see; ``families``, ``prior`` and ``after_drop`` are then not used.

    Non-finite points and negative epochs are dropped. Returns :class:`CannotPredict` (never raises)
    when fewer than :data:`MIN_POINTS` usable points remain or the values do not vary (and no prior
    can speak for them).
    """
    if schedule is not None and schedule.kind != "constant":
        # Imported here: models.schedule_curve builds on this module's CurveFit and helpers.
        from models.schedule_curve import fit_schedule_curve

        return fit_schedule_curve(epochs, values, direction, schedule)
    k, v = _clean(epochs, values)
    n = int(k.size)
    sign = 1.0 if direction == "lower" else -1.0
    value_range = _natural_range(v)
    with np.errstate(all="ignore"):
        unchanged = n > 0 and float(np.ptp(v)) <= 1e-12 * max(1.0, float(np.abs(v).max()))
    if n < MIN_POINTS or unchanged:
        alone = _prior_only(k, v, direction, prior, value_range) if (prior is not None and n > 0) else None
        if alone is not None:
            return alone
        if n < MIN_POINTS:
            return CannotPredict(f"only {n} usable point(s); need {MIN_POINTS}", n)
        return CannotPredict("the metric has not changed", n)

    # A learning-rate drop starts a new phase: the families and the prior see only the newest one
    # (the families count epochs from the last epoch before it; the prior keeps absolute epochs, so
    # its references' own drops stay where they were).
    found = detect_drops(sign * v) if after_drop else []
    start = found[-1] if found else 0
    with np.errstate(all="ignore"):
        if start and float(np.ptp(v[start:])) <= 1e-12 * max(1.0, float(np.abs(v[start:]).max())):
            start = 0  # a phase without variation cannot be fitted on its own
    origin = float(k[start - 1]) if start else 0.0
    kp, vp = k[start:] - origin, v[start:]
    # Fit in standardised units (z = shift + scale * u) so huge or tiny metrics stay well conditioned;
    # parameters are mapped back to value units at the end.
    with np.errstate(all="ignore"):
        shift = float(np.mean(sign * vp))
        scale = float(np.ptp(vp))
    if not (math.isfinite(shift) and math.isfinite(scale)):
        return CannotPredict("values too large to fit", n)
    z = (sign * vp - shift) / scale
    w = _recency_weights(kp)
    # Natural bounds of the metric, as a floor on the plateau in z (badness) units.
    if direction == "higher" and value_range[1] == 1.0:
        floor_z = -1.0  # a fraction cannot exceed 1
    elif direction == "lower" and v.min() >= 0.0:
        floor_z = 0.0  # a non-negative metric stays non-negative
    else:
        floor_z = -math.inf
    c_floor = (floor_z - shift) / scale

    prior_rows: Callable[[list[int]], list[PriorFit | None]] | None = None
    if prior is not None:
        w_all = _recency_weights(k)

        def prior_rows(counts: list[int]) -> list[PriorFit | None]:
            idx = np.arange(n)[None, :]
            seen = (idx >= start) & (idx < start + np.array(counts)[:, None])
            return fit_prior(k, sign * v, np.where(seen, w_all, 0.0), prior, sign)

    got: CurveFit | CannotPredict | None = None
    if families is None and prior is None:
        # Imported here: models.curve_ensemble builds on this module's CurveFit.
        from models.curve_ensemble import fit_ensemble

        with np.errstate(all="ignore"):
            got = fit_ensemble(kp, z, w, direction, v, shift, scale, c_floor, origin)
    if got is None:
        chosen = {name: FAMILIES[name].fit for name in (families or tuple(FAMILIES))}
        with np.errstate(all="ignore"):
            got = _fit(kp, z, w, direction, v, shift, scale, c_floor, chosen, prior_rows, origin)
    if isinstance(got, CurveFit):
        drop_epochs = tuple(float(k[i]) for i in found)
        variants = got.variants
        if isinstance(variants, LazyFits):
            variants = variants.replaced(value_range=value_range, drops=drop_epochs)
        else:
            variants = tuple(replace(x, value_range=value_range, drops=drop_epochs) for x in variants)
        got = replace(got, value_range=value_range, drops=drop_epochs, variants=variants)
    return got


def _prior_only(k: Arr, v: Arr, direction: Direction, prior: CurvePrior, value_range: tuple[float, float]) -> CurveFit | None:
    """The prior alone, for histories too short (or too flat) for any family; ``None`` if it cannot help."""
    sign = 1.0 if direction == "lower" else -1.0
    with np.errstate(all="ignore"):
        pf = fit_prior(k, sign * v, _recency_weights(k)[None, :], prior, sign)[0]
    if pf is None:
        return None
    last = float(k[-1])
    return CurveFit(
        family="prior",
        direction=direction,
        params=_prior_params(pf),
        residual_std=math.sqrt(pf.sse / max(float(k.size), 1.0)),
        # No cross-validation: the band is the references' disagreement at each epoch.
        drift_std=0.0 if pf.spread is not None else pf.spread_end / max(float(pf.epochs[-1]) - last, 1.0),
        spread=tuple(float(x) for x in pf.spread) if pf.spread is not None else None,
        holdout_error=None,
        n_points=int(k.size),
        first_epoch=float(k[0]),
        last_epoch=last,
        last_value=float(v[-1]),
        value_range=value_range,
        table=(tuple(float(x) for x in pf.epochs), tuple(float(x) for x in pf.z)),
    )


def _prior_params(pf: PriorFit) -> dict[str, float]:
    return {"c": float(pf.z[-1]), "warp": pf.warp, "scale": pf.scale, "offset": pf.offset, "references": float(pf.references)}


def horizon_drift(err: Arr, h: Arr, sd: float) -> float:
    """How fast forecast errors grow with the horizon (per epoch), from errors ``err`` made ``h``
    epochs ahead by a fit whose residual spread is ``sd``: ``err^2 ~ sd^2 + (drift * h)^2``, so
    ``drift^2 = mean(max(err^2 - sd^2, 0) / h^2)`` (a horizon below one epoch counts as one). The
    band's drift of every curve model (this module's, :mod:`models.curve_ensemble`'s,
    :mod:`models.schedule_curve`'s), in the units of ``err``."""
    return math.sqrt(float(np.mean(np.maximum(err**2 - sd**2, 0.0) / np.maximum(h, 1.0) ** 2)))


def _fit(
    k: NDArray[np.float64],
    z: NDArray[np.float64],
    w: NDArray[np.float64],
    direction: Direction,
    v: NDArray[np.float64],
    shift: float,
    scale: float,
    c_floor: float,
    fitters: dict[str, Callable[[Arr, Arr, Arr, float], list[Fitted]]],
    prior_rows: Callable[[list[int]], list[PriorFit | None]] | None,
    origin: float,
) -> CurveFit | CannotPredict:
    """Choose and fit a family on one phase: ``k`` counts epochs from ``origin``, ``z`` is standardised."""
    n = int(k.size)
    # A candidate's fit on some weight row: family parameters (standardised units) or a prior curve.
    Fit = tuple[dict[str, float], float] | PriorFit

    def predict(name: str, fit: Fit, kk: Arr) -> Arr:
        if isinstance(fit, PriorFit):
            return (fit.at(kk + origin) - shift) / scale
        return FAMILIES[name].z(fit[0], kk)

    def plateau(name: str, fit: Fit) -> float:
        return (float(fit.z[-1]) - shift) / scale if isinstance(fit, PriorFit) else fit[0]["c"]

    # Time-series cross-validation: from several forecast origins, fit on the points before and score
    # the prediction of every point after (RMS, badness units).
    cv: dict[str, float] = {}
    forecast: dict[str, tuple[Arr, Arr]] = {}  # per candidate: forecast errors and their horizons
    full: dict[str, Fit] = {}  # per candidate: the fit on every point
    at_origins: dict[str, list[Fit]] = {}  # per candidate: the fits at the forecast origins
    origins = [o for o in sorted({int(round(n * f)) for f in CV_ORIGINS}) if MIN_POINTS + 1 <= o < n]
    runs: dict[str, list[Fit | None]] = {}
    if n >= MIN_POINTS_FOR_HOLDOUT and origins:
        # One weight row per forecast origin (points after it unseen), plus one with every point:
        # each candidate is fitted for all of them in a single call.
        seen = np.arange(n)[None, :] < np.array([*origins, n])[:, None]
        rows = np.where(seen, w, 0.0)
        for name, fitter in fitters.items():
            runs[name] = list(fitter(k, z, rows, c_floor))
        if prior_rows is not None:
            runs["prior"] = list(prior_rows([*origins, n]))
        for name, got in runs.items():
            *cvfits, last = got
            if last is not None:
                full[name] = last
            if any(g is None for g in cvfits):
                continue
            errs: list[float] = []
            pairs: list[tuple[Arr, Arr]] = []
            for o, g in zip(origins, cvfits, strict=True):
                assert g is not None
                err = z[o:] - predict(name, g, k[o:])
                errs.append(float(np.sqrt(np.mean(err**2))))
                pairs.append((err, k[o:] - k[o - 1]))
            cv[name] = float(np.mean(errs))
            forecast[name] = (np.concatenate([e for e, _ in pairs]), np.concatenate([h for _, h in pairs]))
            at_origins[name] = [g for g in cvfits if g is not None]

    # Among the candidates that forecast about as well as the best (within LATE_TOLERANCE), take the
    # one with the most improvement left: measured on real curves, the usual failure is a plateau
    # reached too early, not too late. Too few points to cross-validate: the prior if there is one,
    # else the power law.
    fallback = DEFAULT_FAMILY if DEFAULT_FAMILY in fitters else next(iter(fitters))
    family: str | None = None
    chosen_fit: Fit | None = None
    if cv:
        order = sorted(cv, key=lambda nm: (cv[nm], nm))
        best = cv[order[0]]
        close = {nm: f for nm in order if cv[nm] <= LATE_TOLERANCE * best and (f := full.get(nm)) is not None}
        if close:
            family = min(close, key=lambda nm: (plateau(nm, close[nm]), nm))  # lowest plateau in badness units
            chosen_fit = close[family]
    if family is None and prior_rows is not None and not cv:
        pf = prior_rows([n])[0]
        if pf is not None:
            family, chosen_fit = "prior", pf
    if family is None:
        for name in [*sorted(cv, key=lambda nm: (cv[nm], nm)), fallback, *fitters]:
            if name == "prior" or name not in fitters:
                continue
            one = full[name] if name in full else fitters[name](k, z, w[None, :], c_floor)[0]
            if one is not None:
                family, chosen_fit = name, one
                break
    if family is None or chosen_fit is None:
        return CannotPredict("no family fits these points", n)

    dof = max(n - 3, 1)
    # How fast forecast errors grow with the horizon, from the cross-validation of this candidate.
    sse = float((w * (z - predict(family, chosen_fit, k)) ** 2).sum())
    sd_u = math.sqrt(sse / float(w.sum()) * n / dof)
    drift = 0.0
    cap: float | None = None
    if family in forecast:
        err, h = forecast[family]
        drift = scale * horizon_drift(err, h, sd_u)
    elif not isinstance(chosen_fit, PriorFit) and family in fitters:
        # Too short to cross-validate: the forecasts of its prefixes, or at three points (no prefix
        # to forecast from) how far the families part.
        if n > MIN_POINTS:
            drift = scale * _short_drift(fitters[family], family, k, z, w, c_floor, sd_u)
        else:
            drift = scale * _family_drift(fitters, k, z, w, c_floor)
        # As the averaged curve's (models.curve_ensemble): never wider than what the job has shown.
        cap = max(scale, scale * sd_u)
    elif isinstance(chosen_fit, PriorFit):
        drift = chosen_fit.spread_end / max(float(chosen_fit.epochs[-1]) - float(k[-1] + origin), 1.0)
    cv_value_units = {name: scale * e for name, e in cv.items()}

    def build(fit: Fit, last_idx: int) -> CurveFit:
        if isinstance(fit, PriorFit):
            params = _prior_params(fit)
            table: tuple[tuple[float, ...], tuple[float, ...]] | None = (
                tuple(float(x) for x in fit.epochs),
                tuple(float(x) for x in fit.z),
            )
        else:
            params, table = _to_value_units(family, fit[0], shift, scale), None
        return CurveFit(
            family=family,  # type: ignore[arg-type]
            direction=direction,
            params=params,
            residual_std=scale * sd_u,
            drift_std=drift,
            holdout_error=cv_value_units.get(family),
            n_points=n,
            first_epoch=float(k[0] + origin),
            last_epoch=float(k[last_idx] + origin),
            last_value=float(v[v.size - n + last_idx]),  # v holds every point, the phase is its tail
            candidates=cv_value_units,
            origin=origin if table is None else 0.0,
            table=table,
            band_cap=cap,
        )

    main = build(chosen_fit, n - 1)
    variants = tuple(build(g, o - 1) for o, g in zip(origins, at_origins.get(family, []), strict=False))
    return replace(main, variants=variants)


def _short_drift(
    fitter: Callable[[Arr, Arr, Arr, float], list[Fitted]],
    family: str,
    k: Arr,
    z: Arr,
    w: Arr,
    c_floor: float,
    sd_u: float,
) -> float:
    """How fast the band widens (standardised units per epoch) for a history too short to
    cross-validate (``MIN_POINTS < n < MIN_POINTS_FOR_HOLDOUT``): the family refitted on every prefix
    of at least :data:`MIN_POINTS` points forecasts the points after it, as the cross-validation does,
    and the drift those ``m`` errors give is scaled by Student's ``t`` with ``m`` degrees of freedom
    over the normal quantile (a variance read off ``m`` errors). 0 when no prefix fits."""
    n = int(k.size)
    origins = list(range(MIN_POINTS, n))
    rows = np.where(np.arange(n)[None, :] < np.array(origins)[:, None], w, 0.0)
    errs: list[Arr] = []
    hs: list[Arr] = []
    for o, got in zip(origins, fitter(k, z, rows, c_floor), strict=True):
        if got is None:
            continue
        errs.append(z[o:] - FAMILIES[family].z(got[0], k[o:]))
        hs.append(k[o:] - k[o - 1])
    if not errs:
        return 0.0
    err, h = np.concatenate(errs), np.concatenate(hs)
    ok = np.isfinite(err)
    if not ok.any():
        return 0.0
    return few_errors_drift(err[ok], h[ok], sd_u)


def few_errors_drift(err: Arr, h: Arr, sd: float) -> float:
    """:func:`horizon_drift` of a handful of forecast errors (a history too short to cross-validate),
    scaled by Student's ``t`` with as many degrees of freedom as errors over the normal quantile (a
    variance read off ``m`` errors)."""
    return horizon_drift(err, h, sd) * float(stdtrit(err.size, BAND_QUANTILE)) / INTERVAL_Z


def parting_horizons(k: Arr) -> Arr:
    """Where :func:`parting_drift` reads the curves: the next ``n`` report steps after the ``n``
    points ``k``, as far ahead as the history reaches back."""
    n = int(k.size)
    step = max(float(k[-1] - k[0]) / max(n - 1, 1), 1e-9)
    return step * np.arange(1, n + 1, dtype=np.float64)


def parting_drift(ahead: Arr, h: Arr) -> float:
    """The drift that the parting of ``m`` curves that fit the same few points gives (``ahead``:
    ``m`` rows, each curve read at horizons ``h``): the true curve taken as one more draw from them,
    their deviations about their mean times :func:`models.curve_prior.new_draw_factor`. 0 for fewer
    than two."""
    m = int(ahead.shape[0])
    if m < 2:
        return 0.0
    deviation = (ahead - ahead.mean(axis=0)).ravel()
    return horizon_drift(deviation, np.tile(h, m), 0.0) * new_draw_factor(m)


def _family_drift(
    fitters: dict[str, Callable[[Arr, Arr, Arr, float], list[Fitted]]],
    k: Arr,
    z: Arr,
    w: Arr,
    c_floor: float,
) -> float:
    """How fast the band widens (standardised units per epoch) for a history of :data:`MIN_POINTS`
    points: no prefix is left to forecast from (:func:`_short_drift`), and every family fits the
    three points about as well, so the only word on the horizon is how far the families part after
    them. Each is read at the next ``n`` report steps (as far ahead as the history reaches back), and
    the drift is what their parting gives (:func:`parting_drift`; 0 when fewer than two fit).
    Before, the band at three points was the residual alone, which three points all but interpolate:
    it held 8-28 % of the future points (``docs/models.md``, "Three points")."""
    h = parting_horizons(k)
    ahead = []
    for name, fitter in fitters.items():
        got = fitter(k, z, w[None, :], c_floor)[0]
        if got is None:
            continue
        p = FAMILIES[name].z(got[0], k[-1] + h)
        if np.all(np.isfinite(p)):
            ahead.append(p)
    return parting_drift(np.array(ahead).reshape(len(ahead), h.size), h)


def _to_value_units(family: str, p: dict[str, float], shift: float, scale: float) -> dict[str, float]:
    """Map parameters fitted on ``u = (z - shift) / scale`` back to ``z``."""
    return FAMILIES[family].rescale(p, shift, scale)


#: The point cleaning, recency weights and natural range shared with :mod:`models.schedule_curve`.
clean_points = _clean
recency_weights = _recency_weights
natural_range = _natural_range
