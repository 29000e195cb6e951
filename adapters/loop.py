"""The control loop shared by the simulator and the daemon: observe → plan → check → diff → apply.

Every interval the loop asks the adapter for a snapshot, asks the policy for a plan, checks it with
the independent checker (a plan that fails is never applied), turns it into the few changes that
differ from what runs now (:func:`diff`), and applies them. With a recorder (the state store) it
writes the plan and each change before applying it and the outcome after, so a daemon restarted
mid-apply knows what was in flight.

The loop reads time only from its :class:`~adapters.base.Clock`: on the simulator's virtual clock it
runs a day of cluster time in seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from adapters.base import Adapter, Change, Clock, Outcome
from planner.check import check_plan
from planner.plan import Plan
from planner.snapshot import Snapshot
from planner.transitions import TABLE, diff_order

Policy = Callable[[Snapshot], Plan]
Checker = Callable[[Snapshot, Plan], list[str]]


class Recorder(Protocol):
    """What the loop writes to a state store (``store.sqlite.StateStore`` fits)."""

    def save_plan(self, plan: Plan, snapshot: Snapshot | None = None) -> int: ...

    def record_actions(self, plan_id: int, actions: Sequence[dict]) -> list[int]: ...

    def finish_action(self, action_id: int, status: str, message: str = "") -> None: ...


def diff(snapshot: Snapshot, plan: Plan) -> list[Change]:
    """The changes that take the cluster from ``snapshot`` to ``plan``, in a safe order.

    ``keep`` and ``wait`` are no change; ``deliver`` is a change of its own when nothing else
    changes for the job, and a flag on the job's resize or migration otherwise.
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
            deliver=a.deliver or kind == "deliver",
        )
        shrinks = cur is not None and a.cpu_millis <= cur.cpu_millis and a.gpus <= cur.gpus
        out.append((diff_order(kind, shrinks), i, change))
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


class ControlLoop:
    """Drives one adapter with one policy on one clock.

    ``interval`` defaults to the snapshot's ``settings.interval_seconds``. ``dry_run`` plans and
    diffs but applies nothing. ``on_tick`` is called after every interval (progress display).
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
    ) -> None:
        self.adapter = adapter
        self.policy = policy
        self.clock = clock
        self.interval = interval
        self.recorder = recorder
        self.checker = checker
        self.dry_run = dry_run
        self.on_tick = on_tick

    def step(self) -> Tick:
        now = self.clock.now()
        snapshot = self.adapter.observe()
        t0 = time.perf_counter()
        plan = self.policy(snapshot)
        plan_seconds = time.perf_counter() - t0
        violations = self.checker(snapshot, plan)
        plan_id = self.recorder.save_plan(plan, snapshot) if self.recorder is not None else None
        changes: list[Change] = [] if violations else diff(snapshot, plan)
        outcomes: list[Outcome] = []
        if changes and not self.dry_run:
            ids: list[int] = []
            if self.recorder is not None and plan_id is not None:
                ids = self.recorder.record_actions(plan_id, [c.as_dict() for c in changes])
            outcomes = self.adapter.apply(changes)
            if self.recorder is not None:
                for action_id, outcome in zip(ids, outcomes, strict=False):
                    message = outcome.message if outcome.ok else f"{outcome.error}: {outcome.message}"
                    self.recorder.finish_action(action_id, "done" if outcome.ok else "failed", message)
        tick = Tick(now, snapshot, plan, changes, outcomes, plan_seconds, violations, plan_id)
        if self.on_tick is not None:
            self.on_tick(tick)
        return tick

    def run(self, *, max_ticks: int | None = None, until: Callable[[Tick], bool] | None = None) -> tuple[int, Tick | None]:
        """Step, sleep one interval, repeat; stop after ``max_ticks`` or when ``until(tick)`` holds.

        Returns how many intervals ran and the last one (use ``on_tick`` to see each: keeping every
        snapshot of a long run would hold every metric history many times over).
        """
        count, last = 0, None
        while max_ticks is None or count < max_ticks:
            last = self.step()
            count += 1
            if until is not None and until(last):
                break
            if max_ticks is not None and count >= max_ticks:
                break
            self.clock.sleep(self.interval if self.interval is not None else last.snapshot.settings.interval_seconds)
        return count, last
