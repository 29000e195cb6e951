"""The daemon's log lines for one interval (``flowplan.daemon._describe``), from a real snapshot.

Case matrix: a change done prints one ``ok`` line; a failed one prints ``FAILED`` with its error kind
and message; a change already in effect (the adapter's "already asked to deliver N s ago", asked
again at every plan until the job's log says it delivered) prints no line and is counted on the
head line; a deliver not asked yet (the container has printed nothing since its start) prints
``deferred`` with the reason; a dry run prints ``would`` for each change.

Nothing is faked but the interval's record: the tick is built by hand from a real example snapshot
and the adapter's own :class:`~adapters.base.Change` / :class:`~adapters.base.Outcome` types, as
the control loop fills them.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from adapters.base import Change, Outcome
from flowplan.daemon import _describe
from planner.io import load_snapshot

SNAPSHOT = Path(__file__).resolve().parents[1] / "examples" / "snapshots" / "flowcon-1node.json"


def _tick(changes: list[Change], outcomes: list[Outcome]) -> SimpleNamespace:
    snap = load_snapshot(SNAPSHOT)
    return SimpleNamespace(time=snap.time, snapshot=snap, changes=changes, outcomes=outcomes, plan_seconds=0.05, violations=[])


def test_a_change_already_in_effect_prints_no_line_and_is_counted_on_the_head() -> None:
    deliver = Change("job1", "deliver", "local", 250, 0)
    resize = Change("job2", "resize", "local", 500, 0)
    start = Change("job3", "start", "local", 250, 0)
    outcomes = [
        Outcome(deliver, True, message="already asked to deliver 6 s ago (SIGUSR1); its log has not said it delivered yet"),
        Outcome(resize, True, message="share 500m"),
        Outcome(start, False, error="transient", message="job3: the engine did not answer"),
    ]
    head, lines = _describe(_tick([deliver, resize, start], outcomes), dry_run=False)
    assert [line.split(" ", 1)[1] for line in lines] == [
        "resize job2 on local 500m ok",
        "start job3 on local 250m FAILED (transient: job3: the engine did not answer)",
    ]
    assert head.endswith("; 1 already in effect")
    # The first ask is a line like any change done.
    head, lines = _describe(_tick([deliver], [Outcome(deliver, True, message="asked to deliver (SIGUSR1)")]), dry_run=False)
    assert [line.split(" ", 1)[1] for line in lines] == ["deliver job1 on local 250m ok"]
    assert "already in effect" not in head


def test_a_deliver_not_asked_yet_says_deferred() -> None:
    deliver = Change("job1", "deliver", "local", 250, 0)
    why = "not asked yet: it has printed nothing since its start (a signal before its handler is set is lost)"
    _, lines = _describe(_tick([deliver], [Outcome(deliver, True, message=why)]), dry_run=False)
    assert [line.split(" ", 1)[1] for line in lines] == [f"deliver job1 on local 250m deferred ({why})"]


def test_a_dry_run_prints_would_for_every_change() -> None:
    changes = [Change("job1", "deliver", "local", 250, 0), Change("job2", "pause", None, 0, 0)]
    _, lines = _describe(_tick(changes, []), dry_run=True)
    assert [line.split(" ", 1)[1] for line in lines] == ["would deliver job1 on local 250m", "would pause job2"]


def test_the_jobs_gauge_counts_finished_jobs_succeeded_or_failed() -> None:
    """``flowplan_daemon_jobs{state}``: the plan's jobs by action, and the snapshot's finished ones
    the cluster still shows, ``failed`` when the adapter said how (``Job.failure``), else
    ``succeeded``; both states exist (at 0) before any job ends. Scraped from the registry as text."""
    from prometheus_client import generate_latest

    from flowplan.daemon_metrics import DaemonMetrics
    from planner import plan

    metrics = DaemonMetrics()
    assert b'flowplan_daemon_jobs{state="failed"} 0.0' in generate_latest(metrics.registry)
    snap = load_snapshot(SNAPSHOT)
    ended = [
        snap.jobs[0].model_copy(update={"status": "finished", "node": None, "allocation": None, "failure": "exit 3"}),
        snap.jobs[1].model_copy(update={"status": "finished", "node": None, "allocation": None}),
    ]
    snap = snap.model_copy(update={"jobs": [*ended, *snap.jobs[2:]]})
    metrics.tick(SimpleNamespace(plan=plan(snap).plan, snapshot=snap, plan_seconds=0.05, changes=[], outcomes=[]), dry_run=False)
    text = generate_latest(metrics.registry).decode()
    assert 'flowplan_daemon_jobs{state="failed"} 1.0' in text and 'flowplan_daemon_jobs{state="succeeded"} 1.0' in text, text
