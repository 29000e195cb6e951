"""The scheduling policies (``planner.policies``): contract, invariants and each one's signature behaviour.

Case matrix:

- contract: every policy on every example snapshot, on Hypothesis-drawn random snapshots (real curve
  prefixes; 1-4 nodes, 0-11 jobs, pending/running/finished, CPU/GPU, gangs, pinned, non-resizable,
  selectors, cordoned nodes), and along multi-interval runs where each plan is applied to the next
  snapshot: every plan passes the independent checker, places each active job exactly once, names
  the policy in ``solver``; an unplaced job carries a reason;
- determinism: two fresh policies fed the same snapshots give the same plans (but the wall time);
- GPU fractions: multi-interval runs with fractional jobs (pending GPU jobs made fractional, plus
  eight more needing a V100): every policy's plans pass the checker's device rules, and some
  fractional jobs do share a device;
- edge cases: an empty snapshot, jobs without history, flat (constant) histories;
- registry: unknown names and options are ``ValueError`` naming them;
- behaviour, each on a small hand-made snapshot with measured curves (``../shared/data``):

  ============ ============================================================================
  docker       equal CPU split among the containers of a node, new jobs start at once
  kubernetes   binds to the emptier node, requests = the user's max, never resizes
  fifo         the head of the queue blocks a later job that would fit
  flowcon      the faster-growing job gets more CPU than the flat one
  specon       a slow-growing job migrates from a crowded node to an empty one, once
  optimus      more CPU to the job with more remaining time saved per unit
  tiresias     a long-running job is preempted for a new one; the budget bounds it
  flowplan     the wrapper returns the planner's plan and keeps its fit cache
  ============ ============================================================================

The oracle (FlowPlan fed the ground truth) plans only with a truth: the contract tests here run the
policies that plan from the snapshot alone (:data:`PLAIN`); ``tests/test_oracle.py`` covers it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import random_snapshot, real_curve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import check_plan, load_snapshot
from planner.plan import Plan
from planner.policies import POLICIES, make_policy, reads_ground_truth
from planner.snapshot import Snapshot

#: Every policy that plans from the snapshot alone (all but the oracle).
PLAIN = sorted(n for n in POLICIES if not reads_ground_truth(POLICIES[n]()))
BASELINES = sorted(n for n in PLAIN if n != "flowplan")
NOW = 1_000_000.0


def _fresh(name: str) -> Any:
    # FlowPlan's greedy backend keeps the random tests fast; the IP runs on the example snapshots.
    return make_policy(name, solver="greedy") if name == "flowplan" else make_policy(name)


def _strip(p: Plan) -> dict[str, Any]:
    d = p.model_dump()
    d["solver"].pop("seconds")
    return d


def _assert_valid(snap: Snapshot, p: Plan, name: str) -> None:
    assert check_plan(snap, p) == [], name
    active = sorted(j.id for j in snap.jobs if j.status != "finished")
    assert sorted(a.job for a in p.assignments) == active
    for a in p.assignments:
        assert a.explanation, (name, a.job)
    unplaced = {a.job for a in p.assignments if a.node is None}
    assert {u.job for u in p.unserved} == unplaced
    assert all(u.reason for u in p.unserved)
    if name != "flowplan":
        assert p.solver.name == name
        assert p.solver.status in ("trivial", "feasible")
        assert p.objective.migrations == sum(a.action == "migrate" for a in p.assignments)
        assert p.objective.resizes == sum(a.action == "resize" for a in p.assignments)


def _advance(snap: Snapshot, p: Plan, step: float = 1.0) -> Snapshot:
    """The next interval's snapshot if the plan were applied: placements as planned, the clock one
    interval on, one more epoch reported by every running job (its last value nudged by ``step``%)."""
    d = snap.model_dump()
    dt = snap.settings.interval_seconds
    d["time"] = snap.time + dt
    by_job = {a.job: a for a in p.assignments}
    for job in d["jobs"]:
        a = by_job.get(job["id"])
        if a is None:
            continue
        if a.node is None:
            job.update(status="pending", node=None, allocation=None)
            continue
        alloc: dict[str, Any] = {"cpu_millis": a.cpu_millis, "gpus": a.gpus}
        if a.gpu_device is not None:
            alloc["gpu_device"] = a.gpu_device
        job.update(status="running", node=a.node, allocation=alloc)
        if job["history"]:
            last = dict(job["history"][-1])
            last["time"], last["epoch"] = d["time"], last["epoch"] + 1
            for k in ("loss", "metric"):
                if last.get(k) is not None:
                    last[k] = round(last[k] * (1 - step / 100), 6)
            job["history"].append(last)
    return Snapshot.model_validate(d)


# -- contract -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PLAIN)
@pytest.mark.parametrize("example", ["flowcon-1node", "qoe-deadlines", "specon-4nodes"])
def test_every_policy_plans_every_example_snapshot(name: str, example: str) -> None:
    snap = load_snapshot(f"examples/snapshots/{example}.json")
    p = make_policy(name)(snap)
    _assert_valid(snap, p, name)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**31 - 1))
def test_every_policy_passes_the_checker_on_random_snapshots(seed: int) -> None:
    snap = random_snapshot(seed)
    for name in PLAIN:
        _assert_valid(snap, _fresh(name)(snap), name)


@pytest.mark.parametrize("name", PLAIN)
def test_runs_over_many_intervals_stay_valid_and_deterministic(name: str) -> None:
    """Plans applied interval after interval (states, attained service, migrations, preemptions)."""
    for seed in (3, 11, 29):
        first, second = _fresh(name), _fresh(name)
        snap = random_snapshot(seed, n_nodes=3, n_jobs=10, settings={"migration_budget": 2, "interval_seconds": 60.0})
        for _ in range(6):
            p = first(snap)
            _assert_valid(snap, p, name)
            assert _strip(second(snap)) == _strip(p)
            snap = _advance(snap, p, step=0.0 if seed == 29 else 1.0)


def _with_fractions(seed: int) -> Snapshot:
    """A random snapshot whose pending GPU jobs become fractional (one GPU, one replica, 100-900
    milli), plus eight more fractional jobs that need a V100 node: GPUs shared and contended."""
    rng = np.random.default_rng(seed)
    d = random_snapshot(seed, n_nodes=3, n_jobs=8, settings={"migration_budget": 2, "interval_seconds": 60.0}).model_dump()
    extra = [
        {"id": f"frac-{i}", "status": "pending", "min_cpu_millis": 500, "max_cpu_millis": 1000, "gpu_type": "V100"}
        for i in range(8)
    ]
    for job in d["jobs"] + extra:
        if job["status"] == "pending" and (job.get("max_gpus", 0) > 0 or job["id"].startswith("frac-")):
            job.update(min_gpus=1, max_gpus=1, replicas=1, gpu_milli=int(rng.choice([100, 250, 460, 500, 600, 900])))
    d["jobs"] += extra
    return Snapshot.model_validate(d)


@pytest.mark.parametrize("name", PLAIN)
def test_runs_with_gpu_fractions_stay_valid_and_deterministic(name: str) -> None:
    """Fractional jobs start, stay on their devices and share them, interval after interval, under
    every policy; every plan passes the checker (which numbers the devices per node)."""
    shared = 0
    for seed in (1, 4, 7):
        first, second = _fresh(name), _fresh(name)
        snap = _with_fractions(seed)
        for _ in range(4):
            p = first(snap)
            _assert_valid(snap, p, name)
            assert _strip(second(snap)) == _strip(p)
            devices = [(a.node, a.gpu_device) for a in p.assignments if a.gpu_device is not None]
            shared += len(devices) - len(set(devices))
            snap = _advance(snap, p)
    assert shared > 0, "no two fractional jobs ever shared a device: the test exercises nothing"


def test_empty_snapshot_and_jobs_without_history() -> None:
    empty = Snapshot.model_validate({"time": NOW})
    no_jobs = Snapshot.model_validate({"time": NOW, "nodes": [{"name": "n0", "cpu_millis": 4000}]})
    fresh = Snapshot.model_validate(
        {
            "time": NOW,
            "nodes": [{"name": "n0", "cpu_millis": 4000, "memory_mib": 8192}],
            "jobs": [
                {"id": "new", "status": "pending", "max_cpu_millis": 2000},
                {"id": "run", "status": "running", "node": "n0", "allocation": {"cpu_millis": 1000}, "max_cpu_millis": 4000},
            ],
        }
    )
    for name in PLAIN:
        for snap in (empty, no_jobs, fresh):
            p = make_policy(name)(snap)
            _assert_valid(snap, p, name)
        if name != "flowplan":
            assert make_policy(name)(empty).solver.status == "trivial"


def test_flat_histories_do_not_break_any_policy() -> None:
    """Constant loss and constant accuracy (no NaN, just no progress) over several intervals."""
    jobs = []
    for i, field in enumerate(("loss", "metric", "loss")):
        hist = [{"time": NOW - 600 + 60 * e, "epoch": e, field: 0.5} for e in range(1, 10)]
        jobs.append(
            {
                "id": f"flat-{i}",
                "status": "running",
                "node": "n0",
                "allocation": {"cpu_millis": 1000},
                "max_cpu_millis": 4000,
                "history": hist,
            }
        )
    snap = Snapshot.model_validate(
        {"time": NOW, "nodes": [{"name": "n0", "cpu_millis": 8000}, {"name": "n1", "cpu_millis": 8000}], "jobs": jobs}
    )
    for name in PLAIN:
        policy, s = make_policy(name), snap
        for _ in range(4):
            p = policy(s)
            _assert_valid(s, p, name)
            s = _advance(s, p, step=0.0)


def test_registry_rejects_unknown_names_and_options() -> None:
    with pytest.raises(ValueError, match="unknown policy 'nope'.*docker.*tiresias"):
        make_policy("nope")
    with pytest.raises(ValueError, match="policy docker: unknown option"):
        make_policy("docker", alpha=0.1)
    with pytest.raises(ValueError, match="alpha"):
        make_policy("flowcon", alpha=-1.0)
    with pytest.raises(ValueError, match="thresholds"):
        make_policy("tiresias", thresholds=[100.0, 10.0])
    with pytest.raises(ValueError, match="solver"):
        make_policy("flowplan", solver="magic")
    with pytest.raises(ValueError, match="objective: unknown objective profile 'fastest'"):
        make_policy("flowplan", objective="fastest")
    with pytest.raises(ValueError, match="objective"):
        make_policy("oracle", objective="deadlines")
    assert set(POLICIES) == {
        *("flowplan", "oracle", "oracle-speed", "oracle-epochs"),
        *("docker", "kubernetes", "fifo", "flowcon", "specon", "optimus", "tiresias"),
    }
    assert PLAIN == sorted(set(POLICIES) - {"oracle", "oracle-speed", "oracle-epochs"})
    assert all(POLICIES[n]().name == n for n in POLICIES)


# -- behaviour ------------------------------------------------------------------------------------


def _curve_history(
    model: str, bsz: int, first: int, last: int, seconds_per_epoch: float, end: float = NOW
) -> list[dict[str, Any]]:
    """Measured validation accuracy of epochs ``first..last``, the last reported at ``end``."""
    c = real_curve(model, bsz)
    return [{"time": end - (last - e) * seconds_per_epoch, "epoch": e, "metric": float(c[e - 1])} for e in range(first, last + 1)]


def _job(jid: str, status: str = "running", node: str | None = "n0", cpu: int = 1000, **kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"id": jid, "status": status, "min_cpu_millis": 500, "max_cpu_millis": 8000}
    if status == "running":
        d.update(node=node, allocation={"cpu_millis": cpu, "gpus": kw.pop("gpus", 0)})
    d.update(kw)
    return d


def _snap(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]], **settings: Any) -> Snapshot:
    return Snapshot.model_validate({"time": NOW, "nodes": nodes, "jobs": jobs, "settings": settings or {}})


def _by_job(p: Plan) -> dict[str, Any]:
    return {a.job: a for a in p.assignments}


def test_docker_splits_cpu_equally_and_starts_everyone() -> None:
    snap = _snap(
        [{"name": "n0", "cpu_millis": 8000}],
        [_job("a", cpu=1000), _job("b", cpu=6000), _job("c", status="pending", node=None)],
    )
    a = _by_job(make_policy("docker")(snap))
    assert [a[j].cpu_millis for j in "abc"] == [2666, 2666, 2666]
    assert a["c"].action == "start" and a["a"].action == "resize"
    assert "equal CPU share among 3 containers" in a["a"].explanation


def test_kubernetes_binds_to_the_emptier_node_with_static_requests() -> None:
    snap = _snap(
        [{"name": "busy", "cpu_millis": 8000, "memory_mib": 8192}, {"name": "idle", "cpu_millis": 8000, "memory_mib": 8192}],
        [
            _job("old", node="busy", cpu=4000, memory_mib=2048),
            _job("new", status="pending", node=None, max_cpu_millis=2000, memory_mib=2048),
        ],
    )
    a = _by_job(make_policy("kubernetes")(snap))
    assert (a["new"].node, a["new"].cpu_millis) == ("idle", 2000)
    assert a["old"].action == "keep" and a["old"].cpu_millis == 4000


def test_fifo_head_of_line_blocks_a_job_that_would_fit() -> None:
    snap = _snap(
        [{"name": "n0", "cpu_millis": 8000}],
        [
            _job("runs", cpu=6000),
            _job("head", status="pending", node=None, max_cpu_millis=4000, submitted=NOW - 20),
            _job("small", status="pending", node=None, max_cpu_millis=1000, submitted=NOW - 10),
        ],
    )
    a = _by_job(make_policy("fifo")(snap))
    assert a["head"].action == "wait" and a["small"].action == "wait"
    assert "behind head" in a["small"].explanation
    # Without the head, the small job starts at once with its request.
    b = _by_job(
        make_policy("fifo")(
            _snap(
                snap.model_dump()["nodes"],
                [_job("runs", cpu=6000), _job("small", status="pending", node=None, max_cpu_millis=1000)],
            )
        )
    )
    assert (b["small"].action, b["small"].cpu_millis) == ("start", 1000)


def test_flowcon_gives_more_cpu_to_the_faster_growing_job() -> None:
    # Measured cifar10 (batch 128) accuracy: epochs 1-4 climb fast, epochs 92-98 are flat.
    snap = _snap(
        [{"name": "n0", "cpu_millis": 8000}],
        [
            _job("early", cpu=2000, history=_curve_history("cifar10", 128, 1, 4, 20.0)),
            _job("late", cpu=2000, history=_curve_history("cifar10", 128, 92, 98, 20.0)),
        ],
        interval_seconds=20.0,
    )
    policy = make_policy("flowcon")  # published alpha 0.05, progress per interval
    a = _by_job(policy(snap))
    assert a["early"].cpu_millis > a["late"].cpu_millis
    assert "growing" in a["early"].explanation and "watching" in a["late"].explanation
    assert a["early"].cpu_millis + a["late"].cpu_millis <= 8000


def _specon_snapshot(step: int) -> Snapshot:
    """``step`` intervals (10 s, one epoch each) into a run: the fast job on measured cifar10 epochs 1.., the
    slow one on epochs 80.. (flat)."""
    end = NOW + 10.0 * step
    return _snap(
        [{"name": "crowded", "cpu_millis": 8000}, {"name": "empty", "cpu_millis": 8000}],
        [
            _job("fast", node="crowded", cpu=4000, history=_curve_history("cifar10", 128, 1, 3 + step, 10.0, end)),
            _job("slow", node="crowded", cpu=4000, history=_curve_history("cifar10", 128, 80, 86 + step, 10.0, end)),
        ],
        interval_seconds=10.0,
        migration_budget=1,
    ).model_copy(update={"time": end})


def test_specon_moves_a_slow_growing_job_to_an_empty_node_once() -> None:
    # The published alpha 0.1 (progress per interval) separates the measured early and late epochs.
    policy = make_policy("specon")
    first = _by_job(policy(_specon_snapshot(0)))
    assert first["slow"].node == "crowded" and "watching" in first["slow"].explanation  # below alpha once
    assert "growing" in first["fast"].explanation
    second = _by_job(policy(_specon_snapshot(1)))
    assert (second["slow"].action, second["slow"].node) == ("migrate", "empty")
    assert "slow-growing" in second["slow"].explanation
    # The fast job now has the crowded node's CPU to itself (pods share CPU by CFS).
    assert (second["fast"].node, second["fast"].cpu_millis) == ("crowded", 8000)
    moved = _snap(
        [{"name": "crowded", "cpu_millis": 8000}, {"name": "empty", "cpu_millis": 8000}],
        [
            _job("fast", node="crowded", cpu=8000, history=_curve_history("cifar10", 128, 1, 5, 10.0, NOW + 20)),
            _job("slow", node="empty", cpu=8000, history=_curve_history("cifar10", 128, 80, 88, 10.0, NOW + 20)),
        ],
        interval_seconds=10.0,
        migration_budget=1,
    )
    third = _by_job(policy(moved.model_copy(update={"time": NOW + 20})))
    assert third["slow"].node == "empty" and third["slow"].action != "migrate"  # never back and forth
    # Kubernetes default never migrates the same snapshot's slow job.
    assert _by_job(make_policy("kubernetes")(_specon_snapshot(1)))["slow"].action == "keep"


def test_optimus_gives_more_to_the_job_with_more_gain_per_unit() -> None:
    # Same model, same measured speed; one job has most of its epochs ahead, the other is nearly done.
    speed = [
        {"cpu_millis": 1000, "gpus": 0, "seconds_per_epoch": 30.0},
        {"cpu_millis": 2000, "gpus": 0, "seconds_per_epoch": 16.0},
    ]
    target = {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.93}, "max_epochs": 100}
    snap = _snap(
        [{"name": "n0", "cpu_millis": 8000}],
        [
            _job("ahead", history=_curve_history("cifar10", 128, 1, 10, 30.0), speed=speed, target=target),
            _job("nearly-done", history=_curve_history("cifar10", 128, 1, 97, 30.0), speed=speed, target=target),
        ],
    )
    p = make_policy("optimus")(snap)
    a = _by_job(p)
    assert a["ahead"].cpu_millis > a["nearly-done"].cpu_millis
    assert a["ahead"].predictions.epochs_to_finish > a["nearly-done"].predictions.epochs_to_finish
    assert a["ahead"].predictions.seconds_per_epoch is not None and "hyperbola" in a["ahead"].predictions.basis


def test_tiresias_preempts_a_long_running_job_for_a_new_one() -> None:
    nodes = [{"name": "g0", "cpu_millis": 8000, "gpus": 2}]
    long_hist = _curve_history("cifar10", 128, 1, 50, 1000.0)  # 50 epochs of 1000 s on 2 GPUs: ~28 GPU-h
    jobs = [
        _job("long", node="g0", cpu=4000, gpus=2, max_gpus=2, min_gpus=1, history=long_hist),
        _job("new", status="pending", node=None, max_cpu_millis=4000, max_gpus=2, min_gpus=1, submitted=NOW),
    ]
    a = _by_job(make_policy("tiresias")(_snap(nodes, jobs, migration_budget=1)))
    assert (a["long"].action, a["new"].action, a["new"].gpus) == ("pause", "start", 2)
    assert "preempted for new" in a["long"].explanation
    # No budget: nothing is preempted, the new job waits.
    b = _by_job(make_policy("tiresias")(_snap(nodes, jobs, migration_budget=0)))
    assert (b["long"].action, b["new"].action) == ("keep", "wait")


def test_flowplan_wrapper_returns_the_planners_plan_and_keeps_its_cache() -> None:
    snap = load_snapshot("examples/snapshots/specon-4nodes.json")
    policy = make_policy("flowplan", time_limit=0.5)
    p = policy(snap)
    assert p.solver.name == "cpsat" and policy.previous is not None and policy.previous.plan is p
    again = policy(snap)
    assert _strip(again) == _strip(p)
