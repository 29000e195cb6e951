"""A training run as FlowPlan sees it: progress reported, requests heard, checkpoints and deliveries announced."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Literal, TextIO

from flowplan.sdk.control import Control
from flowplan.sdk.report import HttpReporter, StdoutReporter
from flowplan.sdk.schedule import check_schedule

log = logging.getLogger("flowplan.sdk")

#: The exit code of a job that checkpointed because it was asked to stop (EX_TEMPFAIL): the Docker
#: adapter counts the job as pending again, to be resumed from its checkpoint.
EX_CHECKPOINTED = 75

Report = Literal["auto", "stdout", "http"]
Callback = Callable[["Run"], "str | os.PathLike[str] | None"]


def _finite(name: str, value: Any) -> float | None:
    """``value`` as a float (numbers, numpy scalars, 0-d tensors); None, with a warning, when it is not one."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        log.warning("flowplan.sdk: %s is not a number (%r); left out", name, value)
        return None


class Run:
    """One training run. Made by :func:`flowplan.sdk.init`; see ``docs/sdk.md`` for a loop that uses it.

    ``log`` reports progress; ``should_checkpoint``/``should_stop``/``should_deliver`` say what FlowPlan
    asked for; ``checkpoint_done`` and ``delivered`` say it was done; ``finish`` (or leaving the
    ``with`` block) ends the run. ``on_checkpoint``/``on_deliver`` callbacks, where given, are called
    by ``log`` and ``check`` when a request is pending: they return the path written.
    """

    def __init__(
        self,
        job: str,
        *,
        points: StdoutReporter | HttpReporter,
        events: StdoutReporter,
        control: Control,
        min_point_seconds: float = 1.0,
        on_checkpoint: Callback | None = None,
        on_deliver: Callback | None = None,
    ) -> None:
        self.job = job
        self.control = control
        self.min_point_seconds = min_point_seconds
        self.on_checkpoint = on_checkpoint
        self.on_deliver = on_deliver
        self._points = points
        self._events = events
        self.epoch = 0.0
        self._last_point_at = float("-inf")
        self._finished = False

    # -- reporting -----------------------------------------------------------------------------
    def log(
        self,
        epoch: float,
        *,
        loss: Any = None,
        metric: Any = None,
        step: int | None = None,
        at: float | None = None,
    ) -> None:
        """Report progress: ``epoch`` = epochs completed (fractional inside an epoch), the training
        ``loss``, the quality ``metric`` (validation accuracy); ``at``: Unix time (default now).
        Points inside an epoch without a metric are kept at most one per ``min_point_seconds``; whole
        epochs and metrics always. Never raises."""
        e = _finite("epoch", epoch)
        if e is None or not math.isfinite(e) or e < 0:
            log.warning("flowplan.sdk: epoch must be a finite number >= 0, got %r; point left out", epoch)
            return
        now = time.time() if at is None else at
        record: dict[str, Any] = {"epoch": int(e) if e.is_integer() else e}
        for name, value in (("loss", loss), ("metric", metric)):
            v = _finite(name, value)
            if v is not None and not math.isfinite(v):
                self._events.emit({"event": f"{name}_not_finite", "epoch": record["epoch"], "value": str(v), "time": now})
            elif v is not None:
                record[name] = v
        self.epoch = max(self.epoch, e)
        if "loss" in record or "metric" in record:
            whole = e.is_integer() or "metric" in record
            if whole or now - self._last_point_at >= self.min_point_seconds:
                self._last_point_at = now
                record["time"] = now
                if step is not None:
                    record["step"] = int(step)
                self._points.point(record)
        self.check()

    def event(self, kind: str, **detail: Any) -> None:
        """Print ``{"event": kind, ...}`` (with the time, and the epoch reached unless given; ``epoch=None``: none)."""
        detail.setdefault("epoch", self.epoch)
        if detail["epoch"] is None:
            del detail["epoch"]
        elif isinstance(detail["epoch"], float) and detail["epoch"].is_integer():
            detail["epoch"] = int(detail["epoch"])
        self._events.emit({"event": kind, **detail, "time": time.time()})

    # -- requests --------------------------------------------------------------------------------
    def check(self) -> None:
        """Take new requests; run the callbacks of those pending (``log`` calls this)."""
        self._poll()
        if self.control.checkpoint is not None and self.on_checkpoint is not None:
            self.checkpoint_done(self.on_checkpoint(self))
        if self.control.deliver is not None and self.on_deliver is not None:
            self.delivered(self.on_deliver(self))

    def _poll(self) -> None:
        had = (self.control.checkpoint, self.control.deliver)
        self.control.poll()
        for req, before in ((self.control.checkpoint, had[0]), (self.control.deliver, had[1])):
            if req is not None and req is not before:
                self.event("requested", what=req.what, by=req.by)

    def should_checkpoint(self) -> bool:
        """A checkpoint was asked for and not yet done (call between batches: it is cheap)."""
        self._poll()
        return self.control.checkpoint is not None

    def should_stop(self) -> bool:
        """The job was asked to stop (after its checkpoint): a pause or a migration."""
        self._poll()
        return self.control.stop

    def should_deliver(self) -> bool:
        """Delivery of the current model (tier 1 reached) was asked for and not yet done."""
        self._poll()
        return self.control.deliver is not None

    # -- what the job did --------------------------------------------------------------------------
    def checkpoint_done(
        self, path: str | os.PathLike[str] | None = None, *, epoch: float | None = None, exit: bool = True
    ) -> None:
        """Announce a checkpoint (``epoch``: the epochs it holds; default the last whole epoch logged).

        When the job was asked to stop and ``exit`` is true, the run is finished and the process
        exits with :data:`EX_CHECKPOINTED` (75), which the Docker adapter reads as "can resume".
        """
        held = float(math.floor(self.epoch)) if epoch is None else float(epoch)
        detail: dict[str, Any] = {"epoch": held}
        if path is not None:
            detail["path"] = os.fspath(path)
        self.event("checkpoint", **detail)
        self.control.checkpoint = None
        if self.control.stop and exit:
            # Whoever asked is waiting for the exit (the Docker adapter, a pod's grace period): points
            # still buffered for a service that does not answer are not worth much of that time.
            self.finish(stopped=True, timeout=3.0)
            raise SystemExit(EX_CHECKPOINTED)

    def delivered(self, path: str | os.PathLike[str] | None = None, *, metric: float | None = None) -> None:
        """Announce that the model was handed over (TRADL's tier 1): the snapshot's ``delivered``."""
        detail: dict[str, Any] = {}
        if path is not None:
            detail["path"] = os.fspath(path)
        if metric is not None:
            detail["metric"] = _finite("metric", metric)
        self.event("delivered", **detail)
        self.control.deliver = None

    def finish(self, *, stopped: bool = False, timeout: float = 10.0) -> None:
        """End the run: ``finished`` (unless ``stopped`` for a checkpoint), buffered points sent (at
        most ``timeout`` seconds), the previous signal handlers back. Safe to call twice."""
        if self._finished:
            return
        self._finished = True
        if not stopped:
            self.event("finished")
        self._points.close(timeout)
        self.control.restore()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.finish()
        elif isinstance(exc, SystemExit) and exc.code == EX_CHECKPOINTED:
            self.finish(stopped=True)
        else:
            if not issubclass(kind, KeyboardInterrupt | SystemExit):
                self.event("failed", error=f"{kind.__name__}: {exc}"[:500])
            self.finish(stopped=True)


def init(
    job: str | None = None,
    *,
    max_epochs: float | None = None,
    schedule: Mapping[str, Any] | None = None,
    report: Report = "auto",
    url: str | None = None,
    token: str | None = None,
    control_dir: str | os.PathLike[str] | None = None,
    resumed_from: float | None = None,
    signals: bool = True,
    min_point_seconds: float = 1.0,
    on_checkpoint: Callback | None = None,
    on_deliver: Callback | None = None,
    stream: TextIO | None = None,
) -> Run:
    """Start reporting a training run to FlowPlan.

    - ``job``: the job id (default ``$FLOWPLAN_JOB``); needed for HTTP, where it names the job.
    - ``max_epochs``, ``schedule``: what the job plans (``{"kind": "step", "milestones": [30, 60],
      "gamma": 0.1}`` and the other forms of :mod:`flowplan.sdk.schedule`), printed as a ``declare``
      event. A schedule of the wrong shape raises :class:`~flowplan.sdk.schedule.ScheduleError` here.
    - ``report``: ``"stdout"`` (JSON lines, read from the log by the Docker adapter and
      ``flowplan logs``), ``"http"`` (points posted to ``url``/``$FLOWPLAN_URL``, token
      ``$FLOWPLAN_TOKEN``; events still printed), ``"auto"`` (HTTP when a URL and a job id are known).
    - ``control_dir``: where the annotations file and flag files are (default ``$FLOWPLAN_CONTROL_DIR``).
    - ``resumed_from``: the epochs the checkpoint loaded holds; prints ``resumed`` instead of ``started``.
    - ``signals``: handle ``SIGTERM`` (checkpoint, then stop) and ``SIGUSR1`` (deliver).
    """
    job = job or os.environ.get("FLOWPLAN_JOB") or ""
    url = url or os.environ.get("FLOWPLAN_URL") or None
    if report == "auto":
        report = "http" if url and job else "stdout"
    if report not in ("stdout", "http"):
        raise ValueError(f"report: expected auto, stdout or http, got {report!r}")
    if report == "http" and not (url and job):
        raise ValueError("report='http' needs a url (or $FLOWPLAN_URL) and a job id (or $FLOWPLAN_JOB)")
    declared: dict[str, Any] = {}
    if max_epochs is not None:
        m = _finite("max_epochs", max_epochs)
        if m is None or not math.isfinite(m) or m <= 0:
            raise ValueError(f"max_epochs: expected a number above 0, got {max_epochs!r}")
        declared["max_epochs"] = int(m) if m.is_integer() else m
    if schedule is not None:
        declared["schedule"] = check_schedule(schedule)
    events = StdoutReporter(stream)
    points: StdoutReporter | HttpReporter = (
        HttpReporter(url, job, token=token or os.environ.get("FLOWPLAN_TOKEN")) if report == "http" and url else events
    )
    control = Control(
        job or "job", control_dir if control_dir is not None else os.environ.get("FLOWPLAN_CONTROL_DIR"), signals=signals
    )
    run = Run(
        job,
        points=points,
        events=events,
        control=control,
        min_point_seconds=min_point_seconds,
        on_checkpoint=on_checkpoint,
        on_deliver=on_deliver,
    )
    if declared:
        run.event("declare", **declared, epoch=None)
    if resumed_from is not None:
        run.epoch = float(resumed_from)
        run.event("resumed", epoch=resumed_from)
    else:
        run.event("started", epoch=0)
    return run
