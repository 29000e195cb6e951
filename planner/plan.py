"""The Plan contract (``apiVersion: flowplan/v1``): what every active job should get, and why.

One :class:`Assignment` per *active* job (pending or running; finished jobs hold nothing and are
left out). Times (``eta_*``) are absolute, on the snapshot's clock; ``null`` means "not predictable"
(too little history) or "never" (the curve's plateau is short of the tier) — ``predictions.basis``
says which.

Actions:

- ``start``  a pending job is placed;
- ``keep``   a running job stays where it is with what it has;
- ``resize`` a running job stays on its node with a different CPU/GPU share (live);
- ``migrate`` a running job checkpoints and restarts, on another node (or on its own node with a new
  share when it cannot resize live);
- ``pause``  a running job checkpoints and stops to free its resources;
- ``wait``   a pending job stays queued;
- ``deliver`` a running job keeps its resources and hands its tier-1 model to the user now
  (``deliver: true`` can also accompany resize and migrate).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.snapshot import API_VERSION, Contract, Share

Action = Literal["start", "keep", "resize", "migrate", "pause", "wait", "deliver"]


class Placement(Contract):
    node: str | None
    cpu_millis: int
    gpus: int
    gpu_device: int | None = None
    replicas: int = 1
    placement: list[Share] | None = None
    servers: int | None = None


class Predictions(Contract):
    """What the planner expects for this job under this assignment (the allocation held until done)."""

    seconds_per_epoch: float | None = Field(description="Predicted epoch time at the assigned allocation.")
    epoch: float = Field(description="Epochs done so far.")
    epochs_to_tier1: float | None = None
    epochs_to_tier2: float | None = None
    epochs_to_finish: float | None = None
    eta_tier1: float | None = None
    eta_tier2: float | None = None
    eta_finish: float | None = None
    tier1_deadline: float | None = None
    tier2_deadline: float | None = None
    tier1_satisfied: bool | None = Field(None, description="Meets its tier-1 deadline (null: no deadline).")
    tier2_satisfied: bool | None = None
    tier1_reached: bool = False
    basis: str = Field(description="Where the numbers come from: the curve family and speed source, or why none.")


class Assignment(Contract):
    job: str
    node: str | None
    cpu_millis: int = Field(
        description="Guaranteed CPU share per replica: a weight (cgroup cpu.weight, Docker --cpu-shares, a Kubernetes "
        "request). Capacity other jobs leave idle flows to the job at once, up to cpu_limit_millis or its max."
    )
    cpu_limit_millis: int | None = Field(
        None, description="Hard CPU cap (quota) per replica, set only where a cap is the point; null: the job's max_cpu_millis."
    )
    gpus: int = Field(description="Per replica; a fractional job (gpu_milli) is assigned 1: its share of one device.")
    gpu_device: int | None = Field(
        None,
        description="Fractional jobs (gpu_milli) that are placed: the index (0..gpus-1 of the node) of the GPU device "
        "they share; null for every other job. A fractional job that stays on its node keeps its device.",
    )
    replicas: int = Field(1, description="How many replicas run (the job's replicas, or fewer down to min_replicas).")
    placement: list[Share] | None = Field(
        None,
        description="When the replicas do not all run on `node`: the replicas on each node, rank 0's node (`node`) "
        "first, adding up to `replicas`. Null: all on node (or no node).",
    )
    servers: int | None = Field(
        None,
        description="Parameter-server jobs that are placed: the servers on each node of the placement (the same on "
        "each; in all, this times the nodes). Null for every other job.",
    )
    action: Action
    deliver: bool = False
    previous: Placement | None = None
    lost_seconds: float = Field(0.0, description="Time this action costs the job (checkpoint + restart, start-up).")
    predictions: Predictions
    explanation: str


def assigned_shares(a: Assignment) -> tuple[tuple[str, int], ...]:
    """Where an assignment puts the job's replicas, ``(node, replicas)`` per node, rank 0's first."""
    if a.node is None:
        return ()
    if a.placement is None:
        return ((a.node, a.replicas),)
    return tuple((s.node, s.replicas) for s in a.placement)


class Unserved(Contract):
    job: str
    reason: str


class ObjectiveTerms(Contract):
    """The objective broken into its terms (lower is better for every cost)."""

    total: float = Field(description="Solver objective (integer units, see docs/planner.md).")
    unserved_cost: float = Field(description="Cost of active jobs left without a node.")
    qoe_cost: float
    makespan_cost: float
    completion_cost: float
    churn_cost: float
    tier1_met: int
    tier1_missed: int
    tier2_met: int
    tier2_missed: int
    makespan_seconds: float | None = Field(description="Predicted time from now until every active job finishes.")
    total_completion_seconds: float
    migrations: int
    resizes: int
    lost_seconds: float


class SolverReport(Contract):
    name: str = Field(description="Backend that produced the plan: cpsat, pulp-cbc, pulp-highs or greedy.")
    status: Literal["optimal", "feasible", "fallback", "trivial"]
    seconds: float = Field(description="Wall time of the whole planning call (not deterministic).")
    gap: float | None = Field(description="Relative optimality gap (objective - bound) / objective; null if unknown.")
    bound: float | None = None
    objective: float | None = None
    time_limit: float
    subproblems: int = 1
    variables: int = 0
    message: str = ""


class PlanSummary(Contract):
    active_jobs: int
    placed: int
    unserved: int
    finished_jobs: int


class Plan(Contract):
    apiVersion: Literal["flowplan/v1"] = API_VERSION
    kind: Literal["Plan"] = "Plan"
    time: float
    snapshot_digest: str = Field(description="sha256 of the canonical snapshot JSON this plan answers.")
    assignments: list[Assignment]
    unserved: list[Unserved]
    objective: ObjectiveTerms
    solver: SolverReport
    summary: PlanSummary
    warnings: list[str] = Field(default_factory=list)
