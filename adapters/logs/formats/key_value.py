"""Free-form lines of ``name: value`` / ``name=value`` / ``name value`` pairs (hand-written loops, FlowCon's jobs)::

    epoch: 3 loss: 0.2668 acc: 0.9444
    epoch: 2 Loss: 0.2668 Time: 1795411837
    step 40 loss=0.4730
    Loss: 0.43

A line needs a loss or an accuracy (``loss``/``train_loss``…, ``val_acc``/``accuracy``…). Where it is:

- ``epoch e`` alone: epoch ``e`` has finished (counted from 1, or from 0 when the first epoch seen is 0);
- ``epoch e`` with ``step s/S``: ``s`` of ``S`` steps into epoch ``e``;
- a ``step`` (global) without an epoch: ``s / steps_per_epoch`` when steps per epoch are given
  (``flowplan logs --steps-per-epoch``), else the line cannot be placed (counted, and said);
- neither (FlowCon's bare ``Loss: x``): the epoch after the last one seen.

A progress bar's line is not one of these, even where the bar has no epoch for ``progress-bar`` to
read (a bare ``tqdm(loader)``): its postfix's ``loss=`` is a step's, and each redraw is no new epoch.

``time`` is used when it looks like Unix seconds (after 2001); per-epoch durations are not times.
"""

from __future__ import annotations

import re

from adapters.logs.formats.base import LOSS_KEYS, METRIC_KEYS, Context, Item, LogFormat, first, pairs
from adapters.logs.formats.progress_bar import TQDM
from adapters.logs.points import NUMBER, finite
from adapters.logs.terminal import Frame

EPOCH = re.compile(r"(?<![\w/])(?:epoch|ep)\s*[:=]?\s*(\d+)(?:\s*/\s*(\d+))?(?![\w.])", re.IGNORECASE)
STEP = re.compile(
    r"(?<![\w/])(?:global_step|step|iter|iteration|it|batch)\s*[:=]?\s*(\d+)(?:\s*/\s*(\d+))?(?![\w.])", re.IGNORECASE
)
SPACED = re.compile(r"(?<![\w/.])(loss|train_loss|acc|accuracy|val_acc|val_accuracy)\s+(" + NUMBER + r")(?![\w.])", re.IGNORECASE)
UNIX_2001 = 1e9


class KeyValue(LogFormat):
    name = "key-value"
    example = "epoch: 3 loss: 0.2668 acc: 0.9444"
    fields = (("unplaced", int),)

    def __init__(self) -> None:
        super().__init__()
        self.unplaced = 0

    def read(self, frame: Frame, time: float | None, ctx: Context) -> list[Item] | None:
        text = frame.text
        if TQDM.match(text) is not None:
            return None
        values = pairs(text)
        for key, value in SPACED.findall(text):
            values.setdefault(key.lower(), float(value))
        loss, metric = first(values, LOSS_KEYS), first(values, METRIC_KEYS)
        if loss is None and metric is None:
            return None
        stamp = finite(values.get("time"))
        when = stamp if stamp is not None and stamp >= UNIX_2001 else time
        e, s = EPOCH.search(text), STEP.search(text)
        if e is not None and s is not None and s.group(2) is not None and int(s.group(2)) > 0:
            step, total = int(s.group(1)), int(s.group(2))
            if step > total:
                return []
            within = step / total
            return self.point(self.epochs.begun(int(e.group(1))) + within, loss, metric, when, partial=within < 1)
        if s is not None and e is None:
            if not ctx.steps_per_epoch:
                self.unplaced += 1
                return []
            return self.point(int(s.group(1)) / ctx.steps_per_epoch, loss, metric, when)
        if e is not None:
            return self.point(self.epochs.done(int(e.group(1))), loss, metric, when)
        return self.point(float(int(ctx.last_epoch) + 1), loss, metric, when)
