"""FlowPlan's own policy: the integer program of :func:`planner.plan`, as a policy.

Each interval it plans the snapshot with :func:`planner.plan` and keeps the :class:`planner.PlanResult`
for the next call: the result's model fits are a cache keyed by each job's inputs (``previous``
never changes the answer, only saves refitting jobs whose history did not change). The plan is the
planner's own, with its predictions, objective terms and solver report (backend name, status, gap).
"""

from __future__ import annotations

from collections.abc import Mapping

from models.curve_prior import CurvePrior
from planner.config import PlannerConfig, SolverName
from planner.core import PlanResult, plan
from planner.plan import Plan
from planner.snapshot import Snapshot


class FlowPlanPolicy:
    """FlowPlan's integer program; ``solver`` (cpsat, pulp, greedy), ``time_limit`` (seconds of search) and
    ``curve_priors`` (curves of earlier runs per ``Job.task``, see :class:`planner.PlannerConfig`)."""

    name = "flowplan"

    def __init__(
        self, solver: SolverName = "cpsat", time_limit: float = 1.0, curve_priors: Mapping[str, CurvePrior] | None = None
    ) -> None:
        if solver not in ("cpsat", "pulp", "greedy"):
            raise ValueError(f"solver: unknown solver {solver!r} (known: cpsat, pulp, greedy)")
        if not time_limit > 0:
            raise ValueError(f"time_limit: must be > 0 seconds, got {time_limit!r}")
        self.config = PlannerConfig(solver=solver, time_limit=time_limit, curve_priors=dict(curve_priors or {}))
        self.previous: PlanResult | None = None

    def __call__(self, snapshot: Snapshot) -> Plan:
        self.previous = plan(snapshot, self.config, previous=self.previous)
        return self.previous.plan
