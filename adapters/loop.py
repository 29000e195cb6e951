"""The control loop shared by the simulator and the daemon: observe → plan → check → diff → apply.

Every interval the loop asks the adapter for a snapshot, asks the policy for a plan, checks it with
the independent checker (a plan that fails is never applied), turns it into the few changes that
differ from what runs now (:func:`diff`), and applies them. With a recorder (the state store) it
writes the plan and each change before applying it and the outcome after, so a daemon restarted
mid-apply knows what was in flight.

The loop reads time only from its :class:`~adapters.base.Clock`: on the simulator's virtual clock it
runs a day of cluster time in seconds.

Each interval is its own error boundary. An exception from any stage (observe, plan, check, diff,
record, apply, or the ``on_tick`` hook) ends that interval only: it is logged as one line, kept as a
:class:`TickFailure` (``ControlLoop.failures``, and ``on_error``), the changes recorded for it are
finished as failed, and the next interval observes and plans again. One bad interval (an API server
that cannot be listed, a policy's bug on one snapshot) never stops the daemon or a simulation;
``give_up_after`` failed intervals in a row do (the simulator's setting: there, a failure every
interval is a bug to show, not a cluster to wait for).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from adapters.base import Adapter, Change, Clock, Outcome
from planner.check import check_plan
from planner.plan import Plan
from planner.snapshot import Snapshot
from planner.transitions import TABLE, diff_order

Policy = Callable[[Snapshot], Plan]
Checker = Callable[[Snapshot, Plan], list[str]]
#: Where in an interval an exception came from.
Stage = Literal["observe", "plan", "check", "diff", "record", "apply", "report"]
#: Failed intervals a loop keeps (``ControlLoop.failures``); ``ControlLoop.failed`` counts them all.
KEPT_FAILURES = 100
#: Apply order of a delivery that follows its job's start (after every start: :func:`diff_order`).
DELIVER_AFTER_START = 6

log = logging.getLogger("flowplan.loop")


class Recorder(Protocol):
    """What the loop writes to a state store (``store.StateStore`` fits)."""

    def save_plan(self, plan: Plan, snapshot: Snapshot | None = None) -> int: ...

    def record_actions(self, plan_id: int, actions: Sequence[dict]) -> list[int]: ...

    def finish_action(self, action_id: int, status: str, message: str = "") -> None: ...


def diff(snapshot: Snapshot, plan: Plan) -> list[Change]:
    """The changes that take the cluster from ``snapshot`` to ``plan``, in a safe order.

    ``keep`` and ``wait`` are no change. A delivery is always a change of its own: alone when
    nothing else changes for the job; before its resize or migration, where it runs now (the model
    it has is the one to hand over); after its start, once it runs. (As a flag on the resize, read
    by no adapter, it was never made: the README demo's urgent job, resized at every plan once the
    CPU split searched its value, reached tier 1 and was never delivered.)
    """
    jobs = {j.id: j for j in snapshot.jobs}
    out: list[tuple[int, int, Change]] = []
    for i, a in enumerate(plan.assignments):
        job = jobs.get(a.job)
        if job is None:
            continue
        cur = job.allocation
        kind = TABLE[a.action].change
        if kind is None:  # keep, wait: no change, unless the tier-1 model is to be handed over
            if not a.deliver:
                continue
            kind = "deliver"
        change = Change(
            job=a.job,
            kind=kind,
            node=a.node,
            cpu_millis=a.cpu_millis,
            gpus=a.gpus,
            cpu_limit_millis=a.cpu_limit_millis,
            replicas=a.replicas,
            from_node=job.node if job.status == "running" else None,
            deliver=kind == "deliver",
            gpu_milli=job.gpu_milli,
            gpu_device=a.gpu_device,
            placement=tuple((s.node, s.replicas) for s in a.placement) if a.placement is not None else None,
            servers=a.servers,
        )
        shrinks = cur is not None and a.cpu_millis <= cur.cpu_millis and a.gpus <= cur.gpus
        out.append((diff_order(kind, shrinks), i, change))
        if a.deliver and kind != "deliver":
            running = job.status == "running" and cur is not None and job.node is not None
            here = (
                replace(change, kind="deliver", node=job.node, cpu_millis=cur.cpu_millis, gpus=cur.gpus, deliver=True)
                if running and cur is not None
                else replace(change, kind="deliver", from_node=change.node, deliver=True)
            )
            out.append((-1 if running else DELIVER_AFTER_START, i, here))
    out.sort(key=lambda t: (t[0], t[1]))
    return [c for _, _, c in out]


@dataclass(frozen=True)
class Tick:
    """One interval of the loop: what it saw, decided and did."""

    time: float
    snapshot: Snapshot
    plan: Plan
    changes: list[Change]
    outcomes: list[Outcome]
    plan_seconds: float
    violations: list[str] = field(default_factory=list)
    plan_id: int | None = None

    @property
    def applied(self) -> bool:
        return not self.violations


@dataclass(frozen=True)
class TickFailure:
    """One interval that raised: when, in which stage, and the exception. The stages before ``stage``
    ran; nothing after it did (the changes recorded for the interval are finished as failed)."""

    time: float
    stage: Stage
    error: Exception

    @property
    def line(self) -> str:
        """The failure in one line (the exception's first line)."""
        text = str(self.error).strip()
        first = text.splitlines()[0] if text else ""
        return f"interval failed in {self.stage}: {type(self.error).__name__}: {first}"


class ControlLoop:
    """Drives one adapter with one policy on one clock.

    ``interval`` defaults to the snapshot's ``settings.interval_seconds``. ``dry_run`` plans and
    diffs but applies nothing. ``on_tick`` is called after every interval that completed (progress
    display), ``on_error`` after every one that raised (see the module docstring); ``give_up_after``
    failed intervals in a row re-raise the last one's exception (``None``: never).
    """

    def __init__(
        self,
        adapter: Adapter,
        policy: Policy,
        clock: Clock,
        *,
        interval: float | None = None,
        recorder: Recorder | None = None,
        checker: Checker = check_plan,
        dry_run: bool = False,
        on_tick: Callable[[Tick], None] | None = None,
        on_error: Callable[[TickFailure], None] | None = None,
        give_up_after: int | None = None,
    ) -> None:
        self.adapter = adapter
        self.policy = policy
        self.clock = clock
        self.interval = interval
        self.recorder = recorder
        self.checker = checker
        self.dry_run = dry_run
        self.on_tick = on_tick
        self.on_error = on_error
        self.give_up_after = give_up_after
        #: The latest failed intervals (at most :data:`KEPT_FAILURES`), oldest first.
        self.failures: deque[TickFailure] = deque(maxlen=KEPT_FAILURES)
        self.failed = 0  # failed intervals, all told
        self.failed_in_a_row = 0

    def step(self) -> Tick | TickFailure:
        """One interval: observe → plan → check → diff → apply. Returns what it did, or, when a stage
        raised, the :class:`TickFailure` (logged, kept and passed to ``on_error``: module docstring)."""
        now = self.clock.now()
        stage: Stage = "observe"
        ids: list[int] = []
        try:
            snapshot = self.adapter.observe()
            stage = "plan"
            t0 = time.perf_counter()
            plan = self.policy(snapshot)
            plan_seconds = time.perf_counter() - t0
            stage = "check"
            violations = self.checker(snapshot, plan)
            stage = "record"
            plan_id = self.recorder.save_plan(plan, snapshot) if self.recorder is not None else None
            stage = "diff"
            changes: list[Change] = [] if violations else diff(snapshot, plan)
            outcomes: list[Outcome] = []
            if changes and not self.dry_run:
                stage = "record"
                if self.recorder is not None and plan_id is not None:
                    ids = self.recorder.record_actions(plan_id, [c.as_dict() for c in changes])
                stage = "apply"
                outcomes = self.adapter.apply(changes)
                stage = "record"
                if self.recorder is not None:
                    for action_id, outcome in zip(ids, outcomes, strict=False):
                        message = outcome.message if outcome.ok else f"{outcome.error}: {outcome.message}"
                        self.recorder.finish_action(action_id, "done" if outcome.ok else "failed", message)
                ids = []
            tick = Tick(now, snapshot, plan, changes, outcomes, plan_seconds, violations, plan_id)
            stage = "report"
            if self.on_tick is not None:
                self.on_tick(tick)
        except Exception as exc:
            return self._failed(TickFailure(now, stage, exc), ids if stage == "apply" else [])
        self.failed_in_a_row = 0
        return tick

    def _failed(self, failure: TickFailure, in_flight: list[int]) -> TickFailure:
        """Log, keep and report a failed interval; finish the changes it was applying as failed."""
        log.error("%s; planning again next interval", failure.line)
        self.failures.append(failure)
        self.failed += 1
        self.failed_in_a_row += 1
        if self.recorder is not None:
            for action_id in in_flight:  # the adapter raised mid-apply: what took effect is observed next
                try:
                    self.recorder.finish_action(action_id, "failed", failure.line)
                except Exception as exc:  # a store that fails too: the daemon's recovery settles it on restart
                    log.error("action %d: cannot record its failure: %s: %s", action_id, type(exc).__name__, exc)
        if self.on_error is not None:
            self.on_error(failure)
        if self.give_up_after is not None and self.failed_in_a_row >= self.give_up_after:
            raise failure.error
        return failure

    def run(self, *, max_ticks: int | None = None, until: Callable[[Tick], bool] | None = None) -> tuple[int, Tick | None]:
        """Step, sleep one interval, repeat; stop after ``max_ticks`` or when ``until(tick)`` holds.

        Returns how many intervals ran (failed ones included) and the last one that completed (use
        ``on_tick`` to see each: keeping every snapshot of a long run would hold every metric history
        many times over).
        """
        count, last = 0, None
        while max_ticks is None or count < max_ticks:
            result = self.step()
            count += 1
            if isinstance(result, Tick):
                last = result
                if until is not None and until(result):
                    break
            if max_ticks is not None and count >= max_ticks:
                break
            self.clock.sleep(self.sleep_seconds(last))
        return count, last

    def sleep_seconds(self, last: Tick | None) -> float:
        """The interval: the loop's own, else the last observed snapshot's setting, else a minute."""
        if self.interval is not None:
            return self.interval
        return last.snapshot.settings.interval_seconds if last is not None else 60.0
