"""Request and response bodies of the HTTP service (besides the Snapshot and Plan contracts).

Like the contracts, request bodies reject unknown fields and non-finite numbers (NaN, Infinity)
with the path of the offending field.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.snapshot import MAX_EPOCHS, MAX_VALUE, MetricPoint, QoETarget

Finite = Annotated[float, Field(ge=-MAX_VALUE, le=MAX_VALUE, allow_inf_nan=False)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True, strict=True)


class PointIn(Body):
    """One progress report: ``epoch`` (may be fractional) or ``step`` (with the batch's ``steps_per_epoch``)."""

    time: Finite = Field(description="When the point was measured (seconds; the snapshot's clock, usually Unix time).")
    epoch: Annotated[float, Field(ge=0, le=MAX_EPOCHS, allow_inf_nan=False)] | None = None
    step: Annotated[int, Field(ge=0, le=10**15)] | None = None
    loss: Finite | None = None
    metric: Finite | None = Field(None, description="Quality metric such as validation accuracy.")

    @model_validator(mode="after")
    def _one_position_and_a_value(self) -> PointIn:
        if (self.epoch is None) == (self.step is None):
            raise ValueError("give exactly one of 'epoch' and 'step'")
        if self.loss is None and self.metric is None:
            raise ValueError("a metric point needs 'loss' or 'metric'")
        return self


class MetricBatch(Body):
    """A batch of progress points for one job. Stored in one transaction; a point whose (job, epoch)
    is already stored is a duplicate and is ignored (the first write wins), so a retry is safe."""

    points: list[PointIn] = Field(max_length=100_000)
    steps_per_epoch: Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)] | None = Field(
        None, description="Required when points give 'step': epoch = step / steps_per_epoch (the idempotency key)."
    )

    @model_validator(mode="after")
    def _steps_need_a_rate(self) -> MetricBatch:
        for i, p in enumerate(self.points):
            if p.step is None:
                continue
            if self.steps_per_epoch is None:
                raise ValueError(f"points[{i}].step: needs 'steps_per_epoch' in the batch to convert steps to epochs")
            epoch = p.step / self.steps_per_epoch
            if not epoch <= MAX_EPOCHS:  # also catches inf from a tiny steps_per_epoch
                raise ValueError(
                    f"points[{i}].step: {p.step} steps at {self.steps_per_epoch:g} steps per epoch is {epoch:g} epochs "
                    f"(at most {MAX_EPOCHS:g}); check steps_per_epoch"
                )
        return self

    def metric_points(self) -> list[MetricPoint]:
        out = []
        for p in self.points:
            epoch = p.epoch if p.epoch is not None else p.step / self.steps_per_epoch  # type: ignore[operator]
            # Every field was validated by PointIn (finite, epoch >= 0, a value present): no second pass.
            out.append(MetricPoint.model_construct(time=p.time, epoch=float(epoch), loss=p.loss, metric=p.metric))
        return out

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "points": [
                        {"time": 1767000037.0, "epoch": 1, "loss": 1.93, "metric": 0.4229},
                        {"time": 1767000074.0, "epoch": 2, "loss": 1.61, "metric": 0.4378},
                    ]
                }
            ]
        },
    )


class IngestResult(BaseModel):
    job: str
    inserted: int = Field(description="Points stored by this request.")
    duplicates: int = Field(description="Points already stored (same job and epoch), ignored.")
    points: int = Field(description="Points stored for this job in all.")


class JobSummary(BaseModel):
    id: str
    points: int
    first_epoch: float | None
    last_epoch: float | None
    last_time: float | None
    has_target: bool


class JobList(BaseModel):
    jobs: list[JobSummary]
    total: int = Field(description="Jobs known in all (the list is one page of them).")


class TierForecast(BaseModel):
    value: float
    deadline: float | None
    reached: bool = Field(description="The history already reaches this value.")
    epoch: float | None = Field(description="Predicted epoch at which the curve reaches the value (null: never, or no fit).")
    epoch_interval: tuple[float | None, float | None] = Field(
        description="80% band of that epoch; an upper end of null means the pessimistic curve never gets there."
    )
    eta: float | None = Field(description="Predicted time (the points' clock) at the observed speed.")
    eta_interval: tuple[float | None, float | None]
    on_track: bool | None = Field(description="eta <= deadline (null: no deadline, or no eta).")


class LivePredictions(BaseModel):
    metric: str = Field(description="What the curve is fitted on: 'loss', or the target's metric name.")
    direction: str
    basis: str = Field(description="Curve family and number of points, or why there is no prediction yet.")
    family: str | None
    epoch: float = Field(description="Epochs done (largest epoch reported).")
    seconds_per_epoch: float | None = Field(description="Observed over the latest points.")
    plateau: float | None = Field(description="Value the fitted curve levels off at.")
    convergence_epoch: float | None = Field(
        description="Epoch from which it improves by less than 0.1% of the plateau per epoch."
    )
    finish_epoch: float | None = Field(
        description="Where the planner expects the job to finish (tier 2, convergence or max_epochs)."
    )
    eta_finish: float | None
    residual_std: float | None
    tier1: TierForecast | None
    tier2: TierForecast | None


class HistorySummary(BaseModel):
    points: int
    first_epoch: float | None
    last_epoch: float | None
    first_time: float | None
    last_time: float | None
    last_loss: float | None
    last_metric: float | None


class JobDetail(BaseModel):
    id: str
    history: HistorySummary
    target: QoETarget | None
    spec: dict[str, Any] | None = Field(description="The job's registered spec (a Snapshot job without history), if any.")
    predictions: LivePredictions


class Status(BaseModel):
    status: str
    detail: str = ""
