"""The adapter contract (adapters/base.py), written once and run against every backend.

The ``backend`` fixture is parametrised over the simulated cluster, three real Docker engines
(``docker_engines``) and a real kube-apiserver with kwok nodes (``k8s_sandbox``); each backend
overrides the few things that differ (how a job and a foreign workload are made, what identifies
a job's workload, what a fresh adapter is) and the tests are the same. Nothing is mocked: the
Docker and Kubernetes cases fail in CI without their engine or server, as the other tests do.

Every backend starts with two pending FlowPlan jobs, ``ca`` and ``cb``, two nodes, and a workload
that is not FlowPlan's (Docker: an unlabelled container; Kubernetes: a pod of the default
scheduler; the simulator has none, so there a name it does not run stands in). Case matrix:

- idempotent re-apply: a start, a resize, a migration and a pause, each applied twice (and the
  migration a third time before any observe) are ``ok`` every time, end in the same observed
  state, and the second leaves the job's workload alone (same container, same pod, no restart);
- observe after apply: after each kind of change the next observe shows what it asked
  (:func:`adapters.daemon.in_effect`, the daemon's own test after a restart);
- failure kinds: a change for an unknown job is ``not_found``, for an unknown node ``invalid``, a
  start for a job running elsewhere and a migration or resize of a pending job ``conflict``
  (planner/transitions.py); each an outcome in order, never an exception, the valid change among
  them still applied;
- restart safety: a fresh adapter observes the same nodes, jobs and allocations, and re-applying
  the changes through it changes nothing;
- a job that ended since the observe (each backend ends it as its workload would): its resize, move
  and pause are ``ok``, change nothing, and the next observe says ``finished``;
- foreign workloads: never a job, a change naming one is ``not_found``, and after changes and a
  control-loop interval with the real planner it is exactly as it was;
- gangs (where a backend's users can declare one: Kubernetes, ``flowplan.io/gang``; Docker,
  ``flowplan.replicas``; the simulator's scenarios cannot): a gang of 3 is one job with 3 replicas; a
  start, a resize, a migration and a pause each change every replica, show in the next observe, and
  applied again are ``ok`` no-ops that leave every replica alone; a change naming another replica
  count is ``conflict``. A pending gang is its 3 pods on Kubernetes; on Docker it is its rank 0 (the
  template), and the adapter makes the other replicas when it starts or moves the gang;
- GPU fractions: Docker and Kubernetes refuse a change list that places one, whole and before
  applying anything (every outcome ``invalid``, one naming the job and its ``gpu_milli``); the
  simulator, which enforces fractions, applies the rest.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from adapters.base import Adapter, Change, Outcome
from adapters.daemon import in_effect
from planner.snapshot import Snapshot

JOBS = ("ca", "cb")
FOREIGN = "foreign"
MERGE = "application/merge-patch+json"


@dataclass
class Backend:
    """What a backend overrides: a fresh adapter on its cluster, its two node names, what
    identifies a job's workload (changes exactly when it is re-created or restarted), and the state
    of the foreign workload."""

    name: str
    nodes: tuple[str, str]
    fresh: Callable[[], Adapter]
    workload: Callable[[str], Any]
    foreign: Callable[[], Any]
    adapters: list[Adapter] = field(default_factory=list)
    #: Makes a pending gang of that many replicas (``None``: the backend has no gangs).
    gang: Callable[[str, int], None] | None = None
    #: A pending gang's workloads are all its replicas (Kubernetes' pods), not only its rank 0 (Docker's template).
    gang_waits_whole: bool = True
    #: Ends a running job as its own workload would (finished: its last epoch done), behind the adapter's back.
    end: Callable[[str], None] | None = None

    def adapter(self) -> Adapter:
        ad = self.fresh()
        self.adapters.append(ad)
        return ad


# -- the simulated cluster ---------------------------------------------------------------------


def sim_backend() -> Iterator[Backend]:
    from adapters.sim.cluster import SimCluster
    from adapters.sim.scenario import parse_scenario
    from adapters.sim.truth import TraceLibrary

    library = TraceLibrary.bundled()
    row = {"model": "cifar10", "batch_size": 512, "kind": "cpu", "epochs": 30, "arrival": 0,
           "min_cpu_millis": 250, "max_cpu_millis": 2000}  # fmt: skip
    doc = {
        "name": "contract",
        "interval_seconds": 30,
        "noise": 0.0,
        "nodes": [{"name": "n0", "cpu_millis": 4000}, {"name": "n1", "cpu_millis": 4000}],
        "jobs": [{"id": j, **row} for j in JOBS],
    }
    sc = parse_scenario(doc)
    cluster = SimCluster(sc, sc.draw(0, library), library, seed=0)
    first = [True]

    def fresh() -> Adapter:
        # The simulator is its cluster: a restarted adapter is the same state with nothing the
        # adapter remembered between calls (its per-job views).
        if first[0]:
            first[0] = False
            return cluster
        again = copy.deepcopy(cluster)
        for j in again.jobs.values():
            j.view, j.view_key = None, ()
        return again

    def workload(job: str) -> Any:
        j = cluster.jobs[job]
        return (j.node, j.migrations, j.pauses, j.in_place, j.resizes)

    def end(job: str) -> None:
        j = cluster.jobs[job]
        cluster._finish(j, cluster.t)  # its last epoch done now, as the cluster's own clock would end it

    yield Backend("sim", ("n0", "n1"), fresh, workload, lambda: None, end=end)


# -- Docker: three private engines --------------------------------------------------------------

LOOP = "trap 'exit 75' TERM; trap 'exit 0' USR2; while :; do sleep 0.2; done"  # checkpoints (exits 75) on SIGTERM; USR2 ends it


def docker_backend(engines: Any) -> Iterator[Backend]:
    from docker_env import IMAGE, api, create_job, python_mounts, remove_jobs

    from adapters.docker import DockerAdapter, HostSpec
    from adapters.docker.memory import MemoryStore

    names = ("main", "extra0")
    urls = {n: e.url for n, e in zip(names, engines.engines, strict=False)}
    for url in urls.values():
        remove_jobs(url)
    labels = {"flowplan.min_cpu_millis": "250", "flowplan.max_cpu_millis": "2000"}
    for job in JOBS:
        create_job(urls["main"], f"fp-{job}", job, engines.ckpt, labels=labels, command=["/bin/sh", "-c", LOOP], start=False)
    client = api(urls["main"])
    _, binds, _ = python_mounts()
    foreign = client.create_container(
        IMAGE,
        command=["/bin/sh", "-c", LOOP],
        name=FOREIGN,
        labels={"team": "someone-else"},
        host_config=client.create_host_config(binds=binds, network_mode="none", cpu_shares=512),
    )["Id"]
    client.start(foreign)

    def fresh() -> Adapter:
        specs = [HostSpec(n, urls[n], cpu_millis=2000) for n in names]
        return DockerAdapter(specs, store=MemoryStore(), checkpoint_timeout=20.0, read_stats=False)

    def workload(job: str) -> Any:
        live = []
        for n, url in urls.items():
            for c in api(url).containers(all=True, filters={"label": f"flowplan.job={job}"}):
                live.append((n, c["Id"], c["State"]))
        return sorted(live)

    def foreign_state() -> Any:
        raw = client.inspect_container(foreign)
        hc, st = raw["HostConfig"], raw["State"]
        return (raw["Id"], st["Status"], st["StartedAt"], raw["RestartCount"], hc["CpuShares"], hc["NanoCpus"], hc["CpuQuota"])

    def gang(job: str, n: int) -> None:
        gang_labels = {**labels, "flowplan.replicas": str(n)}
        create_job(urls["main"], f"fp-{job}", job, engines.ckpt, labels=gang_labels, command=["/bin/sh", "-c", LOOP], start=False)

    def end(job: str) -> None:
        import time

        for url in urls.values():
            for c in api(url).containers(filters={"label": f"flowplan.job={job}"}):
                api(url).kill(c["Id"], "SIGUSR2")
                api(url).wait(c["Id"], timeout=20)
        time.sleep(0.2)

    backend = Backend("docker", names, fresh, workload, foreign_state, gang=gang, gang_waits_whole=False, end=end)
    try:
        yield backend
    finally:
        for ad in backend.adapters:
            ad.close()
        for url in urls.values():
            remove_jobs(url)
        client.remove_container(foreign, force=True)


# -- Kubernetes: a real API server, kwok nodes -----------------------------------------------------


def k8s_backend(info: Any) -> Iterator[Backend]:
    from k8s_env import NAMESPACE, core, create_pod, delete_all_pods, get_pod, pod_body, pods

    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.sandbox import api_client

    api = core(info)
    delete_all_pods(api)
    n0, n1 = info.nodes[0], info.nodes[1]
    for job in JOBS:
        create_pod(api, pod_body(job, cpu="500m", limit="2"))
    create_pod(api, pod_body(FOREIGN, cpu="250m", limit="1", node=n0, scheduler="default-scheduler"))

    def fresh() -> Adapter:
        return KubernetesAdapter(api_client(info), namespaces=[NAMESPACE])

    def workload(job: str) -> Any:
        mine = []
        for p in pods(api):
            meta = p["metadata"]
            labels = meta.get("labels") or {}
            mine_id = labels.get("flowplan.io/gang", labels.get("flowplan.io/job", meta["name"]))
            if mine_id == job and not meta.get("deletionTimestamp"):
                mine.append((meta["name"], meta["uid"], p["spec"].get("nodeName")))
        return sorted(mine)

    def foreign_state() -> Any:
        p = get_pod(api, FOREIGN)
        assert p is not None, "the foreign pod is gone"
        return (
            p["metadata"]["uid"],
            p["spec"].get("nodeName"),
            p["spec"]["containers"][0]["resources"],
            p["metadata"].get("deletionTimestamp"),
        )

    def gang(job: str, size: int) -> None:
        for i in range(size):
            body = pod_body(f"{job}-{i}", cpu="500m", limit="2", labels={"flowplan.io/gang": job})
            body["metadata"]["annotations"]["flowplan.io/gang-size"] = str(size)
            create_pod(api, body)

    def end(job: str) -> None:
        from k8s_env import wait_for

        for name, _, _ in workload(job):  # as a kubelet writes it
            status = {"status": {"phase": "Succeeded"}}
            api.patch_namespaced_pod_status(name, NAMESPACE, status, _preload_content=False, _content_type=MERGE)
        wait_for(lambda: all((get_pod(api, n) or {})["status"]["phase"] == "Succeeded" for n, _, _ in workload(job)), 10, "ended")

    backend = Backend("kubernetes", (n0, n1), fresh, workload, foreign_state, gang=gang, end=end)
    try:
        yield backend
    finally:
        for ad in backend.adapters:
            ad.close()
        delete_all_pods(api)


@pytest.fixture(
    params=["sim", pytest.param("docker", marks=pytest.mark.slow), pytest.param("kubernetes", marks=pytest.mark.slow)]
)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "sim":
        yield from sim_backend()
    elif request.param == "docker":
        yield from docker_backend(request.getfixturevalue("docker_engines"))
    else:
        yield from k8s_backend(request.getfixturevalue("k8s_sandbox"))


# -- the contract ------------------------------------------------------------------------------------


def state(snapshot: Snapshot, job: str) -> tuple[Any, ...]:
    """What the contract promises about a job: status, node, allocation."""
    j = next((x for x in snapshot.jobs if x.id == job), None)
    assert j is not None, f"job {job} not observed"
    a = j.allocation
    return (j.status, j.node, None if a is None else (a.cpu_millis, a.gpus, a.cpu_limit_millis))


def ok(outcomes: list[Outcome]) -> list[Outcome]:
    assert all(o.ok for o in outcomes), [(o.change.key(), o.error, o.message) for o in outcomes]
    return outcomes


def test_reapplying_a_change_is_a_no_op(backend: Backend) -> None:
    n0, n1 = backend.nodes
    ad = backend.adapter()
    ad.observe()
    steps = [
        Change("ca", "start", n0, 500, 0),
        Change("ca", "resize", n0, 1000, 0, from_node=n0),
        Change("ca", "migrate", n1, 700, 0, from_node=n0),
        Change("ca", "pause", None, 0, 0, from_node=n1),
    ]
    for change in steps:
        ok(ad.apply([change]))
        if change.kind == "migrate":
            ok(ad.apply([change]))  # again before any observe: the adapter knows what it re-created
        after = state(ad.observe(), "ca")
        workload = backend.workload("ca")
        again = ok(ad.apply([change]))
        assert "already" in again[0].message, again
        assert state(ad.observe(), "ca") == after, change.kind
        assert backend.workload("ca") == workload, change.kind  # not restarted, not re-created
    assert state(ad.observe(), "ca")[0] == "pending"


def test_observe_after_apply_shows_each_change(backend: Backend) -> None:
    n0, n1 = backend.nodes
    ad = backend.adapter()
    ad.observe()
    rounds = [
        [Change("ca", "start", n0, 500, 0), Change("cb", "start", n1, 700, 0)],
        [Change("ca", "resize", n0, 900, 0, from_node=n0)],
        [Change("cb", "migrate", n0, 600, 0, from_node=n1)],
        [Change("ca", "pause", None, 0, 0, from_node=n0)],
    ]
    for changes in rounds:
        ok(ad.apply(changes))
        snap = ad.observe()
        for c in changes:
            assert in_effect(snap, c.as_dict()), (c.key(), state(snap, c.job))
    assert state(snap, "cb") == ("running", n0, (600, 0, None))


def test_failures_are_outcomes_with_a_kind(backend: Backend) -> None:
    n0, n1 = backend.nodes
    ad = backend.adapter()
    ad.observe()
    changes = [
        Change("no-such-job", "start", n0, 500, 0),
        Change("ca", "start", "no-such-node", 500, 0),
        Change("cb", "start", n0, 500, 0),  # valid: still applied among the failures
        Change("cb", "start", n1, 500, 0),  # it runs on n0 now: moving it is a migration
        Change("ca", "migrate", n1, 500, 0, from_node=n0),  # pending: started, not migrated
        Change("ca", "resize", n0, 800, 0, from_node=n0),  # pending: started, not resized
    ]
    outcomes = ad.apply(changes)
    assert [o.change for o in outcomes] == changes
    kinds = [(o.ok, o.error) for o in outcomes]
    assert kinds == [
        (False, "not_found"),
        (False, "invalid"),
        (True, None),
        (False, "conflict"),
        (False, "conflict"),
        (False, "conflict"),
    ], [(o.change.key(), o.error, o.message) for o in outcomes]
    assert all(o.message for o in outcomes if not o.ok)
    snap = ad.observe()
    assert state(snap, "cb") == ("running", n0, (500, 0, None)) and state(snap, "ca")[0] == "pending"


def test_a_job_that_ended_since_the_observe_is_left_as_it_ended(backend: Backend) -> None:
    """A plan made while a job ran its last epoch reaches the cluster after the job ended (its
    workload ended as its own would: the simulator's clock, a container's exit 0, a pod's
    ``Succeeded``): a resize, a move and a pause of it are each ``ok`` and change nothing, the
    workload is not re-created or restarted, and the next observe says ``finished``."""
    assert backend.end is not None
    ad = backend.adapter()
    a, b = backend.nodes
    ad.observe()
    ok(ad.apply([Change("ca", "start", a, 500, 0)]))
    ad.observe()  # what the plan below is made from: ca running on a
    backend.end("ca")
    before = backend.workload("ca")
    outcomes = ok(
        ad.apply(
            [
                Change("ca", "resize", a, 1000, 0, from_node=a),
                Change("ca", "migrate", b, 500, 0, from_node=a),
                Change("ca", "pause", None, 0, 0, from_node=a),
            ]
        )
    )
    assert [o.message for o in outcomes] == [
        "finished before the resize: nothing to change",
        "finished before the move: nothing to move",
        "finished before the pause: nothing to pause",
    ], outcomes
    assert backend.workload("ca") == before
    assert state(ad.observe(), "ca")[0] == "finished"


def test_a_fresh_adapter_observes_the_same_cluster(backend: Backend) -> None:
    n0, n1 = backend.nodes
    ad = backend.adapter()
    ad.observe()
    changes = [Change("ca", "start", n0, 500, 0), Change("cb", "start", n1, 700, 0)]
    ok(ad.apply(changes))
    before = ad.observe()
    workloads = [backend.workload(j) for j in JOBS]

    fresh = backend.adapter()
    after = fresh.observe()
    assert [(n.name, n.cpu_millis, n.gpus, n.schedulable) for n in after.nodes] == [
        (n.name, n.cpu_millis, n.gpus, n.schedulable) for n in before.nodes
    ]
    assert sorted(j.id for j in after.jobs) == sorted(j.id for j in before.jobs) == list(JOBS)
    assert [state(after, j) for j in JOBS] == [state(before, j) for j in JOBS]
    ok(fresh.apply(changes))  # a restarted daemon repeating what was in flight: nothing changes
    if backend.name != "sim":  # (the simulator's fresh adapter is a copy of the cluster)
        assert [backend.workload(j) for j in JOBS] == workloads


def test_foreign_workloads_are_left_alone(backend: Backend) -> None:
    from adapters.loop import ControlLoop, Tick
    from planner.policies import make_policy

    n0, n1 = backend.nodes
    before = backend.foreign()
    ad = backend.adapter()
    snap = ad.observe()
    assert FOREIGN not in {j.id for j in snap.jobs}
    naming = [
        Change(FOREIGN, "start", n1, 500, 0),
        Change(FOREIGN, "resize", n0, 1500, 0, from_node=n0),
        Change(FOREIGN, "migrate", n1, 500, 0, from_node=n0),
        Change(FOREIGN, "pause", None, 0, 0, from_node=n0),
        Change(FOREIGN, "deliver", n0, 500, 0, from_node=n0),
    ]
    assert [(o.ok, o.error) for o in ad.apply(naming)] == [(False, "not_found")] * len(naming)
    tick = ControlLoop(ad, make_policy("flowplan", time_limit=1.0), _NoSleep()).step()
    assert isinstance(tick, Tick) and tick.changes and all(o.ok for o in tick.outcomes), tick
    assert FOREIGN not in {c.job for c in tick.changes}
    assert backend.foreign() == before


class _NoSleep:
    def now(self) -> float:
        return 0.0

    def sleep(self, seconds: float) -> None:
        pass


def test_a_gang_is_one_job_changed_whole(backend: Backend) -> None:
    if backend.gang is None:
        pytest.skip(f"{backend.name}: its users cannot declare a gang")
    n0, n1 = backend.nodes
    backend.gang("cg", 3)
    ad = backend.adapter()
    [job] = [j for j in ad.observe().jobs if j.id == "cg"]
    assert (job.status, job.replicas) == ("pending", 3)
    assert len(backend.workload("cg")) == (3 if backend.gang_waits_whole else 1)
    steps = [
        Change("cg", "start", n0, 500, 0, replicas=3),
        Change("cg", "resize", n0, 1000, 0, replicas=3, from_node=n0),
        Change("cg", "migrate", n1, 700, 0, replicas=3, from_node=n0),
        Change("cg", "pause", None, 0, 0, replicas=3, from_node=n1),
    ]
    for change in steps:
        ok(ad.apply([change]))
        snap = ad.observe()
        assert in_effect(snap, change.as_dict()), (change.key(), state(snap, "cg"))
        after, workload = state(snap, "cg"), backend.workload("cg")
        whole = backend.gang_waits_whole or change.kind != "pause"
        assert len(workload) == (3 if whole else 1) and len({w[-1] for w in workload}) == 1, workload  # one node, or none
        again = ok(ad.apply([change]))
        assert "already" in again[0].message, again
        assert state(ad.observe(), "cg") == after and backend.workload("cg") == workload, change.kind
    [wrong] = ad.apply([Change("cg", "start", n0, 500, 0, replicas=2)])
    assert (wrong.ok, wrong.error) == (False, "conflict"), wrong
    assert state(ad.observe(), "cg")[0] == "pending"


def test_a_gpu_fraction_is_enforced_or_the_plan_refused_whole(backend: Backend) -> None:
    """Docker and Kubernetes cannot enforce a share of one GPU: a change list that places one is
    refused whole, every outcome ``invalid``, nothing applied, the message naming the job and its
    ``gpu_milli``. The simulator enforces fractions (tests/test_sim_gpu_fractions.py): its CPU-only
    nodes have no device, so the GPU start is a ``conflict`` and the start beside it is applied."""
    n0, _ = backend.nodes
    ad = backend.adapter()
    ad.observe()
    changes = [
        Change("ca", "start", n0, 500, 0),
        Change("cb", "start", n0, 500, 1, gpu_milli=460, gpu_device=0),
    ]
    outcomes = ad.apply(changes)
    snap = ad.observe()
    if backend.name == "sim":
        assert [(o.ok, o.error) for o in outcomes] == [(True, None), (False, "conflict")]
        assert "node n0 lacks room" in outcomes[1].message
        assert state(snap, "ca")[:2] == ("running", n0)
    else:
        assert [(o.ok, o.error) for o in outcomes] == [(False, "invalid"), (False, "invalid")]
        assert "job cb: gpu_milli 460 (a shared GPU) cannot be enforced on" in outcomes[1].message
        assert state(snap, "ca")[0] == "pending"
    assert state(snap, "cb")[0] == "pending"
    assert all("\n" not in o.message for o in outcomes)
