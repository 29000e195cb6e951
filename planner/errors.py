"""Errors of the planner layer.

Error tree::

    PlannerError                  base of everything the planner raises on purpose
    ├── SnapshotError             the input is not a valid snapshot (carries ``field`` and ``value``)
    └── PlanCheckError            a plan broke an invariant (a bug: the checker caught it)

A user mistake is always a :class:`SnapshotError` with a one-line message naming the field and
the value; an infeasible cluster is *not* an error — the plan lists the jobs it could not serve.
"""

from __future__ import annotations

from typing import Any


class PlannerError(Exception):
    """Base class for planner errors."""


class SnapshotError(PlannerError):
    """The input is not a valid snapshot."""

    def __init__(self, field: str, message: str, value: Any = None) -> None:
        self.field = field
        self.message = message
        self.value = value
        super().__init__(f"{field}: {message}" if field else message)


class PlanCheckError(PlannerError):
    """A plan violates an invariant; ``violations`` lists each one."""

    def __init__(self, violations: list[str]) -> None:
        self.violations = violations
        super().__init__("; ".join(violations[:5]) + (f" (+{len(violations) - 5} more)" if len(violations) > 5 else ""))
