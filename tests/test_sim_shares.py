"""The simulated cluster's CPU sharing (work-conserving weights and quotas), events, lost work, the
idle-capacity count and the oracle's ground truth.

Nothing is faked here: the ground truth is the measured data (the bundled copy of the AdaptDL
traces, checked against ``../shared/data`` in ``test_simulator.py``), the policies are the real ones
and every plan goes through the real checker. Where a test drives the cluster directly it sends the
same :class:`~adapters.base.Change` objects the control loop sends; the expected numbers are computed
by hand from the truth's seconds per epoch.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adapters.base import Change
from adapters.loop import ControlLoop, Tick
from adapters.sim.cluster import CANNOT_RUN_SECONDS, SimCluster, share_cpu
from adapters.sim.run import simulate
from adapters.sim.scenario import load_scenario, parse_scenario
from adapters.sim.truth import GroundTruth, TraceLibrary
from planner.outlook import JobTruth
from planner.plan import Plan
from planner.policies import make_policy
from planner.policies.common import Decision, build_plan
from planner.snapshot import Snapshot

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def library() -> TraceLibrary:
    return TraceLibrary.bundled()


class Fixed:
    """A policy that runs every job on the first node with ``cpu`` millicores, capped there (a quota)."""

    name = "fixed"

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu

    def __call__(self, snapshot: Snapshot) -> Plan:
        node = snapshot.nodes[0].name
        decisions = {
            j.id: Decision(node, self.cpu, 0, "fixed", cpu_limit_millis=self.cpu) for j in snapshot.jobs if j.status != "finished"
        }
        return build_plan(snapshot, self.name, decisions, started=time.perf_counter(), message="fixed")


def scenario(jobs: list[dict[str, Any]], *, cpu: int = 4000, **top: Any) -> dict[str, Any]:
    base = {"model": "yolov3", "batch_size": 64, "kind": "cpu", "epochs": 6, "arrival": 0, "restart_seconds": 0,
            "checkpoint_seconds": 0, "min_cpu_millis": 500, "max_cpu_millis": 4000}  # fmt: skip
    doc: dict[str, Any] = {"name": "t", "interval_seconds": 30, "noise": 0.0, "nodes": [{"name": "n", "cpu_millis": cpu}]}
    doc["jobs"] = [{**base, **j} for j in jobs]
    doc.update(top)
    return doc


def cluster_of(doc: dict[str, Any], library: TraceLibrary, seed: int = 0) -> SimCluster:
    sc = parse_scenario(doc)
    return SimCluster(sc, sc.draw(seed, library), library, seed)


def rate(library: TraceLibrary, cpu: float, model: str = "yolov3", batch: int = 64) -> float:
    return 1.0 / GroundTruth(library, model, batch, "cpu").epoch_seconds(cpu, 0)  # type: ignore[arg-type]


# -- the split ---------------------------------------------------------------------------------------


def test_share_cpu_is_weighted_max_min() -> None:
    """Pure arithmetic of the water-fill (nothing simulated)."""
    assert share_cpu(4000, [1000, 3000], [4000, 4000]) == pytest.approx([1000, 3000])
    assert share_cpu(4000, [1000, 1000], [1000, 4000]) == pytest.approx([1000, 3000])  # a cap's leftover flows
    assert share_cpu(8000, [1000, 1000], [2000, 3000]) == pytest.approx([2000, 3000])  # room left idle
    assert share_cpu(6000, [1000, 2000, 1000], [6000, 6000, 500]) == pytest.approx([1833.333, 3666.667, 500], rel=1e-4)


def test_two_jobs_with_weights_1_to_3_split_a_4_core_node_1_to_3(library: TraceLibrary) -> None:
    """Two yolov3 jobs (measured curve and speed) on 4 cores, guarantees 1 and 3 cores, no caps."""
    c = cluster_of(scenario([{"id": "a"}, {"id": "b"}]), library)
    assert all(o.ok for o in c.apply([Change("a", "start", "n", 1000, 0), Change("b", "start", "n", 3000, 0)]))
    assert (c.jobs["a"].effective, c.jobs["b"].effective) == pytest.approx((1000, 3000))
    c.sleep(30)
    assert c.jobs["a"].progress == pytest.approx(30 * rate(library, 1000))
    assert c.jobs["b"].progress == pytest.approx(30 * rate(library, 3000))
    assert c.used_cpu_seconds == pytest.approx(30 * 4.0)  # effective use, the whole node


def test_a_capped_jobs_leftover_goes_to_the_other(library: TraceLibrary) -> None:
    """Equal guarantees (2 cores each) on 4 cores; ``a`` is capped at 1 core (a quota), so ``b`` gets 3."""
    c = cluster_of(scenario([{"id": "a"}, {"id": "b"}]), library)
    c.apply([Change("a", "start", "n", 1000, 0, cpu_limit_millis=1000), Change("b", "start", "n", 1000, 0)])
    assert (c.jobs["a"].effective, c.jobs["b"].effective) == pytest.approx((1000, 3000))
    snap = c.observe()
    alloc = {j.id: j.allocation for j in snap.jobs}
    assert alloc["a"] is not None and (alloc["a"].cpu_millis, alloc["a"].cpu_limit_millis) == (1000, 1000)
    assert alloc["b"] is not None and (alloc["b"].cpu_millis, alloc["b"].cpu_limit_millis) == (1000, None)
    # The speed reported is the one at the CPU actually used.
    c.sleep(300)
    speeds = {(s.cpu_millis, s.gpus): s.seconds_per_epoch for s in c.observe().jobs[1].speed}
    assert speeds == {(3000, 0): pytest.approx(1 / rate(library, 3000), rel=1e-4)}


def test_a_blocked_jobs_share_goes_to_the_others(library: TraceLibrary) -> None:
    """``b`` starts with 10 s of start-up: for those 10 s ``a`` has the node (up to its max, 4 cores), then
    they split it equally."""
    c = cluster_of(scenario([{"id": "a"}, {"id": "b", "restart_seconds": 10}], replan_on_events=False), library)
    c.apply([Change("a", "start", "n", 2000, 0), Change("b", "start", "n", 2000, 0)])
    assert c.jobs["a"].effective == pytest.approx(4000) and c.jobs["b"].effective == 0
    c.sleep(30)
    assert c.jobs["a"].progress == pytest.approx(10 * rate(library, 4000) + 20 * rate(library, 2000))
    assert c.jobs["b"].progress == pytest.approx(20 * rate(library, 2000))
    assert c.used_cpu_seconds == pytest.approx(10 * 4.0 + 20 * 4.0)


def test_with_startup_cpu_a_starting_job_takes_one_core_from_the_others(library: TraceLibrary) -> None:
    """The scenario's ``startup_cpu``: ``b``'s 10-s start-up runs on one core (at most), so ``a`` has
    the other three; then they split the node equally. ``b`` makes no progress while it starts, and
    the core it used counts as used."""
    doc = scenario([{"id": "a"}, {"id": "b", "restart_seconds": 10}], replan_on_events=False, startup_cpu=True)
    c = cluster_of(doc, library)
    c.apply([Change("a", "start", "n", 2000, 0), Change("b", "start", "n", 2000, 0)])
    assert (c.jobs["a"].effective, c.jobs["b"].effective) == pytest.approx((3000, 1000))
    c.sleep(30)
    assert c.jobs["a"].progress == pytest.approx(10 * rate(library, 3000) + 20 * rate(library, 2000))
    assert c.jobs["b"].progress == pytest.approx(20 * rate(library, 2000))
    assert c.used_cpu_seconds == pytest.approx(10 * 4.0 + 20 * 4.0)
    # A start-up below one core gets its guarantee's share of a busy node: weights 1:3 on 2 cores.
    doc = scenario([{"id": "a"}, {"id": "b", "restart_seconds": 10}], cpu=2000, replan_on_events=False, startup_cpu=True)
    c = cluster_of(doc, library)
    c.apply([Change("a", "start", "n", 1500, 0), Change("b", "start", "n", 500, 0)])
    assert (c.jobs["a"].effective, c.jobs["b"].effective) == pytest.approx((1500, 500))


@pytest.mark.parametrize("wake", [False, True])
def test_when_one_job_finishes_the_other_gets_the_node_at_once(library: TraceLibrary, wake: bool) -> None:
    """cifar10 (1 epoch, ends after one epoch at 2 cores) and yolov3 share 4 cores equally; from the
    cifar10 finish on, yolov3 trains at 4 cores. With ``replan_on_events`` the sleep ends at the finish."""
    doc = scenario([{"id": "short", "model": "cifar10", "batch_size": 512, "epochs": 1}, {"id": "long"}], replan_on_events=wake)
    c = cluster_of(doc, library)
    c.apply([Change("short", "start", "n", 2000, 0), Change("long", "start", "n", 2000, 0)])
    t_f = 1 / rate(library, 2000, "cifar10", 512)  # ~20 s
    assert 0 < t_f < 60
    c.sleep(60)
    short = c.jobs["short"]
    assert short.status == "finished" and short.finish == pytest.approx(t_f)
    if wake:
        assert c.t == pytest.approx(t_f)
        assert c.jobs["long"].progress == pytest.approx(t_f * rate(library, 2000))
        c.sleep(60 - c.t)
    assert c.t == pytest.approx(60)
    assert c.jobs["long"].progress == pytest.approx(t_f * rate(library, 2000) + (60 - t_f) * rate(library, 4000))


def test_gpu_jobs_use_exactly_their_guarantee(library: TraceLibrary) -> None:
    """A GPU job's truth does not depend on CPU: it uses its guarantee, the rest stays for CPU jobs."""
    doc = scenario([{"id": "g", "kind": "gpu", "model": "cifar10", "batch_size": 512, "min_cpu_millis": 1000,
                     "max_cpu_millis": 4000}, {"id": "c", "max_cpu_millis": 8000}], cpu=8000)  # fmt: skip
    doc["nodes"][0]["gpus"] = 1
    c = cluster_of(doc, library)
    c.apply([Change("g", "start", "n", 1000, 1), Change("c", "start", "n", 1000, 0)])
    assert (c.jobs["g"].effective, c.jobs["c"].effective) == pytest.approx((1000, 7000))


def test_a_change_of_the_cap_alone_is_live_for_any_job(library: TraceLibrary) -> None:
    """``docker update --cpus`` needs no restart, even for a job that cannot resize live."""
    c = cluster_of(scenario([{"id": "a", "resizable": False}]), library)
    c.apply([Change("a", "start", "n", 1000, 0)])
    (bad,) = c.apply([Change("a", "resize", "n", 2000, 0, from_node="n")])
    assert not bad.ok
    (ok,) = c.apply([Change("a", "resize", "n", 1000, 0, from_node="n", cpu_limit_millis=1500)])
    assert ok.ok and c.jobs["a"].effective == pytest.approx(1500) and c.jobs["a"].restarts == 0


# -- lost work, restarts -----------------------------------------------------------------------------


def test_periodic_checkpoints_count_training_seconds_across_rate_changes(library: TraceLibrary) -> None:
    """yolov3 (an epoch takes 4-11 minutes) checkpoints every 100 s of training: 70 s at 1 core, then
    50 s at 4 cores; the last checkpoint is at 100 training seconds (70 s at 1 core + 30 s at 4), so a
    pause loses the last 20 s at 4 cores."""
    c = cluster_of(scenario([{"id": "a"}], checkpoint_every_seconds=100), library)
    c.apply([Change("a", "start", "n", 1000, 0, cpu_limit_millis=1000)])
    c.sleep(70)
    c.apply([Change("a", "resize", "n", 4000, 0, from_node="n")])
    c.sleep(50)
    r1, r4 = rate(library, 1000), rate(library, 4000)
    j = c.jobs["a"]
    assert j.progress == pytest.approx(70 * r1 + 50 * r4) and j.progress < 1
    c.apply([Change("a", "pause", None, 0, 0, from_node="n")])
    assert j.progress == pytest.approx(70 * r1 + 30 * r4)
    assert j.lost_epochs == pytest.approx(20 * r4)
    assert j.restarts == 1
    assert c.observe().jobs[0].checkpoint_every_seconds == 100


def test_restarts_are_counted_per_job(library: TraceLibrary) -> None:
    """Migrations, pauses and a restart in place (a mover that found no room) each count once."""
    doc = scenario([{"id": "a", "min_cpu_millis": 4000}, {"id": "b", "min_cpu_millis": 4000}])
    doc["nodes"] = [{"name": "n", "cpu_millis": 4000}, {"name": "m", "cpu_millis": 4000}]
    c = cluster_of(doc, library)
    c.apply([Change("a", "start", "n", 4000, 0), Change("b", "start", "m", 4000, 0)])
    c.sleep(30)
    (o,) = c.apply([Change("a", "migrate", "m", 4000, 0, from_node="n")])  # no room: restarts in place
    assert not o.ok and c.jobs["a"].node == "n" and c.jobs["a"].in_place == 1
    c.apply([Change("b", "pause", None, 0, 0, from_node="m")])
    c.apply([Change("a", "migrate", "m", 4000, 0, from_node="n")])
    assert (c.jobs["a"].restarts, c.jobs["b"].restarts) == (2, 1)


def test_a_running_job_shows_when_its_current_run_started(library: TraceLibrary) -> None:
    """``Job.started``: the start; after a migration, the restart once checkpointed (10 s later); a
    live resize keeps it; a pending job has none."""
    doc = scenario([{"id": "a", "checkpoint_seconds": 10}, {"id": "b"}])
    doc["nodes"] = [{"name": "n", "cpu_millis": 4000}, {"name": "m", "cpu_millis": 4000}]
    c = cluster_of(doc, library)
    c.apply([Change("a", "start", "n", 2000, 0)])
    jobs = {j.id: j for j in c.observe().jobs}
    assert (jobs["a"].started, jobs["b"].started) == (0.0, None)
    c.sleep(30)
    c.apply([Change("a", "resize", "n", 3000, 0)])
    assert {j.id: j for j in c.observe().jobs}["a"].started == 0.0
    c.apply([Change("a", "migrate", "m", 3000, 0, from_node="n")])
    assert {j.id: j for j in c.observe().jobs}["a"].started == pytest.approx(40.0)


# -- wake-up at events -----------------------------------------------------------------------------


def test_sleep_ends_at_the_next_arrival_unless_disabled(library: TraceLibrary) -> None:
    jobs = [{"id": "a"}, {"id": "b", "arrival": 7}]
    c = cluster_of(scenario(jobs), library)
    c.sleep(30)
    assert c.t == pytest.approx(7) and c.jobs["b"].status == "pending"
    c = cluster_of(scenario(jobs, replan_on_events=False), library)
    c.sleep(30)
    assert c.t == pytest.approx(30) and c.jobs["b"].status == "pending"


def test_docker_starts_every_job_at_its_arrival(library: TraceLibrary) -> None:
    """The loop wakes at each arrival, so Docker's default starts each container when it arrives (the
    flowcon-1node scenario: 10 measured jobs arriving within 100 s)."""
    sc = load_scenario(REPO / "examples" / "scenarios" / "flowcon-1node.toml")
    r = simulate(sc, make_policy("docker"), "docker", 0, library, record_timeline=False)
    assert r.finished and r.checker_failures == 0
    assert all(j.start == pytest.approx(j.arrival, abs=1e-3) for j in r.jobs)


# -- determinism, idle waits -----------------------------------------------------------------------


def test_same_seed_same_result_with_events_and_noise(library: TraceLibrary) -> None:
    sc = load_scenario(REPO / "examples" / "scenarios" / "flowcon-1node.toml")

    def run(seed: int, policy: str) -> dict:
        d = simulate(sc, make_policy(policy), policy, seed, library).to_dict()
        for k in ("plan_seconds_mean", "plan_seconds_median", "plan_seconds_p95", "plan_seconds_p99", "plan_seconds_max"):
            d.pop(k)
        return d

    assert run(1, "flowcon") == run(1, "flowcon")
    assert run(1, "docker")["jobs"] != run(2, "docker")["jobs"]


def test_idle_waits_zero_for_docker_positive_for_fifo(library: TraceLibrary) -> None:
    """8 cores; ``big`` asks for 6 and arrives first, ``small`` asks for 4 (minimum 1). FIFO gives ``big``
    its 6 and makes ``small`` wait although 2 cores idle; Docker starts both at once."""
    doc = scenario(
        [{"id": "big", "min_cpu_millis": 1000, "max_cpu_millis": 6000},
         {"id": "small", "arrival": 1, "min_cpu_millis": 1000, "max_cpu_millis": 4000}],
        cpu=8000,
    )  # fmt: skip
    sc = parse_scenario(doc)
    fifo = simulate(sc, make_policy("fifo"), "fifo", 0, library)
    docker = simulate(sc, make_policy("docker"), "docker", 0, library)
    assert fifo.finished and docker.finished
    assert docker.idle_waits == 0
    assert fifo.idle_waits > 0
    # Every interval ``small`` waited counts once: until ``big`` finishes.
    big = next(j for j in fifo.jobs if j.id == "big")
    small = next(j for j in fifo.jobs if j.id == "small")
    assert small.start == pytest.approx(big.finish)
    assert fifo.idle_waits <= math.ceil((small.start - small.arrival) / sc.interval_seconds) + 1


def test_idle_waits_on_the_flowcon_scenario(library: TraceLibrary) -> None:
    sc = load_scenario(REPO / "examples" / "scenarios" / "flowcon-1node.toml")
    assert simulate(sc, make_policy("docker"), "docker", 0, library, record_timeline=False).idle_waits == 0
    assert simulate(sc, make_policy("fifo"), "fifo", 0, library, record_timeline=False).idle_waits > 0


# -- FlowCon's caps --------------------------------------------------------------------------------


def _run_counting_decisions(name: str, library: TraceLibrary) -> tuple[list[Tick], list[float], float]:
    """Run ``name`` on flowcon-1node; the ticks, and the times its growth test ran (``decided`` moved)."""
    sc = load_scenario(REPO / "examples" / "scenarios" / "flowcon-1node.toml")
    policy = make_policy(name)
    ticks: list[Tick] = []
    tests: list[float] = []
    c = SimCluster(sc, sc.draw(0, library), library, 0)

    def call(snap: Snapshot) -> Plan:
        before = getattr(policy, "decided", None)
        plan = policy(snap)
        if getattr(policy, "decided", None) != before:
            tests.append(snap.time)
        return plan

    loop = ControlLoop(c, call, c, interval=sc.interval_seconds, on_tick=ticks.append)
    loop.run(until=lambda _: c.done())
    return ticks, tests, sc.interval_seconds


def test_flowcon_sets_caps_and_docker_none(library: TraceLibrary) -> None:
    """FlowCon's mechanism is a quota (``docker update --cpus``); Docker's default sets none. FlowCon's
    growth test runs at most once per interval although the loop wakes at every arrival and finish."""
    ticks, tests, interval = _run_counting_decisions("flowcon", library)
    placed = [a for t in ticks for a in t.plan.assignments if a.node is not None]
    assert placed and all(a.cpu_limit_millis is not None and a.cpu_limit_millis >= a.cpu_millis for a in placed)
    assert len(tests) > 3 and np.diff(tests).min() >= interval - 1e-6
    assert len(ticks) > len(tests)  # woken between heartbeats too
    ticks, _, _ = _run_counting_decisions("docker", library)
    placed = [a for t in ticks for a in t.plan.assignments if a.node is not None]
    assert placed and all(a.cpu_limit_millis is None for a in placed)


# -- ground truth for the oracle -------------------------------------------------------------------


def test_truth_remaining_epochs_match_the_run(library: TraceLibrary) -> None:
    """A job's ``remaining_finish`` at its start is the epochs it then trains; tier 1 and the final
    tier (shown as tier 2) are reached where the truth said (noisy reports, drawn at creation)."""
    doc = scenario([{"id": "a", "model": "cifar10", "batch_size": 512, "epochs": 30, "tier1": 0.9, "tier2": 0.97}],
                   noise=0.01)  # fmt: skip
    sc = parse_scenario(doc)
    c = SimCluster(sc, sc.draw(4, library), library, 4)
    first = c.truth()["a"]
    assert isinstance(first, JobTruth)
    assert first.remaining_tier1 is not None and first.remaining_tier2 is not None
    loop = ControlLoop(c, Fixed(2000), c, interval=30)
    loop.run(until=lambda _: c.done())
    j = c.jobs["a"]
    assert j.progress == pytest.approx(first.remaining_finish)
    hist = {p.epoch: p.time for p in j.history}
    assert j.tier1_time == pytest.approx(hist[first.remaining_tier1], abs=1e-3)  # reports round to ms
    assert j.finish == pytest.approx(hist[first.remaining_tier2], abs=1e-3)  # it stops at its final tier
    assert c.truth() == {}  # nothing active any more


def test_truth_mid_run_and_its_speed(library: TraceLibrary) -> None:
    c = cluster_of(scenario([{"id": "a", "epochs": 10, "tier1": 0.95}]), library)
    c.apply([Change("a", "start", "n", 2000, 0)])
    c.sleep(500)
    t = c.truth()["a"]
    j = c.jobs["a"]
    assert t.remaining_finish == pytest.approx(j.stop_epoch - j.progress)
    truth = GroundTruth(library, "yolov3", 64, "cpu")
    assert t.speed.source == "truth" and t.speed.n_observations == 0
    assert t.speed.seconds_per_epoch(3000, 0) == pytest.approx(truth.epoch_seconds(3000, 0))
    cpu = np.array([500.0, 1000, 2500, 4000, 0])
    many = t.speed.seconds_per_epoch_many(cpu, np.zeros(5))
    assert many[:4] == pytest.approx([truth.epoch_seconds(int(x), 0) for x in cpu[:4]])
    assert many[4] == CANNOT_RUN_SECONDS and math.isfinite(many[4])


class TruthReader:
    """Docker's default that records the truth it is given (the oracle's interface)."""

    reads_ground_truth = True
    name = "truth-reader"

    def __init__(self) -> None:
        self.inner = make_policy("docker")
        self.seen: list[dict[str, JobTruth]] = []
        self.calls: list[Snapshot] = []

    def observe_truth(self, truth: dict[str, JobTruth]) -> None:
        self.seen.append(truth)

    def __call__(self, snapshot: Snapshot) -> Plan:
        self.calls.append(snapshot)
        return self.inner(snapshot)


class NoTruth(TruthReader):
    reads_ground_truth = False


def test_only_a_policy_that_reads_ground_truth_gets_it(library: TraceLibrary) -> None:
    sc = load_scenario(REPO / "adapters" / "sim" / "data" / "demo.toml")
    oracle, other = TruthReader(), NoTruth()
    simulate(sc, oracle, "oracle", 0, library)
    simulate(sc, other, "other", 0, library)
    assert other.seen == []
    assert len(oracle.seen) == len(oracle.calls) > 0
    for truth, snap in zip(oracle.seen, oracle.calls, strict=True):
        assert set(truth) == {j.id for j in snap.jobs if j.status != "finished"}


def test_policies_still_finish_every_scenario_shape(library: TraceLibrary) -> None:
    """Every baseline on the TRADL-shaped scenario (one host, two-tier targets), plans checked."""
    sc = load_scenario(REPO / "examples" / "scenarios" / "tradl-tiers.toml")
    for name in ("flowcon", "specon", "optimus", "tiresias", "kubernetes"):
        t = time.perf_counter()
        r = simulate(sc, make_policy(name), name, 0, library, record_timeline=False)
        assert r.finished and r.checker_failures == 0, name
        assert time.perf_counter() - t < 60
