"""FlowCon's growth efficiency (ICPP 2019): how much a job learns per interval per unit of CPU.

For a job's loss series and a control interval ``T`` (seconds):

- normalise every loss by the largest loss seen so far (values in (0, 1]);
- ``E_i``: the mean normalised loss over the last interval ``(t - T, t]``, ``E_{i-1}`` over the one
  before it;
- progress ``P = |E_i - E_{i-1}| / T`` [1/s];
- growth efficiency ``G = P / u`` with ``u`` the job's mean CPU usage over the interval [cores].

FlowCon marks a job "watching" when ``G < alpha`` (alpha about 0.03-0.05 in its units) and
"completing" when that happens again. :func:`growth_efficiency` returns ``None`` while either interval
has no point (too early to tell).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike


def growth_efficiency(times: ArrayLike, losses: ArrayLike, interval: float, cpu_cores: float) -> float | None:
    """``G`` at the last reported time; see the module docstring. Non-finite points are ignored."""
    if not (math.isfinite(interval) and interval > 0 and math.isfinite(cpu_cores) and cpu_cores > 0):
        return None
    t = np.asarray(times, dtype=float).ravel()
    v = np.asarray(losses, dtype=float).ravel()
    n = min(t.size, v.size)
    t, v = t[:n], v[:n]
    ok = np.isfinite(t) & np.isfinite(v)
    t, v = t[ok], v[ok]
    if t.size == 0:
        return None
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    peak = np.maximum.accumulate(np.abs(v))
    norm = np.abs(v) / np.where(peak > 0, peak, 1.0)
    end = t[-1]
    now = (t > end - interval) & (t <= end)
    before = (t > end - 2 * interval) & (t <= end - interval)
    if not now.any() or not before.any():
        return None
    progress = abs(float(norm[now].mean()) - float(norm[before].mean())) / interval
    return progress / cpu_cores
