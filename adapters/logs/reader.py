"""Reading a training log incrementally: bytes in, points and events out.

    reader = LogReader()
    for chunk in stream:
        items = reader.feed(chunk)          # whatever the chunk completed
    items += reader.close()                 # the unfinished last line, and points held back

Each frame (:mod:`adapters.logs.terminal`) goes to the formats in :data:`FORMATS` order; the first
that recognises it reads it, so one log may mix formats (Hugging Face's bars and dicts; a tqdm bar
and a coloured summary line). Two rules keep the history clean:

- JSON progress lines, once seen, are the job's whole truth (FlowPlan's own format, printed on purpose);
- points inside an epoch (progress bars redrawn many times a second) are kept at most one per
  ``resolution`` epochs and only moving forward; epoch ends are always kept. A bar's own rate
  becomes a ``speed`` event (seconds an epoch takes), at most one per quarter epoch.

The reader's state (:meth:`state`) is small and JSON-able, so a daemon can resume reading a log
where it stopped (the Docker adapter keeps it beside its log cursor). It holds no text but the
unfinished last line, which is bounded (``terminal.MAX_FRAME``), and a Rich bar's first line.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from adapters.logs.formats import FORMATS, Context, Item, LogFormat
from adapters.logs.formats.jsonl import is_progress, json_object
from adapters.logs.points import LogEvent, LogPoint
from adapters.logs.terminal import MAX_FRAME, Frame, FrameSplitter

FORMAT_NAMES = tuple(f.name for f in FORMATS)
#: At most one ``speed`` event per format every this many epochs.
SPEED_RESOLUTION = 0.25


def describe_formats() -> str:
    """One line per format: its name and an example line (for help and for 'nothing recognised')."""
    return "\n".join(f"  {f.name:<13} {f.example}" for f in FORMATS)


def is_json_progress(text: str) -> bool:
    obj = json_object(text)
    return obj is not None and is_progress(obj)


class LogReader:
    """Points and events from a log fed in pieces (see the module docstring)."""

    def __init__(
        self,
        *,
        steps_per_epoch: float | None = None,
        resolution: float = 0.01,
        only: str | None = None,
        last_epoch: float = 0.0,
        max_frame: int = MAX_FRAME,
    ) -> None:
        if only is not None and only not in FORMAT_NAMES:
            raise ValueError(f"unknown log format {only!r} (one of {', '.join(FORMAT_NAMES)})")
        if steps_per_epoch is not None and not steps_per_epoch > 0:
            raise ValueError(f"steps per epoch must be > 0, got {steps_per_epoch}")
        self.splitter = FrameSplitter(max_frame)
        self.formats: list[LogFormat] = [f() for f in FORMATS if only is None or f.name == only]
        self.ctx = Context(steps_per_epoch, last_epoch)
        self.resolution = resolution
        self.json_only = False
        self.recognised: Counter[str] = Counter()
        self.frames = 0
        self._last_speed: dict[str, float] = {}  # format -> epoch of the last speed event kept
        self._last: dict[str, tuple[float, float]] = {}  # format -> (last epoch end, last point inside an epoch)

    # -- feeding --------------------------------------------------------------------------------

    def feed(self, data: bytes | str, time: float | None = None) -> list[Item]:
        """Read a piece of the log; ``time`` (Unix seconds) stamps points whose line states no time."""
        out: list[Item] = []
        for frame in self.splitter.feed(data):
            out.extend(self.read_frame(frame, time))
        return out

    def close(self, time: float | None = None) -> list[Item]:
        """The log has ended: read its unfinished last line and release every held point."""
        out: list[Item] = []
        for frame in self.splitter.close():
            out.extend(self.read_frame(frame, time))
        return out + self.flush()

    def flush(self) -> list[Item]:
        """Release points held back (an epoch's end whose validation a later redraw may add)."""
        out: list[Item] = []
        for f in self.formats:
            out.extend(self._keep(f.flush()))
        return out

    def read_frame(self, frame: Frame, time: float | None) -> list[Item]:
        self.frames += 1
        for f in self.formats:
            if self.json_only and f.name != "jsonl":
                continue
            items = f.read(frame, time, self.ctx)
            if items is None:
                continue
            self.recognised[f.name] += 1
            reached = max((i.epoch for i in items if isinstance(i, LogPoint)), default=None)
            if f.name == "jsonl" and reached is not None:
                self.json_only = True
            released: list[Item] = []
            if reached is not None:  # epoch ends others hold back, up to here, come first (the order of epochs)
                for g in self.formats:
                    if g is not f and g.held is not None and g.held.epoch <= reached:
                        released += g.flush()
            return self._keep(released + items)
        return []

    def _keep(self, items: list[Item]) -> list[Item]:
        out: list[Item] = []
        for it in items:
            if isinstance(it, LogEvent) and it.kind == "speed" and it.epoch is not None:
                last = self._last_speed.get(it.format)
                if last is not None and last <= it.epoch < last + SPEED_RESOLUTION:
                    continue  # a bar shows its rate on every redraw: a few a epoch are enough
                self._last_speed[it.format] = it.epoch
            if isinstance(it, LogPoint):
                whole, partial = self._last.get(it.format, (-1.0, -1.0))
                if not it.partial:
                    self._last[it.format] = (it.epoch, partial)
                elif it.epoch < whole or it.epoch < partial + self.resolution:
                    continue  # a redraw that moved too little, or a bar re-shown for an epoch already ended
                else:
                    self._last[it.format] = (whole, it.epoch)
                self.ctx.last_epoch = max(self.ctx.last_epoch, it.epoch)
            out.append(it)
        return out

    # -- what was seen --------------------------------------------------------------------------

    @property
    def unplaced(self) -> int:
        """Lines with a loss at a step that could not be placed: steps per epoch unknown."""
        return sum(int(getattr(f, "unplaced", 0)) for f in self.formats)

    @property
    def overlong(self) -> int:
        return self.splitter.overlong

    # -- resuming -------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What a later reader needs to go on, the unfinished last line included (bounded)."""
        return {
            "splitter": self.splitter.state(),
            "formats": {f.name: f.state() for f in self.formats},
            "json_only": self.json_only,
            "last_epoch": self.ctx.last_epoch,
            "last": {k: list(v) for k, v in self._last.items()},
            "last_speed": dict(self._last_speed),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Go on from a :meth:`state`; a state that does not fit (an older or damaged one) starts afresh."""
        fresh = LogReader(steps_per_epoch=self.ctx.steps_per_epoch, resolution=self.resolution, last_epoch=self.ctx.last_epoch)
        try:
            formats = state.get("formats") or {}
            for f in self.formats:
                if isinstance(formats.get(f.name), dict):
                    f.restore(formats[f.name])
            self.splitter.restore(state.get("splitter") or {})
            self.json_only = bool(state.get("json_only", False))
            self.ctx.last_epoch = float(state.get("last_epoch", self.ctx.last_epoch))
            self._last = {str(k): (float(v[0]), float(v[1])) for k, v in (state.get("last") or {}).items()}
            self._last_speed = {str(k): float(v) for k, v in (state.get("last_speed") or {}).items()}
        except (TypeError, ValueError, KeyError, IndexError, AttributeError):
            self.formats = [f for f in fresh.formats if any(g.name == f.name for g in self.formats)]
            self.json_only, self.ctx.last_epoch, self._last, self._last_speed = False, fresh.ctx.last_epoch, {}, {}
            self.splitter = fresh.splitter


def merge_points(points: list[LogPoint]) -> list[LogPoint]:
    """Consecutive points at the same epoch as one: the loss of one, the metric of the other.

    Frameworks print an epoch's training loss and its validation on two lines (Hugging Face's two
    dicts, PyTorch's train and test lines, a bar and a summary line); the snapshot keeps one point
    per epoch (the state store's key), so they are joined. The first value of each field and the
    first time are kept; the point is inside an epoch only if all of them were.
    """
    out: list[LogPoint] = []
    for p in points:
        if out and out[-1].epoch == p.epoch:
            q = out[-1]
            out[-1] = replace(
                q,
                loss=q.loss if q.loss is not None else p.loss,
                metric=q.metric if q.metric is not None else p.metric,
                time=q.time if q.time is not None else p.time,
                partial=q.partial and p.partial,
            )
        else:
            out.append(p)
    return out


def read_log(data: bytes | str, **options: Any) -> tuple[list[LogPoint], list[LogEvent], LogReader]:
    """A whole log at once: its points (same-epoch points merged), its events, and the reader (for what it recognised)."""
    reader = LogReader(**options)
    items = reader.feed(data) + reader.close()
    points = merge_points([i for i in items if isinstance(i, LogPoint)])
    return points, [i for i in items if isinstance(i, LogEvent)], reader
