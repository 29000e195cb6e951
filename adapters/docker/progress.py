"""Training progress from container logs, read incrementally with the shared log parsers.

Every format :mod:`adapters.logs` understands is read (FlowPlan's JSON lines and events, FlowCon's
``Loss: <float>``, PyTorch's example loops, Keras, Lightning's and tqdm's bars, Hugging Face
Trainer dicts, free-form ``epoch: 3 loss: 0.25`` lines): ``flowplan logs`` shows what a log gives.

Only new lines are read each interval: a :class:`LogCursor` holds the engine timestamp of the last
line consumed and the reader's small state (the epoch a Keras header started, an epoch end held for
its validation figures...), kept in the state store, so a restarted daemon neither reads a log twice
nor forgets where the job was. Points whose line states no time get the line's engine timestamp.

FlowCon's jobs print both ``Loss:`` and JSON: once a container has printed JSON progress, only JSON
is read, and a bare ``Loss:`` line at the very end of what was read is held back until the next
line arrives, because the JSON line of the same epoch may follow it.

:class:`LogProgress` keeps what logs said per job (points, declarations, delivery) in the state
store; the Docker and Kubernetes adapters both read through it (pod logs with ``timestamps=true``
have the same line format as ``docker logs --timestamps``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from adapters.logs import Declaration, LogEvent, LogPoint, LogReader, declaration, is_json_progress, merge_points
from adapters.logs.mlflow import MlflowClient, MlflowCursor, MlflowError, read_job
from planner.io import point_refusal
from planner.snapshot import Job, MetricPoint, QoETarget, ScheduleOnly, TaskCurves, schedule_problem

if TYPE_CHECKING:
    from adapters.logs.tensorboard import TensorBoardRead

#: A partial message's timestamp inside an engine line (Docker's RFC 3339 with 9 fractional digits).
_INLINE_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) ")
_LOSS = re.compile(r"^\s*Loss:\s*([-+0-9.eEinfINFaN]+)\s*$")


@dataclass
class LogCursor:
    """Where reading a container's log left off: the last consumed line's timestamp (engine clock) and the reader's state."""

    since: str = ""
    json_seen: bool = False
    reader: dict[str, Any] = field(default_factory=dict)
    #: how many entries stamped exactly ``since`` were consumed (the pieces of a line the engine cut
    #: share its first timestamp); -1: all of them (a cursor from before this was counted)
    at_since: int = -1

    def as_dict(self) -> dict[str, Any]:
        return {"since": self.since, "json_seen": self.json_seen, "reader": self.reader, "at_since": self.at_since}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> LogCursor:
        if not d:
            return cls()
        reader = d.get("reader")
        return cls(
            since=str(d.get("since", "")),
            json_seen=bool(d.get("json_seen", False)),
            reader=reader if isinstance(reader, dict) else {},
            at_since=int(d.get("at_since", -1)) if isinstance(d.get("at_since", -1), int) else -1,
        )


@dataclass
class Progress:
    """What new log lines said: metric points (as dicts for ``MetricPoint``) and events."""

    points: list[dict[str, float]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    ignored: int = 0
    #: (time, seconds an epoch takes) at the rate a progress bar showed (tqdm's it/s, Keras' ms/step)
    rates: list[tuple[float, float]] = field(default_factory=list)


def parse_timestamp(text: str) -> tuple[int, int]:
    """An RFC 3339 nano timestamp as (Unix seconds, nanoseconds), for exact ordering."""
    base, _, frac = text.rstrip("Z").partition(".")
    dt = datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return int(dt.timestamp()), int((frac + "000000000")[:9]) if frac else 0


def to_seconds(stamp: tuple[int, int]) -> float:
    return stamp[0] + stamp[1] / 1e9


#: Formats that print an epoch's loss and its validation on two lines (a loss dict and an eval dict;
#: the test line and the next train line): their last epoch end waits a read for its other half.
SPLIT_EPOCHS = ("hf-trainer", "pytorch")


def cursor_point(cursor: LogCursor) -> list[LogPoint]:
    """The point the last read left waiting for the other half of its epoch (none, or one)."""
    try:
        return [LogPoint(**d) for d in cursor.reader.get("waiting") or [] if isinstance(d, dict)]
    except TypeError:  # a damaged cursor: the point is lost, reading goes on
        return []


def read_lines(
    raw: bytes, cursor: LogCursor, last_epoch: float, *, final: bool, steps_per_epoch: float | None = None
) -> tuple[Progress, LogCursor]:
    """Parse ``raw`` (``docker logs --timestamps`` output) past ``cursor``.

    ``last_epoch`` numbers bare ``Loss:`` lines; ``final`` (the container has stopped) consumes a
    trailing ``Loss:`` line instead of holding it back, and releases epoch ends held for their
    validation figures. Points at one epoch are joined (the store keeps one per epoch, the first);
    so an epoch end of :data:`SPLIT_EPOCHS` that lacks a loss or a metric waits in the cursor for
    the next read, where the other half of its epoch may be. Returns the progress and the advanced cursor.
    """
    after = parse_timestamp(cursor.since) if cursor.since else None
    entries: list[tuple[str, tuple[int, int], str, bool]] = []  # (stamp, parsed stamp, text, the engine ended the line)
    # Split at "\n" only (the engine's line end): "\r" redraws stay inside their line, for the reader.
    lines = raw.decode("utf-8", "replace").split("\n")
    seen_at_since = 0
    for n, line in enumerate(lines):
        stamp_text, _, text = line.partition(" ")
        # The engine cuts a line longer than 16 KiB (a bar redrawn with "\r" for a whole epoch) into
        # partial messages, each with its own timestamp and no "\n" until the last.
        parts = _INLINE_STAMP.split(text)
        pieces = [(stamp_text, parts[0]), *zip(parts[1::2], parts[2::2], strict=True)]
        for k, (piece_stamp, piece) in enumerate(pieces):
            try:
                stamp = parse_timestamp(piece_stamp)
            except ValueError:
                break
            if after is not None and stamp < after:
                continue
            if after is not None and stamp == after:
                seen_at_since += 1
                if cursor.at_since < 0 or seen_at_since <= cursor.at_since:
                    continue
            entries.append((piece_stamp, stamp, piece, n < len(lines) - 1 and k == len(pieces) - 1))

    reader = LogReader(steps_per_epoch=steps_per_epoch, last_epoch=last_epoch)
    if cursor.reader:
        reader.restore(cursor.reader)
        reader.ctx.last_epoch = max(reader.ctx.last_epoch, last_epoch)
    json_seen = cursor.json_seen or any(is_json_progress(t) for _, _, t, _ in entries)
    reader.json_only = reader.json_only or json_seen
    out = Progress()
    new_since, at_since = cursor.since, cursor.at_since
    items: list[Any] = []
    for i, (stamp_text, stamp, text, ended) in enumerate(entries):
        if i == len(entries) - 1 and not final and not json_seen and _LOSS.match(text):
            break  # the JSON line of this epoch may still come
        items += reader.feed(text + "\n" if ended else text, time=to_seconds(stamp))
        if new_since and stamp == parse_timestamp(new_since) and at_since >= 0:
            at_since += 1
        else:
            new_since, at_since = stamp_text, 1
    if final:
        items += reader.flush()
    points = merge_points([*cursor_point(cursor), *(i for i in items if isinstance(i, LogPoint))])
    last = points[-1] if points else None
    if (
        last is not None
        and not final
        and last.format in SPLIT_EPOCHS
        and last.epoch.is_integer()
        and None in (last.loss, last.metric)
    ):
        waiting = [asdict(points.pop())]  # its epoch's other half (a test line, an eval dict) may come next
    else:
        waiting = []
    for p in points:
        point: dict[str, float] = {"time": p.time if p.time is not None else 0.0, "epoch": p.epoch}
        if p.loss is not None:
            point["loss"] = p.loss
        if p.metric is not None:
            point["metric"] = p.metric
        out.points.append(point)
    for it in items:
        if isinstance(it, LogEvent) and it.kind == "speed" and it.time is not None:
            out.rates.append((it.time, float(it.detail["seconds_per_epoch"])))
        elif isinstance(it, LogEvent) and it.format == "jsonl" and it.kind not in ("loss_not_finite", "metric_not_finite"):
            out.events.append(it.as_dict())
        elif isinstance(it, LogEvent):
            out.ignored += 1
    return out, LogCursor(new_since, json_seen, {**reader.state(), "waiting": waiting}, at_since)


def kv_json(store: Any, key: str) -> Any:
    """The JSON value kept under ``key`` in the state store's key-value table (None: none, or unreadable)."""
    text = store.get_kv(key)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def set_kv_json(store: Any, key: str, value: Any) -> None:
    store.set_kv(key, json.dumps(value, allow_nan=False))


class LogProgress:
    """What jobs' logs said, kept in the state store: points, ``declare`` and ``delivered`` events.

    One of these serves each adapter that reads logs (Docker containers, Kubernetes pods), so both
    turn log text into a job's history, planned epochs, schedule and delivery in the same way. Keys
    (under ``prefix``, e.g. ``docker``): ``<prefix>.log.<source>`` the cursor of one log (a
    container id, a pod UID), ``<prefix>.declared.<job>`` the job's declaration (each ``declare``
    event's fields over the earlier ones'), ``<prefix>.delivered.<job>`` the job reported its tier-1
    delivery. Points go to the store, which keeps one per (job, epoch): a point the HTTP ingest
    already gave, or a log read again, is not duplicated.
    """

    def __init__(self, store: Any, prefix: str, log: logging.Logger) -> None:
        self.store = store
        self.prefix = prefix
        self.log = log
        self._warned_schedule: dict[str, str] = {}  # job -> the reason its declared schedule was left out, logged once
        self._mlflow_said = ""  # the last MLflow failure logged (a server down for an hour is one warning, not one a job a tick)

    def _kv_json(self, key: str) -> Any:
        return kv_json(self.store, key)

    def _set_kv_json(self, key: str, value: Any) -> None:
        set_kv_json(self.store, key, value)

    def cursor(self, source: str) -> LogCursor:
        """Where reading the log of ``source`` (a container id, a pod UID) left off."""
        return LogCursor.from_dict(self._kv_json(f"{self.prefix}.log.{source}"))

    def read(self, job_id: str, source: str, raw: bytes, *, final: bool, steps_per_epoch: float | None = None) -> Progress:
        """Parse ``raw`` (timestamped log lines of ``source``) past its cursor; keep the points, the
        declarations and a delivery; advance the cursor. Returns what was read (rates included)."""
        cursor = self.cursor(source)
        last_epoch = max((p.epoch for p in self.store.history(job_id)), default=0.0) if b"Loss:" in raw else 0.0
        progress, cursor = read_lines(raw, cursor, last_epoch, final=final, steps_per_epoch=steps_per_epoch)
        points = []
        refused: list[dict[str, Any]] = []
        for p in progress.points:
            try:
                points.append(MetricPoint(**p))
            except ValueError:
                refused.append(p)
        self._refused(job_id, refused)
        if points:
            self.store.add_points(job_id, points)
        for ev in progress.events:
            if ev.get("event") == "delivered":
                self.mark_delivered(job_id)
        self.keep_declared(job_id, progress.events)
        self._set_kv_json(f"{self.prefix}.log.{source}", cursor.as_dict())
        return progress

    def read_mlflow(self, job_id: str, client: MlflowClient, *, steps_per_epoch: float | None = None) -> bool:
        """Keep the points the job's MLflow runs logged since the last read (cursor ``<prefix>.mlflow.<job>``).

        Returns False when the server could not be read (logged once per distinct failure; the caller
        skips the other jobs this interval rather than wait out a timeout for each)."""
        key = f"{self.prefix}.mlflow.{job_id}"
        try:
            read, cursor = read_job(client, job_id, MlflowCursor.from_dict(self._kv_json(key)), steps_per_epoch=steps_per_epoch)
        except (MlflowError, ValueError) as exc:
            if str(exc) != self._mlflow_said:
                self._mlflow_said = str(exc)
                self.log.warning("job %s: progress from MLflow not read: %s", job_id, exc)
            return not isinstance(exc, MlflowError)
        self._mlflow_said = ""
        self._keep(job_id, read.points, key, cursor.as_dict())
        return True

    def read_tensorboard(
        self, job_id: str, files: Mapping[str, bytes], *, final: bool, steps_per_epoch: float | None = None
    ) -> TensorBoardRead:
        """Keep the points the job's TensorBoard event ``files`` (path -> the whole file) hold past the
        last read (cursor ``<prefix>.tensorboard.<job>``: bytes read per file); ``final``: the job
        writes no more (its newest step is read too)."""
        from adapters.logs.tensorboard import TensorBoardCursor, read_files

        key = f"{self.prefix}.tensorboard.{job_id}"
        cursor = TensorBoardCursor.from_dict(self._kv_json(key))
        read, cursor = read_files(files, cursor, steps_per_epoch=steps_per_epoch, final=final)
        self._keep(job_id, read.points, key, cursor.as_dict())
        return read

    def _keep(self, job_id: str, read: list[LogPoint], key: str, cursor: dict[str, Any]) -> None:
        """Store the points of a read from a source other than the log (MLflow, event files), then its cursor."""
        points = []
        refused: list[dict[str, Any]] = []
        for p in read:
            try:
                points.append(MetricPoint(time=p.time or 0.0, epoch=p.epoch, loss=p.loss, metric=p.metric))
            except ValueError:
                refused.append({"time": p.time, "epoch": p.epoch, "loss": p.loss, "metric": p.metric})
        self._refused(job_id, refused)
        if points:
            self.store.add_points(job_id, points)
        self._set_kv_json(key, cursor)

    def _refused(self, job_id: str, refused: list[dict[str, Any]]) -> None:
        """Say (a warning) that points the snapshot contract refuses were left out, naming the first."""
        if refused:
            first = refused[0]
            why = point_refusal(first.get("time"), first["epoch"], first.get("loss"), first.get("metric"))
            self.log.warning("job %s: %d progress point(s) left out: epoch %g: %s", job_id, len(refused), first["epoch"], why)

    def delivered(self, job_id: str) -> bool:
        return bool(self._kv_json(f"{self.prefix}.delivered.{job_id}"))

    def mark_delivered(self, job_id: str) -> None:
        self._set_kv_json(f"{self.prefix}.delivered.{job_id}", True)

    def declared(self, job_id: str) -> Declaration | None:
        """What the job declared in its log (``{"event": "declare", ...}``: ``flowplan.sdk.init``)."""
        return Declaration.from_dict(self._kv_json(f"{self.prefix}.declared.{job_id}"))

    def keep_declared(self, job_id: str, events: list[dict[str, Any]]) -> None:
        """Store the ``declare`` events among ``events``: each one's fields over the earlier ones'."""
        for ev in events:
            decl = declaration(ev)
            if decl is not None:
                self._set_kv_json(f"{self.prefix}.declared.{job_id}", decl.over(self.declared(job_id)).as_dict())

    def with_declared(self, job_id: str, target: QoETarget | None) -> QoETarget | None:
        """The target with the ``max_epochs`` the job declared, where its labels set none (a label wins).

        A job without a target has no field for it in the snapshot (``max_epochs`` is the target's).
        """
        decl = self.declared(job_id)
        if target is None or target.max_epochs is not None or decl is None or decl.max_epochs is None:
            return target
        return target.model_copy(update={"max_epochs": decl.max_epochs})

    def declared_schedule(self, job_id: str, target: QoETarget | None) -> Any:
        """The learning-rate schedule the job declared, validated as the snapshot's (None when it
        declared none, or one the contract refuses: logged once, and the job is planned without it)."""
        decl = self.declared(job_id)
        if decl is None or decl.schedule is None:
            return None
        schedule: Any = None
        try:
            schedule = ScheduleOnly.model_validate({"schedule": decl.schedule}).schedule
        except ValueError as exc:
            problem: str | None = str(exc).splitlines()[-1].strip()
        else:
            problem = schedule_problem(schedule, target.max_epochs if target is not None else None)
        if problem is not None:
            if self._warned_schedule.get(job_id) != problem:
                self._warned_schedule[job_id] = problem
                self.log.warning("job %s: declared schedule left out: %s", job_id, problem)
            return None
        return schedule


def curve_priors(store: Any, jobs: Sequence[Job]) -> list[TaskCurves]:
    """The snapshot's ``curve_priors``: for each task a job not finished names, the curves of the
    task's finished runs in ``store`` (its ``task_curves``; ``store.curves``), where it has any."""
    tasks = sorted({j.task for j in jobs if j.task is not None and j.status != "finished"})
    return [c for task in tasks if (c := store.task_curves(task)) is not None]
