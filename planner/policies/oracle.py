"""The oracle: FlowPlan's integer program fed the ground truth instead of its predictions.

It is :class:`~planner.policies.flowplan.FlowPlanPolicy` (the same :class:`planner.PlannerConfig`,
the same solver and objective) except that each job's fitted learning-curve and speed models are
replaced by what really remains (:class:`planner.JobTruth`: epochs to tier 1, tier 2 and the finish,
and the true seconds per epoch at any allocation). Only a simulator can give it that: the simulator
calls :meth:`OraclePolicy.observe_truth` right before each call of a policy whose
``reads_ground_truth`` is true, and no other policy has that flag.

What it is for: on the same run, *FlowPlan − oracle* is the cost of FlowPlan's prediction errors and
*oracle − the best policy* the cost of the formulation itself (what the integer program optimises
and cannot see, with perfect predictions). It is not a deployable policy: on a real cluster there is
no truth and it refuses to plan.

Two variants split the prediction error in two (``knows``): ``oracle-speed`` is given only the true
speeds (each job's epochs left still predicted from its curve, as FlowPlan has them) and
``oracle-epochs`` only the true epochs left to each tier and to the end (each job's speed still
fitted from what it showed). ``docs/results.md``, "Which prediction costs what", has both on the CPU
scenarios.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

from planner.core import plan
from planner.errors import PlannerError
from planner.outlook import JobTruth
from planner.plan import Plan
from planner.policies.flowplan import FlowPlanPolicy, with_objective
from planner.snapshot import Snapshot


class OracleError(PlannerError):
    """The oracle was asked to plan without the ground truth of every active job."""


class OraclePolicy(FlowPlanPolicy):
    """FlowPlan with the ground truth (same options as :class:`FlowPlanPolicy`); see the module docstring."""

    name = "oracle"
    #: The simulator gives the ground truth only to policies that say they read it: this one alone.
    reads_ground_truth = True

    #: The truth for the next call (set by :meth:`observe_truth`, used once).
    truth: dict[str, JobTruth] | None = None

    def __init__(self, knows: Literal["all", "speed", "epochs"] = "all", **options: Any) -> None:
        if knows not in ("all", "speed", "epochs"):
            raise ValueError(f"knows: must be all, speed or epochs, got {knows!r}")
        super().__init__(**options)
        #: What of the truth it plans with (:class:`planner.JobTruth` ``knows``; module docstring).
        self.knows = knows
        if knows != "all":
            self.name = f"oracle-{knows}"

    def observe_truth(self, truth: Mapping[str, JobTruth]) -> None:
        """The ground truth for the next call (job id -> :class:`planner.JobTruth`); used once."""
        self.truth = dict(truth) if self.knows == "all" else {k: replace(t, knows=self.knows) for k, t in truth.items()}

    def __call__(self, snapshot: Snapshot) -> Plan:
        truth, self.truth = self.truth, None  # one truth per interval: a stale one is never reused
        if truth is None:
            raise OracleError(
                "oracle: no ground truth for this interval (the oracle plans only inside the simulator, which calls "
                "observe_truth() before each plan; on a real cluster use --policy flowplan)"
            )
        missing = sorted(j.id for j in snapshot.jobs if j.status != "finished" and j.id not in truth)
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise OracleError(f"oracle: the ground truth lacks active job(s) {shown}")
        self.previous = plan(
            with_objective(snapshot, self.objective, self.makespan_slack), self.config, previous=self.previous, truth=truth
        )
        return self.previous.plan
