"""The FlowPlan planner core: a snapshot in, an explained, checked plan out.

Pure and deterministic: no clock reads (time comes in the snapshot), no network, no global state.
Imports nothing from ``adapters``, ``api``, docker, kubernetes or fastapi (see ``.importlinter``).

The names below are imported on first use (PEP 562 ``__getattr__``), not when the package is: importing
a light submodule such as :mod:`planner.profiles` (what ``flowplan plan --help`` reads) must not pull in
the models, SciPy, pandas and OR-Tools behind :mod:`planner.core`, about two seconds at start-up.
``from planner import plan`` and ``planner.plan`` are always the function :func:`planner.core.plan`,
never the submodule ``planner/plan.py`` (see :class:`_Package`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.check import check_plan
    from planner.config import ObjectiveWeights, PlannerConfig, SolverName
    from planner.core import PlanResult, plan, snapshot_digest
    from planner.errors import PlanCheckError, PlannerError, SnapshotError
    from planner.io import load_snapshot, parse_snapshot
    from planner.outlook import JobTruth
    from planner.plan import Assignment, Plan, Unserved
    from planner.snapshot import API_VERSION, Job, MetricPoint, Node, QoETarget, Settings, Snapshot, SpeedPoint, SpeedPrior, Tier

#: Each public name and the submodule it comes from.
_SOURCES: dict[str, str] = {
    "check_plan": "planner.check",
    **dict.fromkeys(("ObjectiveWeights", "PlannerConfig", "SolverName"), "planner.config"),
    **dict.fromkeys(("PlanResult", "plan", "snapshot_digest"), "planner.core"),
    **dict.fromkeys(("PlanCheckError", "PlannerError", "SnapshotError"), "planner.errors"),
    **dict.fromkeys(("load_snapshot", "parse_snapshot"), "planner.io"),
    "JobTruth": "planner.outlook",
    **dict.fromkeys(("Assignment", "Plan", "Unserved"), "planner.plan"),
    **dict.fromkeys(
        ("API_VERSION", "Job", "MetricPoint", "Node", "QoETarget", "Settings", "Snapshot", "SpeedPoint", "SpeedPrior", "Tier"),
        "planner.snapshot",
    ),
}

__all__ = [
    "API_VERSION",
    "Assignment",
    "Job",
    "JobTruth",
    "MetricPoint",
    "Node",
    "ObjectiveWeights",
    "Plan",
    "PlanCheckError",
    "PlanResult",
    "PlannerConfig",
    "PlannerError",
    "QoETarget",
    "Settings",
    "Snapshot",
    "SnapshotError",
    "SolverName",
    "SpeedPoint",
    "SpeedPrior",
    "Tier",
    "Unserved",
    "check_plan",
    "load_snapshot",
    "parse_snapshot",
    "plan",
    "snapshot_digest",
]


class _Package(types.ModuleType):
    """The package's module type. Importing the submodule ``planner.plan`` makes Python set the package's
    attribute ``plan`` to that submodule; this drops that one assignment, so the name ``plan`` stays the
    function (``__getattr__`` below finds it in :mod:`planner.core`) in every import order. The submodule
    stays importable by its full name (``from planner.plan import Plan``), as before."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "plan" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

if not TYPE_CHECKING:  # for mypy, the imports above define these names, and no others

    def __getattr__(name: str) -> object:
        source = _SOURCES.get(name)
        if source is not None:
            value = getattr(importlib.import_module(source), name)
            globals()[name] = value  # once: later lookups find it without calling this
            return value
        # A submodule not imported yet (``import planner`` used to import most of them).
        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
