"""What a log says about a job: progress points and events, with the snapshot's meaning.

A :class:`LogPoint` means what ``planner.snapshot.MetricPoint`` means: after ``epoch`` epochs
(*completed*, fractional inside an epoch; a framework that counts epochs from 0 is converted), the
job showed this training ``loss`` and/or quality ``metric`` (the validation accuracy where the log
shows one, else the accuracy it shows). ``time`` is the time the log itself states (Unix seconds),
else the time the caller gave with the text (the engine's timestamp of the line), else ``None``.

A point inside an epoch (``partial``) carries the loss only: the accuracy a progress bar shows
mid-epoch is a running training figure, or the previous epoch's validation, not the quality metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LogPoint:
    epoch: float
    loss: float | None = None
    metric: float | None = None
    time: float | None = None
    partial: bool = False
    format: str = ""

    def as_dict(self) -> dict[str, float | None]:
        """The ``flowplan logs --format json`` shape (and ``MetricPoint``'s fields)."""
        return {"epoch": self.epoch, "loss": self.loss, "metric": self.metric, "time": self.time}


@dataclass(frozen=True)
class LogEvent:
    """Something that is not progress: a JSON event line, a loss that is not a number."""

    kind: str
    epoch: float | None = None
    time: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    format: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {**self.detail, "event": self.kind, "epoch": self.epoch, "time": self.time}


NUMBER = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|NaN|NAN|inf|Inf|INF|infinity|Infinity)"


def number(value: Any) -> float | None:
    """A float from a number or a numeric string (NaN and infinities included); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and len(value) <= 64:
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


class EpochCount:
    """How a format numbers its epochs: from 0 or from 1, decided by the first epoch number seen.

    ``done(e)``: epochs completed when epoch ``e`` has finished; ``begun(e)``: epochs completed while
    epoch ``e`` is running. A log whose first epoch is 0 counts from 0 (Lightning, FlowCon's jobs);
    otherwise from 1 (Keras, PyTorch's examples, most hand-written loops).
    """

    def __init__(self, base: int | None = None) -> None:
        self.base = base

    def see(self, e: int) -> None:
        if self.base is None:
            self.base = 0 if e == 0 else 1

    def done(self, e: int) -> float:
        self.see(e)
        return float(e + 1 - (self.base or 0))

    def begun(self, e: int) -> float:
        self.see(e)
        return float(max(0, e - (self.base or 0)))


#: Values logged at one step of a run: key -> (value, Unix seconds).
StepValues = dict[str, tuple[float, float]]


def points_by_step(
    by_step: dict[int, StepValues],
    *,
    epoch_keys: tuple[str, ...],
    loss_keys: tuple[str, ...],
    metric_keys: tuple[str, ...],
    base: int | None,
    steps_per_epoch: float | None,
    fmt: str,
    index_in_progress: bool = False,
) -> tuple[list[LogPoint], int, int | None]:
    """The points of one run's values grouped by step (MLflow's metrics, TensorBoard's scalars):
    ``(points, steps not placed, base)``.

    ``epoch`` is the first of ``epoch_keys`` logged at the step (a whole number counts from the run's
    ``base``: 0 when its first such value is 0, and is shifted by one, as ``flowplan logs`` does for
    logs; a fractional one is epochs completed, as Hugging Face's ``train/epoch``), else the step over
    ``steps_per_epoch`` (counted from the first step's base the same way), else the step is not placed.
    ``loss`` is the first of ``loss_keys`` at the step, ``metric`` the first of ``metric_keys``;
    ``time`` the latest of the step's values. ``base`` is the run's, None when not yet known.

    ``index_in_progress``: a run that counts its epochs from 0 logs the *index* of the epoch in
    progress (Lightning's ``epoch`` scalar, logged with every training step): a step with a loss and
    no metric is then inside that epoch (epochs completed: the index), and one with a metric (the
    validation at its end) has completed it (the index plus one)."""
    points: list[LogPoint] = []
    unplaced = 0
    for step in sorted(by_step):
        vals = by_step[step]
        e = next((vals[k][0] for k in epoch_keys if k in vals), None)
        metric = next((vals[k] for k in metric_keys if k in vals), None)
        inside = False
        if e is not None:
            if base is None:
                base = 0 if e == 0 else 1
            inside = index_in_progress and base == 0 and float(e).is_integer() and metric is None
            epoch = e if inside else (e + 1 - base if float(e).is_integer() else e)
        elif steps_per_epoch:
            if base is None:
                base = 0 if step == 0 else 1
            epoch = (step + 1 - base) / steps_per_epoch
        else:
            unplaced += 1
            continue
        loss = next((vals[k] for k in loss_keys if k in vals), None)
        if loss is None and metric is None:
            continue
        points.append(
            LogPoint(
                epoch=float(epoch),
                loss=loss[0] if loss else None,
                metric=metric[0] if metric else None,
                time=max(t for _, t in vals.values()),
                partial=inside or not float(epoch).is_integer(),
                format=fmt,
            )
        )
    return points, unplaced, base
