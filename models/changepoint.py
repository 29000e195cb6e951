"""Learning-rate drops: find the epochs where a curve suddenly improves after a plateau.

A step learning-rate schedule (ImageNet's drops at epochs 30 and 60, CIFAR "multi-step") makes a
curve jump to a better level in one or two epochs after it had nearly stopped improving. No smooth
family fits across such a jump, but each phase between jumps is an ordinary smooth curve: once a
drop has been seen, the newest phase is what predicts the future (:func:`models.curves.fit_learning_curve`
fits only the points after the last drop).

Test for a drop just before point ``i`` (``z`` is the badness: lower is better), with a window of
``W`` = :data:`WINDOW` points:

- ``jump = median(z[i-W:i]) - median(z[i:i+W])``, the improvement of the level across the break;
- ``noise`` = 1.4826 · median absolute deviation of the residuals of a straight line through the
  ``2W`` points before ``i`` pooled with those of the level after ``i``, floored by the metric's
  resolution (the smallest non-zero change between neighbours: accuracy on 540 images moves in steps
  of 1/540, and a plateau that never changes must not make every single step look infinitely large);
- ``trend = median(z[i-2W:i-W]) - median(z[i-W:i])``, the improvement over the ``W`` points before.

A drop needs all of: ``jump > JUMP_SIGMAS · noise`` (well above the noise), ``jump > TREND_FACTOR ·
trend`` (an *extra* improvement, not the curve's ordinary pace: "after a plateau"), the single step
``z[i-1] - z[i]`` carrying at least :data:`STEP_SHARE` of the jump (sudden, not gradual), and
``jump >= MIN_RANGE_SHARE`` of the range seen so far (material). Breaks within ``W`` points of each
other are one drop, placed where the jump is largest relative to the noise.

Measured on every curve in ``../shared/data`` and on the curves trained in ``tests/data/curves``:
it finds ImageNet's drops at epochs 31 and 61 on all seven batch sizes, the first drop of
``digits_sgd_step`` (epoch 31; the second, at 61, is inside noise of ±4 %), and one step on yolov3
(batch 16, epoch 40: the metric sits at 12.3 for six epochs after it); it fires on no cifar10,
deepspeech2, ncf or bert curve. An earlier detector (differences against the noise of the 8
changes before) missed ImageNet's drop and fired at epoch 19: see ``docs/models.md``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

#: Points on each side of a candidate break whose medians are compared.
WINDOW = 5
#: The jump must exceed this many noise standard deviations.
JUMP_SIGMAS = 5.0
#: ... and this many times the improvement over the window before (the ordinary pace).
TREND_FACTOR = 3.0
#: The one step at the break carries at least this share of the jump.
STEP_SHARE = 0.5
#: The jump is at least this share of the metric's range observed up to the break.
MIN_RANGE_SHARE = 0.05
#: Points needed after a break before it can be confirmed.
MIN_AFTER = 3


def detect_drops(z: NDArray[np.float64]) -> list[int]:
    """Indices ``i`` (into ``z``, in badness units, sorted by epoch) of the first point of each new phase.

    Empty when the series is shorter than ``2·WINDOW + MIN_AFTER`` points or nothing qualifies.
    Never raises; non-finite values must already be removed.
    """
    z = np.asarray(z, dtype=float)
    n = int(z.size)
    W = WINDOW
    if n < 2 * W + MIN_AFTER or not np.all(np.isfinite(z)):
        return []
    steps = np.abs(np.diff(z))
    nonzero = steps[steps > 1e-12 * max(1.0, float(np.abs(z).max()))]
    resolution = float(nonzero.min()) if nonzero.size else 0.0
    # Cheap screen first: the single step must be an improvement big enough to carry the jump.
    idx = np.arange(2 * W, n - MIN_AFTER + 1)
    step = z[idx - 1] - z[idx]
    upto = np.minimum(idx + W, n) - 1
    seen_range = (np.maximum.accumulate(z) - np.minimum.accumulate(z))[upto]
    keep = (step > 0) & (step >= STEP_SHARE * MIN_RANGE_SHARE * seen_range)
    idx, step, seen_range = idx[keep], step[keep], seen_range[keep]
    if idx.size == 0:
        return []
    # Every remaining candidate at once (rows): the 2W points before and the W after (fewer near the
    # end of the series: one group per available length, at most MIN_AFTER..W).
    t = np.arange(2 * W, dtype=float) - (2 * W - 1) / 2.0  # centred: the slope is a plain ratio
    length = np.minimum(n - idx, W)
    noise = np.empty(idx.size)
    level_after = np.empty(idx.size)
    before = np.lib.stride_tricks.sliding_window_view(z, 2 * W)[idx - 2 * W]  # (m, 2W)
    line = before.mean(1)[:, None] + ((before * t).sum(1) / (t * t).sum())[:, None] * t
    for a in np.unique(length):
        rows = np.flatnonzero(length == a)
        after = np.lib.stride_tricks.sliding_window_view(z, int(a))[idx[rows]]  # (r, a)
        level_after[rows] = np.median(after, axis=1)
        resid = np.concatenate([before[rows] - line[rows], after - level_after[rows, None]], axis=1)
        noise[rows] = 1.4826 * np.median(np.abs(resid), axis=1)
    noise = np.maximum(noise, max(resolution, 1e-12))
    level_before = np.median(before[:, W:], axis=1)
    jump = level_before - level_after
    trend = np.maximum(np.median(before[:, :W], axis=1) - level_before, 0.0)
    ok = (
        (jump > JUMP_SIGMAS * noise)
        & (jump > TREND_FACTOR * trend)
        & (step >= STEP_SHARE * jump)
        & (jump >= MIN_RANGE_SHARE * seen_range)
    )
    hits = [(int(i), float(s)) for i, s in zip(idx[ok], (jump / noise)[ok], strict=True)]
    # One drop per cluster of neighbouring hits: the strongest.
    drops: list[int] = []
    best: tuple[int, float] | None = None
    for i, score in hits:
        if best is not None and i - best[0] >= W:
            drops.append(best[0])
            best = None
        if best is None or score > best[1]:
            best = (i, score)
    if best is not None:
        drops.append(best[0])
    return drops
