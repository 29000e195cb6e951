"""FlowPlan's own policy: the integer program of :func:`planner.plan`, as a policy.

Each interval it plans the snapshot with :func:`planner.plan` and keeps the :class:`planner.PlanResult`
for the next call: the result's model fits are a cache keyed by each job's inputs (``previous``
never changes the answer, only saves refitting jobs whose history did not change). The plan is the
planner's own, with its predictions, objective terms and solver report (backend name, status, gap).

``objective`` (a profile of :data:`planner.profiles.OBJECTIVE_PROFILES`, or one of the short names
``mean-jct`` and ``makespan``) overrides ``Settings.objective`` of every snapshot it plans; ``None``
plans each snapshot with the objective it carries.
"""

from __future__ import annotations

from collections.abc import Mapping

from models.curve_prior import CurvePrior
from planner.config import PlannerConfig, SolverName
from planner.core import PlanResult, plan
from planner.plan import Plan
from planner.profiles import ObjectiveProfile, resolve_objective
from planner.snapshot import Snapshot


def with_objective(snapshot: Snapshot, objective: ObjectiveProfile | None, makespan_slack: float | None = None) -> Snapshot:
    """``snapshot`` with ``Settings.objective`` set to ``objective`` and ``Settings.makespan_slack`` to
    ``makespan_slack`` (each unchanged when ``None``)."""
    update: dict[str, object] = {}
    if objective is not None and snapshot.settings.objective != objective:
        update["objective"] = objective
    if makespan_slack is not None and snapshot.settings.makespan_slack != makespan_slack:
        update["makespan_slack"] = makespan_slack
    if not update:
        return snapshot
    return snapshot.model_copy(update={"settings": snapshot.settings.model_copy(update=update)})


class FlowPlanPolicy:
    """FlowPlan's integer program; ``solver`` (cpsat, pulp, greedy), ``time_limit`` (seconds of search),
    ``curve_priors`` (curves of earlier runs per ``Job.task``, see :class:`planner.PlannerConfig`) and
    ``objective`` (a profile that overrides each snapshot's ``Settings.objective``) and ``makespan_slack``
    (overrides ``Settings.makespan_slack``, the mean-JCT profile's makespan budget)."""

    name = "flowplan"

    def __init__(
        self,
        solver: SolverName = "cpsat",
        time_limit: float = 1.0,
        curve_priors: Mapping[str, CurvePrior] | None = None,
        objective: str | None = None,
        makespan_slack: float | None = None,
    ) -> None:
        if solver not in ("cpsat", "pulp", "greedy"):
            raise ValueError(f"solver: unknown solver {solver!r} (known: cpsat, pulp, greedy)")
        if not time_limit > 0:
            raise ValueError(f"time_limit: must be > 0 seconds, got {time_limit!r}")
        try:
            self.objective: ObjectiveProfile | None = None if objective is None else resolve_objective(objective)
        except ValueError as exc:
            raise ValueError(f"objective: {exc}") from None
        if makespan_slack is not None and not 0 <= makespan_slack <= 10:
            raise ValueError(f"makespan_slack: must be between 0 and 10, got {makespan_slack!r}")
        self.makespan_slack = makespan_slack
        self.config = PlannerConfig(solver=solver, time_limit=time_limit, curve_priors=dict(curve_priors or {}))
        self.previous: PlanResult | None = None

    def __call__(self, snapshot: Snapshot) -> Plan:
        self.previous = plan(with_objective(snapshot, self.objective, self.makespan_slack), self.config, previous=self.previous)
        return self.previous.plan
