"""The FlowPlan planner core: a snapshot in, an explained, checked plan out.

Pure and deterministic: no clock reads (time comes in the snapshot), no network, no global state.
Imports nothing from ``adapters``, ``api``, docker, kubernetes or fastapi (see ``.importlinter``).
"""

from planner.check import check_plan
from planner.config import ObjectiveWeights, PlannerConfig, SolverName
from planner.core import PlanResult, plan, snapshot_digest
from planner.errors import PlanCheckError, PlannerError, SnapshotError
from planner.io import load_snapshot, parse_snapshot
from planner.outlook import JobTruth
from planner.plan import Assignment, Plan, Unserved
from planner.snapshot import API_VERSION, Job, MetricPoint, Node, QoETarget, Settings, Snapshot, SpeedPoint, SpeedPrior, Tier

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
