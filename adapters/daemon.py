"""The daemon: the shared control loop against a real cluster, with crash recovery.

Each interval: observe → plan → check → diff → apply (:class:`~adapters.loop.ControlLoop`), with
the state store as the loop's recorder: the plan and every change are written *before* the change is
applied, and its outcome after. A daemon killed mid-apply therefore leaves ``pending`` actions.

Action states (the store's ``actions.status``)::

    (recorded) ──► pending ──► done      the adapter reported success
                          ├──► failed    the adapter reported an error (kind and message kept)
                          └──► done / failed on restart:
                                 done    what the action asked for is in effect when observed again
                                 failed  it is not ("interrupted by a restart"); the next plan,
                                         made from what is observed, decides again

On start, :meth:`Daemon.recover` settles the pending actions that way and asks the adapter to
``reconcile`` (remove the extra container an interrupted migration can leave). Nothing is replayed
blindly: the cluster as observed is the truth, and a plan is only ever applied as a diff against it.

Between intervals the daemon sleeps on a :class:`WakeClock`: the interval is a heartbeat, and a
wake-up (a job container created, started, dead or removed: the engine's events) cuts the sleep
short after a short debounce, so a job that arrives is placed at once rather than at the next tick.
Events that are the daemon's own doing (it started, stopped or removed that container a moment ago)
do not wake it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from adapters.base import Adapter, Clock
from adapters.loop import ControlLoop, Policy, Recorder, Tick, TickFailure
from planner.snapshot import Snapshot
from planner.transitions import TABLE

log = logging.getLogger("flowplan.daemon")


class DaemonStore(Recorder, Protocol):
    """What the daemon needs from the state store besides the loop's recorder calls."""

    def pending_actions(self) -> list[tuple[int, int, dict[str, Any]]]: ...


def in_effect(snapshot: Snapshot, action: dict[str, Any]) -> bool:
    """Does ``snapshot`` show what ``action`` (a :meth:`~adapters.base.Change.as_dict`) asked for?"""
    job = next((j for j in snapshot.jobs if j.id == action.get("job")), None)
    if job is None:
        return False
    kind = action.get("kind")
    spec = next((t for t in TABLE.values() if t.change == kind), None)
    if spec is None:
        return False
    if kind == "deliver":
        return job.delivered
    if not spec.placed:  # a pause
        return job.status != "running"
    a = job.allocation  # start, resize, migrate: running there with what was asked
    return (
        job.status == "running"
        and job.node == action.get("node")
        and _shares_in_effect(job.shares(), action)
        and a is not None
        and a.cpu_millis == action.get("cpu_millis")
        and a.gpus == action.get("gpus")
        and a.gpu_device == action.get("gpu_device")
        and _cap_in_effect(snapshot, job.node, job.max_cpu_millis, a.cpu_limit_millis, action.get("cpu_limit_millis"))
    )


def _shares_in_effect(shares: tuple[tuple[str, int], ...], action: dict[str, Any]) -> bool:
    """The job's replicas are where the action put them (an action recorded without a count: not checked)."""
    if action.get("placement") is not None:
        return shares == tuple((str(n), int(k)) for n, k in action["placement"])
    if "replicas" in action:
        return shares == ((action.get("node"), action["replicas"]),)
    return True


def _cap_in_effect(snapshot: Snapshot, node: str | None, job_max: int, seen: int | None, asked: Any) -> bool:
    """A cap asked for is in effect when seen; "none" (``None``) also covers a cap at the job's max or the node's size."""
    if asked == seen:
        return True
    if seen is not None or not isinstance(asked, int):
        return False
    size = next((n.cpu_millis for n in snapshot.nodes if n.name == node), None)
    return asked >= job_max or (size is not None and asked >= size)


@dataclass(frozen=True)
class Wake:
    """A reason to re-plan now: what happened, when it was received (``time.monotonic()``), to which container."""

    at: float
    reason: str
    container: str | None = None


class WakeClock:
    """The wall clock, with a sleep that returns early.

    - at once when :meth:`halt` is called (SIGTERM, Ctrl-C);
    - ``debounce`` seconds after the first :meth:`wake` that ``ignore`` does not discard (a burst
      of events, such as a batch of submissions, gives one re-plan, not one per container).

    ``ignore`` is asked from the sleeping thread, after the interval's changes were applied, so it
    can tell the daemon's own actions apart (``DockerAdapter.own_event``). Wake-ups that come while
    the loop is busy are kept and cut the next sleep short. Thread-safe; :meth:`halt` may be called
    from a signal handler.
    """

    def __init__(self, debounce: float = 0.4, ignore: Callable[[Wake], bool] | None = None) -> None:
        self.debounce = max(0.0, debounce)
        self.ignore = ignore
        self.stop = threading.Event()
        self.woken = 0  # sleeps cut short by a wake-up
        self.reasons: list[str] = []  # what cut the last sleep short
        self._cond = threading.Condition(threading.RLock())
        self._wakes: list[Wake] = []

    def now(self) -> float:
        return time.time()

    def wake(self, reason: str, container: str | None = None) -> None:
        with self._cond:
            self._wakes.append(Wake(time.monotonic(), reason, container))
            self._cond.notify_all()

    def halt(self) -> None:
        self.stop.set()
        with self._cond:
            self._cond.notify_all()

    def _relevant(self, pending: list[Wake]) -> None:
        """Move the wake-ups received so far into ``pending``, less the ignored ones."""
        for w in self._wakes:
            try:
                own = self.ignore is not None and self.ignore(w)
            except Exception:  # a broken filter must not stop the daemon: wake
                own = False
            if not own:
                pending.append(w)
        self._wakes.clear()

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + max(0.0, seconds)
        pending: list[Wake] = []
        with self._cond:
            while not self.stop.is_set():
                self._relevant(pending)
                until = end if not pending else min(end, pending[0].at + self.debounce)
                left = until - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            self._relevant(pending)  # what came during the debounce is covered by the coming re-plan
            self.reasons = [w.reason for w in pending]
            if pending and time.monotonic() < end:
                self.woken += 1


class LeaseLost(Exception):
    """Another daemon holds (or took over) the jobs this one would manage: stop, act on nothing."""


class Daemon:
    """Runs ``adapter`` with ``policy`` on ``clock``, recording to ``store``; see the module docstring."""

    def __init__(
        self,
        adapter: Adapter,
        policy: Policy,
        clock: Clock,
        store: DaemonStore,
        *,
        interval: float | None = None,
        dry_run: bool = False,
        on_tick: Callable[[Tick], None] | None = None,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self.adapter = adapter
        #: Called before every interval (and before recovery); raises to stop the daemon, e.g. when
        #: its lease on the jobs it manages was lost (:class:`LeaseLost`). Never caught here.
        self.guard = guard
        self.store = store
        self.dry_run = dry_run
        self._on_tick = on_tick
        self.loop = ControlLoop(
            adapter,
            policy,
            clock,
            interval=interval,
            recorder=store,
            dry_run=dry_run,
            on_tick=self._tick,
        )

    def recover(self) -> list[str]:
        """Settle the actions a previous run left pending, then reconcile duplicates. Lines of what it did."""
        if self.guard is not None:
            self.guard()
        pending = self.store.pending_actions()
        lines: list[str] = []
        if pending:
            snapshot = self.adapter.observe()
            for action_id, _plan_id, action in pending:
                if in_effect(snapshot, action):
                    status, message = "done", "completed before the restart (observed after it)"
                else:
                    status, message = "failed", "interrupted by a restart; not in effect, re-planned from what is observed"
                if not self.dry_run:
                    self.store.finish_action(action_id, status, message)
                lines.append(f"action {action_id} {action.get('kind')} {action.get('job')}: {status}: {message}")
        if not self.dry_run:
            if not pending:
                self.adapter.observe()  # reconcile acts on what the last observe saw
            lines.extend(self.adapter.reconcile())
        for line in lines:
            log.info("recover: %s", line)
        return lines

    def _tick(self, tick: Tick) -> None:
        # An interrupted migration or a host that came back can leave a job with two workloads. By
        # the adapter contract, reconcile calls nothing when the last observe found none.
        if not self.dry_run:
            for line in self.adapter.reconcile():
                log.info("reconcile: %s", line)
        if self._on_tick is not None:
            self._on_tick(tick)

    def run(
        self,
        *,
        max_ticks: int | None = None,
        until: Callable[[Tick], bool] | None = None,
        stopped: Callable[[], bool] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> tuple[int, Tick | None]:
        """Step, sleep, repeat, as ``ControlLoop.run``, with two differences for a long-lived daemon:

        - ``stopped`` is asked before every step, so a stop request that cuts a sleep short ends the
          run there instead of planning and applying once more;
        - an interval that raises (a policy's bug, an adapter's) is the loop's failure
          (:class:`~adapters.loop.TickFailure`: logged as one line, its changes recorded as failed)
          and its exception is passed to ``on_error``; the next interval plans again from what is
          observed. ``max_ticks`` counts such intervals too.
        """
        count, last = 0, None
        while (max_ticks is None or count < max_ticks) and not (stopped is not None and stopped()):
            if self.guard is not None:
                self.guard()
            result = self.loop.step()
            count += 1
            if isinstance(result, TickFailure):
                if on_error is not None:
                    on_error(result.error)
            else:
                last = result
                if until is not None and until(result):
                    break
            if (max_ticks is not None and count >= max_ticks) or (stopped is not None and stopped()):
                break
            self.loop.clock.sleep(self.loop.sleep_seconds(last))
        return count, last
