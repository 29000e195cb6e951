"""PyTorch's example loops (``pytorch/examples``: mnist, fashion, ...)::

    Train Epoch: 1 [640/60000 (1%)]	Loss: 2.300000
    Test set: Average loss: 0.0484, Accuracy: 9840/10000 (98%)

Epochs count from 1 (from 0 when the first one seen is 0); ``[640/60000]`` is how far into the epoch
the line is, so a train line is the point ``epoch - 1 + 640/60000``. The test line after an epoch
is that epoch's point with the accuracy as the metric (its loss is a test loss: the training loss
series stays the train lines').
"""

from __future__ import annotations

import re

from adapters.logs.formats.base import Context, Item, LogFormat
from adapters.logs.points import NUMBER, number
from adapters.logs.terminal import Frame

TRAIN = re.compile(r"Train Epoch:\s*(\d+)\s*\[\s*(\d+)\s*/\s*(\d+)\s*(?:\(\s*[\d.]+%\s*\))?\s*\]\s*Loss:\s*(" + NUMBER + ")")
TEST = re.compile(r"Test set:\s*Average loss:\s*(" + NUMBER + r")\s*,\s*Accuracy:\s*(\d+)\s*/\s*(\d+)")


class PytorchExample(LogFormat):
    name = "pytorch"
    example = "Train Epoch: 1 [640/60000 (1%)]\tLoss: 2.300000"
    fields = (("current", int),)

    def __init__(self) -> None:
        super().__init__()
        self.current: int | None = None

    def read(self, frame: Frame, time: float | None, ctx: Context) -> list[Item] | None:
        m = TRAIN.search(frame.text)
        if m is not None:
            e, done, total = int(m.group(1)), int(m.group(2)), int(m.group(3))
            self.current = e
            if total <= 0 or done > total:
                return []
            within = done / total
            return self.point(self.epochs.begun(e) + within, number(m.group(4)), None, time, partial=within < 1)
        m = TEST.search(frame.text)
        if m is not None:
            if self.current is None or int(m.group(3)) <= 0:
                return []
            return self.point(self.epochs.done(self.current), None, int(m.group(2)) / int(m.group(3)), time)
        return None
