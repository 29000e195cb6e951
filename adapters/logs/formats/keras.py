"""Keras ``model.fit`` (Keras 3 on any backend, and tf.keras 2), verbose 1 (a bar redrawn with ``\\b`` and ``\\r``) or 2::

    Epoch 3/10
    45/90 ━━━━━━━━━━━━━━━━━━━━ 0s 6ms/step - accuracy: 0.8536 - loss: 0.9818
    90/90 ━━━━━━━━━━━━━━━━━━━━ 1s 7ms/step - accuracy: 0.8539 - loss: 0.9027 - val_accuracy: 0.8278 - val_loss: 0.8641

``Epoch k/N`` counts from 1 and starts epoch ``k``; a bar at step ``s`` of ``S`` is the point
``k - 1 + s/S`` (loss only: the running mean of the epoch so far). At ``s == S`` Keras first redraws
the bar without, then prints it with the validation figures and a newline: the epoch's point (loss,
and ``val_accuracy``, else ``accuracy``) is held until that line, or the next epoch, or the end.
The bar's ``ms/step`` (the epoch's mean so far) times ``S`` is a ``speed`` event.
"""

from __future__ import annotations

import re

from adapters.logs.formats.base import LOSS_KEYS, METRIC_KEYS, MIN_STEPS, Context, Item, LogFormat, first, pairs, speed
from adapters.logs.points import EpochCount
from adapters.logs.terminal import Frame

HEADER = re.compile(r"^\s*Epoch\s+(\d+)\s*/\s*(\d+)\s*$")
STEP_TIME = re.compile(r"\s(\d+(?:\.\d+)?)(us|µs|ms|s)/step\b")
UNIT = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
BAR = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s+(?:\S*\s+)?(?:\d+\w*\s+)?.*?\s-\s")


class Keras(LogFormat):
    name = "keras"
    example = "90/90 ━━━━━━━━━━━━━━━━━━━━ 1s 7ms/step - accuracy: 0.85 - loss: 0.90 - val_accuracy: 0.83 - val_loss: 0.86"
    fields = (("current", int),)

    def __init__(self) -> None:
        super().__init__()
        self.epochs = EpochCount(1)
        self.current: int | None = None

    def restore(self, state: dict[str, object]) -> None:
        super().restore(state)
        self.epochs = EpochCount(1)

    def read(self, frame: Frame, time: float | None, ctx: Context) -> list[Item] | None:
        m = HEADER.match(frame.text)
        if m is not None:
            out = self.flush() if self.current != int(m.group(1)) else []
            self.current = int(m.group(1))
            return out
        m = BAR.match(frame.text)
        if m is None or self.current is None:
            return None
        step, total = int(m.group(1)), int(m.group(2))
        values = pairs(frame.text)
        if total <= 0 or step > total or not values:
            return []
        loss = first(values, LOSS_KEYS)
        at = self.epochs.begun(self.current) + step / total
        t = STEP_TIME.search(frame.text)  # the mean step time of the epoch so far
        rate = speed(at, float(t.group(1)) * UNIT[t.group(2)] * total if t and step >= MIN_STEPS else None, time, self.name)
        if step < total:
            return self.point(at, loss, None, time, partial=True) + rate
        out = self.hold(self.point(self.epochs.done(self.current), loss, first(values, METRIC_KEYS), time)) + rate
        return out + self.flush() if frame.final else out
