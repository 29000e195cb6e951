"""The per-node CPU split (planner/share.py, planner/split.py): work conservation, the rule, profiles.

Case matrix:

- work-conserving invariant over seeded random snapshots built on real curves (conftest): on every
  node, no CPU is left unguaranteed while a placed job that may change its share is below its max;
- hand-computed splits on one node with linear speed-ups (serial 0, so shares convert to speed 1:1):
  shortest-remaining-first with caps; the job that ends last under the equal split keeps at least
  its equal share; a tier-1 deadline reserves the share that meets it; the makespan-first profile
  gives the longest job more than the mean-completion profile;
- the rollout's predicted finishes see completions (a job speeds up when another finishes);
- a probe's cap on one job (for one interval) does not move the tail guard: the equal split it
  follows runs each job within its own bounds, and no job's floor goes above its cap;
- a job whose speed is only assumed (nothing of its own observed) keeps its equal share like the
  job that ends last, by hand and in a plan of three real snapshot jobs;
- a tier 1 only assumed (no curve yet) counts once in the value search (it is the finish); one a
  curve places counts on its own (the real-engine demo's plan, by hand);
- known work at speeds proportional to the share: shortest-first without the tail guard's floor,
  the batch ending no later; concave speeds or a predicted length keep the guard; a job
  shortest-first would leave alone at its cap is still guarded;
- a job the curve believes converged below its max_epochs is still placed when there is room;
- purity: a plan made with ``previous`` from another config equals one made from scratch;
- the value search: costates by hand on a two-phase rollout; on measured speeds (yolov3, deepspeech2
  and cifar10 on 8 cores) it stops starving the linear-speed-up job and ends the batch no later;
  over random nodes it never raises the rollout's objective or makespan, never loses a deadline the
  rule meets, spends only its budget, and leaves CPU-insensitive (GPU) jobs alone; a value change
  that cannot move a share is not rolled out, and the search still ends where rolling every one out
  ends, with the same budget left.

Nothing is faked: plans come from the real planner; curves are measured ones where a curve matters.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import random_snapshot
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import planner.share as share
from adapters.sim.truth import GroundTruth, TraceLibrary
from models import SpeedObservation, fit_speed_model
from planner import PlannerConfig, Snapshot, check_plan, plan
from planner.share import Phase, SearchBudget, ShareJob, _epoch_values, share_grid, split_node

FAST = PlannerConfig(time_limit=0.5)
MEAN = "deadlines>mean-jct>makespan"
SPAN = "deadlines>makespan>mean-jct"


def _linear(lo: int, hi: int, epochs: float, sec_per_epoch_on_one_core: float, **kw: float | None) -> ShareJob:
    """A job whose speed is proportional to its share (serial 0)."""
    return _job(lo, hi, epochs, sec_per_epoch_on_one_core, 1.0, **kw)


def _job(lo: int, hi: int, epochs: float, sec_per_epoch_on_one_core: float, power: float, **kw: float | None) -> ShareJob:
    """A job whose speed grows as its share to ``power`` (1: linear; below 1: concave, Amdahl-like)."""
    grid = share_grid(lo, hi, 100)
    return ShareJob(
        lo=lo,
        hi=hi,
        replicas=1,
        weight=10.0,
        seconds_per_epoch=sec_per_epoch_on_one_core * (1000.0 / grid) ** power,
        grid=grid,
        remaining=epochs,
        remaining_tier1=kw.get("tier1"),
        deadline=kw.get("deadline"),
        blocked=0.0,
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**31 - 1))
def test_no_node_has_free_cpu_while_a_placed_job_is_below_its_max(seed: int) -> None:
    snap = random_snapshot(seed)
    p = plan(snap, FAST).plan
    assert check_plan(snap, p) == []
    jobs = {j.id: j for j in snap.jobs}
    for node in snap.nodes:
        on = [(a, jobs[a.job]) for a in p.assignments if a.node == node.name]
        free = node.cpu_millis - sum(a.cpu_millis * j.replicas for a, j in on)
        for a, j in on:
            flexible = j.resizable or j.status != "running" or j.node != node.name or a.action == "migrate"
            if flexible and a.cpu_millis < j.max_cpu_millis:
                assert free < j.replicas, (node.name, a.job, a.cpu_millis, j.max_cpu_millis, free)


def test_shortest_first_with_caps() -> None:
    """Two equal-speed jobs on 4 cores, each at most 3: the shorter gets its max, the other the rest."""
    short, long_ = _linear(500, 3000, 10, 60.0), _linear(500, 3000, 40, 60.0)
    split = split_node([long_, short], 4000, MEAN)
    # The long job ends last under the equal split, so it keeps its equal share (2 cores) as a floor.
    assert split.shares.tolist() == [2000, 2000]
    three = [_linear(500, 3000, 10, 60.0), _linear(500, 3000, 20, 60.0), _linear(500, 3000, 80, 60.0)]
    s3 = split_node(three, 6000, MEAN)
    assert int(s3.shares.sum()) == 6000
    assert s3.shares[0] == 3000  # the shortest gets its max
    assert s3.shares[2] >= 2000  # the critical one keeps its equal share (6 / 3 cores)
    assert s3.finish[0] < s3.finish[1] < s3.finish[2]


def test_the_critical_job_keeps_its_equal_share_when_it_falls_between_grid_steps() -> None:
    """8 cores among three jobs of at most 6 cores (grid steps of about 115 millicores): the equal
    share, 2,667, lies between two steps. The job that ends last under the equal split gets at least
    that share (the step above), so it ends no later than under the equal split; rounded down to the
    step below (2,562, as before) it ended later, and the batch's makespan with it."""
    jobs = [_linear(500, 6000, 8, 60.0), _linear(500, 6000, 12, 60.0), _linear(500, 6000, 90, 60.0)]
    split = split_node(jobs, 8000, MEAN)
    assert int(split.shares.sum()) == 8000
    assert split.shares[2] >= 8000 / 3
    assert split.finish[2] <= split.fair_finish[2] + 1e-6
    assert split.finish[0] < split.fair_finish[0]  # and the short job still goes first


def test_rollout_sees_completions() -> None:
    """When the short job ends, the long one gets its share: its predicted finish is earlier than at
    its first share held to the end."""
    jobs = [_linear(500, 4000, 5, 60.0), _linear(500, 4000, 50, 60.0)]
    split = split_node(jobs, 4000, MEAN)
    held = 50 * 60.0 * 1000.0 / float(split.shares[1])
    assert split.finish[1] < held - 1.0


def test_deadline_reserves_what_meets_it() -> None:
    """A job with a tier-1 deadline it can meet gets at least the constant share that meets it."""
    urgent = _linear(500, 4000, 30, 60.0, tier1=10.0, deadline=400.0)  # 10 epochs in 400 s: 1.5 cores
    others = [_linear(500, 4000, 3, 60.0), _linear(500, 4000, 4, 60.0)]
    split = split_node([urgent, *others], 4000, MEAN)
    assert split.shares[0] >= 1500
    assert split.tier1[0] <= 400.0 + 1e-6


def test_makespan_profile_favours_the_longest_job() -> None:
    jobs = [_linear(500, 3000, 5, 60.0), _linear(500, 3000, 8, 60.0), _linear(500, 3000, 60, 60.0)]
    mean = split_node(jobs, 4000, MEAN)
    span = split_node(jobs, 4000, SPAN)
    assert span.shares[2] > mean.shares[2]
    assert span.finish.max() <= mean.finish.max() + 1e-6


def _sqrt(lo: int, hi: int, epochs: float, sec_per_epoch_on_one_core: float, **kw: float | None) -> ShareJob:
    """A job whose speed grows as the square root of its share (a concave, Amdahl-like speed-up)."""
    return _job(lo, hi, epochs, sec_per_epoch_on_one_core, 0.5, **kw)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.floats(min_value=1.0, max_value=60.0), min_size=2, max_size=7),
    concave=st.booleans(),
)
# Found by hypothesis in session 9 (1.07 % past): three longest jobs tied at the top of the range.
@example(sizes=[16.0, 31.546875, 14.0, 60.0, 60.0, 60.0, 18.25], concave=True)
def test_no_job_ends_after_the_equal_splits_makespan(sizes: list[float], concave: bool) -> None:
    """Mean completion first, the batch still ends no later than under the equal split: not only the
    job that ends last there, but every job the shortest-first rule would push past that makespan
    (a second long job held back behind the first) is guarded. Before the late jobs were guarded,
    two long jobs of similar size ended with the shorter one last, after the equal split's end."""
    make = _sqrt if concave else _linear
    jobs = [make(250, 6000, s, 60.0) for s in sizes]
    split = split_node(jobs, 8000, MEAN)
    makespan = float(np.max(split.fair_finish))
    # Within 1.5 %: the guard is greedy (one more job a round), and a short job that ends later than
    # under the equal split holds its minimum meanwhile, which the guarded jobs then cannot have
    # (session 9, 3,000 uniform random cases: 6 past 0.1 %, none past 0.44 %; hypothesis found
    # 1.07 % with three tied longest jobs, the example above; before the guard, 2,531 of 3,000 were
    # past 0.1 % and up to 24 %).
    assert float(np.max(split.finish)) <= makespan * 1.015 + 1e-6


def test_a_deadline_comes_before_the_tail_guards_floor() -> None:
    """The profile puts deadlines first: a deadline that can be met is reserved for even when the
    tail guard's floor for the longest job then cannot be met in full (before, the floor was taken
    first and the deadline, no longer fitting, got nothing)."""
    urgent = _linear(500, 4000, 12, 60.0, tier1=10.0, deadline=200.0)  # 10 epochs in 200 s: 3 cores
    long_ = _linear(500, 4000, 200, 60.0)
    split = split_node([urgent, long_], 4000, MEAN)
    assert split.shares[0] >= 3000
    assert split.tier1[0] <= 200.0 + 1e-6


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.floats(min_value=1.0, max_value=60.0), min_size=2, max_size=6),
    slack=st.sampled_from([0.0, 0.02, 0.05, 0.2]),
)
# Found in session 32: the makespan-first split *with* the value search ends this batch at 1,100.5 s,
# its rule at 1,119.8 s; the budget is the rule's (held: 1,118.5 s), so against the searched reach
# the test failed by 1.6 %, one run in many.
@example(sizes=[1.0, 7.0, 22.0, 32.0, 25.75], slack=0.0)
def test_a_makespan_budget_holds_the_batch_within_it(sizes: list[float], slack: float) -> None:
    """Mean completion first within a makespan budget: with concave speed-ups (where the equal split
    ends the batch later than need be) no job ends past ``(1 + slack)`` times the makespan reachable
    on the node (the makespan-first profile's rule, without the value search, as the budget reads it;
    1 % tolerance, as for the tail guard), nor past the budget-free plan's makespan. (Nothing is
    claimed of the mean: the rule is greedy, and a budget that reserves for a long job early can
    leave a shorter mean too; CI found such a case.)"""
    jobs = [_sqrt(250, 6000, s, 60.0) for s in sizes]
    free = split_node(jobs, 8000, MEAN)
    reach = float(np.max(split_node(jobs, 8000, SPAN, search=SearchBudget(0)).finish))
    held = split_node(jobs, 8000, MEAN, makespan_slack=slack)
    assert int(held.shares.sum()) == 8000
    budget = min(reach * (1.0 + slack), float(np.max(free.finish)))
    assert float(np.max(held.finish)) <= budget * 1.01 + 1e-6


def test_a_makespan_budget_gives_the_long_job_more_than_its_equal_share() -> None:
    """Hand-computed: on 8 cores, a long square-root job (60 epochs) and a short one (6): the equal
    split gives each 4 cores and the long job then runs alone at its max of 6, leaving 2 idle. With a
    0 % budget the long job gets more than 4 cores from the start, and the batch ends sooner; unset,
    the long job keeps its equal share (the short one goes first)."""
    jobs = [_sqrt(500, 6000, 60, 60.0), _sqrt(500, 6000, 6, 60.0)]
    free = split_node(jobs, 8000, MEAN)
    held = split_node(jobs, 8000, MEAN, makespan_slack=0.0)
    assert free.shares.tolist() == [4000, 4000]
    assert held.shares[0] > 4000
    assert held.finish[0] < free.finish[0] - 1.0
    assert held.finish[1] > free.finish[1]


def _one_host(jobs: list[dict], cpu: int = 8000) -> Snapshot:
    return Snapshot.model_validate({"time": 10_000.0, "nodes": [{"name": "h", "cpu_millis": cpu}], "jobs": jobs})


def test_converged_belief_never_starves_a_job() -> None:
    """A running job whose curve is flat (the model predicts nothing left) but is below its max_epochs
    keeps running when the node has room: the belief gives it less, not nothing."""
    flat = [{"time": 9000.0 + 100 * e, "epoch": e, "metric": 0.9} for e in range(1, 9)]
    job = {
        "id": "flat",
        "status": "running",
        "node": "h",
        "allocation": {"cpu_millis": 2000},
        "min_cpu_millis": 500,
        "max_cpu_millis": 4000,
        "history": flat,
        "target": {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.95}, "max_epochs": 50},
    }
    p = plan(_one_host([job])).plan
    a = p.assignments[0]
    assert a.node == "h" and a.action != "pause"
    assert a.cpu_millis == 4000  # the only job: the whole of what it can use


def test_a_new_job_keeps_its_equal_share_until_its_speed_is_seen() -> None:
    """A plan on one 8-core host: two jobs with 20 and 10 epochs reported (their speeds observed at
    4 cores) and one started 10 s ago that has reported nothing (its speed only assumed: 60 s an
    epoch on one core, a guess). Shortest-first on that guess gave it 1,646 millicores and the
    10-epoch job 3,687; it now keeps its equal share, 2,666 (the other two 2,667 each), until its
    first report says how fast it trains, and its explanation says so. The plan passes the checker."""

    def history(n: int, t0: float) -> list[dict]:
        return [{"time": t0 + 100.0 * e, "epoch": e, "metric": 0.5 + 0.01 * e} for e in range(1, n + 1)]

    def job(name: str, points: list[dict], cpu: int, started: float, max_epochs: int) -> dict:
        return {
            "id": name,
            "status": "running",
            "node": "h",
            "allocation": {"cpu_millis": cpu},
            "started": started,
            "min_cpu_millis": 500,
            "max_cpu_millis": 6000,
            "history": points,
            "target": {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.99}, "max_epochs": max_epochs},
        }

    snap = _one_host(
        [
            job("long", history(20, 8000.0), 4000, 7900.0, 60),
            job("short", history(10, 9000.0), 4000, 8900.0, 12),
            job("fresh", [], 500, 9990.0, 40),
        ]
    )
    result = plan(snap)
    shares = {a.job: a.cpu_millis for a in result.plan.assignments}
    assert shares == {"long": 2667, "short": 2667, "fresh": 2666}
    said = {a.job: a.explanation for a in result.plan.assignments}
    assert "held at its equal share or more until its first report" in said["fresh"]
    assert "until its first report" not in said["long"] + said["short"]
    check_plan(snap, result.plan)


def test_plan_with_previous_from_another_config_is_the_same_as_from_scratch() -> None:
    snap = random_snapshot(7, n_nodes=2, n_jobs=8)
    other = plan(snap, PlannerConfig(time_limit=0.5, unknown_remaining_epochs=5.0))
    cfg = PlannerConfig(time_limit=0.5)
    fresh = plan(snap, cfg).plan.model_dump()
    reused = plan(snap, cfg, previous=other).plan.model_dump()
    for d in (fresh, reused):
        d["solver"].pop("seconds")
    assert fresh == reused


def test_profiles_change_the_plan_on_a_real_snapshot() -> None:
    """The two profiles are both valid plans of the same snapshot, and the makespan-first one gives
    the job predicted to end last at least as much."""
    snap = random_snapshot(11, n_nodes=1, n_jobs=6)
    plans = {}
    for profile in (MEAN, SPAN):
        s = snap.model_copy(update={"settings": snap.settings.model_copy(update={"objective": profile})})
        plans[profile] = plan(s, FAST).plan
        assert check_plan(s, plans[profile]) == []
    placed = [a for a in plans[MEAN].assignments if a.node is not None and a.predictions.eta_finish is not None]
    if len(placed) >= 2:
        last = max(placed, key=lambda a: a.predictions.eta_finish or 0.0).job
        by = {a.job: a.cpu_millis for a in plans[SPAN].assignments}
        mine = {a.job: a.cpu_millis for a in plans[MEAN].assignments}
        assert by[last] >= mine[last] or np.isclose(by[last], mine[last])


def test_a_job_with_nothing_left_keeps_its_minimum_and_the_node_is_not_overfilled() -> None:
    """Regression (found by the Docker end-to-end run): a job at its max_epochs is out of the
    rollout but keeps its minimum in the plan; the others used to be handed that minimum too
    (2214 of 2000 millicores)."""
    done = _linear(250, 1000, 0.0, 60.0)
    others = [_linear(250, 1000, e, 60.0) for e in (2.2, 1.9, 2.7, 39.0)]
    split = split_node([done, *others], 2000, MEAN)
    assert int(split.shares.sum()) <= 2000
    assert split.shares[0] == 250


def test_an_assumed_tier1_deadline_gets_the_max_until_a_curve_can_tell() -> None:
    """A new job whose tier 1 is only assumed (at its finish: 30 epochs) cannot meet a 400 s
    deadline on paper; it still gets its max rather than nothing, since nothing says it cannot."""
    base = _linear(250, 1000, 30, 60.0, tier1=30.0, deadline=400.0)
    assumed = ShareJob(**{**base.__dict__, "tier1_assumed": True})
    others = [_linear(250, 1000, 3, 60.0), _linear(250, 1000, 4, 60.0)]
    judged = split_node([base, *others], 2000, MEAN)
    guessed = split_node([assumed, *others], 2000, MEAN)
    assert guessed.shares[0] == 1000
    assert judged.shares[0] < 1000
    # On a node too small for its max beside the others' minimums it gets all the room there is.
    crowded = split_node([assumed, *others], 1000, MEAN)
    assert crowded.shares[0] == 500 and int(crowded.shares.sum()) == 1000


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.floats(min_value=0.0, max_value=50.0), min_size=1, max_size=6),
    spare=st.integers(min_value=0, max_value=3000),
    blocked=st.floats(min_value=0.0, max_value=300.0),
    profile=st.sampled_from([MEAN, SPAN]),
)
def test_a_node_that_holds_everyone_at_max_gives_everyone_its_max(
    sizes: list[float], spare: int, blocked: float, profile: str
) -> None:
    """When the node's CPU covers every job with work left at its max (``spare`` beyond that), the
    split gives each its max and predicts its finish at that speed from the end of its start-up: the
    shortcut that skips the rule there (most nodes of a GPU cluster) answers what the rule would.
    Jobs with nothing left keep at least their minimum."""
    jobs = [
        ShareJob(**{**_sqrt(500, 2500 + 500 * (i % 3), e, 60.0).__dict__, "blocked": blocked * (i % 2)})
        for i, e in enumerate(sizes)
    ]
    need = sum(j.hi for j in jobs if j.remaining > 0) + sum(j.lo for j in jobs if j.remaining <= 0)
    split = split_node(jobs, need + spare, profile)
    for j, job in enumerate(jobs):
        if job.remaining > 0:
            assert split.shares[j] == job.hi
            expected = job.blocked + job.remaining * float(job.seconds_per_epoch[-1])
            # The rollout counts a job with 1e-9 epochs or less left as done (share._rollout).
            tolerance = 1e-9 * max(expected, 1.0) + 1e-9 * float(job.seconds_per_epoch[-1])
            assert abs(split.finish[j] - expected) <= tolerance
            assert abs(split.fair_finish[j] - expected) <= tolerance
        else:
            assert job.lo <= split.shares[j] <= job.hi


def test_a_job_that_may_well_end_last_is_guarded_too() -> None:
    """Three jobs on 6 cores: by the median the 60-epoch one ends last and is the one guarded, so
    shortest-first starves the 30-epoch one (500 millicores) while the 10-epoch one runs. If the
    30-epoch job's pessimistic reading is 80 epochs (its band), at its equal-split pace it may well
    end after the batch: it keeps its equal share too. A pessimistic 35 epochs stays short of that
    and changes nothing."""
    short, mid, long_ = _linear(500, 6000, 10, 60.0), _linear(500, 6000, 30, 60.0), _linear(500, 6000, 60, 60.0)
    median = split_node([short, mid, long_], 6000, MEAN)
    assert median.shares.tolist() == [3500, 500, 2000]
    unsure = split_node([short, replace(mid, remaining_high=80.0), long_], 6000, MEAN)
    assert unsure.shares.tolist() == [2000, 2000, 2000]
    assert unsure.finish[2] <= median.finish[2] + 1e-6  # the longest is no later for it
    near = split_node([short, replace(mid, remaining_high=35.0), long_], 6000, MEAN)
    assert near.shares.tolist() == median.shares.tolist()


def test_a_job_whose_speed_is_only_assumed_keeps_its_equal_share() -> None:
    """The same three jobs: by its assumed speed the 30-epoch one is not the tail and shortest-first
    leaves it 500 millicores. With its speed only assumed (nothing of its own observed) how long it
    runs is not known, so it is guarded at its equal share like the job the equal split ends last;
    the short job still gets the rest. A job that has finished its work is not held to anything."""
    short, mid, long_ = _linear(500, 6000, 10, 60.0), _linear(500, 6000, 30, 60.0), _linear(500, 6000, 60, 60.0)
    median = split_node([short, mid, long_], 6000, MEAN)
    assert median.shares.tolist() == [3500, 500, 2000]
    unknown = split_node([short, replace(mid, speed_assumed=True), long_], 6000, MEAN)
    assert unknown.shares.tolist() == [2000, 2000, 2000]
    assert unknown.finish[2] <= median.finish[2] + 1e-6  # the longest is no later for it
    # The short one assumed: it is at or above its equal share anyway, nothing changes.
    assert split_node([replace(short, speed_assumed=True), mid, long_], 6000, MEAN).shares.tolist() == [3500, 500, 2000]


def test_a_probes_cap_does_not_move_the_tail_guard() -> None:
    """Three jobs on 6 cores; the 30-epoch one is probed (capped at 1 core for this interval). Read
    as lasting the whole rollout, that cap made it the job that ends last under the equal split, so
    the guard held it and the 40-epoch job, the real tail, fell to its minimum beside it (found on a
    held-out workload: ``benchmarks/heldout.py --generator-seed 14``, workload 0, whose batch then
    ended after Docker's). The equal split runs each job within its own bounds (``reference``): the
    40-epoch job keeps its equal share, no job goes above its cap, and the reference's finishes are
    the unprobed ones."""
    short, mid, long_ = _linear(500, 6000, 10, 60.0), _linear(500, 6000, 30, 60.0), _linear(500, 6000, 40, 60.0)
    plain = split_node([short, mid, long_], 6000, MEAN)
    assert plain.shares.tolist() == [3500, 500, 2000]  # the 40-epoch job is the one guarded
    probed = [
        short,
        replace(mid, hi=1000, grid=mid.grid[mid.grid <= 1000], seconds_per_epoch=mid.seconds_per_epoch[mid.grid <= 1000]),
        long_,
    ]
    split = split_node(probed, 6000, MEAN, reference=[short, mid, long_])
    assert split.shares[2] >= 2000 and split.shares[1] <= 1000
    assert int(split.shares.sum()) == 6000
    assert split.fair_finish.tolist() == plain.fair_finish.tolist()


def test_epoch_values_are_the_rollouts_costates_by_hand() -> None:
    """Two jobs of weight 1: A (0.1 epochs/s) ends the first phase while B runs at 0.05; B then runs
    alone at 0.2. One more epoch of B's costs its finish 1 / 0.2 = 5 s. One more epoch of A's keeps
    the first phase 10 s longer: 10 s of A's finish and 10 s of B's, less the 0.5 epochs B does
    meanwhile, worth 2.5 s: 17.5."""
    phases = [
        Phase([0.1, 0.05], [True, True], [False, False], [True, False], [False, False]),
        Phase([0.0, 0.2], [False, True], [False, False], [False, True], [False, False]),
    ]
    finish, tier1 = _epoch_values([1.0, 1.0], [0.0, 0.0], phases)
    assert finish == [17.5, 5.0]
    assert tier1 == [0.0, 0.0]


def _measured(model: str, batch: int, epochs: float, lo: int = 500, hi: int = 6000) -> ShareJob:
    """A CPU job with the measured speed of ``model`` at ``batch`` (the bundled AdaptDL tables)."""
    truth = GroundTruth(TraceLibrary.bundled(), model, batch, "cpu")
    grid = share_grid(lo, hi, 100)
    spe = np.array([truth.epoch_seconds(int(g), 0) for g in grid])
    return ShareJob(
        lo=lo,
        hi=hi,
        replicas=1,
        weight=10.0,
        seconds_per_epoch=spe,
        grid=grid,
        remaining=epochs,
        remaining_tier1=None,
        deadline=None,
        blocked=0.0,
    )


def test_the_value_search_stops_starving_a_linear_job_behind_a_concave_one() -> None:
    """The README demo's three long jobs on its 8-core host, measured speeds: yolov3 (5.3 epochs left,
    ends last, held to its equal share), deepspeech2 (9 epochs; linear speed-up, serial fraction 0)
    and cifar10 (20 epochs; serial fraction 0.17). The rule, weight over epochs left, gives cifar10
    4,167 and deepspeech2 1,166 until cifar10 ends; an offline optimum of this case (a mixed-integer
    program over 10-s steps) balances them (about 3,100 and 2,000) and ends deepspeech2 about 50 s
    sooner for 30 s on cifar10. The searched values move the same way, and the batch ends no
    later."""
    jobs = [_measured("yolov3", 128, 5.3), _measured("deepspeech2", 160, 9.0), _measured("cifar10", 256, 20.0)]
    rule = split_node(jobs, 8000, MEAN, search=SearchBudget(0))
    searched = split_node(jobs, 8000, MEAN)
    assert rule.shares.tolist()[1] < 1500
    assert searched.shares[1] >= rule.shares[1] + 500
    assert float(searched.finish.sum()) < float(rule.finish.sum()) * 0.998
    assert float(searched.finish.max()) <= float(rule.finish.max()) * (1 + 1e-3)
    assert int(searched.shares.sum()) == 8000


def test_the_value_search_runs_with_two_jobs() -> None:
    """A short ncf job fitted from its measured speeds (72.2 s an epoch at 2, 3.2 and 4 cores: the
    fit's serial fraction near 0.9, the prior's pull on a flat speed-up) beside a long yolov3 job
    (measured; it scales) on 8 cores. The tail guard holds yolov3 to its equal share, and the rule
    gives ncf the rest, its max, by its weight over its few epochs left, though four cores make it
    only some 10 % faster than one; the search gives yolov3 more, lowers the completion times and
    ends the batch no later."""
    obs = [SpeedObservation(c, 0, 72.2016) for c in (2000, 3200, 4000)]
    model = fit_speed_model(obs, uses_gpu=False)
    grid = share_grid(500, 4000, 100)
    ncf = ShareJob(
        lo=500,
        hi=4000,
        replicas=1,
        weight=10.0,
        seconds_per_epoch=model.seconds_per_epoch_many(grid, np.zeros(grid.size)),
        grid=grid,
        remaining=3.0,
        remaining_tier1=None,
        deadline=None,
        blocked=0.0,
    )
    jobs = [ncf, _measured("yolov3", 64, 6.5, hi=8000)]
    rule = split_node(jobs, 8000, MEAN, search=SearchBudget(0))
    searched = split_node(jobs, 8000, MEAN)
    assert rule.shares.tolist() == [4000, 4000]
    assert searched.shares[1] >= rule.shares[1] + 800
    assert float(searched.finish.sum()) < float(rule.finish.sum()) * 0.998
    assert float(searched.finish.max()) <= float(rule.finish.max()) * (1 + 1e-3)
    assert int(searched.shares.sum()) == 8000


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.floats(min_value=1.0, max_value=60.0), min_size=3, max_size=6),
    powers=st.lists(st.sampled_from([1.0, 0.7, 0.5, 0.3]), min_size=6, max_size=6),
    deadline=st.one_of(st.none(), st.floats(min_value=60.0, max_value=3000.0)),
)
def test_the_value_search_lowers_the_objective_and_keeps_makespan_and_deadlines(
    sizes: list[float], powers: list[float], deadline: float | None
) -> None:
    """Random nodes (3-6 jobs, linear to strongly concave speed-ups, perhaps a tier-1 deadline on the
    first): the searched split's rollout has a weighted completion no higher than the rule's, ends
    no job later than the rule's makespan, meets a deadline the rule meets, and still hands out the
    whole node."""
    jobs = [_job(250, 4000, s, 60.0, p) for s, p in zip(sizes, powers, strict=False)]
    if deadline is not None:
        jobs[0] = replace(jobs[0], remaining_tier1=jobs[0].remaining / 2, deadline=deadline, tier1_open=True)
    rule = split_node(jobs, 8000, MEAN, search=SearchBudget(0))
    budget = SearchBudget(5000)
    searched = split_node(jobs, 8000, MEAN, search=budget)
    assert budget.left <= 5000
    w = np.array([j.weight for j in jobs])

    def cost(split: object) -> float:
        f, t1 = split.finish, split.tier1  # type: ignore[attr-defined]
        t = np.where(np.isfinite(t1), t1, 0.0)
        return float(np.dot(w, f) + np.dot(w, t))

    assert cost(searched) <= cost(rule) * (1 + 1e-9)
    assert float(searched.finish.max()) <= float(rule.finish.max()) * (1 + 1e-3) + 1e-6
    if deadline is not None and rule.tier1[0] <= deadline:
        assert searched.tier1[0] <= deadline + 1e-6
    assert int(searched.shares.sum()) == min(8000, sum(j.hi for j in jobs))


def test_the_value_search_spends_only_its_budget_and_skips_cpu_insensitive_jobs() -> None:
    """The budget is a count of rule applications shared by a plan's nodes: none left, no search
    (the rule's split); the same budget, the same split (deterministic). GPU jobs whose speed
    hardly depends on their CPU share are not searched at all, whatever the budget."""
    jobs = [_measured("yolov3", 128, 5.3), _measured("deepspeech2", 160, 9.0), _measured("cifar10", 256, 20.0)]
    a, b = SearchBudget(300), SearchBudget(300)
    first, again = split_node(jobs, 8000, MEAN, search=a), split_node(jobs, 8000, MEAN, search=b)
    assert first.shares.tolist() == again.shares.tolist() and a.left == b.left
    assert a.left < 300
    flat = [replace(j, seconds_per_epoch=np.full(j.grid.size, 100.0) * (1 + i)) for i, j in enumerate(jobs)]
    untouched = SearchBudget(300)
    split_node(flat, 8000, MEAN, search=untouched)
    assert untouched.left == 300


def _search_once(jobs: list[ShareJob], budget: int, skip: bool) -> tuple[object, int, int]:
    """``split_node`` with ``budget`` (``skip``: as it runs; else with every value change rolled out,
    ``_rule`` marking every job as one whose value could move its share): the split, the budget left
    and the rollouts made."""
    rollouts = [0]
    rule, rollout = share._rule, share._rollout

    def every(*args: object, **kw: object) -> list[float]:
        got = rule(*args, **kw)  # type: ignore[arg-type]
        moved = args[9] if len(args) > 9 else kw.get("moved")
        if moved is not None and not skip:
            for flags in moved:  # type: ignore[attr-defined]
                flags[:] = [True] * len(flags)
        return got

    def counted(*args: object, **kw: object) -> object:
        rollouts[0] += 1
        return rollout(*args, **kw)  # type: ignore[arg-type]

    left = SearchBudget(budget)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(share, "_rule", every)
        mp.setattr(share, "_rollout", counted)
        split = split_node(jobs, 8000, MEAN, search=left)
    return split, left.left, rollouts[0]


def _search_both_ways(jobs: list[ShareJob], budget: int) -> tuple[tuple[object, int, int], tuple[object, int, int]]:
    return _search_once(jobs, budget, True), _search_once(jobs, budget, False)


def _same_split(a: object, b: object) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True) for f in ("shares", "finish", "tier1", "fair_finish"))


def test_a_value_change_that_cannot_move_a_share_is_not_rolled_out() -> None:
    """The README demo's three long jobs (measured speeds, as above) and an ncf job capped at one core
    on 8 cores. The ncf job holds its max at every event, so a higher value for it moves nothing,
    and a lower value for a job that takes no marginal step moves nothing either. The search skips
    those changes, and ends with the same split (not the rule's: it gives deepspeech2 more), the
    same predictions and the same budget left as when every change is rolled out, in fewer
    rollouts."""
    jobs = [_measured("yolov3", 128, 5.3), _measured("deepspeech2", 160, 9.0), _measured("cifar10", 256, 20.0)]
    jobs.append(_measured("ncf", 512, 3.0, hi=1000))
    rule = split_node(jobs, 8000, MEAN, search=SearchBudget(0))
    (fast, left_fast, n_fast), (full, left_full, n_full) = _search_both_ways(jobs, 5000)
    assert fast.shares[1] >= rule.shares[1] + 500  # type: ignore[attr-defined]
    assert _same_split(fast, full)
    assert left_fast == left_full < 5000
    assert n_fast < n_full


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.floats(min_value=1.0, max_value=60.0), min_size=3, max_size=6),
    powers=st.lists(st.sampled_from([1.0, 0.7, 0.5, 0.3]), min_size=6, max_size=6),
    caps=st.lists(st.sampled_from([1000, 2000, 4000, 8000]), min_size=6, max_size=6),
    budget=st.sampled_from([150, 600, 5000]),
)
# A job that takes only the part of a step left over at some event: a lower value hands that part to
# another job, so it must be rolled out.
@example(sizes=[1.6, 59.0, 18.4], powers=[0.5, 0.3, 0.3, 1.0, 1.0, 1.0], caps=[1000, 4000, 8000, 8000, 8000, 8000], budget=5000)
def test_skipping_value_changes_leaves_the_search_where_it_was(
    sizes: list[float], powers: list[float], caps: list[int], budget: int
) -> None:
    """Random nodes (3-6 jobs, linear to strongly concave, maxima from one core to the node), budgets
    that run out early or never: the split, its predictions and the budget left are the same with
    the skips as with every value change rolled out."""
    jobs = [_job(250, c, s, 60.0, p) for s, p, c in zip(sizes, powers, caps, strict=False)]
    (fast, left_fast, n_fast), (full, left_full, n_full) = _search_both_ways(jobs, budget)
    assert _same_split(fast, full)
    assert left_fast == left_full
    assert n_fast <= n_full


def test_a_tier1_only_assumed_counts_once_in_the_value_search() -> None:
    """The real-engine demo's plan 7 (``benchmarks/e2e_docker.py``, daemon log of session 40): on a
    1000m node, ``job0`` has reached tier 1 and has 25.9 epochs left; ``job1`` has just started (no
    curve yet, so its tier 1 is only assumed at its finish, 40 epochs); both at 0.557 s an epoch on a
    core, linear below it. The rule gives each its equal share (``job1`` ends last under the equal
    split and is guarded). The value search counted ``job1``'s assumed tier-1 time on top of its
    finish, the same time twice, and gave it 750 against 250: ``job0``, nearer its end, ended later,
    and the completion times added up to more than the equal split's. A tier 1 placed by a curve
    still counts (its weight is the user's target: usable models early)."""
    done = replace(_linear(250, 1000, 25.87, 0.557), tier1_open=False)
    new = replace(_linear(250, 1000, 40.0, 0.557, tier1=40.0), tier1_open=True, tier1_assumed=True)
    split = split_node([done, new], 1000, MEAN)
    assert split.shares.tolist() == [500, 500]
    assert float(split.finish.sum()) <= float(split.fair_finish.sum()) + 1e-6
    # Placed by a curve at the same epoch, the tier-1 time counts: the search moves CPU to it.
    placed = split_node([done, replace(new, tier1_assumed=False)], 1000, MEAN)
    assert placed.shares.tolist() == [250, 750]


def test_known_work_at_linear_speeds_goes_shortest_first_without_the_tail_guard() -> None:
    """The real-engine demo's plan 7 of session 40's third run: on a 1000m node, ``job0`` (30.4
    epochs left) and ``job1`` (40), both running to their max_epochs, at 2.70 s an epoch on 250m and
    0.675 s on a core, proportional to the share (below one core the kernel time-slices). Whatever
    the order, the node's work ends at the same time (47.5 s); the guard held ``job1``, which ends
    last under the equal split, at 500m, and the value search, shortest-first ruled out, gave it
    750m: ``job0`` ended at 47.5 s instead of 27.4 s. With both amounts of work known and the
    speeds linear, the node goes shortest-first, and ends no later. One job's work a prediction (it
    may run longer than the curve says): the guard stays."""
    a = replace(_linear(250, 1000, 30.37, 0.675), work_known=True)
    b = replace(_linear(250, 1000, 40.0, 0.675), work_known=True)
    split = split_node([a, b], 1000, MEAN)
    assert split.shares.tolist() == [750, 250]
    assert float(split.finish.max()) <= float(split.fair_finish.max()) * (1 + 1e-6)
    assert float(split.finish.sum()) < float(split.fair_finish.sum()) - 10.0
    guarded = split_node([a, replace(b, work_known=False)], 1000, MEAN)
    assert guarded.shares[1] >= 500
    # Concave speeds (Amdahl-like): the order changes when the work ends; the guard stays.
    ca = replace(_job(250, 1000, 30.37, 0.675, 0.5), work_known=True)
    cb = replace(_job(250, 1000, 40.0, 0.675, 0.5), work_known=True)
    assert split_node([ca, cb], 1000, MEAN).shares[1] >= 500


def test_known_work_at_linear_speeds_still_guards_a_job_left_alone_at_its_cap() -> None:
    """Three linear jobs with known work on 2000m, each capped at 1000m: shortest-first would leave
    the longest to run alone at its cap at the end, with half the node idle, and end the batch
    later than the equal split. The rollout sees it and guards that job: the batch ends no later."""
    jobs = [replace(_linear(250, 1000, e, 1.0), work_known=True) for e in (10.0, 20.0, 60.0)]
    split = split_node(jobs, 2000, MEAN)
    assert float(split.finish.max()) <= float(split.fair_finish.max()) * (1 + 1e-3) + 1e-6
    assert int(split.shares.sum()) == 2000
