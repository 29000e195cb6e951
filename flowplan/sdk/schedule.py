"""The learning-rate schedule a job declares: checked for shape only, passed on as given.

The forms (issue 13), one dict each; ``epoch`` values are epochs completed, as everywhere in FlowPlan::

    {"kind": "constant"}
    {"kind": "step", "milestones": [30, 60], "gamma": 0.1}      # LR × gamma at each milestone
    {"kind": "exp", "gamma": 0.93}                             # LR × gamma every epoch
    {"kind": "cosine"}                                         # annealed to 0 over max_epochs
    {"kind": "warmup_cosine", "warmup": 10}                    # linear warm-up, then cosine
    {"kind": "warmup_linear", "warmup": 5}                     # linear warm-up, then linear decay to 0
    {"kind": "plateau", "factor": 0.5, "patience": 4, "min_lr": 1e-06}

What the curves make of a schedule is the planner's business; the SDK only makes sure a typo is
caught where it is made (at ``init``), not hours later in a daemon's log.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: kind -> (required keys, optional keys)
KINDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "constant": (frozenset(), frozenset()),
    "step": (frozenset({"milestones"}), frozenset({"gamma"})),
    "exp": (frozenset({"gamma"}), frozenset()),
    "cosine": (frozenset(), frozenset({"min_lr"})),
    "warmup_cosine": (frozenset({"warmup"}), frozenset({"min_lr"})),
    "warmup_linear": (frozenset({"warmup"}), frozenset()),
    "plateau": (frozenset(), frozenset({"factor", "patience", "min_lr"})),
}


class ScheduleError(ValueError):
    """A declared schedule does not have one of the known shapes (the message names the key and value)."""


def _number(key: str, value: Any, *, low: float = 0.0, strict_low: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ScheduleError(f"schedule.{key}: expected a finite number, got {value!r}")
    if value < low or (strict_low and value == low):
        raise ScheduleError(f"schedule.{key}: must be {'above' if strict_low else 'at least'} {low:g}, got {value!r}")
    return float(value)


def check_schedule(schedule: Mapping[str, Any]) -> dict[str, Any]:
    """``schedule`` as a plain dict, or :class:`ScheduleError` naming what is wrong with its shape."""
    if not isinstance(schedule, Mapping):
        raise ScheduleError(f"schedule: expected a dict like {{'kind': 'cosine'}}, got {schedule!r}")
    kind = schedule.get("kind")
    if kind not in KINDS:
        raise ScheduleError(f"schedule.kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    required, optional = KINDS[kind]
    for key in schedule:
        if key != "kind" and key not in required | optional:
            known = ", ".join(sorted(required | optional)) or "none"
            raise ScheduleError(f"schedule.{key}: not a key of kind {kind!r} (its keys: {known})")
    for key in sorted(required - set(schedule)):
        raise ScheduleError(f"schedule.{key}: required for kind {kind!r}")
    out: dict[str, Any] = {"kind": kind}
    for key, value in schedule.items():
        if key == "kind":
            continue
        if key == "milestones":
            if not isinstance(value, list | tuple) or not value:
                raise ScheduleError(f"schedule.milestones: expected a non-empty list of epochs, got {value!r}")
            ms = [_number(f"milestones[{i}]", v, strict_low=True) for i, v in enumerate(value)]
            if any(b <= a for a, b in zip(ms, ms[1:], strict=False)):
                raise ScheduleError(f"schedule.milestones: must increase, got {list(value)!r}")
            out[key] = [int(m) if m.is_integer() else m for m in ms]
        elif key in ("gamma", "factor"):
            v = _number(key, value, strict_low=True)
            if v > 1:
                raise ScheduleError(f"schedule.{key}: a decay factor is at most 1, got {value!r}")
            out[key] = value
        else:  # warmup, patience, min_lr
            _number(key, value)
            out[key] = value
    return out
