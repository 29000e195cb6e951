"""What a job declares about itself: ``{"event": "declare", "max_epochs": 30, "schedule": {...}}``.

``flowplan.sdk.init(max_epochs=..., schedule=...)`` prints it. ``max_epochs`` is the epochs the job
plans to run (``QoETarget.max_epochs``'s meaning); ``schedule`` its learning-rate schedule, one of
the forms of issue 13 (``{"kind": "step", "milestones": [30, 60], "gamma": 0.1}``...). Here a
schedule is only checked to be a dict with a ``kind``: the SDK checked its shape where it was
written, and the curves that use it check it again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: The most epochs a declaration may state (as the snapshot contract's ``MAX_EPOCHS``).
MAX_DECLARED_EPOCHS = 1e6


@dataclass(frozen=True)
class Declaration:
    max_epochs: float | None = None
    schedule: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"max_epochs": self.max_epochs, "schedule": self.schedule}

    def over(self, earlier: Declaration | None) -> Declaration:
        """This declaration, what it leaves out taken from an ``earlier`` one."""
        if earlier is None:
            return self
        return Declaration(
            self.max_epochs if self.max_epochs is not None else earlier.max_epochs,
            self.schedule if self.schedule is not None else earlier.schedule,
        )

    @classmethod
    def from_dict(cls, d: Any) -> Declaration | None:
        """From :meth:`as_dict` or a ``declare`` event's dict (``LogEvent.as_dict``); None when it declares nothing usable."""
        if not isinstance(d, dict):
            return None
        m = d.get("max_epochs")
        ok_m = isinstance(m, int | float) and not isinstance(m, bool) and math.isfinite(m) and 0 < m <= MAX_DECLARED_EPOCHS
        s = d.get("schedule")
        ok_s = isinstance(s, dict) and isinstance(s.get("kind"), str)
        if not ok_m and not ok_s:
            return None
        return cls(float(m) if ok_m else None, dict(s) if ok_s else None)  # type: ignore[arg-type]


def declaration(event: dict[str, Any]) -> Declaration | None:
    """The declaration a ``declare`` event carries (None for any other event, or one declaring nothing usable)."""
    if event.get("event") != "declare":
        return None
    return Declaration.from_dict(event)
