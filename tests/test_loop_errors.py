"""The control loop's per-interval error boundary (adapters/loop.py), on the real simulated cluster.

The adapter is the real :class:`~adapters.sim.cluster.SimCluster`, wrapped so that one call raises
once (the lowest level that can fail: the cluster's own observe or apply), with the real planner
and, where it matters, the real state store. Case matrix:

- observe raises once: that interval is a ``TickFailure`` (stage ``observe``), logged as one line,
  kept in ``loop.failures`` and passed to ``on_error``; the next interval observes, plans and
  applies; ``run`` goes on and the simulated jobs finish;
- the policy raises once: the same, stage ``plan``, nothing applied in that interval;
- apply raises once with a state store: the changes recorded for the interval are finished as
  ``failed`` with the one line (none left ``pending``), and the next interval applies;
- a failure in every interval: ``give_up_after`` in a row re-raise the error (the simulator's
  setting), and by default the loop never gives up;
- the daemon: a failing interval reaches its ``on_error`` and the next runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from adapters.base import Adapter, Change, Outcome, WallClock
from adapters.loop import ControlLoop, Tick, TickFailure
from adapters.sim.cluster import SimCluster
from adapters.sim.scenario import parse_scenario
from adapters.sim.truth import TraceLibrary
from planner.policies import make_policy
from planner.snapshot import Snapshot


@pytest.fixture(scope="module")
def library() -> TraceLibrary:
    return TraceLibrary.bundled()


def cluster(library: TraceLibrary) -> SimCluster:
    job = {"id": "j", "model": "cifar10", "batch_size": 512, "kind": "cpu", "epochs": 3, "arrival": 0,
           "min_cpu_millis": 1000, "max_cpu_millis": 4000, "count": 2}  # fmt: skip
    nodes = [{"name": "n", "cpu_millis": 8000}]
    sc = parse_scenario({"name": "t", "interval_seconds": 30, "noise": 0.0, "nodes": nodes, "jobs": [job]})
    return SimCluster(sc, sc.draw(0, library), library, seed=0)


class RaisesOnce(Adapter):
    """The real simulated cluster, whose ``observe`` or ``apply`` raises at its ``at``-th call (1-based)."""

    def __init__(self, inner: SimCluster, call: str, at: int = 1) -> None:
        self.inner, self.call, self.at = inner, call, at
        self.calls = {"observe": 0, "apply": 0}

    def _count(self, call: str) -> None:
        self.calls[call] += 1
        if call == self.call and self.calls[call] == self.at:
            raise ConnectionError(f"{call} failed\nsecond line never logged")

    def observe(self) -> Snapshot:
        self._count("observe")
        return self.inner.observe()

    def apply(self, changes: Sequence[Change]) -> list[Outcome]:
        self._count("apply")
        return self.inner.apply(changes)


def test_observe_raising_once_costs_one_interval(library: TraceLibrary, caplog: pytest.LogCaptureFixture) -> None:
    sim = cluster(library)
    adapter = RaisesOnce(sim, "observe", at=1)
    errors: list[TickFailure] = []
    loop = ControlLoop(adapter, make_policy("flowplan", time_limit=0.5), sim, on_error=errors.append)
    with caplog.at_level(logging.ERROR, logger="flowplan.loop"):
        first = loop.step()
    assert isinstance(first, TickFailure) and first.stage == "observe" and isinstance(first.error, ConnectionError)
    said = "interval failed in observe: ConnectionError: observe failed; planning again next interval"
    assert [r.getMessage() for r in caplog.records] == [said]
    assert list(loop.failures) == errors == [first] and loop.failed == 1
    second = loop.step()
    assert isinstance(second, Tick) and second.changes and all(o.ok for o in second.outcomes), second
    assert loop.failed_in_a_row == 0
    count, last = loop.run(until=lambda _: sim.done(), max_ticks=200)
    assert sim.done() and last is not None and loop.failed == 1


def test_policy_raising_once_applies_nothing_that_interval(library: TraceLibrary) -> None:
    sim = cluster(library)
    real = make_policy("flowplan", time_limit=0.5)
    calls: list[int] = []

    def policy(snapshot: Snapshot) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a planner bug")
        return real(snapshot)

    loop = ControlLoop(sim, policy, sim)
    failed = loop.step()
    assert isinstance(failed, TickFailure) and failed.stage == "plan"
    assert all(j.status == "pending" for j in sim.jobs.values())  # nothing applied
    tick = loop.step()
    assert isinstance(tick, Tick) and {c.kind for c in tick.changes} == {"start"} and all(o.ok for o in tick.outcomes)


def test_apply_raising_records_its_changes_as_failed(library: TraceLibrary, tmp_path: Path) -> None:
    from store import StateStore

    sim = cluster(library)
    store = StateStore(str(tmp_path / "state.db"))
    try:
        loop = ControlLoop(RaisesOnce(sim, "apply", at=1), make_policy("flowplan", time_limit=0.5), sim, recorder=store)
        failed = loop.step()
        assert isinstance(failed, TickFailure) and failed.stage == "apply"
        assert store.pending_actions() == []  # none left pending: finished as failed, with the line
        records = store.actions(limit=10)
        assert records and all(r.status == "failed" and "interval failed in apply" in r.message for r in records), records
        tick = loop.step()
        assert isinstance(tick, Tick) and tick.outcomes and all(o.ok for o in tick.outcomes)
        assert store.pending_actions() == []
    finally:
        store.close()


def test_failing_every_interval_gives_up_only_when_asked(library: TraceLibrary) -> None:
    sim = cluster(library)

    def broken(snapshot: Snapshot) -> Any:
        raise RuntimeError("always")

    count, last = ControlLoop(sim, broken, sim).run(max_ticks=5)
    assert (count, last) == (5, None)
    loop = ControlLoop(sim, broken, sim, give_up_after=3)
    with pytest.raises(RuntimeError, match="always"):
        loop.run(max_ticks=10)
    assert loop.failed == 3


def test_daemon_passes_a_failed_interval_to_on_error_and_goes_on(library: TraceLibrary, tmp_path: Path) -> None:
    from adapters.daemon import Daemon
    from store import StateStore

    sim = cluster(library)
    store = StateStore(str(tmp_path / "state.db"))
    errors: list[BaseException] = []

    class Clock(WallClock):
        def sleep(self, seconds: float) -> None:
            sim.sleep(seconds)

    try:
        daemon = Daemon(RaisesOnce(sim, "observe", at=2), make_policy("flowplan", time_limit=0.5), Clock(), store, interval=30)
        count, last = daemon.run(max_ticks=3, on_error=errors.append)
    finally:
        store.close()
    assert count == 3 and last is not None and [str(e).splitlines()[0] for e in errors] == ["observe failed"]
    assert daemon.loop.failed == 1
