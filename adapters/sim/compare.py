"""Comparing simulation runs: per-policy summaries over seeds, and FlowPlan's improvement over each baseline.

The improvement is measured on the scenario's own metric (``Scenario.metric``), seed by seed (the
same arrivals and noise for both policies), then averaged:

- ``makespan``, ``mean_jct``, ``tier1_time``: percent shorter than the baseline;
- ``qoe_met``: the ratio of jobs meeting their tier-1 deadline (FlowPlan / baseline; a baseline that
  meets none counts as 0.5 job, so the ratio stays finite; the raw counts are reported too);
- ``job_jct`` (FlowCon's claim): the largest completion-time reduction of any one job, reported with
  the makespan change of the same run (the claim holds only when the makespan is not longer).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from adapters.sim.run import RunResult

FIELDS = (
    "makespan",
    "mean_jct",
    "p95_jct",
    "mean_tier1_time",
    "qoe_met",
    "qoe_share",
    "cpu_utilisation",
    "gpu_utilisation",
    "migrations",
    "resizes",
    "pauses",
    "plan_seconds_mean",
    "plan_seconds_max",
    "checker_failures",
)


@dataclass(frozen=True)
class Stat:
    mean: float | None
    sd: float | None
    n: int

    def fmt(self, unit: str = "", digits: int = 0) -> str:
        if self.mean is None:
            return "-"
        if self.n > 1 and self.sd is not None:
            return f"{self.mean:.{digits}f} ± {self.sd:.{digits}f}{unit}"
        return f"{self.mean:.{digits}f}{unit}"


def stat(values: Sequence[float | None]) -> Stat:
    xs = [float(v) for v in values if v is not None]
    if not xs or len(xs) < len(values):
        return Stat(None, None, len(xs))
    return Stat(statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0, len(xs))


def summarise(runs: Sequence[RunResult]) -> dict[str, dict[str, Stat]]:
    """policy -> field -> Stat over that policy's seeds."""
    by: dict[str, list[RunResult]] = defaultdict(list)
    for r in runs:
        by[r.policy].append(r)
    return {p: {f: stat([getattr(r, f) for r in rs]) for f in FIELDS} for p, rs in by.items()}


def _pct_shorter(ours: float | None, base: float | None) -> float | None:
    if ours is None or base is None or base <= 0:
        return None
    return 100.0 * (base - ours) / base


def improvement(metric: str, ours: RunResult, base: RunResult) -> dict[str, Any]:
    """FlowPlan's gain over one baseline on one seed, on the scenario's metric."""
    if metric in ("makespan", "mean_jct"):
        return {"value": _pct_shorter(getattr(ours, metric), getattr(base, metric)), "unit": "% shorter"}
    if metric == "tier1_time":
        return {"value": _pct_shorter(ours.mean_tier1_time, base.mean_tier1_time), "unit": "% shorter"}
    if metric == "qoe_met":
        return {
            "value": ours.qoe_met / max(base.qoe_met, 0.5),
            "unit": "x jobs meeting tier-1 deadlines",
            "ours": ours.qoe_met,
            "base": base.qoe_met,
        }
    if metric == "job_jct":
        base_jct = {j.id: j.jct for j in base.jobs}
        gains = []
        for j in ours.jobs:
            b = base_jct.get(j.id)
            g = _pct_shorter(j.jct, b)
            if g is not None:
                gains.append((g, j.id))
        best = max(gains, default=(None, None))
        shorter = _pct_shorter(ours.makespan, base.makespan)
        return {
            "value": best[0],
            "unit": "% shorter for one job",
            "job": best[1],
            "makespan_change": None if shorter is None else -shorter,
        }
    raise ValueError(f"unknown metric {metric!r}")


def improvements(metric: str, runs: Sequence[RunResult], ours: str = "flowplan") -> dict[str, dict[str, Any]]:
    """baseline policy -> mean/sd of FlowPlan's per-seed improvement (plus per-seed details)."""
    idx = {(r.policy, r.seed): r for r in runs}
    out: dict[str, dict[str, Any]] = {}
    for policy in sorted({r.policy for r in runs} - {ours}):
        per = []
        for (p, seed), r in sorted(idx.items()):
            if p != policy or (ours, seed) not in idx:
                continue
            per.append({"seed": seed, **improvement(metric, idx[(ours, seed)], r)})
        vals = [d["value"] for d in per]
        s = stat(vals)
        entry: dict[str, Any] = {"mean": s.mean, "sd": s.sd, "seeds": per, "unit": per[0]["unit"] if per else ""}
        if metric == "job_jct":
            entry["makespan_change"] = stat([d["makespan_change"] for d in per]).mean
        out[policy] = entry
    return out
