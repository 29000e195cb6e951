"""Training progress from container logs, read incrementally.

Two line formats are accepted (a job may print both; JSON wins):

- FlowCon's ``Loss: <float>``: one point per line, numbered after the last known epoch;
- JSON lines: ``{"epoch": 3, "loss": 0.43, "metric": 0.91, "time": 1767000000.1}`` (``loss`` or
  ``metric`` required, ``time`` optional: the log's timestamp is used otherwise), and events
  ``{"event": "checkpoint" | "delivered" | "resumed" | "finished" | "started", ...}``.

Only new lines are read each interval: a :class:`LogCursor` holds the engine timestamp of the last
line consumed (kept in the state store, so a restarted daemon does not read a log twice). A ``Loss:``
line at the very end of what was read is held back until the next line arrives, because the JSON
line of the same epoch may follow it; once a container has printed JSON progress, its ``Loss:``
lines are ignored.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

_LOSS = re.compile(r"^\s*Loss:\s*([-+0-9.eEinfINFaN]+)\s*$")


@dataclass
class LogCursor:
    """Where reading a container's log left off: the last consumed line's timestamp (engine clock)."""

    since: str = ""
    json_seen: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"since": self.since, "json_seen": self.json_seen}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> LogCursor:
        if not d:
            return cls()
        return cls(since=str(d.get("since", "")), json_seen=bool(d.get("json_seen", False)))


@dataclass
class Progress:
    """What new log lines said: metric points (as dicts for ``MetricPoint``) and events."""

    points: list[dict[str, float]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    ignored: int = 0


def parse_timestamp(text: str) -> tuple[int, int]:
    """An RFC 3339 nano timestamp as (Unix seconds, nanoseconds), for exact ordering."""
    base, _, frac = text.rstrip("Z").partition(".")
    dt = datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return int(dt.timestamp()), int((frac + "000000000")[:9]) if frac else 0


def to_seconds(stamp: tuple[int, int]) -> float:
    return stamp[0] + stamp[1] / 1e9


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def read_lines(raw: bytes, cursor: LogCursor, last_epoch: float, *, final: bool) -> tuple[Progress, LogCursor]:
    """Parse ``raw`` (``docker logs --timestamps`` output) past ``cursor``.

    ``last_epoch`` numbers ``Loss:`` lines; ``final`` (the container has stopped) consumes a trailing
    ``Loss:`` line instead of holding it back. Returns the progress and the advanced cursor.
    """
    after = parse_timestamp(cursor.since) if cursor.since else None
    entries: list[tuple[str, tuple[int, int], str]] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        stamp_text, _, text = line.partition(" ")
        try:
            stamp = parse_timestamp(stamp_text)
        except ValueError:
            continue
        if after is not None and stamp <= after:
            continue
        entries.append((stamp_text, stamp, text))

    out = Progress()
    json_seen = cursor.json_seen or any(_json_progress(t) is not None for _, _, t in entries)
    new_since = cursor.since
    epoch = last_epoch
    for i, (stamp_text, stamp, text) in enumerate(entries):
        m = _LOSS.match(text)
        if m is not None:
            if json_seen:
                new_since = stamp_text
                continue
            if i == len(entries) - 1 and not final:
                break  # the JSON line of this epoch may still come
            loss = _finite(_parse_float(m.group(1)))
            new_since = stamp_text
            if loss is None:
                out.ignored += 1
                continue
            epoch = math.floor(epoch) + 1
            out.points.append({"time": to_seconds(stamp), "epoch": float(epoch), "loss": loss})
            continue
        new_since = stamp_text
        record = _json_progress(text)
        if record is not None:
            point = {"time": _finite(record.get("time")) or to_seconds(stamp), "epoch": float(record["epoch"])}
            for key in ("loss", "metric"):
                v = _finite(record.get(key))
                if v is not None:
                    point[key] = v
            if "loss" not in point and "metric" not in point:
                out.ignored += 1
                continue
            epoch = max(epoch, point["epoch"])
            out.points.append(point)
            continue
        event = _json_event(text)
        if event is not None:
            event.setdefault("time", to_seconds(stamp))
            out.events.append(event)
    return out, LogCursor(new_since, json_seen)


def _parse_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _json_object(text: str) -> dict[str, Any] | None:
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _json_progress(text: str) -> dict[str, Any] | None:
    obj = _json_object(text)
    if obj is None or "event" in obj:
        return None
    epoch = _finite(obj.get("epoch"))
    if epoch is None or epoch < 0:
        return None
    if _finite(obj.get("loss")) is None and _finite(obj.get("metric")) is None:
        return None
    return obj


def _json_event(text: str) -> dict[str, Any] | None:
    obj = _json_object(text)
    if obj is None or not isinstance(obj.get("event"), str):
        return None
    return obj
