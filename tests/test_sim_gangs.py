"""Gangs that span nodes in the simulator (issue 17): the ground truth at a placement, the cluster's
per-node accounting and restart charges, the scenario fields, the baselines placing gangs over
nodes, and a short end-to-end run of ``pollux-span``.

Nothing is faked: the ground truth is the measured AdaptDL data (the expected step times are read
here from the CSVs of ``../shared/data`` with the ``csv`` module, independently of the truth's
reader), the policies are the real ones, and every plan goes through the real checker. Where a test
drives the cluster directly it sends the :class:`~adapters.base.Change` objects the control loop sends.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adapters.base import Change
from adapters.loop import Tick
from adapters.sim.cluster import SimCluster
from adapters.sim.run import simulate
from adapters.sim.scenario import ScenarioError, load_scenario, parse_scenario
from adapters.sim.truth import GroundTruth, TraceLibrary
from planner import check_plan
from planner.policies import make_policy
from planner.snapshot import Snapshot

REPO = Path(__file__).resolve().parent.parent
SPAN = REPO / "examples" / "scenarios" / "pollux-span.toml"
BASELINES = ("docker", "fifo", "flowcon", "kubernetes", "optimus", "specon", "tiresias")


@pytest.fixture(scope="module")
def library() -> TraceLibrary:
    return TraceLibrary.bundled()


def measured(
    data: Path, model: str, local_batch: int, *, placement: str | None = None, also: str = "", nk: tuple[int, int] | None = None
) -> float:
    """Geometric mean of the measured step times of a placement string (and ``also``), or of a
    scalability (num_nodes, num_replicas), at one local batch, read straight from the CSV."""
    folder = data / "adaptdl-osdi21" / "traces" / model
    times: list[float] = []
    if placement is not None:
        with (folder / "placements.csv").open(newline="") as f:
            times = [
                float(r["step_time"])
                for r in csv.DictReader(f)
                if r["placement"] in (placement, also) and int(r["local_bsz"]) == local_batch
            ]
    else:
        assert nk is not None
        with (folder / "scalability.csv").open(newline="") as f:
            times = [
                float(r["step_time"])
                for r in csv.DictReader(f)
                if (int(r["num_nodes"]), int(r["num_replicas"])) == nk and int(r["local_bsz"]) == local_batch
            ]
    assert times, f"no measured row for {model} {placement or nk} at {local_batch}"
    return statistics.geometric_mean(times)


# -- ground truth -----------------------------------------------------------------------------------


def test_truth_at_a_placement_is_the_measured_rows(library: TraceLibrary, data_dir: Path) -> None:
    """A measured spread: steps per epoch x the measured step time (4 significant digits kept)."""
    g = GroundTruth(library, "cifar10", 256, "gpu")
    # (4, 4): placement "44", 8 workers at local batch 32.
    want = g.curve.steps_per_epoch * measured(data_dir, "cifar10", 32, placement="44")
    assert g.epoch_seconds(1000, 1, (4, 4)) == pytest.approx(want, rel=1e-3)
    # 8 nodes x 2 = 16 workers at local batch 512 / 16 = 32: a scalability.csv row.
    g = GroundTruth(library, "cifar10", 512, "gpu")
    want = g.curve.steps_per_epoch * measured(data_dir, "cifar10", 32, nk=(8, 16))
    assert g.epoch_seconds(1000, 1, (2,) * 8) == pytest.approx(want, rel=1e-3)


@pytest.mark.parametrize(
    "model,batch", [("bert", 48), ("cifar10", 128), ("deepspeech2", 160), ("imagenet", 800), ("ncf", 256), ("yolov3", 64)]
)
def test_packed_or_spread_is_slower_as_the_table_says(library: TraceLibrary, data_dir: Path, model: str, batch: int) -> None:
    """4 workers packed on one node against 2 + 2 on two nodes (at a measured local batch): the truth
    is the measured rows (2 nodes x 4 workers: the placements ``13`` and ``22``), so it orders them as
    the table does; for bert, whose all-reduce is large, the spread is the slower by far."""
    g = GroundTruth(library, model, batch, "gpu")
    lb = batch // 4
    table_packed = measured(data_dir, model, lb, placement="4")
    table_spread = measured(data_dir, model, lb, placement="22", also="13")
    packed, spread = g.epoch_seconds(1000, 1, (4,)), g.epoch_seconds(1000, 1, (2, 2))
    assert packed == pytest.approx(g.curve.steps_per_epoch * table_packed, rel=1e-9)
    assert spread == pytest.approx(g.curve.steps_per_epoch * table_spread, rel=1e-3)
    assert (spread > packed) == (table_spread > table_packed)
    if model == "bert":
        assert spread > 1.5 * packed


def test_one_node_is_unchanged_and_unmeasured_spreads_are_finite(library: TraceLibrary, data_dir: Path) -> None:
    g = GroundTruth(library, "cifar10", 2048, "gpu")
    for gpus in (1, 2, 3, 4):
        assert g.epoch_seconds(1000, gpus) == g.epoch_seconds(1000, gpus, ()) == g.epoch_seconds(1000, gpus, (1,))
    assert g.epoch_seconds(1000, 1, (4,)) == g.epoch_seconds(1000, 4)  # 4 replicas of 1 GPU on one node
    assert g.epoch_seconds(1000, 2, (2, 1)) == g.epoch_seconds(1000, 1, (4, 2))  # workers per node
    fresh = TraceLibrary.from_dir(data_dir)
    for p in [(4, 4, 4, 4, 4), (3, 3, 3, 3, 3, 3, 3), (2, 1, 1, 1, 1, 1)]:  # 5 and 7 nodes, 6 x 7: not measured
        t = g.epoch_seconds(1000, 1, p)
        assert math.isfinite(t) and t > 0
        # bundle = data (to the ninth digit: the fits behind unmeasured spreads move with the BLAS)
        assert t == pytest.approx(GroundTruth(fresh, "cifar10", 2048, "gpu").epoch_seconds(1000, 1, p), rel=1e-7)


# -- the cluster ------------------------------------------------------------------------------------


def gang_doc(**job: Any) -> dict[str, Any]:
    base = {"id": "g", "model": "cifar10", "batch_size": 2048, "kind": "gpu", "epochs": 20, "arrival": 0,
            "min_cpu_millis": 4000, "min_gpus": 1, "replicas": 6, "min_replicas": 1, "max_nodes": 3,
            "checkpoint_seconds": 30, "restart_seconds": 60}  # fmt: skip
    return {
        "name": "t",
        "noise": 0.0,
        "interval_seconds": 60,
        "nodes": [{"name": "n", "count": 3, "cpu_millis": 32000, "gpus": 4, "memory_mib": 0}],
        "jobs": [{**base, **job}, {**base, "id": "one", "replicas": 1, "min_replicas": None, "max_nodes": 1}],
    }


def cluster(library: TraceLibrary, **job: Any) -> SimCluster:
    doc = gang_doc(**job)
    doc["jobs"] = [{k: v for k, v in j.items() if v is not None} for j in doc["jobs"]]
    sc = parse_scenario(doc)
    return SimCluster(sc, sc.draw(0, library), library, 0)


def test_the_cluster_places_a_gang_per_node_and_trains_it_at_its_placement(library: TraceLibrary) -> None:
    c = cluster(library)
    spread = (("n-0", 4), ("n-1", 2))
    (o,) = c.apply([Change("g", "start", "n-0", 4000, 1, replicas=6, placement=spread)])
    assert o.ok, o.message
    snap = c.observe()
    job = next(j for j in snap.jobs if j.id == "g")
    assert job.shares() == spread and job.max_nodes == 3 and job.min_replicas == 1
    # Per node: n-1 has 2 GPUs left, so 3 replicas of the other job do not fit there, 2 would.
    (o,) = c.apply([Change("one", "start", "n-1", 4000, 3)])
    assert not o.ok and o.error == "conflict" and "n-1" in o.message
    assert c._gpu_room("n-1", "")[0] == 2 and c._gpu_room("n-0", "")[0] == 0
    # It trains at the (4, 2) truth: after the restart, 60 s of training is 60 / T epochs.
    c.sleep(60)
    p0 = c.jobs["g"].progress
    c.sleep(60)
    t = GroundTruth(library, "cifar10", 2048, "gpu").epoch_seconds(4000, 1, (4, 2))
    assert c.jobs["g"].progress - p0 == pytest.approx(60 / t, rel=1e-9)
    c.sleep(600)
    speed = next(j for j in c.observe().jobs if j.id == "g").speed
    assert [(s.replicas, s.nodes) for s in speed] == [(None, 2)]  # all 6 replicas, over 2 nodes
    assert speed[0].seconds_per_epoch == pytest.approx(t, rel=1e-3)
    g = c.jobs["g"]
    assert g.status == "finished" and g.finish is not None  # its 20 epochs take about 155 s at (4, 2)
    assert c.used_gpu_seconds == pytest.approx(6 * g.finish, rel=1e-9)  # 6 GPUs held from its start (t = 0)


def test_a_count_change_restarts_a_job_that_is_not_elastic(library: TraceLibrary) -> None:
    c = cluster(library, model="imagenet", batch_size=800)  # epochs of about 20 minutes: still running
    c.apply([Change("g", "start", "n-0", 4000, 1, replicas=6, placement=(("n-0", 4), ("n-1", 2)))])
    c.sleep(600)
    (o,) = c.apply([Change("g", "resize", "n-0", 4000, 1, replicas=4, from_node="n-0")])
    assert not o.ok and o.error == "invalid" and "elastic" in o.message
    (o,) = c.apply([Change("g", "migrate", "n-0", 4000, 1, replicas=4, from_node="n-0")])
    j = c.jobs["g"]
    assert o.ok and j.migrations == 1 and j.restarts == 1 and j.shares == (("n-0", 4),)
    assert j.blocked_until == pytest.approx(c.t + 30 + 60)  # checkpoint + restart, no progress
    shrunk = next(x for x in c.observe().jobs if x.id == "g")
    assert [(s.node, s.replicas) for s in shrunk.placement or []] == [("n-0", 4)]  # shrunk: the placement is shown


def test_a_count_change_is_live_for_an_elastic_job(library: TraceLibrary) -> None:
    c = cluster(library, elastic=True, model="imagenet", batch_size=800, replicas=8)
    c.apply([Change("g", "start", "n-0", 4000, 1, replicas=6, placement=(("n-0", 4), ("n-1", 2)))])
    c.sleep(600)
    j = c.jobs["g"]
    before, blocked = j.progress, j.blocked_until
    (o,) = c.apply([Change("g", "resize", "n-0", 4000, 1, replicas=8, from_node="n-0", placement=(("n-0", 4), ("n-2", 4)))])
    assert o.ok, o.message
    assert (j.resizes, j.restarts, j.lost_epochs) == (1, 0, 0.0) and j.blocked_until == blocked and j.progress == before
    assert c._gpu_room("n-1", "")[0] == 4 and c._gpu_room("n-2", "")[0] == 0
    # Out of bounds is refused whole, naming the value.
    (o,) = c.apply(
        [Change("g", "resize", "n-0", 4000, 1, replicas=9, from_node="n-0", placement=(("n-0", 4), ("n-1", 4), ("n-2", 1)))]
    )
    assert not o.ok and o.error == "invalid" and "9 replicas" in o.message


# -- scenarios --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("min_replicas", 7, "jobs[0].min_replicas: 7 exceeds replicas 6"),
        ("max_nodes", 7, "jobs[0].max_nodes: 7 exceeds replicas 6 (a node holds at least one replica)"),
        ("max_nodes", 0, "jobs[0].max_nodes: 0 is below the minimum 1"),
        ("elastic", "yes", "jobs[0].elastic: expected true or false, got 'yes'"),
        ("replicas", 1.5, "jobs[0].replicas: expected a whole number, got 1.5"),
    ],
)
def test_scenario_gang_fields_fail_in_one_line_naming_the_field(
    library: TraceLibrary, field: str, value: Any, message: str
) -> None:
    doc = gang_doc(**{field: value})
    doc["jobs"] = [{k: v for k, v in j.items() if v is not None} for j in doc["jobs"]]
    with pytest.raises(ScenarioError) as e:
        parse_scenario(doc).draw(0, library)
    assert str(e.value) == message


def test_a_cpu_job_does_not_spread(library: TraceLibrary) -> None:
    doc = gang_doc()
    doc["jobs"] = [{"id": "c", "model": "yolov3", "batch_size": 64, "kind": "cpu", "replicas": 2, "max_nodes": 2}]
    with pytest.raises(ScenarioError, match=r"^jobs\[0\]\.replicas: 2 on up to 2 node\(s\), but a cpu job"):
        parse_scenario(doc).draw(0, library)


def test_the_span_option_gives_pollux_jobs_their_real_counts(library: TraceLibrary, data_dir: Path) -> None:
    with (data_dir / "adaptdl-osdi21" / "workloads" / "workload-1.csv").open(newline="") as f:
        asked = {r["name"]: int(r["num_replicas"]) for r in csv.DictReader(f)}
    span = load_scenario(SPAN)
    jobs = span.draw(0, library, data_dir)
    assert len(jobs) == len(asked) and len(span.nodes) == 16
    for j in jobs:
        assert (j.replicas, j.min_replicas, j.elastic, j.min_gpus, j.max_gpus) == (asked[j.id], 1, False, 1, 1)
        assert j.max_nodes == min(asked[j.id], 16)
    # Without the option nothing changes: one replica of up to 4 GPUs.
    plain = dataclasses.replace(span, trace={k: v for k, v in (span.trace or {}).items() if k != "span"})
    for j in plain.draw(0, library, data_dir):
        assert (j.replicas, j.min_replicas, j.max_nodes, j.max_gpus) == (1, None, 1, min(asked[j.id], 4))
    bad = dataclasses.replace(span, trace={**(span.trace or {}), "span": "on"})
    with pytest.raises(ScenarioError, match=r"^trace\.span: expected true or false, got 'on'$"):
        bad.draw(0, library, data_dir)


# -- baselines --------------------------------------------------------------------------------------


def gang_snapshot(replicas: int, min_replicas: int | None = None) -> Snapshot:
    """3 nodes of 4 GPUs; a pending gang that may spread over all three, and a one-node job behind it."""
    job = {"status": "pending", "min_cpu_millis": 1000, "max_cpu_millis": 1000, "min_gpus": 1, "max_gpus": 1,
           "submitted": 0.0}  # fmt: skip
    gang = {**job, "id": "gang", "replicas": replicas, "max_nodes": 3}
    if min_replicas is not None:
        gang["min_replicas"] = min_replicas
    return Snapshot.model_validate(
        {
            "time": 100.0,
            "nodes": [{"name": f"n{i}", "cpu_millis": 16000, "gpus": 4, "memory_mib": 65536} for i in range(3)],
            "jobs": [gang, {**job, "id": "small", "submitted": 1.0}],
        }
    )


@pytest.mark.parametrize("name", BASELINES)
def test_every_baseline_places_a_gang_that_no_node_holds(name: str) -> None:
    snap = gang_snapshot(6, min_replicas=1)
    plan = make_policy(name)(snap)
    assert check_plan(snap, plan) == []
    a = next(x for x in plan.assignments if x.job == "gang")
    shares = [(s.node, s.replicas) for s in a.placement] if a.placement else [(a.node, a.replicas)]
    assert a.node is not None and 1 <= a.replicas <= 6
    if name in ("fifo", "kubernetes", "specon", "tiresias"):
        assert a.replicas == 6 and len(shares) >= 2  # its request, over nodes
    if name == "tiresias":
        assert sorted(k for _, k in shares) == [2, 4]  # consolidated: the fewest nodes
    if name == "kubernetes":
        assert len(shares) == 3  # LeastAllocated spreads the pods
    if name in ("docker", "flowcon"):
        assert shares == [(a.node, 4)]  # one host, at the count that fits there
    if name == "optimus":
        assert a.replicas > 1  # more replicas for as long as they gain (ideal scaling before any speed is seen)


@pytest.mark.parametrize("name", BASELINES)
def test_a_gang_larger_than_the_cluster_never_blocks_the_others(name: str) -> None:
    snap = gang_snapshot(13)  # 13 GPUs on 12, all or nothing
    plan = make_policy(name)(snap)
    assert check_plan(snap, plan) == []
    placed = {a.job: a.node for a in plan.assignments}
    assert placed["gang"] is None and placed["small"] is not None


# -- end to end -------------------------------------------------------------------------------------


def test_pollux_span_end_to_end_with_a_baseline(library: TraceLibrary, data_dir: Path) -> None:
    """The first 12 jobs of the workload, 3 epochs each, on the 16-node cluster with Tiresias: it
    finishes, every plan passes the checker, and gangs do run over several nodes."""
    sc = load_scenario(SPAN)
    sc = dataclasses.replace(sc, trace={**(sc.trace or {}), "limit": 12, "max_epochs": 3})
    spread: set[str] = set()

    def seen(cluster: SimCluster, _: Tick) -> None:
        spread.update(j.spec.id for j in cluster.jobs.values() if len(j.shares) > 1)

    r = simulate(sc, make_policy("tiresias"), "tiresias", 0, library, data=data_dir, on_tick=seen, record_timeline=False)
    assert r.finished and r.checker_failures == 0 and r.failed_intervals == 0
    assert spread and r.makespan is not None and r.makespan >= r.makespan_lower_bound


def test_the_timeline_counts_every_replicas_gpus(library: TraceLibrary, data_dir: Path) -> None:
    """The allocation plot's timeline holds what a gang holds on all its nodes: each running job's
    GPUs are its replicas' (a gang of 8 one-GPU replicas holds 8, not 1), and the GPUs held at an
    interval never exceed the cluster's (found in session 22: the plot showed 1-5 of 64 GPUs held
    where utilisation was 44 %)."""
    sc = load_scenario(SPAN)
    sc = dataclasses.replace(sc, trace={**(sc.trace or {}), "limit": 12, "max_epochs": 3})
    held: list[tuple[float, float]] = []

    def seen(cluster: SimCluster, _: Tick) -> None:
        running = [j for j in cluster.jobs.values() if j.status == "running"]
        held.append((sum(j.gpus * j.replicas for j in running), sum(n.gpus for n in cluster.nodes.values())))

    r = simulate(sc, make_policy("tiresias"), "tiresias", 0, library, data=data_dir, on_tick=seen)
    assert len(r.timeline) == len(held) and any(g > 4 for g, _ in held)
    for t, (gpus, capacity) in zip(r.timeline, held, strict=True):
        assert sum(v[1] for v in t["alloc"].values()) == pytest.approx(gpus) and gpus <= capacity == t["capacity"][1]


def random_gangs(seed: int) -> dict[str, Any]:
    """A small random cluster of 4-GPU nodes with gangs of every kind: 1-10 replicas, some with a
    ``min_replicas``, spread allowed over enough nodes to hold them, some elastic."""
    rng = np.random.default_rng(seed)
    n_nodes = int(rng.integers(2, 5))
    jobs = []
    for i in range(int(rng.integers(5, 10))):
        r = int(rng.integers(1, min(10, 4 * n_nodes) + 1))
        model, batch = [("cifar10", 512), ("yolov3", 64), ("deepspeech2", 160), ("ncf", 1024)][int(rng.integers(0, 4))]
        job = {"id": f"j{i}", "model": model, "batch_size": batch, "kind": "gpu", "epochs": 2,
               "arrival": float(rng.uniform(0, 600)), "min_cpu_millis": 2000, "replicas": r,
               "max_nodes": int(rng.integers(math.ceil(r / 4), min(r, n_nodes) + 1)),
               "elastic": bool(rng.integers(0, 2)), "checkpoint_seconds": 10, "restart_seconds": 20}  # fmt: skip
        if r > 1 and rng.integers(0, 2):
            job["min_replicas"] = int(rng.integers(1, r + 1))
        jobs.append(job)
    return {
        "name": f"random-gangs-{seed}",
        "interval_seconds": 60,
        "max_hours": 24,
        "nodes": [{"name": "n", "count": n_nodes, "cpu_millis": 16000, "gpus": 4}],
        "jobs": jobs,
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", BASELINES)
def test_baselines_run_random_gangs_to_the_end(library: TraceLibrary, name: str, seed: int) -> None:
    """Every baseline runs random gang workloads with every plan checked and no failed interval, and
    finishes every job it can run: all of them (each can run at its full count on the cluster), but
    for Docker and FlowCon, which run a gang on one host, those whose fewest replicas no host holds:
    they wait, and never hold up the others."""
    sc = parse_scenario(random_gangs(seed))
    r = simulate(sc, make_policy(name), name, seed, library, record_timeline=False)
    assert r.checker_failures == 0 and r.failed_intervals == 0
    one_host = name in ("docker", "flowcon")
    fewest = {j["id"]: j.get("min_replicas", j["replicas"]) for j in random_gangs(seed)["jobs"]}
    for j in r.jobs:
        never = one_host and fewest[j.id] > 4
        assert (j.start is None and j.finish is None) if never else j.finish is not None, (j.id, fewest[j.id])
    assert r.finished == (not one_host or max(fewest.values()) <= 4)


def test_tiresias_preempts_lower_queues_for_a_gang_over_nodes() -> None:
    """Two long-running jobs fill both nodes; a new 6-replica gang (queue 0) pauses both, the lowest
    priority first, and spreads 4 + 2; with a budget of one it waits and pauses nothing."""
    old = {"status": "running", "min_cpu_millis": 1000, "max_cpu_millis": 1000, "min_gpus": 4, "max_gpus": 4,
           "submitted": 0.0, "history": [{"time": 1000.0, "epoch": 1, "loss": 1.0}]}  # fmt: skip
    doc = {
        "time": 200_000.0,
        "nodes": [{"name": f"n{i}", "cpu_millis": 16000, "gpus": 4, "memory_mib": 65536} for i in range(2)],
        "jobs": [{**old, "id": f"old{i}", "node": f"n{i}", "allocation": {"cpu_millis": 1000, "gpus": 4}} for i in range(2)]
        + [
            {
                "id": "gang",
                "status": "pending",
                "min_cpu_millis": 1000,
                "max_cpu_millis": 1000,
                "min_gpus": 1,
                "max_gpus": 1,
                "replicas": 6,
                "max_nodes": 2,
                "submitted": 199_000.0,
            }  # fmt: skip
        ],
        "settings": {"migration_budget": 2},
    }
    snap = Snapshot.model_validate(doc)
    plan = make_policy("tiresias")(snap)
    assert check_plan(snap, plan) == []
    by = {a.job: a for a in plan.assignments}
    assert by["old0"].action == by["old1"].action == "pause"
    gang = by["gang"]
    assert gang.action == "start" and sorted(s.replicas for s in gang.placement or []) == [2, 4]
    assert "preempted for gang" in by["old0"].explanation
    doc["settings"] = {"migration_budget": 1}
    snap = Snapshot.model_validate(doc)
    plan = make_policy("tiresias")(snap)
    by = {a.job: a for a in plan.assignments}
    assert by["gang"].node is None and by["old0"].action == by["old1"].action == "keep"
