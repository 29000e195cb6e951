"""``flowplan explain``: what a job was offered and what its tier-1 deadline would take
(:func:`planner.alternatives.job_options`), checked against the planner's own parts.

Cases: every active job of the shipped snapshots built from measured curves and real node shapes
(``qoe-deadlines``: deadlines from comfortable to impossible on three GPU nodes; ``specon-4nodes``:
20 jobs on four GPU nodes, one nearly empty), planned by the real planner. For every option listed:

- it is an option of the planner's: placing the job there in the plan instead passes the
  independent checker (bounds, eligibility, transitions), and when it is said to fit, on capacity
  too; when it is said to take resources from others, the checker finds that node over capacity by
  exactly what it says is short;
- its times are the speed model's, recomputed here: ``lost + remaining epochs x epoch time``, and
  "meets the deadline" is that time against the deadline;
- the allocation offered to meet the deadline meets it, and no option with fewer GPUs, or as many
  GPUs and less CPU, does; where none is offered, no option meets it.

A job the refill placed after the solve on a node outside its candidates (a recorded philly-scale
snapshot, ``tests/data/snapshots``) has that node among its options, at every level of its menu.

Then, as processes on a real state file: the text and JSON of ``explain`` agree, and a plan stored
without its snapshot says the options cannot be worked out.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from planner import PlannerConfig, load_snapshot, plan
from planner.alternatives import JobOptions, Option, job_options
from planner.check import check_plan
from planner.outlook import build_outlook
from planner.plan import Assignment, Plan
from planner.snapshot import Snapshot
from planner.transitions import allowed_actions

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ["qoe-deadlines", "specon-4nodes"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flowplan", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module", params=SNAPSHOTS)
def planned(request: pytest.FixtureRequest) -> tuple[Snapshot, Plan, dict[str, JobOptions]]:
    snap = load_snapshot(str(ROOT / "examples" / "snapshots" / f"{request.param}.json"))
    got = plan(snap).plan
    return snap, got, {a.job: job_options(snap, got, a.job) for a in got.assignments}


def _with(snap: Snapshot, p: Plan, job: str, o: Option) -> Plan:
    """``p`` with ``job`` placed as option ``o`` says (the action the transitions table names)."""
    j = next(x for x in snap.jobs if x.id == job)
    out = []
    for a in p.assignments:
        if a.job != job:
            out.append(a)
            continue
        if o.node is None:
            action = allowed_actions(j, None, False)[0]
            out.append(
                a.model_copy(update={"node": None, "cpu_millis": 0, "gpus": 0, "cpu_limit_millis": None, "action": action})
            )
            continue
        cur = j.allocation if j.status == "running" else None
        same = (
            cur is not None
            and o.node == j.node
            and (o.cpu_millis, o.gpus, None) == (cur.cpu_millis, cur.gpus, cur.cpu_limit_millis)
        )
        action = allowed_actions(j, o.node, same)[0]
        if o.way == "move":  # a restart in place with a new share, or a move
            action = "migrate"
        upd = {"node": o.node, "cpu_millis": o.cpu_millis, "gpus": o.gpus, "cpu_limit_millis": None, "action": action}
        out.append(Assignment.model_validate({**a.model_dump(), **upd}))
    return p.model_copy(update={"assignments": out})


def test_every_option_listed_is_the_planners_and_fits_or_takes_what_it_says(
    planned: tuple[Snapshot, Plan, dict[str, JobOptions]],
) -> None:
    snap, p, found = planned
    budget = re.compile(r"migrations and pauses exceed the budget")
    checked = taking = 0
    for job, f in found.items():
        assert f.options, job
        for o in f.options:
            bad = [v for v in check_plan(snap, _with(snap, p, job, o)) if not budget.search(v)]
            over = {}
            for v in bad:
                m = re.fullmatch(r"node (\S+): (cpu_millis|gpus|memory_mib) (\d+) exceeds capacity (\d+)", v)
                assert m is not None and m.group(1) == o.node, (job, o, v)  # nothing but capacity, on its node
                over[m.group(2)] = int(m.group(3)) - int(m.group(4))
            short = {"cpu_millis": o.short_cpu_millis, "gpus": o.short_gpus, "memory_mib": o.short_memory_mib}
            assert over == {k: v for k, v in short.items() if v > 0}, (job, o, bad)
            assert o.fits == (not over)
            checked += 1
            taking += bool(over)
    assert checked > 2 * len(found) and 0 < taking < checked  # both kinds are there to check


def test_option_times_are_the_speed_models_and_deadlines_judged_on_them(
    planned: tuple[Snapshot, Plan, dict[str, JobOptions]],
) -> None:
    snap, p, found = planned
    config = PlannerConfig()
    jobs = {j.id: j for j in snap.jobs}
    judged = 0
    for a in p.assignments:
        f = found[a.job]
        speed = build_outlook(jobs[a.job], snap.settings, config).speed
        q = a.predictions
        deadline = None if q.tier1_deadline is None or q.tier1_reached else q.tier1_deadline - snap.time
        assert f.tier1_deadline_s == pytest.approx(deadline) if deadline is not None else f.tier1_deadline_s is None
        for o in (f.given, *f.options):
            if o.node is None:
                assert o.finish_s is None and o.tier1_s is None
                continue
            spe = float(speed.seconds_per_epoch(o.cpu_millis, o.gpus))
            assert o.seconds_per_epoch == pytest.approx(spe)
            assert o.finish_s == pytest.approx(o.lost_seconds + q.epochs_to_finish * spe)  # type: ignore[operator]
            if q.epochs_to_tier1 is None or q.tier1_reached:
                assert o.tier1_s is None
            else:
                assert o.tier1_s == pytest.approx(o.lost_seconds + q.epochs_to_tier1 * spe)
            if deadline is None:
                assert o.tier1_met is None
            else:
                assert o.tier1_met == (o.tier1_s is not None and o.tier1_s <= deadline)
                judged += 1
    assert judged > 0 or all(f.tier1_deadline_s is None for f in found.values())


def test_what_meeting_the_deadline_takes_meets_it_and_is_the_smallest(
    planned: tuple[Snapshot, Plan, dict[str, JobOptions]],
) -> None:
    _, _, found = planned
    offered = 0
    for job, f in found.items():
        meeting = [o for o in f.options if o.tier1_met]
        if f.tier1_deadline_s is None:
            assert f.to_meet is None
            continue
        if f.to_meet is None:
            assert not meeting, job
            continue
        m = f.to_meet
        assert m.tier1_s is not None and m.tier1_s <= f.tier1_deadline_s and m.node is not None
        assert not [o for o in meeting if (o.gpus, o.cpu_millis) < (m.gpus, m.cpu_millis)], job
        offered += 1
    has = any(f.tier1_deadline_s is not None for f in found.values())
    assert offered > 0 or not has  # where there are deadlines, some can be met


def test_the_node_the_refill_gave_a_job_is_among_its_options() -> None:
    snap = Snapshot.model_validate_json(
        gzip.decompress((ROOT / "tests" / "data" / "snapshots" / "philly-scale-t448.json.gz").read_bytes())
    )
    config = PlannerConfig(fit_processes=1)
    got = plan(snap, config).plan
    # Every job this plan moves or starts, among them one the refill's widen put on a node the
    # solve had not offered it (philly-161 to gpu-node-16 until session 15's ageing change, now
    # philly-162 there): the explanation offers the node and allocation the plan gave it.
    moved = [a for a in got.assignments if a.action in ("migrate", "start")]
    assert len(moved) >= 3
    for given in moved:
        found = job_options(snap, got, given.job, config)
        way = "move" if given.action == "migrate" else "start"
        there = {(o.gpus, o.way) for o in found.options if o.node == given.node}
        assert (given.gpus, way) in there, (given.job, given.node, given.gpus, sorted(there))


def test_explain_text_and_json_agree_on_a_real_state_file(tmp_path: Path) -> None:
    """Both kinds of missed deadline: one some option would meet, one none could. The second is made
    sure of (the first job's tier-1 deadline moved to a second after the snapshot), so the test does
    not depend on which deadlines the current predictions happen to miss."""
    from store import StateStore

    snap = load_snapshot(str(ROOT / "examples" / "snapshots" / "qoe-deadlines.json"))
    first = snap.jobs[0]
    assert first.target is not None and first.target.tier1 is not None
    tier1 = first.target.tier1.model_copy(update={"deadline": snap.time + 1.0})
    hopeless = first.model_copy(update={"target": first.target.model_copy(update={"tier1": tier1})})
    snap = snap.model_copy(update={"jobs": [hopeless, *snap.jobs[1:]]})
    got = plan(snap).plan
    path = tmp_path / "state.db"
    with StateStore(path) as st:
        with_snapshot = st.save_plan(got, snap)
        without = st.save_plan(got)
    missed = [a.job for a in got.assignments if a.predictions.tier1_satisfied is False and a.node is not None]
    seen_meet = seen_none = False
    for job in missed:
        if seen_meet and seen_none:
            break
        text = run("explain", job, "--state", str(path), "--plan", str(with_snapshot))
        assert text.returncode == 0, text.stderr
        doc = json.loads(run("explain", job, "--state", str(path), "--plan", str(with_snapshot), "-o", "json").stdout)
        off: dict[str, Any] = doc["offered"]
        assert "offered:" in text.stdout and f"{len(off['options'])} option(s) weighed" in text.stdout
        m = off["to_meet"]
        if m is None:
            assert "no option meets it" in text.stdout
            seen_none = True
            continue
        gets = f"{m['cpu_millis'] / 1000:g} CPU" + (f" + {m['gpus']} GPU" if m["gpus"] else "")
        line = next(x for x in text.stdout.splitlines() if x.startswith("  to meet it:"))
        assert f"{gets} on {m['node']}" in line
        assert m["tier1_s"] <= off["tier1_deadline_s"] and math.isfinite(m["tier1_s"])
        if not m["fits"]:
            assert all(h["job"] in text.stdout for h in m["holders"])
        seen_meet = True
    assert seen_meet and seen_none
    bare = run("explain", missed[0], "--state", str(path), "--plan", str(without))
    assert bare.returncode == 0 and "has no snapshot in the store" in bare.stdout
