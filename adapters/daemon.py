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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from adapters.base import Adapter, Clock
from adapters.loop import ControlLoop, Policy, Recorder, Tick
from planner.snapshot import Snapshot

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
    if kind == "pause":
        return job.status != "running"
    if kind == "deliver":
        return job.delivered
    if kind in ("start", "resize", "migrate"):
        return (
            job.status == "running"
            and job.node == action.get("node")
            and job.allocation is not None
            and job.allocation.cpu_millis == action.get("cpu_millis")
            and job.allocation.gpus == action.get("gpus")
        )
    return False


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
    ) -> None:
        self.adapter = adapter
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
        reconcile = getattr(self.adapter, "reconcile", None)
        if callable(reconcile) and not self.dry_run:
            if not pending:
                self.adapter.observe()
            lines.extend(reconcile())
        for line in lines:
            log.info("recover: %s", line)
        return lines

    def _tick(self, tick: Tick) -> None:
        # An interrupted migration or a host that came back can leave a job with two containers.
        reconcile = getattr(self.adapter, "reconcile", None)
        if not self.dry_run and callable(reconcile) and _has_duplicates(self.adapter):
            for line in reconcile():
                log.info("reconcile: %s", line)
        if self._on_tick is not None:
            self._on_tick(tick)

    def run(self, *, max_ticks: int | None = None, until: Callable[[Tick], bool] | None = None) -> tuple[int, Tick | None]:
        return self.loop.run(max_ticks=max_ticks, until=until)


def _has_duplicates(adapter: Any) -> bool:
    last = getattr(adapter, "last", None)
    placed: Sequence[Any] = list(getattr(last, "placed", {}).values()) if last is not None else []
    return any(getattr(p, "duplicates", None) for p in placed)
