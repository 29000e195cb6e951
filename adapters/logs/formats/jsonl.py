"""FlowPlan's own JSON lines (what the training-side SDK and ``examples/jobs`` print)::

    {"epoch": 3, "loss": 0.43, "metric": 0.91, "time": 1767000000.1}
    {"event": "checkpoint", "epoch": 3}

``epoch`` is epochs completed, as in the snapshot; ``loss`` or ``metric`` is needed, ``time`` is
optional. Once a log has printed a JSON progress line, the reader reads nothing else from it: the
job reports on purpose, and its other lines (``Loss: ...`` for FlowCon) would count epochs twice.
"""

from __future__ import annotations

import json
from typing import Any

from adapters.logs.formats.base import Context, Item, LogFormat
from adapters.logs.points import LogEvent, finite
from adapters.logs.terminal import Frame


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def json_object(text: str) -> dict[str, Any] | None:
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def is_progress(obj: dict[str, Any]) -> bool:
    epoch = finite(_num(obj.get("epoch")))
    has_value = _num(obj.get("loss")) is not None or _num(obj.get("metric")) is not None
    return "event" not in obj and epoch is not None and epoch >= 0 and has_value


class JsonLines(LogFormat):
    name = "jsonl"
    example = '{"epoch": 3, "loss": 0.43, "metric": 0.91, "time": 1767000000.1}'

    def read(self, frame: Frame, time: float | None, ctx: Context) -> list[Item] | None:
        obj = json_object(frame.text)
        if obj is None:
            return None
        stamp = finite(_num(obj.get("time")))
        when = stamp if stamp is not None else time
        if isinstance(obj.get("event"), str):
            detail = {k: v for k, v in obj.items() if k not in ("event", "epoch", "time")}
            return [LogEvent(obj["event"], finite(_num(obj.get("epoch"))), when, detail, self.name)]
        if not is_progress(obj):
            return None
        epoch = float(obj["epoch"])
        return self.point(epoch, _num(obj.get("loss")), _num(obj.get("metric")), when) or [
            LogEvent("metric_not_finite", epoch, when, {}, self.name)
        ]
