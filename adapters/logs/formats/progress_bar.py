"""Progress bars with the epoch in their description: tqdm (hand-written loops, Lightning's ``TQDMProgressBar``)
and Rich (Lightning's ``RichProgressBar``, its default when ``rich`` is installed)::

    Epoch 1/3:  47%|████▋     | 21/45 [00:00<00:00, 596.48it/s, loss=1.3346]
    Epoch 0: 100%|██████████| 23/23 [00:00<00:00, 146.87it/s, train_loss=1.220, val_loss=1.040, val_acc=0.792]
    Epoch 2/2  ━━━━━━━━━━━━━━━━━━━━━━━━━━ 23/23 0:00:00 • 0:00:00 129.13it/s train_loss: 0.368 val_loss:
                                                                             0.290 val_acc: 0.919

A tqdm description counts epochs from 1 unless the first epoch seen is 0 (Lightning's ``Epoch 0:``);
Rich's ``Epoch k/K`` is Lightning's (``K`` = max_epochs - 1): from 0. Step ``n`` of ``total`` inside
an epoch is a point with the loss only (the bar's postfix also shows the previous epoch's validation
until this epoch's is done). At ``n == total`` the bar is redrawn once more after validation with
the new figures, so the epoch's point is held until the bar moves to another epoch or the log ends.
Rich wraps a long bar onto an indented second line (even without a terminal): the two are joined.
Bars without an epoch (validation, Hugging Face's step bar) are not progress points. A bar's rate
(``it/s`` or ``s/it``) times its total is a ``speed`` event.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from adapters.logs.formats.base import LOSS_KEYS, MIN_STEPS, VALIDATION_METRIC_KEYS, Context, Item, LogFormat, first, pairs, speed
from adapters.logs.points import EpochCount
from adapters.logs.terminal import Frame

TQDM = re.compile(r"^(?P<desc>.*?)\s*\d{1,3}%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[(?P<info>[^\]]*)")
RICH = re.compile(r"^(?P<desc>.*?)\s+[━╸╺╾╼─]+\s+(?P<n>\d+)/(?P<total>\d+)\s+(?P<info>.*)$")
EPOCH = re.compile(r"\bepoch\s*(\d+)(?:\s*/\s*(\d+))?", re.IGNORECASE)
RATE = re.compile(r"(\d+(?:\.\d+)?)\s*(it/s|s/it)\b")
CONTINUATION = re.compile(r"^\s{8,}\S")
VALIDATION_PREFIXES = ("val", "valid", "eval", "test")


class ProgressBar(LogFormat):
    name = "progress-bar"
    example = "Epoch 1/3:  47%|████▋     | 21/45 [00:00<00:00, 596.48it/s, loss=1.3346]"
    fields = (("held_epoch", int), ("pending", list), ("last_validation", list))

    def __init__(self) -> None:
        super().__init__()
        self.rich = EpochCount(0)
        self.held_epoch: int | None = None
        self.pending: list[Any] | None = None  # [text, time]: a Rich bar whose wrapped second line may follow
        self.last_validation: list[list[Any]] = []  # the validation figures the bar showed last

    def read(self, frame: Frame, time: float | None, ctx: Context) -> list[Item] | None:
        out: list[Item] = []
        if self.pending is not None:
            text, when = self.pending
            self.pending = None
            if CONTINUATION.match(frame.text) and not RICH.match(frame.text):
                return self._bar(text + " " + frame.text.strip(), when, rich=True) or []
            out = self._bar(text, when, rich=True) or []
        m = TQDM.match(frame.text)
        if m is not None:
            got = self._bar(frame.text, time, rich=False)
            return None if got is None and not out else out + (got or [])
        r = RICH.match(frame.text)
        if r is not None and EPOCH.search(r.group("desc")):
            self.pending = [frame.text, time]
            return out
        return out or None

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        if self.pending is not None and (len(self.pending) != 2 or not isinstance(self.pending[0], str)):
            raise ValueError(f"progress-bar state: pending is not [text, time]: {self.pending!r}")

    def flush(self) -> list[Item]:
        out: list[Item] = []
        if self.pending is not None:
            text, when = self.pending
            self.pending = None
            out = self._bar(text, when, rich=True) or []
        self.held_epoch = None
        return out + super().flush()

    def _bar(self, text: str, time: float | None, *, rich: bool) -> list[Item] | None:
        m = (RICH if rich else TQDM).match(text)
        if m is None:
            return None
        e = EPOCH.search(m.group("desc"))
        if e is None:
            return None
        epoch, n, total = int(e.group(1)), int(m.group("n")), int(m.group("total"))
        count = self.rich if rich else self.epochs
        values = pairs(m.group("info"))
        metric = self._new_validation(values)
        out: list[Item] = []
        if self.held is not None and self.held_epoch != epoch:
            if metric is not None:  # the validation of the epoch that just ended (Rich shows it only now)
                self.held, metric = replace(self.held, metric=metric), None
            out = self.flush()
        if total <= 0 or n > total:
            return out
        loss = first(values, LOSS_KEYS)
        if n == total:
            kept = self.held.metric if self.held is not None and self.held_epoch == epoch else None
            self.held_epoch = epoch
            end = self.point(count.done(epoch), loss, metric if metric is not None else kept, time)
            return out + self.hold(end) + self._rate(m, epoch, count, n, total, time)
        if metric is not None:  # a new validation with no epoch end in view: it is the last finished epoch's
            out += self.point(count.begun(epoch), None, metric, time)
        if n == 0:
            return out  # nothing done in this epoch yet: the postfix is the last epoch's
        return (
            out
            + self.point(count.begun(epoch) + n / total, loss, None, time, partial=True)
            + self._rate(m, epoch, count, n, total, time)
        )

    def _rate(self, m: re.Match[str], epoch: int, count: EpochCount, n: int, total: int, time: float | None) -> list[Item]:
        """A ``speed`` event from the bar's own rate (tqdm's smoothed ``it/s`` or ``s/it``; Rich's ``it/s``)."""
        r = RATE.search(m.group("info"))
        if r is None or n < MIN_STEPS or float(r.group(1)) <= 0:
            return []
        per_step = 1 / float(r.group(1)) if r.group(2) == "it/s" else float(r.group(1))
        return speed(count.begun(epoch) + n / total, per_step * total, time, self.name)

    def _new_validation(self, values: dict[str, float]) -> float | None:
        """The validation metric when the bar shows validation figures it did not show before, else None."""
        seen = [[k, v] for k, v in values.items() if k.startswith(VALIDATION_PREFIXES)]
        if not seen or seen == self.last_validation:
            return None
        self.last_validation = seen
        return first(values, VALIDATION_METRIC_KEYS)
