"""Objective terms in integer form, priced onto the job menus.

The IP minimises::

    Σ_j unserved_j  +  Σ_j qoe_j  +  A · M  +  Σ_j c_j · f_j  +  Σ_j churn_j

- ``f_j`` — job j's predicted finish, in *quanta* (``quantum_seconds = horizon / time_resolution``,
  the horizon being the latest finish over every option considered); ``M ≥ f_j`` for every job is the
  makespan.
- ``w_j = max(1, round(priority_j · priority_scale))`` — integer job weight; the completion term uses
  ``c_j``, the same weight leaned towards jobs with less work left (``completion_tilt``: the model
  holds allocations until done, but freed resources are re-planned every interval, where
  shortest-remaining-first wins on mean completion time). ``f_j`` also counts the time to tier 1,
  ``tier1_time_factor`` times, while a job has not reached it (TRADL: usable models early); past a
  tier-1 deadline each quantum of lateness counts ``lateness_factor`` times more (a late job is not
  starved once a miss is predicted).
- ``A = round(makespan_factor · Σ_j w_j)`` — makespan weight: one quantum of makespan is worth one
  quantum of every job's completion.
- ``qoe_j`` — for a missed tier-2 deadline ``ceil(qoe_dominance · (A + Σw) · R · w_j / w_1)`` where
  ``R = time_resolution`` and ``w_1`` is the weight of a priority-1 job; a tier-1 miss costs
  ``tier1_over_tier2`` times that. Since ``A·M + Σ w·f ≤ (A + Σw)·R``, a priority-1 job's missed
  deadline outweighs every time term together: QoE first, then makespan, then completion and churn.
- ``unserved_j`` — for a job left without a node (wait / pause), ``unserved_over_tier1`` times its
  tier-1 miss cost: every active job gets a placement whenever capacity allows, ahead of deadlines.
  Deadlines on CPU-only jobs' tiers only assumed (no curve yet, ``menu.guessed_tiers``) cost, all of
  them together, less than the least ``unserved_j``: they steer where such jobs go, never who runs.
  A waiting job's ``f_j`` assumes it restarts one interval later at its slowest level.
- ``churn_j`` — ``w_j`` times ``resize_quanta`` / ``migration_quanta`` for a resize / restart;
  the seconds a restart loses are already inside ``f_j``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.config import PlannerConfig
from planner.menu import MOVE, STAY, JobMenu, guessed_tiers

#: How far the completion weights lean towards short jobs: ``(median / own) ** tilt`` within
#: [1/LEAN_CLIP, LEAN_CLIP]; the ageing of a long GPU job can make up for all of it (LEAN_CLIP ** 2).
LEAN_CLIP = 8.0

#: Longest horizon the integer model represents (10 years); predictions beyond are clipped.
MAX_HORIZON_SECONDS = 10 * 365 * 86400.0


@dataclass(frozen=True)
class Pricing:
    quantum_seconds: float
    makespan_weight: int
    total_weight: int
    qoe_unit: float  # cost of one tier-2 miss for weight w_1


def price_menus(menus: Sequence[JobMenu], config: PlannerConfig, now: float | None = None) -> Pricing:
    """Fill every menu's integer costs in place and return the pricing constants."""
    w = config.weights
    R = w.time_resolution
    # Every menu's (3, L) tables side by side, (3, sum of L): the arithmetic below is elementwise,
    # with each job's constants repeated over its columns, so each entry is computed exactly as
    # job by job, in one NumPy operation for all jobs. Each menu gets its own columns back.
    J = len(menus)
    sizes = [m.cpu.size for m in menus]
    bounds = np.cumsum([0, *sizes]).tolist()
    col = np.repeat(np.arange(J), sizes)

    def side_by_side(tables: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(tables, axis=1) if tables else np.zeros((3, 0))

    def per_column(values: list[Any], dtype: type) -> np.ndarray:
        return np.array(values, dtype=dtype)[col] if values else np.zeros(0, dtype=dtype)

    # Clip before anything becomes an integer: a bounded snapshot stays finite, this keeps it so.
    cap = MAX_HORIZON_SECONDS
    finish_s = np.minimum(np.nan_to_num(side_by_side([m.finish_s for m in menus]), nan=cap, posinf=cap), cap)
    horizon = max(1.0, float(np.max(finish_s)) if finish_s.size else 1.0)
    for m, lo, hi in zip(menus, bounds, bounds[1:], strict=False):
        m.finish_s = finish_s[:, lo:hi]
        m.wait_finish_s = min(m.wait_finish_s, MAX_HORIZON_SECONDS) if math.isfinite(m.wait_finish_s) else MAX_HORIZON_SECONDS
        horizon = max(horizon, m.wait_finish_s)
    horizon = min(horizon, MAX_HORIZON_SECONDS)
    q = horizon / R
    total_w = int(sum(m.weight for m in menus))
    A = max(1, int(round(w.makespan_factor * total_w)))
    w1 = max(1, int(round(w.priority_scale)))
    cw = _completion_weights(menus, w.completion_tilt, now, w.gpu_age_exponent)
    t1w = [int(round(w.tier1_time_factor * c)) if _tier1_open(m) else 0 for m, c in zip(menus, cw, strict=True)]
    latew = [int(round(w.lateness_factor * c)) if m.t1_slack_s is not None else 0 for m, c in zip(menus, cw, strict=True)]
    qoe_unit = w.qoe_dominance * (A + int(sum(cw)) + int(sum(t1w)) + int(sum(latew))) * R / w1

    fq = np.minimum(np.ceil(finish_s / q), R).astype(np.int64)
    # Time to tier 1 (unreachable or unknown: the finish), in quanta.
    t1_s = side_by_side([m.t1_s for m in menus])
    t1q = np.where(np.isfinite(t1_s), np.minimum(np.ceil(np.nan_to_num(t1_s, nan=0.0) / q), R), fq).astype(np.int64)
    t2_cost = [int(math.ceil(qoe_unit * m.weight)) for m in menus]
    t1_cost = [int(math.ceil(qoe_unit * m.weight * w.tier1_over_tier2)) for m in menus]
    # Every active job is served whenever capacity allows (work conservation covers admission):
    # only a job at its max_epochs (about to end by itself) loses nothing by waiting. A GPU job
    # priced with the phase model waits at the cost of its time alone: there a short job may hold
    # GPUs a long one waits for, as shortest-remaining-first would.
    free = [m.outlook.remaining_finish <= 0 or m.phase_seconds > 0 for m in menus]
    unserved = [0 if f else int(math.ceil(c * w.unserved_over_tier1)) for f, c in zip(free, t1_cost, strict=True)]
    # Deadlines read off a guess (a CPU job's tiers only assumed) are worth less, all of them
    # together, than any one job's service: they steer where those jobs go and what they get,
    # never who runs. Each guessed job's tier-1 and tier-2 misses share an equal part of that.
    served = [u for u in unserved if u > 0]
    guessed = [
        guessed_tiers(m.outlook) and (m.outlook.tier1_deadline is not None or m.outlook.tier2_deadline is not None) for m in menus
    ]
    if served and any(guessed):
        part = max(min(served) - 1, 0) // sum(guessed)
        t2_part = part // int(1 + w.tier1_over_tier2)
        t2_cost = [min(c, t2_part) if g else c for c, g in zip(t2_cost, guessed, strict=True)]
        t1_cost = [min(c, part - t2_part) if g else c for c, g in zip(t1_cost, guessed, strict=True)]
    t1_met = side_by_side([m.t1_met for m in menus])
    t2_met = side_by_side([m.t2_met for m in menus])
    qoe = ((t1_met == 0) * per_column(t1_cost, np.int64) + (t2_met == 0) * per_column(t2_cost, np.int64)).astype(np.int64)
    move_q = [max(w.migration_quanta, math.ceil(w.migration_margin * float(m.lost[MOVE]) / q)) for m in menus]
    if w.cpu_jobs_move_when_forced:
        # Not a gang's: its restart may change its count, a gain the CPU split cannot hand out.
        move_q = [R if m.outlook.job.max_gpus == 0 and m.count is None else x for m, x in zip(menus, move_q, strict=True)]
    churn = np.zeros_like(fq)
    churn[MOVE, :] = per_column([m.weight * x for m, x in zip(menus, move_q, strict=True)], np.int64)
    resize = [m.weight * w.resize_quanta if m.current_level is not None else 0 for m in menus]
    churn[STAY, :] = per_column(resize, np.int64)
    held = [lo + m.current_level for m, lo in zip(menus, bounds, strict=False) if m.current_level is not None]
    churn[STAY, np.array(held, dtype=np.int64)] = 0  # keeping the current level costs no churn
    # Lateness past the tier-1 deadline, for jobs with an open one and a lateness weight.
    late = [m.t1_slack_s is not None and cl > 0 for m, cl in zip(menus, latew, strict=True)]
    slack_q = per_column(
        [m.t1_slack_s / q if on and m.t1_slack_s is not None else 0.0 for m, on in zip(menus, late, strict=True)], float
    )
    late_q = np.where(per_column(late, bool), np.minimum(np.maximum(np.ceil(t1q - slack_q), 0), R).astype(np.int64), 0)
    time_cost = per_column(cw, np.int64) * fq + per_column(t1w, np.int64) * t1q + per_column(latew, np.int64) * late_q
    cost = qoe + time_cost + churn

    for m, c, c1, cl, on, mq, t1c, t2c, un, lo, hi in zip(
        menus, cw, t1w, latew, late, move_q, t1_cost, t2_cost, unserved, bounds, bounds[1:], strict=False
    ):
        m.finish_q = fq[:, lo:hi]
        m.qoe_cost = qoe[:, lo:hi]
        m.churn_cost = churn[:, lo:hi]
        m.completion_weight = c
        m.time_cost = time_cost[:, lo:hi]
        m.cost = cost[:, lo:hi]
        wait_late = 0
        if on and m.t1_slack_s is not None:
            wait_late = int(min(max(math.ceil(min(math.ceil(m.wait_finish_s / q), R) - m.t1_slack_s / q), 0), R))
        m.wait_q = int(min(math.ceil(m.wait_finish_s / q), R))
        # Waiting misses every deadline still open (conservative: it might still make a late one).
        m.wait_qoe = (t1c if m.outlook.tier1_deadline is not None else 0) + (t2c if m.outlook.tier2_deadline is not None else 0)
        m.wait_unserved = un
        pausing = m.outlook.job.status == "running"
        m.wait_churn = m.weight * mq if pausing else 0
        m.wait_time_cost = (c + c1) * m.wait_q + cl * wait_late
        m.wait_cost = m.wait_unserved + m.wait_qoe + m.wait_time_cost + m.wait_churn
    return Pricing(quantum_seconds=q, makespan_weight=A, total_weight=total_w, qoe_unit=qoe_unit)


def _tier1_open(m: JobMenu) -> bool:
    """A tier-1 target the job has not reached yet (time to it is worth shortening)."""
    o = m.outlook
    return o.job.target is not None and not o.tier1_reached


def _best_seconds_done(m: JobMenu, left_s: float) -> float:
    """The job's epochs done, in seconds at its best rate now (``left_s`` over the epochs left)."""
    o = m.outlook
    if o.remaining_finish <= 0 or o.epoch <= 0:
        return 0.0
    return o.epoch * left_s / o.remaining_finish


def _completion_weights(menus: Sequence[JobMenu], tilt: float, now: float | None = None, age_exponent: float = 0.0) -> list[int]:
    """Integer completion weights: the priority weight leaned towards jobs with less work left.

    A job's work left is its fastest predicted finish over its options; the lean is
    ``(median / own) ** tilt`` clipped to [1/8, 8] (``LEAN_CLIP``). A GPU job priced with the phase
    model is also aged: times ``slowdown ** age_exponent``, at most ``LEAN_CLIP ** 2``, where the
    slowdown is ``(time in the system + work left) / (work done + work left)``, the work in seconds
    at the job's best rate, so that a long job that has waited long enough weighs as much as the
    shortest new job (a cap of ``LEAN_CLIP`` left it at most at the median job's weight for ever),
    while one that has been served at its best all along is not aged at all.
    """
    if tilt <= 0 or not menus:
        return [m.weight for m in menus]
    left = []
    for m in menus:
        f = m.finish_s[np.isfinite(m.finish_s)]
        left.append(float(np.min(f)) if f.size else math.inf)
    finite = [x for x in left if math.isfinite(x) and x > 0]
    if not finite:
        return [m.weight for m in menus]
    mid = float(np.median(finite))
    out = []
    for m, x in zip(menus, left, strict=True):
        lean = 1.0 if not math.isfinite(x) else min(LEAN_CLIP, max(1.0 / LEAN_CLIP, (mid / max(x, 1e-9)) ** tilt))
        sub = m.outlook.job.submitted
        if age_exponent > 0 and m.phase_seconds > 0 and now is not None and sub is not None and math.isfinite(x):
            # Ageing: a job that has been slowed down (kept waiting, or served below its best) gains
            # weight, so shortest-first does not starve it. The ratio is the job's slowdown if it
            # ran at its best from now: time in the system plus work left, over the work done and
            # left at the best rate. A job that waited all along has the response ratio of
            # highest-response-ratio-next, ``1 + time in the system / work left``; one that has
            # run at its best has 1 however long it has been in the system.
            done = _best_seconds_done(m, x)
            ratio = (max(now - sub, 0.0) + x) / max(done + x, 1e-9)
            lean *= min(LEAN_CLIP**2, max(ratio, 1.0) ** age_exponent)
        out.append(max(1, int(round(m.weight * lean))))
    return out
