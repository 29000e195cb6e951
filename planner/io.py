"""Reading snapshots: JSON text in, a validated :class:`Snapshot` out, or one clear :class:`SnapshotError`.

The error names the field by its path (``jobs[3].min_cpu_millis``), says what is wrong and shows
the offending value, so a user sees one line, never a traceback.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from models import SCHEDULE_KINDS, LRSchedule
from planner.errors import SnapshotError, field_path, first_error, unknown_field, unknown_tag
from planner.snapshot import MetricPoint, ScheduleOnly, Snapshot, lr_schedule, schedule_problem


def _short(value: Any) -> str:
    text = json.dumps(value, default=str, allow_nan=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _reject_constant(name: str) -> float:
    # json accepts NaN/Infinity (not valid JSON); keep them so the schema rejects them with a path.
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]


def _read_int(text: str) -> int:
    # Python refuses to convert an integer of more than 4300 digits (sys.set_int_max_str_digits): say
    # so in the user's terms instead of a ValueError that names a setting of Python's.
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"an integer of {len(text.lstrip('-'))} digits (at most {sys.get_int_max_str_digits()} are read)"
        ) from None


def parse_snapshot(text: str | bytes) -> Snapshot:
    """Parse and validate snapshot JSON.

    A valid snapshot goes through pydantic's own JSON parser in one step (a third of the time of
    ``json.loads`` and validating the objects it built: 1 ms against 3.4 ms for 50 jobs, which a plan
    request paid in the service process). Whatever that refuses is parsed again the careful way,
    which gives the one-line error naming the field; both take the last of duplicate keys, and the
    schema has no field (tuple, enum, date) that the JSON parser would take where the other refuses."""
    try:
        return Snapshot.model_validate_json(text)
    except ValidationError:
        pass
    if not (text.strip() if isinstance(text, str) else text.strip(b" \t\r\n")):
        raise SnapshotError("", "empty (no JSON at all)")
    try:
        data = json.loads(text, parse_constant=_reject_constant, parse_int=_read_int)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise SnapshotError("", f"not valid JSON{where}: {msg}") from exc
    except ValueError as exc:  # _read_int's
        raise SnapshotError("", f"not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise SnapshotError("", "not valid JSON: nested too deeply") from exc
    return validate_snapshot(data)


def validate_snapshot(data: Any) -> Snapshot:
    if not isinstance(data, dict):
        raise SnapshotError("", f"a snapshot is a JSON object, got {type(data).__name__}")
    version = data.get("apiVersion", "flowplan/v1")
    if version != "flowplan/v1":
        raise SnapshotError("apiVersion", f"unsupported version {_short(version)} (this FlowPlan reads flowplan/v1)", version)
    try:
        return Snapshot.model_validate(data)
    except ValidationError as exc:
        raise _translate(exc, Snapshot) from None


def _untagged(loc: Any) -> tuple[Any, ...]:
    """The error's path without the tag pydantic inserts after a discriminated union
    (``jobs.0.schedule.step.gamma`` is ``jobs[0].schedule.gamma`` in the user's JSON)."""
    out: list[Any] = []
    for part in loc:
        if out and out[-1] == "schedule" and part in SCHEDULE_KINDS:
            continue
        out.append(part)
    return tuple(out)


def _translate(exc: ValidationError, model: Any) -> SnapshotError:
    """The first of pydantic's errors as one :class:`SnapshotError` naming the field and the value."""
    errors = exc.errors(include_url=False)
    err = first_error(errors)
    loc = field_path(_untagged(err["loc"]))
    if err["type"] == "extra_forbidden":
        return SnapshotError(loc, unknown_field(tuple(err["loc"]), errors, model))
    if err["type"] == "union_tag_invalid":
        return SnapshotError(loc, unknown_tag(err))
    if err["type"] == "union_tag_not_found":
        return SnapshotError(f"{loc}.kind", f"missing (one of: {', '.join(SCHEDULE_KINDS)})")
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    # Cross-field errors raised at the top level carry their own path in the message ...
    if not loc and ": " in msg and msg.startswith(("jobs[", "nodes[", "curve_priors[")):
        loc, msg = msg.split(": ", 1)
        return SnapshotError(loc, msg)
    # ... and those of a job name their field first ("schedule: ...").
    head = re.match(r"^([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*|\[\d+\])*): ", msg)
    if loc and head:
        return SnapshotError(f"{loc}.{head.group(1)}", msg[head.end() :])
    value = err.get("input")
    shown = "" if isinstance(value, dict | list) else f" (got {_short(value)})"
    extra = f"; {len(exc.errors()) - 1} more error(s)" if len(exc.errors()) > 1 else ""
    return SnapshotError(loc, f"{msg}{shown}{extra}", value)


def point_refusal(time: float | None, epoch: float, loss: float | None, metric: float | None) -> str | None:
    """Why the snapshot contract refuses a history point read from a log or a tracking server (one
    line naming the field and the value, e.g. ``loss: Input should be greater than or equal to
    -1000000000000 (got -1e+300)``), or ``None`` when it takes it. The adapters drop such a point;
    ``flowplan logs`` says so."""
    try:
        MetricPoint(time=time or 0.0, epoch=epoch, loss=loss, metric=metric)
    except ValidationError as exc:
        return str(_translate(exc, MetricPoint))
    return None


def parse_schedule(text: str, max_epochs: float | None) -> LRSchedule:
    """A learning-rate schedule given as JSON text (``flowplan predict --schedule``), validated like a
    job's ``schedule``; errors are one :class:`SnapshotError` naming the field (``schedule.gamma``)."""
    try:
        data = json.loads(text, parse_constant=_reject_constant, parse_int=_read_int)
    except json.JSONDecodeError as exc:
        raise SnapshotError("schedule", f"not valid JSON at column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:  # _read_int's
        raise SnapshotError("schedule", f"not valid JSON: {exc}") from None
    except RecursionError:
        raise SnapshotError("schedule", "not valid JSON: nested too deeply") from None
    try:
        spec = ScheduleOnly.model_validate({"schedule": data}).schedule
    except ValidationError as exc:
        raise _translate(exc, ScheduleOnly) from None
    problem = schedule_problem(spec, max_epochs)
    if problem is not None:
        raise SnapshotError("schedule", problem)
    return lr_schedule(spec, max_epochs)


def load_snapshot(path: str | Path) -> Snapshot:
    """Read and validate a snapshot file; errors name the file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError as exc:
        raise SnapshotError("", "no such file") from exc
    except IsADirectoryError as exc:
        raise SnapshotError("", "is a directory, not a snapshot file") from exc
    except PermissionError as exc:
        raise SnapshotError("", "permission denied") from exc
    return parse_snapshot(raw)
