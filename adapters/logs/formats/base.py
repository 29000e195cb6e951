"""What every log format shares: the interface the reader calls, epoch counting, the held epoch end."""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any, ClassVar

from adapters.logs.points import NUMBER, EpochCount, LogEvent, LogPoint, finite, number
from adapters.logs.terminal import Frame

Item = LogPoint | LogEvent

#: ``name: 0.25`` or ``name=0.25`` pairs (keys as frameworks write them: ``val_acc``, ``train/loss``).
PAIRS = re.compile(r"(?<![\w/.])([A-Za-z_][\w./-]*)\s*[:=]\s*(" + NUMBER + r")(?![\w.])")

#: Keys of the training loss, in order of preference.
LOSS_KEYS = ("train_loss", "training_loss", "train/loss", "train_loss_epoch", "loss", "train_loss_step", "trn_loss")
#: Keys of a validation accuracy, in order of preference.
VALIDATION_METRIC_KEYS = (
    "val_accuracy", "val_acc", "valid_acc", "valid_accuracy", "validation_accuracy", "val/acc", "val/accuracy",
    "eval_accuracy", "eval_acc", "test_acc", "test_accuracy",
)  # fmt: skip
#: Keys of the quality metric: a validation accuracy first, else the accuracy shown.
METRIC_KEYS = VALIDATION_METRIC_KEYS + ("accuracy", "acc", "train_acc", "train_accuracy")


def pairs(text: str) -> dict[str, float]:
    """Every ``name: value`` / ``name=value`` pair of a line, names lower-cased, the first of each name kept."""
    out: dict[str, float] = {}
    for key, value in PAIRS.findall(text):
        v = number(value)
        if v is not None:
            out.setdefault(key.lower().replace("-", "_"), v)
    return out


def first(values: dict[str, float], keys: tuple[str, ...]) -> float | None:
    for k in keys:
        if k in values:
            return values[k]
    return None


#: Steps into an epoch before a bar's rate is taken as its speed (the first include start-up).
MIN_STEPS = 3


def speed(epoch: float, seconds_per_epoch: float | None, time: float | None, name: str) -> list[Item]:
    """A ``speed`` event: the seconds an epoch takes at the rate the framework itself shows."""
    if seconds_per_epoch is None or not 0 < seconds_per_epoch < 1e9:
        return []
    return [LogEvent("speed", epoch, time, {"seconds_per_epoch": seconds_per_epoch}, name)]


class Context:
    """What the reader tells a format: steps per epoch when given, the last epoch any point reached."""

    def __init__(self, steps_per_epoch: float | None = None, last_epoch: float = 0.0) -> None:
        self.steps_per_epoch = steps_per_epoch
        self.last_epoch = last_epoch


class LogFormat:
    """One way a framework prints progress.

    :meth:`read` gets each frame (in order) and returns ``None`` when the frame is not in this format,
    else what it says (possibly nothing: a header, a summary). A format may hold a point back (an
    epoch's end, whose validation figures a later redraw may add) until :meth:`flush`.
    Its state is small and JSON-able (:meth:`state`), so a reader can resume where it stopped.
    """

    name: ClassVar[str] = ""
    example: ClassVar[str] = ""
    #: attributes saved by :meth:`state` besides the epoch base and the held point, with their types
    fields: ClassVar[tuple[tuple[str, type], ...]] = ()

    def __init__(self) -> None:
        self.epochs = EpochCount()
        self.held: LogPoint | None = None

    def read(self, frame: Frame, time: float | None, ctx: Context) -> list[Item] | None:
        raise NotImplementedError

    def flush(self) -> list[Item]:
        """Release what is held back (the log ended, or was read to its end for now)."""
        held, self.held = self.held, None
        return [held] if held is not None else []

    def point(
        self, epoch: float, loss: float | None, metric: float | None, time: float | None, *, partial: bool = False
    ) -> list[Item]:
        """A point (or nothing), and an event when the loss shown is not a number (a diverged job)."""
        items: list[Item] = []
        if loss is not None and finite(loss) is None:
            items.append(LogEvent("loss_not_finite", epoch, time, {"value": str(loss)}, self.name))
            loss = None
        metric = None if partial else finite(metric)
        if loss is not None or metric is not None:
            items.append(LogPoint(epoch, loss, metric, time, partial, self.name))
        return items

    def hold(self, items: list[Item]) -> list[Item]:
        """Keep the point among ``items`` back (replacing one held before); pass the events on."""
        out: list[Item] = []
        for it in items:
            if isinstance(it, LogPoint):
                self.held = it
            else:
                out.append(it)
        return out

    def state(self) -> dict[str, Any]:
        return {
            "base": self.epochs.base,
            "held": asdict(self.held) if self.held is not None else None,
            **{f: getattr(self, f) for f, _ in self.fields},
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Go on from a :meth:`state`; raises ``ValueError`` or ``TypeError`` when it does not fit."""
        base = state.get("base")
        self.epochs = EpochCount(base if base in (0, 1) else None)
        held = state.get("held")
        self.held = LogPoint(**held) if isinstance(held, dict) else None
        for f, kind in self.fields:
            if f in state:
                value = state[f]
                if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                    raise ValueError(f"{self.name} state: {f} is not a {kind.__name__}: {value!r}")
                setattr(self, f, value)
