"""The Snapshot contract (``apiVersion: flowplan/v1``): what the cluster looks like now.

Units: times are seconds on one clock shared by ``time``, metric ``time`` and deadlines (Unix time is
the usual choice, but any clock works); CPU is in millicores (1000 = one core); a GPU fraction
(``gpu_milli``) in thousandths of one GPU; memory in MiB.

A *job* is one training run: one container, or a gang of ``replicas`` identical containers placed all
or nothing; its CPU, GPU and memory figures are per replica. A gang sits on one node unless the job
allows more (``max_nodes``): then its *placement* is the replicas on each node, rank 0's node (``node``)
first. A job with ``min_replicas`` below ``replicas`` can train with any count in between (a data-
parallel job whose workers the planner chooses). Resizing a job that is not ``resizable`` live,
moving it to another node, or changing its count or placement when it is not ``elastic`` is a restart:
it checkpoints (``checkpoint_seconds``), is re-created, and restores (``restart_seconds``); each
counts as a migration.

Validation is strict: unknown fields, NaN, infinities, negative capacities, duplicate names and jobs
on unknown nodes are rejected with the path of the offending field. Numbers are bounded so that
every figure derived from them stays finite: durations up to 1e9 s, epochs up to 1e9, clock times
within ±1e12 s, loss and metric values within ±1e12.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from models import Direction, LRSchedule
from planner.profiles import ObjectiveProfile

API_VERSION: Literal["flowplan/v1"] = "flowplan/v1"

#: A job's id or a node's name: what every contract, store and adapter can carry (a DNS-like label).
NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._:/-]*[A-Za-z0-9])?$"
MAX_NAME = 253
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN)]
#: Bounds that keep every derived figure finite (a year is 3.2e7 s; Unix time now is 1.8e9 s).
MAX_SECONDS = 1e9
MAX_EPOCHS = 1e9
MAX_VALUE = 1e12  # largest |loss| or |metric| value
#: A whole GPU in the unit of ``gpu_milli``: the planner's GPU capacities and demands are in it.
MILLI_PER_GPU = 1000

Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
Time = Annotated[float, Field(ge=-1e12, le=1e12, allow_inf_nan=False)]
Finite = Annotated[float, Field(ge=-MAX_VALUE, le=MAX_VALUE, allow_inf_nan=False)]
Millis = Annotated[int, Field(ge=0, le=10**9)]
Count = Annotated[int, Field(ge=0, le=10**6)]
#: Most GPU models one job may name as its choice (``Job.gpu_type`` as a list).
MAX_GPU_MODELS = 64


def gpu_model_allowed(want: str | Sequence[str] | None, model: str | None) -> bool:
    """Whether a node with GPU model ``model`` meets a job's ``gpu_type`` ``want``: one model, any
    of several, or (None) any node."""
    return want is None or (model == want if isinstance(want, str) else model in want)


JobStatus = Literal["pending", "running", "finished"]


class Contract(BaseModel):
    """Base of every contract model: unknown fields and non-finite floats are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class Input(Contract):
    """Base of the models a user or an adapter writes (the snapshot and its parts): strict types as
    well, so ``true`` is not a number, ``"16000"`` not an integer and ``0`` or ``"yes"`` not a
    boolean (an integer is still a valid number)."""

    model_config = ConfigDict(strict=True)


class Node(Input):
    """A machine jobs can run on (a Docker host, a Kubernetes node)."""

    name: Name
    cpu_millis: Millis = Field(description="Allocatable CPU in millicores (1000 = one core).")
    gpus: Count = Field(0, description="Allocatable whole GPUs.")
    memory_mib: Annotated[int, Field(ge=0, le=10**9)] = Field(0, description="Allocatable memory in MiB.")
    gpu_type: str | None = Field(None, description="GPU model, e.g. 'V100M16'; jobs may require one.")
    labels: dict[str, str] = Field(default_factory=dict)
    schedulable: bool = Field(True, description="False: cordoned; jobs already there may stay, none is added.")


class Allocation(Input):
    """Resources a running job holds now, per replica.

    ``cpu_millis`` is the job's *guaranteed* CPU share: a weight (Docker ``--cpu-shares``, cgroup
    ``cpu.weight``, a Kubernetes request). While every container on the node is busy the job gets
    its share; capacity others leave idle flows to it, up to ``cpu_limit_millis`` (a quota: Docker
    ``--cpus``, a Kubernetes limit) when one is set, else up to the job's ``max_cpu_millis``.
    """

    cpu_millis: Millis
    gpus: Count = 0
    gpu_device: Annotated[int, Field(ge=0, le=10**6)] | None = Field(
        None,
        description="Fractional jobs (gpu_milli) only: the index (0..gpus-1 of the node) of the GPU device the job "
        "shares with other fractional jobs. Null for whole-GPU jobs.",
    )
    cpu_limit_millis: Annotated[int, Field(ge=1, le=10**9)] | None = Field(
        None, description="Hard CPU cap (quota) in force, per replica; null: none beyond the job's max_cpu_millis."
    )
    servers: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None,
        description="Parameter-server jobs (`servers` set on the job) only: the servers it runs on each of its worker "
        "nodes now (null: its fewest, servers.min spread over its nodes, at least one on each).",
    )


class Share(Input):
    """Replicas of one job on one node: a job spanning nodes has one per node."""

    node: Name
    replicas: Annotated[int, Field(ge=1, le=1024)]


class MetricPoint(Input):
    """One progress report: at ``time``, after ``epoch`` epochs, the job's loss and/or quality metric."""

    time: Time
    epoch: Annotated[float, Field(ge=0, le=MAX_EPOCHS, allow_inf_nan=False)]
    loss: Finite | None = None
    metric: Finite | None = Field(None, description="Quality metric such as validation accuracy.")

    @model_validator(mode="after")
    def _has_a_value(self) -> MetricPoint:
        if self.loss is None and self.metric is None:
            raise ValueError("a metric point needs 'loss' or 'metric'")
        return self


class SpeedPoint(Input):
    """An observed training speed at a past allocation (``cpu_millis`` and ``gpus`` per replica):
    the seconds one epoch of the whole job took with ``replicas`` replicas on ``nodes`` nodes."""

    cpu_millis: Annotated[int, Field(ge=1, le=10**9)]
    gpus: Count = 0
    seconds_per_epoch: Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
    replicas: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None, description="How many replicas ran (null: the job's replicas)."
    )
    nodes: Annotated[int, Field(ge=1, le=1024)] = Field(1, description="Over how many nodes they were spread.")
    servers: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None, description="Parameter-server jobs: how many servers ran, in all (null: its fewest on those nodes)."
    )


#: Most jobs, and most points, a speed prior may carry (what an adapter borrows is a handful).
MAX_PRIOR_JOBS = 20
MAX_PRIOR_POINTS = 100


class SpeedPrior(Input):
    """Speeds of similar jobs, borrowed until the job's own speed is observed.

    An adapter (or whoever writes the snapshot) looks them up, e.g. in the state store: the jobs
    with the same ``task`` (``basis: "task"``), else the same container ``image`` (``basis:
    "image"``), that finished or ran long enough to have a measured speed. ``key`` is that task or
    image and must be the job's own; ``jobs`` names the jobs the ``points`` were measured on.

    The planner trusts it less than the job's own observations: it is used only while the job has
    no ``speed`` points and no speed can be read off its history; the first observation replaces it.
    """

    basis: Literal["task", "image"] = Field(description="What the borrowed jobs share with this one.")
    key: str = Field(min_length=1, max_length=253, description="The shared task or image (the job's own).")
    jobs: list[Name] = Field(min_length=1, max_length=MAX_PRIOR_JOBS, description="The jobs the points come from.")
    points: list[SpeedPoint] = Field(
        min_length=1,
        max_length=MAX_PRIOR_POINTS,
        description="Their observed speeds at the CPU they used. A point may say the replicas and nodes it was measured "
        "with: the borrower scales it to its own replicas on one node by the data-parallel prior (a point that does not "
        "say is taken as measured at the borrower's count).",
    )


class Tier(Input):
    """One QoE tier: reach ``value`` of the target metric, by ``deadline`` if one is given."""

    value: Finite
    deadline: Time | None = None


class QoETarget(Input):
    """The user's promise: tier 1 (deliver a usable model by its deadline), tier 2 (keep training to it).

    ``metric`` names what the tiers are measured on: ``"loss"`` reads ``MetricPoint.loss``; any other
    name reads ``MetricPoint.metric``. ``max_epochs`` caps the run (the job finishes there at the latest).
    """

    metric: Annotated[str, Field(min_length=1, max_length=MAX_NAME)] = Field(
        "loss", description="What the tiers read: 'loss', or the name of the quality metric (1-253 printable characters)."
    )
    direction: Direction = "lower"
    tier1: Tier
    tier2: Tier | None = None
    max_epochs: Annotated[float, Field(gt=0, le=MAX_EPOCHS, allow_inf_nan=False)] | None = None

    @field_validator("metric")
    @classmethod
    def _printable(cls, v: str) -> str:
        if any(ord(c) < 32 or ord(c) == 127 for c in v):
            raise ValueError("must be printable, without control characters")
        return v

    @model_validator(mode="after")
    def _tiers_ordered(self) -> QoETarget:
        if self.tier2 is not None:
            better = self.tier2.value >= self.tier1.value if self.direction == "higher" else self.tier2.value <= self.tier1.value
            if not better:
                raise ValueError(
                    f"tier2.value: {self.tier2.value} must be at least as good as tier1.value {self.tier1.value} "
                    f"(direction '{self.direction}')"
                )
        return self


EpochCount = Annotated[float, Field(ge=0, le=MAX_EPOCHS, allow_inf_nan=False)]


class ConstantSchedule(Input):
    """The learning rate never changes."""

    kind: Literal["constant"]


class StepSchedule(Input):
    """The rate is multiplied by ``gamma`` after each milestone epoch (torch ``MultiStepLR``, stepped
    once an epoch: milestone 30 means the 31st epoch trains at the lower rate)."""

    kind: Literal["step"]
    milestones: list[EpochCount] = Field(
        min_length=1, max_length=1000, description="Epochs after which the rate drops, increasing."
    )
    gamma: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = Field(0.1, description="Factor applied at each milestone.")

    @model_validator(mode="after")
    def _increasing(self) -> StepSchedule:
        for a, b in zip(self.milestones, self.milestones[1:], strict=False):
            if b <= a:
                raise ValueError(f"milestones must increase (got {a:g} then {b:g})")
        return self


class ExpSchedule(Input):
    """The rate is multiplied by ``gamma`` every epoch (torch ``ExponentialLR``)."""

    kind: Literal["exp"]
    gamma: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(description="Factor applied every epoch.")


class CosineSchedule(Input):
    """Half a cosine from the initial rate to zero over the planned epochs (``target.max_epochs``;
    torch ``CosineAnnealingLR(T_max=max_epochs)``)."""

    kind: Literal["cosine"]


class WarmupCosineSchedule(Input):
    """A linear rise from zero over ``warmup`` epochs, then half a cosine to zero at the last planned
    epoch (Hugging Face ``get_cosine_schedule_with_warmup``)."""

    kind: Literal["warmup_cosine"]
    warmup: EpochCount = Field(description="Epochs of linear warm-up.")


class WarmupLinearSchedule(Input):
    """A linear rise from zero over ``warmup`` epochs, then a straight line to zero at the last planned
    epoch (Hugging Face ``get_linear_schedule_with_warmup``)."""

    kind: Literal["warmup_linear"]
    warmup: EpochCount = Field(description="Epochs of linear warm-up.")


class PlateauSchedule(Input):
    """The rate is multiplied by ``factor`` after ``patience`` epochs without a new best of the job's
    judged metric (torch ``ReduceLROnPlateau``); ``min_lr`` is the floor, as a fraction of the initial rate."""

    kind: Literal["plateau"]
    factor: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.1
    patience: Annotated[int, Field(ge=0, le=10**6)] = 10
    min_lr: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0


#: The ``schedule`` of a job: one of seven kinds, told apart by ``kind``.
Schedule = Annotated[
    ConstantSchedule
    | StepSchedule
    | ExpSchedule
    | CosineSchedule
    | WarmupCosineSchedule
    | WarmupLinearSchedule
    | PlateauSchedule,
    Field(discriminator="kind"),
]


#: Most earlier runs a task's curves may hold, and most points of each.
MAX_REFERENCE_RUNS = 20
MAX_REFERENCE_POINTS = 2000
#: Fewest points a reference run needs (a shape, not a level).
MIN_REFERENCE_POINTS = 3


class CurvePoint(Input):
    """One point of an earlier run's learning curve: after ``epoch`` epochs, its loss and/or metric."""

    epoch: Annotated[float, Field(ge=0, le=MAX_EPOCHS, allow_inf_nan=False)]
    loss: Finite | None = None
    metric: Finite | None = Field(None, description="Quality metric such as validation accuracy.")

    @model_validator(mode="after")
    def _has_a_value(self) -> CurvePoint:
        if self.loss is None and self.metric is None:
            raise ValueError("a curve point needs 'loss' or 'metric'")
        return self


class ReferenceRun(Input):
    """An earlier run's learning curve, and the learning-rate schedule it declared, if any."""

    job: Name = Field(description="The finished job it comes from.")
    points: list[CurvePoint] = Field(min_length=MIN_REFERENCE_POINTS, max_length=MAX_REFERENCE_POINTS)
    schedule: Schedule | None = Field(None, description="The learning-rate schedule the run declared (null: none).")
    max_epochs: Annotated[float, Field(gt=0, le=MAX_EPOCHS, allow_inf_nan=False)] | None = Field(
        None, description="The epochs it planned (its target's max_epochs; null: not said)."
    )


class TaskCurves(Input):
    """Learning curves of finished runs of one task: the prior of the curve of each job of the task.

    An adapter (or whoever writes the snapshot) looks them up, e.g. in the state store: the jobs of
    the task that finished. For each job of the task the planner reads the runs on the column the
    job is judged on (its target's metric: ``"loss"`` reads ``loss``, any other name ``metric``),
    leaves out a run of the job itself and one with fewer than 3 such points, and fits the job's
    points with a stretched and shifted copy of them (``models.curve_prior``) as one more
    candidate, kept only where it forecasts the job's own later points at least as well as the
    parametric families; with no curve yet (fewer than 3 points) it reads the tiers off them. They
    join the planner's own library for the task (``PlannerConfig.curve_priors``), if it has one.
    A job that declares a learning-rate schedule reads only the runs that declared the same one
    over the same planned epochs (with none, its declared schedule's own curve is used).
    """

    task: str = Field(min_length=1, max_length=253, description="The task (``Job.task``) the runs trained.")
    runs: list[ReferenceRun] = Field(min_length=1, max_length=MAX_REFERENCE_RUNS)


class ScheduleOnly(Input):
    """A schedule on its own (``flowplan predict --schedule``), validated as a job's would be."""

    schedule: Schedule


def schedule_problem(schedule: BaseModel, max_epochs: float | None) -> str | None:
    """Why ``schedule`` cannot be used with ``max_epochs`` planned epochs (``None``: it can)."""
    kind = getattr(schedule, "kind", "")
    if kind in ("cosine", "warmup_cosine", "warmup_linear") and max_epochs is None:
        return (
            f"a '{kind}' schedule anneals over the planned epochs: it needs max_epochs "
            "(target.max_epochs in a snapshot, --max-epochs for predict)"
        )
    warmup = getattr(schedule, "warmup", None)
    if warmup is not None and max_epochs is not None and warmup >= max_epochs:
        return f"warmup {warmup:g} must be shorter than the planned epochs (max_epochs {max_epochs:g})"
    return None


def lr_schedule(schedule: BaseModel, max_epochs: float | None) -> LRSchedule:
    """The models' :class:`models.LRSchedule` for a validated contract schedule."""
    return LRSchedule(
        kind=getattr(schedule, "kind"),  # noqa: B009  (every schedule model has one)
        milestones=tuple(getattr(schedule, "milestones", ())),
        gamma=float(getattr(schedule, "gamma", 1.0)),
        warmup=float(getattr(schedule, "warmup", 0.0)),
        max_epochs=max_epochs,
        factor=float(getattr(schedule, "factor", 0.1)),
        patience=int(getattr(schedule, "patience", 10)),
        min_lr=float(getattr(schedule, "min_lr", 0.0)),
    )


def speed_prior_problem(job: Job) -> str | None:
    """Why ``job.speed_prior`` is not a prior for this job (``None``: it is), naming the field."""
    prior = job.speed_prior
    if prior is None:
        return None
    own = job.task if prior.basis == "task" else job.image
    if own is None:
        return f"speed_prior.key: borrowed by {prior.basis} {prior.key!r}, but the job has no {prior.basis}"
    if own != prior.key:
        return f"speed_prior.key: {prior.basis} {prior.key!r} is not the job's {prior.basis} {own!r}"
    if job.id in prior.jobs:
        return f"speed_prior.jobs: names the job itself ({job.id!r}); its own speeds go in 'speed'"
    if job.max_gpus == 0:
        for i, p in enumerate(prior.points):
            if p.gpus > 0:
                return f"speed_prior.points[{i}].gpus: {p.gpus} GPU(s), but the job uses none (max_gpus 0)"
    return None


def gang_problem(job: Job) -> str | None:
    """Why ``job``'s replica count, ``max_nodes`` and ``placement`` do not go together (``None``: they
    do), naming the field and its value."""
    if job.min_replicas is not None and job.min_replicas > job.replicas:
        return f"min_replicas: {job.min_replicas} exceeds replicas {job.replicas}"
    if job.gpu_milli is not None and (job.max_nodes != 1 or job.fewest_replicas != 1):
        return f"max_nodes: {job.max_nodes}, but a fractional job (gpu_milli {job.gpu_milli}) runs as one replica on one node"
    if job.placement is None:
        return None
    if job.status != "running":
        return f"placement: set, but the job is {job.status} (only a running job has one)"
    if not job.placement:
        return "placement: empty; a running job's replicas are somewhere (null: all on node)"
    if job.placement[0].node != job.node:
        return f"placement[0].node: '{job.placement[0].node}', but rank 0 runs on node '{job.node}' (list it first)"
    seen: set[str] = set()
    for i, share in enumerate(job.placement):
        if share.node in seen:
            return f"placement[{i}].node: '{share.node}' listed twice"
        seen.add(share.node)
    if len(job.placement) > job.max_nodes:
        return f"placement: {len(job.placement)} nodes, but max_nodes is {job.max_nodes}"
    count = sum(s.replicas for s in job.placement)
    if not job.fewest_replicas <= count <= job.replicas:
        return f"placement: {count} replicas in all, outside [{job.fewest_replicas}, {job.replicas}] (min_replicas, replicas)"
    return None


def gpu_fraction_problem(job: Job) -> str | None:
    """Why ``job``'s ``gpu_milli`` / ``allocation.gpu_device`` do not go together (``None``: they do),
    naming the field and its value."""
    alloc = job.allocation
    if job.gpu_milli is None:
        if alloc is not None and alloc.gpu_device is not None:
            return f"allocation.gpu_device: {alloc.gpu_device}, but the job uses whole GPUs (no gpu_milli)"
        return None
    for name, value in (("min_gpus", job.min_gpus), ("max_gpus", job.max_gpus), ("replicas", job.replicas)):
        if value != 1:
            return f"{name}: {value}, but a fractional job (gpu_milli {job.gpu_milli}) needs min_gpus = max_gpus = replicas = 1"
    if job.status == "running" and alloc is not None:
        if alloc.gpus != 1:
            return (
                f"allocation.gpus: {alloc.gpus}, but a fractional job (gpu_milli {job.gpu_milli}) holds 1 (a share of one device)"
            )
        if alloc.gpu_device is None:
            return f"allocation.gpu_device: missing; a running fractional job (gpu_milli {job.gpu_milli}) names its device"
    return None


class ServerRole(Input):
    """A job's parameter servers (TensorFlow's ``ps`` tasks, MXNet's servers): CPU-only processes that
    hold the model, beside its ``replicas`` workers.

    The planner places them as Optimus does: the same number on each node that holds workers, so the
    load on every node's network is even. It chooses that number per worker count from the job's
    parameter-server speed model (``models.speed.PSSpeedModel``): the fewest servers per node whose
    epoch time is within 3 % of the fastest the model gives. ``min`` and ``max`` bound the servers in
    all; a spread over more than ``max`` nodes is not offered."""

    min: Annotated[int, Field(ge=1, le=1024)] = Field(1, description="The fewest servers the job trains with, in all.")
    max: Annotated[int, Field(ge=1, le=1024)] = Field(1, description="The most servers the job may have, in all.")
    cpu_millis: Annotated[int, Field(ge=1, le=10**9)] = Field(
        1000, description="CPU share of each server (a weight, like a replica's)."
    )
    memory_mib: Annotated[int, Field(ge=0, le=10**9)] = Field(0, description="Memory of each server in MiB.")
    form: Literal["optimus", "coach"] = Field(
        "optimus", description="The speed model's form before the job's own speeds pin it: Optimus' or Coach's."
    )

    @model_validator(mode="after")
    def _bounds(self) -> ServerRole:
        if self.min > self.max:
            raise ValueError(f"servers.min {self.min} exceeds servers.max {self.max}")
        return self


def server_problem(job: Job) -> str | None:
    """Why ``job``'s parameter servers do not go with the rest of it (``None``: they do), naming the field."""
    alloc = job.allocation
    if job.servers is None:
        if alloc is not None and alloc.servers is not None:
            return f"allocation.servers: {alloc.servers}, but the job has no parameter servers (no 'servers')"
        for i, p in enumerate(job.speed):
            if p.servers is not None:
                return f"speed[{i}].servers: {p.servers}, but the job has no parameter servers (no 'servers')"
        return None
    if job.gpu_milli is not None:
        return f"servers: set, but a fractional job (gpu_milli {job.gpu_milli}) runs as one replica"
    if job.max_nodes > job.servers.max:
        return (
            f"max_nodes: {job.max_nodes}, but servers.max is {job.servers.max} and every node with workers holds at "
            "least one server"
        )
    if job.status == "running" and alloc is not None:
        per = job.running_servers
        total = per * len(job.shares())
        if not job.servers.min <= total <= job.servers.max:
            return (
                f"allocation.servers: {per} per node on {len(job.shares())} node(s) is {total} in all, outside "
                f"[{job.servers.min}, {job.servers.max}] (servers.min, servers.max)"
            )
    return None


class Job(Input):
    """One training run (a container, or a gang of ``replicas`` containers on one node).

    Cross-field rules: ``min_cpu_millis <= max_cpu_millis``, ``min_gpus <= max_gpus``, a
    running job has ``node`` and ``allocation`` (the last is in the JSON Schema too), and a fractional
    job (``gpu_milli``) has ``min_gpus = max_gpus = replicas = 1`` and, running, ``allocation.gpus = 1``
    with its ``allocation.gpu_device`` (:func:`gpu_fraction_problem`); a gang's count and placement
    follow :func:`gang_problem`.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"status": {"const": "running"}}, "required": ["status"]},
            "then": {"required": ["node", "allocation"]},
        }
    )

    id: Name
    status: JobStatus
    task: str | None = Field(
        None,
        max_length=253,
        description="What is trained (e.g. 'cifar10-resnet18'). Jobs naming a task with curves of earlier runs "
        "(the snapshot's curve_priors, or PlannerConfig.curve_priors) get that prior on their learning curve.",
    )
    image: str | None = Field(
        None,
        max_length=1000,
        description="The container image it runs (informational; a speed_prior with basis 'image' must name it).",
    )
    node: Name | None = Field(None, description="Where it runs now (running jobs).")
    allocation: Allocation | None = Field(None, description="What it holds now, per replica (running jobs).")
    cpu_used_millis: Annotated[float, Field(ge=0, le=10**9, allow_inf_nan=False)] | None = Field(
        None,
        description="CPU it used per replica over the last interval, as the adapter measured it (running jobs; null: "
        "not measured). Informational: shown by flowplan status; the planner plans from speeds, not from this.",
    )
    replicas: Annotated[int, Field(ge=1, le=1024)] = Field(
        1, description="Identical containers (workers) of the job, placed all or nothing; its most when min_replicas is set."
    )
    min_replicas: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None,
        description="The fewest replicas the job can train with (null: exactly replicas). The planner then chooses a "
        "count in [min_replicas, replicas].",
    )
    max_nodes: Annotated[int, Field(ge=1, le=1024)] = Field(
        1,
        description="The most nodes the job's replicas may spread over (1: all on one node). Replicas on several "
        "nodes synchronise over the network and train slower; the planner prices that.",
    )
    elastic: bool = Field(
        False,
        description="The replica count and placement can change while the job runs (torchrun --nnodes MIN:MAX, "
        "Horovod elastic) without a checkpoint-restart; false: a new count or placement restarts the job.",
    )
    placement: list[Share] | None = Field(
        None,
        max_length=1024,
        description="Running jobs whose replicas are not all `replicas` on `node`: the replicas on each node, rank 0's "
        "node first (it is `node`), the sum the running count. Null: all replicas on node.",
    )
    min_cpu_millis: Annotated[int, Field(ge=1, le=10**9)] = 1000
    max_cpu_millis: Annotated[int, Field(ge=1, le=10**9)] = 1000
    min_gpus: Count = 0
    max_gpus: Count = 0
    memory_mib: Annotated[int, Field(ge=0, le=10**9)] = Field(0, description="Memory per replica in MiB.")
    gpu_milli: Annotated[int, Field(ge=1, le=999)] | None = Field(
        None,
        description="A fraction of ONE GPU, in thousandths (460: 0.46 of a GPU): the job shares a device with other "
        "fractional jobs, whose gpu_milli on that device add up to at most 1000. Only with min_gpus = max_gpus = 1 "
        "and replicas = 1. Null: whole GPUs (min_gpus..max_gpus), as before.",
    )
    gpu_type: str | list[str] | None = Field(
        None,
        description="Only nodes with this GPU model qualify; a list: any of these models (the Alibaba trace's "
        "gpu_spec 'V100M16|V100M32'). Null: any node.",
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="Labels a node must carry.")
    resizable: bool = Field(True, description="CPU/GPU can change in place without a restart.")
    migratable: bool = Field(True, description="Can checkpoint, stop, and restart elsewhere (or be paused).")
    checkpoint_seconds: Seconds = 30.0
    restart_seconds: Seconds = 30.0
    checkpoint_every_seconds: Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)] | None = Field(
        None,
        description="How often the job checkpoints while training, besides every epoch end (null: only at epoch "
        "ends). A restart loses the work since the last checkpoint; the planner prices that.",
    )
    priority: Annotated[float, Field(ge=0.01, le=100, allow_inf_nan=False)] = 1.0
    submitted: Time | None = None
    started: Time | None = Field(
        None,
        description="When its current run started (running jobs: the start, or the restart after a pause or "
        "migration; null: not known). A running job that has reported nothing for longer than its assumed epoch "
        "is planned no faster than that silence allows.",
    )
    history: list[MetricPoint] = Field(default_factory=list)
    speed: list[SpeedPoint] = Field(default_factory=list, description="The job's own observed speeds.")
    speed_prior: SpeedPrior | None = Field(
        None,
        description="Speeds borrowed from similar jobs (same task, else same image), used only until the job's own "
        "speed is observed; without either the planner assumes 60 s an epoch on one core.",
    )
    target: QoETarget | None = None
    schedule: Schedule | None = Field(
        None,
        description="The learning-rate schedule the job trains with (its planned epochs are target.max_epochs); "
        "the learning curve then predicts the rate's drops and annealed end. Kinds: constant, step, exp, "
        "cosine, warmup_cosine, warmup_linear (these three need target.max_epochs), plateau.",
    )
    delivered: bool = Field(False, description="The tier-1 model was already handed over.")
    failure: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="How a finished job failed, as the cluster reports it (Docker: 'exit 3', 'exit 137 (OOMKilled)'; "
        "Kubernetes: the pod's reason, e.g. 'OOMKilled (exit 137)'); null: it did not fail, or has not ended. "
        "Only with status finished. Informational: flowplan status --all shows it; a failed job is planned as finished.",
    )
    servers: ServerRole | None = Field(
        None,
        description="Parameter servers beside the workers (null: none, a data-parallel job). The planner then "
        "chooses the workers (replicas) and the servers together.",
    )

    @field_validator("gpu_type", mode="before")
    @classmethod
    def _gpu_models(cls, v: Any) -> Any:
        # One message for every wrong shape (a union's errors name its members: "gpu_type.str: ...").
        ok = v is None or isinstance(v, str)
        if isinstance(v, list):
            ok = 1 <= len(v) <= MAX_GPU_MODELS and all(isinstance(x, str) and 1 <= len(x) <= 253 for x in v)
        if not ok:
            raise ValueError(f"expected a GPU model name or a list of 1-{MAX_GPU_MODELS} of them, got {v!r}"[:200])
        return v

    def takes_gpu_type(self, model: str | None) -> bool:
        """Whether a node with GPU model ``model`` qualifies (``gpu_type``: one model, any of a list, or any)."""
        return gpu_model_allowed(self.gpu_type, model)

    @property
    def gpu_type_key(self) -> tuple[str, ...] | None:
        """The GPU models the job takes, sorted, as one hashable key (None: any)."""
        want = self.gpu_type
        return None if want is None else ((want,) if isinstance(want, str) else tuple(sorted(set(want))))

    def gpu_type_text(self) -> str:
        """``T4``, or ``V100M16 or V100M32`` for a choice (empty when any qualifies)."""
        return " or ".join(self.gpu_type_key or ())

    @property
    def fewest_replicas(self) -> int:
        """The smallest count the job may run with (``min_replicas``, else ``replicas``)."""
        return self.replicas if self.min_replicas is None else self.min_replicas

    def fewest_servers(self, nodes: int) -> int:
        """The servers on each of ``nodes`` worker nodes when none are named: ``servers.min`` spread over
        them, at least one on each (what the adapters start; 0 for a job without servers)."""
        return 0 if self.servers is None else max(1, -(-self.servers.min // max(nodes, 1)))

    @property
    def running_servers(self) -> int:
        """Parameter servers a running job has on each of its nodes (``allocation.servers``, else its
        fewest, :meth:`fewest_servers`); 0 for a job without servers or not running."""
        if self.servers is None or self.status != "running" or self.allocation is None:
            return 0
        if self.allocation.servers is not None:
            return self.allocation.servers
        return self.fewest_servers(len(self.shares()))

    def shares(self) -> tuple[tuple[str, int], ...]:
        """Where a running job's replicas are, ``(node, replicas)`` per node, rank 0's first; ``()``
        for a job that is not running."""
        if self.status != "running" or self.node is None:
            return ()
        if self.placement is None:
            return ((self.node, self.replicas),)
        return tuple((s.node, s.replicas) for s in self.placement)

    @model_validator(mode="after")
    def _consistent(self) -> Job:
        if self.min_cpu_millis > self.max_cpu_millis:
            raise ValueError(f"min_cpu_millis {self.min_cpu_millis} exceeds max_cpu_millis {self.max_cpu_millis}")
        if self.min_gpus > self.max_gpus:
            raise ValueError(f"min_gpus {self.min_gpus} exceeds max_gpus {self.max_gpus}")
        if self.failure is not None and self.status != "finished":
            raise ValueError(f"failure: set, but the job is {self.status} (only a finished job has failed)")
        if self.status == "running":
            if self.node is None:
                raise ValueError("a running job needs 'node'")
            if self.allocation is None:
                raise ValueError("a running job needs 'allocation'")
        problem = gpu_fraction_problem(self) or gang_problem(self) or server_problem(self)
        if problem is not None:
            raise ValueError(problem)
        if self.speed_prior is not None:
            problem = speed_prior_problem(self)
            if problem is not None:
                raise ValueError(problem)
        if self.schedule is not None:
            problem = schedule_problem(self.schedule, self.target.max_epochs if self.target is not None else None)
            if problem is not None:
                raise ValueError(f"schedule: {problem}")
        return self


class Settings(Input):
    """Per-snapshot planning settings (the operator's knobs for this cluster)."""

    objective: ObjectiveProfile = Field(
        "deadlines>mean-jct>makespan",
        description="What the plan optimises, in priority order: QoE deadlines first, then either the mean job "
        "completion time or the makespan (the other one next). A tail guard keeps any job from starving.",
    )

    makespan_slack: Annotated[float | None, Field(ge=0, le=10, allow_inf_nan=False)] = Field(
        None,
        description="With the mean-JCT profile: hold each node's predicted makespan within this fraction over the "
        "shortest one reachable there (0.05: at most 5 % longer), at the cost of a longer mean JCT. "
        "Unset: only the tail guard's bound (no later than the equal split, Docker's default).",
    )
    interval_seconds: Annotated[float, Field(gt=0, le=86400, allow_inf_nan=False)] = 60.0
    migration_budget: Annotated[int, Field(ge=0, le=10**6)] = Field(
        4, description="Most checkpoint-restarts per interval: migrations, restarts in place and pauses together."
    )
    deadline_confidence: Annotated[float, Field(ge=0.5, le=0.99, allow_inf_nan=False)] = Field(
        0.5,
        description="A deadline counts as met only if the job reaches its tier with this probability: "
        "0.5 uses the median prediction; higher values use the pessimistic side of the curve's band.",
    )
    convergence_tolerance: Annotated[float, Field(gt=0, le=MAX_VALUE, allow_inf_nan=False)] = Field(
        1e-3, description="A job without a tier-2 value or max_epochs finishes when it improves less than this per epoch."
    )


class Snapshot(Input):
    """What the cluster looks like at ``time``."""

    apiVersion: Literal["flowplan/v1"] = API_VERSION
    kind: Literal["Snapshot"] = "Snapshot"
    time: Time
    nodes: list[Node] = Field(default_factory=list, max_length=100_000)
    jobs: list[Job] = Field(default_factory=list, max_length=1_000_000)
    settings: Settings = Field(default_factory=Settings)
    curve_priors: list[TaskCurves] = Field(
        default_factory=list,
        max_length=100_000,
        description="Learning curves of finished runs, per task (the state store's, put here by the adapter): the prior "
        "of the curve of each job of that task, beside the planner's own library for it.",
    )

    @model_validator(mode="after")
    def _references(self) -> Snapshot:
        tasks: dict[str, int] = {}
        for i, entry in enumerate(self.curve_priors):
            if entry.task in tasks:
                also = tasks[entry.task]
                raise ValueError(f"curve_priors[{i}].task: duplicate task '{entry.task}' (also curve_priors[{also}])")
            tasks[entry.task] = i
            runs: dict[str, int] = {}
            for k, run in enumerate(entry.runs):
                if run.job in runs:
                    raise ValueError(f"curve_priors[{i}].runs[{k}].job: duplicate run '{run.job}' (also runs[{runs[run.job]}])")
                runs[run.job] = k
        names: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node.name in names:
                raise ValueError(f"nodes[{i}].name: duplicate node name '{node.name}' (also nodes[{names[node.name]}])")
            names[node.name] = i
        ids: dict[str, int] = {}
        for i, job in enumerate(self.jobs):
            if job.id in ids:
                raise ValueError(f"jobs[{i}].id: duplicate job id '{job.id}' (also jobs[{ids[job.id]}])")
            ids[job.id] = i
            if job.node is not None and job.node not in names:
                raise ValueError(f"jobs[{i}].node: unknown node name '{job.node}'")
            for k, share in enumerate(job.placement or ()):
                if share.node not in names:
                    raise ValueError(f"jobs[{i}].placement[{k}].node: unknown node name '{share.node}'")
            device = job.allocation.gpu_device if job.allocation is not None and job.status == "running" else None
            if device is not None and job.node is not None and device >= self.nodes[names[job.node]].gpus:
                gpus = self.nodes[names[job.node]].gpus
                raise ValueError(
                    f"jobs[{i}].allocation.gpu_device: {device} is out of range for node '{job.node}' with {gpus} GPU(s)"
                )
        return self

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)
