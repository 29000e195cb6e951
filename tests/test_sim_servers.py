"""Parameter-server jobs in the simulator (issue 17): the scenario fields, the truth's (w, s) speed, the
cluster holding the servers' CPU on each node, and the baselines giving a job its fewest servers.

The truth of a parameter-server job is MODELLED (``../shared/data`` holds no parameter-server timing):
one worker's measured epoch time times the job's drawn Optimus-form model ``t(w, s) / t(1, 1)``; the
expected figures here are computed from the drawn parameters by hand. Nothing else is faked: the
cluster, the policies and the checker are the real ones, driven with the changes the loop sends.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from adapters.base import Change
from adapters.loop import Tick
from adapters.sim.cluster import SimCluster
from adapters.sim.run import simulate
from adapters.sim.scenario import ScenarioError, load_scenario, parse_scenario
from adapters.sim.truth import GroundTruth, TraceLibrary
from models import PSSpeedModel
from planner import check_plan
from planner.policies import make_policy
from planner.policies.common import fewest_servers
from planner.policies.optimus import ps_model
from planner.snapshot import SpeedPoint

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def library() -> TraceLibrary:
    return TraceLibrary.bundled()


def ps_doc(**job: Any) -> dict[str, Any]:
    base = {"id": "p", "model": "cifar10", "batch_size": 2048, "kind": "gpu", "epochs": 20, "arrival": 0,
            "min_cpu_millis": 4000, "min_gpus": 1, "replicas": 6, "min_replicas": 1, "max_nodes": 3,
            "checkpoint_seconds": 30, "restart_seconds": 60, "servers_max": 6, "server_cpu_millis": 8000}  # fmt: skip
    return {
        "name": "t",
        "noise": 0.0,
        "interval_seconds": 60,
        "nodes": [{"name": "n", "count": 3, "cpu_millis": 32000, "gpus": 4, "memory_mib": 0}],
        "jobs": [{k: v for k, v in {**base, **job}.items() if v is not None}],
    }


def cluster(library: TraceLibrary, **job: Any) -> SimCluster:
    sc = parse_scenario(ps_doc(**job))
    return SimCluster(sc, sc.draw(0, library), library, 0)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("servers_min", 7, "jobs[0].servers_min: 7 is above the maximum 6"),
        ("server_form", "bsp", "jobs[0].server_form: 'bsp' is not 'optimus' or 'coach'"),
        ("max_nodes", 3, None),
        ("servers_max", 2, "jobs[0].max_nodes: 3, but servers_max is 2 (each worker node holds a server)"),
    ],
)
def test_scenario_server_fields_fail_in_one_line(library: TraceLibrary, field: str, value: Any, message: str | None) -> None:
    doc = ps_doc(**{field: value})
    if message is None:
        assert parse_scenario(doc).draw(0, library)[0].servers == (1, 6, 8000, "optimus")
        return
    with pytest.raises(ScenarioError) as e:
        parse_scenario(doc).draw(0, library)
    assert str(e.value) == message


def test_servers_need_a_gpu_job_and_servers_max(library: TraceLibrary) -> None:
    doc = ps_doc(servers_max=None)
    with pytest.raises(ScenarioError, match=r"^jobs\[0\]\.server_cpu_millis: set, but servers_max is not"):
        parse_scenario(doc).draw(0, library)
    doc = ps_doc(kind="cpu", model="yolov3", batch_size=64, replicas=1, min_replicas=None, max_nodes=1, min_gpus=0)
    with pytest.raises(ScenarioError, match=r"^jobs\[0\]\.servers_max: parameter servers serve GPU workers"):
        parse_scenario(doc).draw(0, library)


def test_the_truth_is_one_workers_epoch_times_the_drawn_model(library: TraceLibrary) -> None:
    """``epoch_seconds`` at w workers and s servers is one measured worker's epoch times
    ``t(w, s) / t(1, 1)`` of the drawn Optimus form (written out here); without servers it is one per node."""
    spec = parse_scenario(ps_doc()).draw(0, library)[0]
    assert spec.ps_theta is not None
    t0, t1, t2, t3, t4 = spec.ps_theta

    def form(w: float, s: float) -> float:
        return t0 / w + t1 + t2 * w / s + t3 * w + t4 * s

    truth = spec.truth(library)
    one = GroundTruth(library, "cifar10", 2048, "gpu").epoch_seconds(4000, 1)
    for placement, servers in (((4, 2), 4), ((4, 2), 2), ((3,), 1), ((2, 2, 2), 6)):
        want = one * form(sum(placement), servers) / form(1, 1)
        assert truth.epoch_seconds(4000, 1, placement, servers) == pytest.approx(want, rel=1e-12)
    assert truth.epoch_seconds(4000, 1, (4, 2)) == pytest.approx(one * form(6, 2) / form(1, 1), rel=1e-12)
    # The draw moves every parameter, by seed: two seeds, two models.
    other = parse_scenario(ps_doc()).draw(1, library)[0]
    assert other.ps_theta != spec.ps_theta


def test_the_cluster_holds_the_servers_cpu_and_trains_at_their_count(library: TraceLibrary) -> None:
    c = cluster(library)
    spread = (("n-0", 4), ("n-1", 2))
    (o,) = c.apply([Change("p", "start", "n-0", 4000, 1, replicas=6, placement=spread, servers=2)])
    assert o.ok, o.message
    # n-1: 2 workers x 4 cores + 2 servers x 8 cores = 24 of 32 cores held.
    assert c._free("n-1", "")[0] == 32000 - 2 * 4000 - 2 * 8000
    job = next(j for j in c.observe().jobs if j.id == "p")
    assert job.servers is not None and (job.servers.min, job.servers.max, job.servers.cpu_millis) == (1, 6, 8000)
    assert job.allocation is not None and job.allocation.servers == 2
    c.sleep(60)  # the restart
    p0 = c.jobs["p"].progress
    c.sleep(30)
    t = c.jobs["p"].truth.epoch_seconds(4000, 1, (4, 2), 4)
    assert c.jobs["p"].progress - p0 == pytest.approx(30 / t, rel=1e-9)
    # New servers on the same nodes: a restart for a job that is not elastic; its speed points say how many.
    (o,) = c.apply([Change("p", "resize", "n-0", 4000, 1, replicas=6, from_node="n-0", placement=spread, servers=1)])
    assert not o.ok and o.error == "invalid"
    (o,) = c.apply([Change("p", "migrate", "n-0", 4000, 1, replicas=6, from_node="n-0", placement=spread, servers=1)])
    assert o.ok and c.jobs["p"].servers == 1 and c.jobs["p"].migrations == 1
    (o,) = c.apply([Change("p", "migrate", "n-0", 4000, 1, replicas=6, from_node="n-0", placement=spread, servers=4)])
    assert not o.ok and o.error == "invalid" and "outside its bounds" in o.message  # 8 in all, above 6
    c.sleep(3600)
    done = next(j for j in c.observe().jobs if j.id == "p")
    assert {(s.nodes, s.servers) for s in done.speed} <= {(2, 4), (2, 2)} and done.speed


def test_servers_crowd_out_what_does_not_fit_beside_them(library: TraceLibrary) -> None:
    """4 servers of 8 cores on n-0 leave no CPU for a worker there: the start is refused, naming the node."""
    c = cluster(library)
    (o,) = c.apply([Change("p", "start", "n-0", 4000, 1, replicas=1, servers=4)])
    assert not o.ok and o.error == "conflict" and "n-0" in o.message


@pytest.mark.parametrize("name", ["tiresias", "kubernetes", "fifo", "docker"])
def test_baselines_give_the_fewest_servers_and_pass_the_checker(library: TraceLibrary, name: str) -> None:
    """These baselines have no model of servers: a placed job gets its fewest (1 in all here, so 1 on
    each of its nodes), and the checker passes the plan."""
    snap = cluster(library).observe()
    plan = make_policy(name)(snap)
    assert check_plan(snap, plan) == []
    a = next(x for x in plan.assignments if x.job == "p")
    assert a.node is not None and a.servers == 1
    shares = [(s.node, s.replicas) for s in a.placement] if a.placement else [(a.node, a.replicas)]
    assert fewest_servers(snap.jobs[0], shares) == 1


@pytest.mark.parametrize("name", ["tiresias", "kubernetes", "optimus", "fifo", "docker", "flowcon", "specon"])
def test_baselines_leave_room_for_the_servers(library: TraceLibrary, name: str) -> None:
    """4 workers of 6 cores and 2 servers of 8 cores (40 cores) do not fit one 32-core node: a baseline
    that spreads places the job over nodes, each with its servers; one that keeps a gang on one
    host leaves it waiting, saying why. Either way the plan passes the checker (which counts the
    servers in every node's capacity: before the ledgers charged them, 5 of these 7 raised)."""
    snap = cluster(library, min_cpu_millis=6000, max_cpu_millis=6000, replicas=4, min_replicas=None, servers_min=2).observe()
    plan = make_policy(name)(snap)
    assert check_plan(snap, plan) == []
    (a,) = plan.assignments
    if a.node is None:
        assert name in ("docker", "flowcon") and "no host has room for its fewest 4 replica(s)" in a.explanation
        return
    assert a.placement is not None and len(a.placement) >= 2 and a.servers == 1


def ps_points(theta: tuple[float, float, float, float, float]) -> list[SpeedPoint]:
    """Epoch times of job ``p`` at four (workers, servers) shapes, from an Optimus-form model."""
    model = PSSpeedModel("optimus", theta, 0, "prior")
    shapes = [(1, 1, 1), (2, 1, 2), (4, 2, 2), (6, 3, 6)]  # workers, nodes, servers in all
    return [
        SpeedPoint(cpu_millis=4000, gpus=1, replicas=w, nodes=n, servers=s, seconds_per_epoch=model.seconds_per_epoch(w, s))
        for w, n, s in shapes
    ]


@pytest.mark.parametrize(("theta", "servers"), [((60.0, 2.0, 30.0, 0.0, 0.5), (2, 3)), ((60.0, 2.0, 0.0, 0.0, 3.0), (1, 1))])
def test_optimus_adds_servers_by_marginal_gain(library: TraceLibrary, theta: Any, servers: tuple[int, int]) -> None:
    """Optimus gives a parameter-server job more servers only where its fitted (w, s) function says they
    pay for their CPU: with a heavy ``w / s`` term (30 s per worker per server) it gives 2 or 3 on
    each node; where servers only cost (``θ2 = 0``) it keeps the fewest, 1 on each. Its prediction is
    that model's epoch time at the shape it chose."""
    snap = cluster(library).observe()
    job = snap.jobs[0].model_copy(update={"speed": ps_points(theta)})
    snap = snap.model_copy(update={"jobs": [job]})
    plan = make_policy("optimus")(snap)
    assert check_plan(snap, plan) == []
    (a,) = plan.assignments
    assert a.node is not None and a.servers is not None and servers[0] <= a.servers <= servers[1]
    nodes, count = (len(a.placement), sum(s.replicas for s in a.placement)) if a.placement else (1, a.replicas)
    assert f"{a.servers * nodes} parameter server(s), {a.servers} on each node" in a.explanation
    fitted = ps_model(job)
    assert fitted is not None and fitted.source == "fitted"
    assert a.predictions.seconds_per_epoch == pytest.approx(fitted.seconds_per_epoch(count, a.servers * nodes))


@pytest.mark.parametrize("name", ["flowplan", "tiresias"])
def test_pollux_ps_end_to_end(library: TraceLibrary, data_dir: Path, name: str) -> None:
    """The first 12 jobs of ``pollux-ps``, 3 epochs each: every job finishes, every plan passes the
    checker, no interval fails, and every running job has its servers on each of its nodes."""
    sc = load_scenario(REPO / "examples" / "scenarios" / "pollux-ps.toml")
    sc = dataclasses.replace(sc, trace={**(sc.trace or {}), "limit": 12, "max_epochs": 3})
    held: list[int] = []

    def seen(cluster: SimCluster, _: Tick) -> None:
        held.extend(j.servers for j in cluster.jobs.values() if j.status == "running")

    r = simulate(sc, make_policy(name), name, 0, library, data=data_dir, on_tick=seen, record_timeline=False)
    assert r.finished and r.checker_failures == 0 and r.failed_intervals == 0
    assert held and min(held) >= 1
