"""Schedule-aware learning curves: progress in cumulative learning rate, plus a term for the rate itself.

When a job declares its learning-rate schedule (:class:`models.schedule.LRSchedule`) the curve is

    ``z(k) = c + d * <h(S)>_k + e * r(k)^p``

in the badness coordinate ``z`` of :mod:`models.curves` (lower is better), with

- ``S(k) = ∫_0^k m(t) dt`` [epochs at the initial rate]: the *cumulative* learning rate, the time
  axis on which optimisation progresses (a step drop slows it tenfold, a cosine tail stops it, a
  warm-up starts it slowly);
- ``h`` a decreasing shape on that axis: ``power`` ``(1 + S/s0)^-alpha`` (``alpha`` [-] in
  (0, 1], ``s0`` [epochs] > 0: a small ``s0`` is a fast first drop followed by a long tail) or
  ``exponential`` ``exp(-rate * S)`` (``rate`` [1/epoch] > 0); ``<h(S)>_k`` is its mean over the
  epoch ending at ``k``, since a training loss is the mean over the epoch's batches (it matters in
  the first epochs, where ``h`` falls fast within one);
- ``r(k)`` [-]: the rate the loss reflects at ``k`` (the multiplier averaged over the epoch, or
  followed with a lag of ``lag`` epochs): the noise floor of stochastic gradient descent scales with
  the rate, so *lowering* the rate *lowers* the loss at once (the jump after a step drop, the last
  descent of a cosine); ``e`` [z-unit] >= 0 is that gain for annealing the rate from its initial
  value to zero, ``p`` (1 or 2, :data:`RATE_POWERS`) how it is spread over the rate's fall;
- ``c`` [z-unit]: the level at infinite progress and zero rate; ``d`` [z-unit] >= 0: the gap at
  ``S = 0``.

This is the form of Tissue et al., "Scaling law with learning rate annealing" (2024):
``L = L0 + A * S1^-alpha - C * S2`` with ``S1`` the forward area (our ``S``) and ``S2`` the
annealing area (our ``1 - r``, with the lag playing the part of their momentum), applied per epoch.

Fitting: for each grid point of (shape parameters, ``lag``, ``p``) the rest is linear in ``(c, d, e)``:
weighted least squares (recent points weigh more, as in :mod:`models.curves`). Until the rate has
changed in the observed points, ``e`` cannot be told apart from ``c``; a ridge pulls it towards
:data:`ANNEAL_SHARE` times the range observed so far, worth :data:`ANNEAL_PRIOR_WEIGHT` of the
data's weight: the prior sets the size of a drop not yet seen; once one has been seen, the data
do. Bounds: ``d >= 0``, ``e >= 0`` (else refitted with ``e = 0``), the plateau above the metric's
floor. ``power`` and ``exponential`` compete by time-series cross-validation from 60 % and 80 % of
the points (:mod:`models.curves`); with fewer than 6 points the power shape is used.

``plateau`` schedules: the drops already made are found by replaying torch's rule on the observed
values (:func:`models.schedule.plateau_drops`); ahead, the fitted curve is rolled forward epoch by
epoch and the rate lowered once it has improved by less than the residual noise for ``patience``
epochs (noise, not the 1e-4 threshold, is what makes a real curve miss a new best).

The result is a :class:`models.curves.CurveFit` of family ``"schedule"`` whose curve is tabulated
(``table``) up to the end of the schedule (or far beyond the data when it never ends); ``params``
holds ``c`` (the level at the end of the table), ``c_inf``, ``d``, ``e``, the shape parameters,
``lag`` and ``rate_power``, in value units.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from models.curve_families import MAX_PLATEAU_GAP
from models.curves import (
    CV_ORIGINS,
    LATE_TOLERANCE,
    MIN_POINTS,
    MIN_POINTS_FOR_HOLDOUT,
    SEARCH_HORIZON_FACTOR,
    CannotPredict,
    CurveFit,
    Direction,
    clean_points,
    few_errors_drift,
    horizon_drift,
    natural_range,
    parting_drift,
    parting_horizons,
    recency_weights,
)
from models.schedule import LRSchedule, plateau_drops

Arr = NDArray[np.float64]

#: Lags (epochs) with which the loss follows the rate (0: the epoch's mean rate).
LAGS = (0.0, 1.0, 3.0)
#: Powers ``p`` of the rate in the noise-floor term ``e * r^p``, one per grid point (the data choose):
#: 1, the stationary excess loss of SGD in proportion to the rate; 2, more than in proportion, as
#: when the sharpest directions sit near the stability edge (per direction of curvature ``l`` the
#: excess grows like ``eta / (2 - eta * l)``), so that most of the gain comes while the rate is
#: still high and little from its last tenths.
RATE_POWERS = (1.0, 2.0)
#: Grid of the power shape's exponent: 0.05 to 1. Learning curves in steps (or in cumulative rate)
#: follow power laws with exponents below 1 (Kaplan et al. 2020: 0.76 in steps; Tissue et al. 2024
#: fit about 0.5 on the forward area); an exponent of 2-3 would exhaust the progress within a few
#: epochs, which is what the exponential shape is for. Without this bound the fast first epochs
#: dragged the exponent to 2-3 and the curve stopped progressing early (docs/models.md).
POWER_ALPHAS = 0.05 * (1.0 / 0.05) ** np.linspace(0.0, 1.0, 16)
#: ... and of its scale ``s0`` [epochs at the initial rate]: how soon the power-law tail begins (with
#: the exponent at most 1, a small ``s0`` is what fits a first epoch that falls fast).
POWER_SCALES = (0.1, 0.3, 1.0, 3.0)
#: Grid of the exponential's rate (per epoch at the initial rate, relative to the cumulative rate
#: observed: from 0.05 to 5 e-foldings over it).
EXP_RATES = 0.05 * (5.0 / 0.05) ** np.linspace(0.0, 1.0, 16)
#: Kinds whose rate changes within an epoch (stepped every batch); the others are stepped once an
#: epoch, so the cumulative rate is linear within it.
PER_BATCH_KINDS = ("warmup_cosine", "warmup_linear")
#: Slices of an epoch over which the progress term is averaged for a per-batch kind.
EPOCH_SLICES = 8
#: Prior size of the annealing gain ``e``, as a share of the range observed so far. Chosen on the
#: *tuning* runs only (``benchmarks/data/schedules``, task ``digits_mlp``): their fits on all epochs
#: give a median of 0.25 of the range seen in the first quarter
#: (``python benchmarks/schedule_curves.py --learn-prior``); 0.3 is the value on a grid from 0.25 to
#: 0.5 that minimised the sum of the median epochs-to-target and final-value errors at 25 % observed
#: on those runs (larger shares reach targets on time but overshoot the final level; docs/models.md).
ANNEAL_SHARE = 0.3
#: Weight of that prior, as a share of the total weight of the observed points.
ANNEAL_PRIOR_WEIGHT = 0.05
#: A simulated plateau drop smaller than this (in multiples of the initial rate) ends the simulation.
MIN_RATE_CHANGE = 1e-3
#: Epochs tabulated one by one after the last observation (then a geometric grid to the horizon).
DENSE_EPOCHS = 2000
#: Epochs of the simulated plateau curve computed at a time.
ROLL_CHUNK = 64
TAIL_POINTS = 200

SHAPES = ("power", "exponential")


def _epoch_slices(schedule: LRSchedule, k: Arr) -> tuple[Arr, Arr]:
    """Cumulative rate at the start and the end (each (n, J)) of ``J`` equal slices in time of the epoch
    ending at each ``k``: one slice for kinds stepped once an epoch (``S`` is linear within it), else
    :data:`EPOCH_SLICES`."""
    slices = EPOCH_SLICES if schedule.kind in PER_BATCH_KINDS else 1
    lo = np.maximum(k - 1.0, 0.0)
    edges = lo[:, None] + (k - lo)[:, None] * (np.arange(slices + 1) / slices)[None, :]
    S = schedule.integral(edges)
    return S[:, :-1], S[:, 1:]


def _mean_power(Sa: Arr, Sb: Arr, scale: float, alphas: ArrayLike) -> Arr:
    """``(1 + S/scale)^-alpha`` averaged over the epoch, for each alpha (A, n): a training loss is the
    mean over the epoch's batches. The exact mean over each slice's ``[Sa, Sb]`` (closed form),
    averaged over the slices; where the rate is ~0 (``S`` does not move), the value there."""
    a = np.asarray(alphas, dtype=float)[:, None, None]
    dS = Sb - Sa
    still = dS <= 1e-6 * (1.0 + Sb)
    xa, xb = np.log1p(Sa / scale), np.log1p(Sb / scale)
    one = np.abs(1.0 - a) < 1e-12
    g = np.where(one, 1.0, 1.0 - a)
    # An antiderivative of (1 + S/scale)^-a: scale * ((1 + S/scale)^(1-a) - 1) / (1 - a), or
    # scale * ln(1 + S/scale) at a = 1.
    with np.errstate(all="ignore"):
        H = np.where(one, xb - xa, (np.expm1(g * xb) - np.expm1(g * xa)) / g)
        mean = scale * H / np.where(still, 1.0, dS)
    at = (1.0 + 0.5 * (Sa + Sb) / scale) ** (-a)
    out: Arr = np.where(still, at, mean).mean(2)
    return out


def _mean_exp(Sa: Arr, Sb: Arr, rates: ArrayLike) -> Arr:
    """``exp(-rate * S)`` averaged over the epoch, for each rate (R, n) (as :func:`_mean_power`)."""
    q = np.asarray(rates, dtype=float)[:, None, None]
    dS = Sb - Sa
    still = dS <= 1e-6 * (1.0 + Sb)
    safe = np.where(still, 1.0, dS)
    mean = np.exp(-q * Sa) * -np.expm1(-q * safe) / (q * safe)
    out: Arr = np.where(still, np.exp(-q * 0.5 * (Sa + Sb)), mean).mean(2)
    return out


def _mean_h(Sa: Arr, Sb: Arr, shape: dict[str, float]) -> Arr:
    """The progress shape ``h`` of one grid point, averaged over the epoch (n,)."""
    if "alpha" in shape:
        return _mean_power(Sa, Sb, shape["scale"], [shape["alpha"]])[0]
    return _mean_exp(Sa, Sb, [shape["rate"]])[0]


def _design(schedule: LRSchedule, k: Arr, s_scale: float) -> tuple[Arr, list[dict[str, float]], Arr, Arr]:
    """Basis rows for every grid point: ``h`` (G, n), the rate term ``r`` (G, n), the shape id per row
    (0 power, 1 exponential) and the grid parameters."""
    hs, rs, params, shape = [], [], [], []
    Sa, Sb = _epoch_slices(schedule, k)
    h_pow = {s0: _mean_power(Sa, Sb, s0, POWER_ALPHAS) for s0 in POWER_SCALES}
    h_exp = _mean_exp(Sa, Sb, EXP_RATES / s_scale)
    rate_at = {lag: schedule.cumulative(k, lag=lag)[1] for lag in LAGS}
    for lag, power in itertools.product(LAGS, RATE_POWERS):
        r = rate_at[lag] ** power
        for s0 in POWER_SCALES:
            for i, a in enumerate(POWER_ALPHAS):
                hs.append(h_pow[s0][i])
                rs.append(r)
                params.append({"alpha": float(a), "scale": float(s0), "lag": lag, "rate_power": power})
                shape.append(0.0)
        for i, q in enumerate(EXP_RATES):
            hs.append(h_exp[i])
            rs.append(r)
            params.append({"rate": float(q / s_scale), "lag": lag, "rate_power": power})
            shape.append(1.0)
    return np.array(hs), params, np.array(rs), np.array(shape)


def _solve(h: Arr, r: Arr, z: Arr, W: Arr, c_floor: float) -> tuple[Arr, Arr]:
    """Bounded ridge least squares of ``z ≈ c + d h + e r`` for every weight row (O) and grid row (G).

    The bounds ``c >= c_floor`` and ``e >= 0`` are met exactly by solving on every face of them (free,
    ``e = 0``, ``c = c_floor``, both) and keeping the best solution that breaks none; ``d >= 0`` and
    the plateau's gap are checked. Returns the coefficients (O, G, 3) and the penalised weighted SSE
    (O, G), ``inf`` where no face qualifies."""
    G, n = h.shape[0], z.size
    X = np.stack([np.ones((G, n)), h, r], axis=2)  # (G, n, 3)
    # Normal equations per weight row and grid row (matmul: several times faster than einsum here).
    A = np.matmul((X[None] * W[:, None, :, None]).transpose(0, 1, 3, 2), X[None])  # (O, G, 3, 3)
    b = np.matmul((W * z)[:, None, None, :], X[None])[:, :, 0, :]  # (O, G, 3)
    obs = W > 0
    zmin = np.where(obs, z, np.inf).min(1)
    span = np.maximum(np.where(obs, z, -np.inf).max(1) - zmin, 1e-12)
    kappa = ANNEAL_PRIOR_WEIGHT * W.sum(1)  # (O,)
    e0 = ANNEAL_SHARE * span
    A[:, :, 2, 2] += kappa[:, None]
    b[:, :, 2] += (kappa * e0)[:, None]
    A += 1e-10 * np.eye(3) * np.trace(A, axis1=2, axis2=3)[..., None, None]
    floor = c_floor if math.isfinite(c_floor) else None
    faces: list[dict[int, float]] = [{}, {2: 0.0}]
    if floor is not None:
        faces += [{0: floor}, {0: floor, 2: 0.0}]
    best_beta = np.zeros(A.shape[:2] + (3,))
    best_sse = np.full(A.shape[:2], np.inf)
    for fixed in faces:
        free = [i for i in range(3) if i not in fixed]
        beta = np.zeros(A.shape[:2] + (3,))
        rhs = b[..., free].copy()
        for i, val in fixed.items():
            beta[..., i] = val
            rhs -= A[..., free, i] * val
        with np.errstate(all="ignore"):
            beta[..., free] = np.linalg.solve(A[..., free, :][..., :, free], rhs[..., None])[..., 0]
        zhat = np.matmul(X[None], beta[..., None])[..., 0]
        sse = (W[:, None, :] * (z - zhat) ** 2).sum(2) + kappa[:, None] * (beta[..., 2] - e0[:, None]) ** 2
        c, d, e = beta[..., 0], beta[..., 1], beta[..., 2]
        # The plateau: above the metric's floor, and at most MAX_PLATEAU_GAP observed ranges (plus
        # the annealing gain) beyond the best point.
        ok = np.isfinite(sse) & (d >= 0) & (e >= 0) & (c >= (zmin - MAX_PLATEAU_GAP * span)[:, None] - e)
        if floor is not None:
            ok &= c >= floor - 1e-12
        better = ok & (sse < best_sse)
        best_beta = np.where(better[..., None], beta, best_beta)
        best_sse = np.where(better, sse, best_sse)
    return best_beta, best_sse


def _tab_epochs(k: Arr, schedule: LRSchedule) -> Arr:
    """Epochs of the tabulated curve: the observed ones, every epoch for :data:`DENSE_EPOCHS`, then a
    geometric tail to the search horizon (or to the end of the schedule)."""
    last = float(k[-1])
    span = max(last - float(k[0]), 1.0)
    horizon = min(last + SEARCH_HORIZON_FACTOR * span, schedule.end + 1.0)
    dense = np.arange(math.floor(last) + 1.0, min(horizon, last + DENSE_EPOCHS) + 1.0)
    tail = (
        np.geomspace(max(dense[-1] if dense.size else last, 1.0), max(horizon, 1.0), TAIL_POINTS)
        if horizon > last + DENSE_EPOCHS
        else np.zeros(0)
    )
    return np.unique(np.concatenate([k, dense, tail]))


def _curve(schedule: LRSchedule, shape: dict[str, float], beta: Arr, grid: Arr) -> Arr:
    """The fitted curve (standardised units) at ``grid`` epochs for a fixed schedule."""
    _, r1 = schedule.cumulative(grid, lag=shape["lag"])
    r = r1 ** shape["rate_power"]
    h = _mean_h(*_epoch_slices(schedule, grid), shape)
    return beta[0] + beta[1] * h + beta[2] * r


def _roll_plateau(schedule: LRSchedule, shape: dict[str, float], beta: Arr, k: Arr, noise: float) -> LRSchedule:
    """Simulate ``ReduceLROnPlateau`` on the fitted curve after the last observation: the rate drops once
    the curve has improved by less than ``noise`` for more than ``patience`` epochs (see module docstring)."""
    last = float(k[-1])
    start = math.floor(last)
    stop = int(min(start + DENSE_EPOCHS, start + SEARCH_HORIZON_FACTOR * max(last - float(k[0]), 1.0)))
    grid = np.arange(start + 1, stop + 1, dtype=float)
    sched = schedule
    # The best value the scheduler holds at the last observation is unknown in the forecast's terms:
    # start from the curve's own value there, as if it had just improved.
    best = float(_curve(sched, shape, beta, np.array([last]))[0])
    bad = 0
    lr = float(sched.multiplier(np.array([last]))[0])
    i = 0
    # The curve under the current schedule, computed a chunk at a time: each drop changes it from the
    # drop on, and most of a long grid lies after the last drop.
    zz = np.empty_like(grid)
    ready = 0
    while i < grid.size:
        if i >= ready:
            ready = min(i + ROLL_CHUNK, grid.size)
            zz[i:ready] = _curve(sched, shape, beta, grid[i:ready])
        if zz[i] < best - noise:
            best, bad = float(zz[i]), 0
        else:
            bad += 1
        if bad > sched.patience:
            new = max(lr * sched.factor, sched.min_lr)
            if lr - new <= MIN_RATE_CHANGE:
                break  # at the floor, or the rate is so small already that a drop changes nothing
            # Epoch grid[i] ends the patience; the next one trains at the lower rate.
            sched = sched.with_drops([*sched.drops, float(grid[i])])
            lr, bad = new, 0
            ready = i + 1  # the curve changes from the drop on
        i += 1
    return sched


def _short_drift(
    schedule: LRSchedule,
    picks: list[int | None],
    prefixes: list[int],
    beta: Arr,
    h: Arr,
    r: Arr,
    z: Arr,
    k: Arr,
    sd_u: float,
) -> float:
    """The drift (standardised units per epoch) of a history too short to cross-validate: the chosen
    shape fitted on each prefix (``picks``: its best grid point per prefix row) forecasts the points
    after it (:func:`models.curves.few_errors_drift`). 0 without a prefix."""
    errs: list[Arr] = []
    hs: list[Arr] = []
    for j, (o, g) in enumerate(zip(prefixes, picks, strict=True)):
        if g is None:
            continue
        pred = beta[j, g, 0] + beta[j, g, 1] * h[g] + beta[j, g, 2] * r[g]
        errs.append(z[o:] - pred[o:])
        hs.append(k[o:] - k[o - 1])
    if not errs:
        return 0.0
    err, hz = np.concatenate(errs), np.concatenate(hs)
    ok = np.isfinite(err)
    return few_errors_drift(err[ok], hz[ok], sd_u) if ok.any() else 0.0


def fit_schedule_curve(
    epochs: ArrayLike, values: ArrayLike, direction: Direction, schedule: LRSchedule
) -> CurveFit | CannotPredict:
    """Fit the schedule-aware curve (module docstring) to ``(epoch, value)`` points. Never raises."""
    k, v = clean_points(epochs, values)
    n = int(k.size)
    sign = 1.0 if direction == "lower" else -1.0
    value_range = natural_range(v)
    if n < MIN_POINTS:
        return CannotPredict(f"only {n} usable point(s); need {MIN_POINTS}", n)
    with np.errstate(all="ignore"):
        shift = float(np.mean(sign * v))
        scale = float(np.ptp(v))
    if not (math.isfinite(shift) and math.isfinite(scale)) or scale <= 1e-12 * max(1.0, float(np.abs(v).max())):
        return CannotPredict("the metric has not changed" if math.isfinite(scale) else "values too large to fit", n)
    if schedule.kind == "plateau":
        schedule = schedule.with_drops(plateau_drops(sign * v, k, schedule.patience, schedule.factor, schedule.min_lr))
    z = (sign * v - shift) / scale
    w = recency_weights(k)
    if direction == "higher" and value_range[1] == 1.0:
        floor_z = -1.0
    elif direction == "lower" and v.min() >= 0.0:
        floor_z = 0.0
    else:
        floor_z = -math.inf
    c_floor = (floor_z - shift) / scale if math.isfinite(floor_z) else -math.inf

    S_last = float(schedule.cumulative(k[-1:])[0][0])
    h, grid_params, r, shape_id = _design(schedule, k, max(S_last, 1.0))
    origins = [o for o in sorted({int(round(n * f)) for f in CV_ORIGINS}) if MIN_POINTS + 1 <= o < n]
    cross = n >= MIN_POINTS_FOR_HOLDOUT and bool(origins)
    # Too short to cross-validate: each prefix of at least MIN_POINTS points forecasts the points
    # after it (the band's drift), as for the families (models.curves._short_drift).
    prefixes = [] if cross else list(range(MIN_POINTS, n))
    rows_at = [*origins, n] if cross else [*prefixes, n]
    W = np.where(np.arange(n)[None, :] < np.array(rows_at)[:, None], w, 0.0)
    with np.errstate(all="ignore"):
        beta, sse = _solve(h, r, z, W, c_floor)

    # Best grid point per shape and weight row; cross-validated forecast error per shape.
    best: dict[str, list[int | None]] = {}
    for sid, name in enumerate(SHAPES):
        masked = np.where(shape_id[None, :] == sid, sse, np.inf)
        best[name] = [int(np.argmin(row)) if np.isfinite(row.min()) else None for row in masked]
    cv: dict[str, float] = {}
    forecast: dict[str, tuple[Arr, Arr]] = {}
    if cross:
        for name, picks in best.items():
            if any(p is None for p in picks):
                continue
            errs, pairs = [], []
            for j, o in enumerate(origins):
                g = picks[j]
                assert g is not None
                pred = beta[j, g, 0] + beta[j, g, 1] * h[g] + beta[j, g, 2] * r[g]
                err = z[o:] - pred[o:]
                errs.append(float(np.sqrt(np.mean(err**2))))
                pairs.append((err, k[o:] - k[o - 1]))
            cv[name] = float(np.mean(errs))
            forecast[name] = (np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs]))
    full = {name: picks[-1] for name, picks in best.items() if picks[-1] is not None}
    if not full:
        return CannotPredict("no schedule-aware curve fits these points", n)
    tab_k = _tab_epochs(k, schedule)

    def end_level(name: str) -> float:
        g = full[name]
        assert g is not None
        return float(_curve(schedule, grid_params[g], beta[-1, g], tab_k[-1:])[0])

    if cv:
        order = sorted(cv, key=lambda nm: (cv[nm], nm))
        close = [nm for nm in order if cv[nm] <= LATE_TOLERANCE * cv[order[0]] and nm in full]
        name = min(close, key=lambda nm: (end_level(nm), nm)) if close else next(iter(full))
    else:
        name = "power" if "power" in full else next(iter(full))
    g = full[name]
    assert g is not None
    dof = max(n - 3, 1)
    resid = z - (beta[-1, g, 0] + beta[-1, g, 1] * h[g] + beta[-1, g, 2] * r[g])
    sd_u = math.sqrt(float((w * resid**2).sum()) / float(w.sum()) * n / dof)
    drift = 0.0
    cap: float | None = None
    if name in forecast:
        err, hz = forecast[name]
        drift = scale * horizon_drift(err, hz, sd_u)
    elif not cross:
        # A short history: what its prefixes' forecasts missed by, or at three points (no prefix) how
        # far the shapes that fit them part; the band never wider than what the job has shown.
        drift = scale * _short_drift(schedule, best[name][:-1], prefixes, beta, h, r, z, k, sd_u)
        if not prefixes:
            ahead = parting_horizons(k)
            members = [_curve(schedule, grid_params[gi], beta[-1, gi], k[-1] + ahead) for gi in full.values() if gi is not None]
            drift = scale * parting_drift(np.array(members).reshape(len(members), ahead.size), ahead)
        cap = max(scale, scale * sd_u)

    def build(row: int, gi: int, upto: int) -> CurveFit:
        shape, b = grid_params[gi], beta[row, gi]
        kk = k[:upto]
        sched = schedule
        if schedule.kind == "plateau":
            sched = schedule.with_drops([d for d in schedule.drops if d <= kk[-1]])
            sched = _roll_plateau(sched, shape, b, kk, sd_u)
        grid = _tab_epochs(kk, sched)
        zz = shift + scale * _curve(sched, shape, b, grid)
        params = {
            "c": float(zz[-1]),
            "c_inf": float(shift + scale * b[0]),
            "d": float(scale * b[1]),
            "e": float(scale * b[2]),
            **{key: float(val) for key, val in shape.items()},
            "drops_ahead": float(len(sched.drops) - len([d for d in sched.drops if d <= kk[-1]])),
        }
        return CurveFit(
            family="schedule",
            direction=direction,
            params=params,
            residual_std=scale * sd_u,
            drift_std=drift,
            holdout_error=scale * cv[name] if name in cv else None,
            n_points=upto,
            first_epoch=float(k[0]),
            last_epoch=float(kk[-1]),
            last_value=float(v[upto - 1]),
            candidates={f"schedule_{nm}": scale * e for nm, e in cv.items()},
            value_range=value_range,
            drops=tuple(float(d) for d in sched.drops)
            if schedule.kind == "plateau"
            else tuple(float(m) for m in schedule.milestones),
            table=(tuple(float(x) for x in grid), tuple(float(x) for x in zz)),
            band_cap=cap,
        )

    main = build(len(rows_at) - 1, g, n)
    variants = []
    if cross:
        for j, o in enumerate(origins):
            gj = best[name][j]
            if gj is not None:
                variants.append(build(j, gj, o))
    return replace(main, variants=tuple(variants))
