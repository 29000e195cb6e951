"""Gangs by owner (adapters/kubernetes/gangs.py): FlowPlan pods without a ``flowplan.io/gang`` label that
share a controller owner (a Job, a StatefulSet, ...) are one job, against a real kube-apiserver with
kwok's fake kubelets.

The one faked part: there is no kube-controller-manager in the sandbox, so nothing makes an owner's
pods. Each test creates the owner object itself (a real batch/v1 Job or apps/v1 StatefulSet on the
real server) and then creates its pods, with the template's labels, annotations and spec and a
controller ``ownerReference`` to it, as the Job or StatefulSet controller would
(tests/k8s_env.py ``create_owner``, ``owned_pod``). The adapter reads the owner from the server.

Case matrix:

- without a server: the controller owner names the job (``job/train``), the gang label wins over it,
  an owner that is not the controller is no owner, an over-long name is cut to a valid unique id;
- observe: a Job with parallelism 4 and its 4 pods are one job of 4 replicas (no size annotation:
  the Job's count); a StatefulSet of 4 with 2 pods so far waits, saying whose count it waits for;
  a pod of the Job with a gang label is in the label's gang, not the Job's; an owner that cannot be
  read (NotFound) or whose kind is not read gives a gang of the pods seen, and the observation says why;
- all or none: with room for only 3 of the Job's 4 pods on any node, a daemon interval binds none;
  once a node has room, one interval binds all 4 there;
- a migration of a StatefulSet's gang: every replacement keeps the owner, so the gang is the same
  job on the new node, and the StatefulSet's replica count is not touched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from k8s_env import NAMESPACE, core, create_owner, create_pod, free_node_and_start, owned_pod, pod_body, pods, wait_for

from adapters.base import Change
from adapters.kubernetes.pods import controller_of, job_id_of, owner_job_id

ANNOTATIONS = {"flowplan.io/min_cpu_millis": "1000", "flowplan.io/max_cpu_millis": "2000"}


def template() -> dict[str, Any]:
    return pod_body("template", cpu="1", limit="2", annotations=dict(ANNOTATIONS))


def adapter_for(info: Any) -> Any:
    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.sandbox import api_client

    return KubernetesAdapter(api_client(info), namespaces=[NAMESPACE], read_logs=False)


def owned_by(api: Any, kind: str, name: str) -> list[dict[str, Any]]:
    """The live pods whose controller is ``kind``/``name``, by pod name."""
    out = []
    for p in pods(api):
        ref = controller_of(p)
        if ref is not None and (ref["kind"], ref["name"]) == (kind, name) and not p["metadata"].get("deletionTimestamp"):
            out.append(p)
    return sorted(out, key=lambda p: p["metadata"]["name"])


# -- without a server ----------------------------------------------------------------------------------


def _raw(labels: dict[str, str] | None = None, *refs: dict[str, Any]) -> dict[str, Any]:
    body = pod_body("p-0", labels=labels)
    body["metadata"]["ownerReferences"] = list(refs)
    return body


def test_the_controller_owner_names_the_gang_and_the_label_wins() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1", "controller": True}
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "cfg", "uid": "u2"}  # an owner, not the controller
    assert job_id_of(_raw(None, other, job)) == "job/train"
    assert job_id_of(_raw({"flowplan.io/job": "mine"}, job)) == "job/train"  # the job label does not change it
    assert job_id_of(_raw({"flowplan.io/gang": "lab"}, job)) == "lab"  # the gang label wins
    assert controller_of(_raw(None, other)) is None and job_id_of(_raw(None, other)) == "p-0"
    long = owner_job_id({"kind": "StatefulSet", "name": "x" * 253})
    assert len(long) == 253 and long.startswith("statefulset/xxx")
    assert long != owner_job_id({"kind": "StatefulSet", "name": "x" * 252})


# -- against the sandbox ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_observe_makes_one_gang_of_an_owners_pods(k8s_sandbox: Any) -> None:
    api = core(k8s_sandbox)
    job = create_owner(k8s_sandbox, "Job", "train", 4, template())
    assert job["spec"]["parallelism"] == 4 and job["spec"]["template"]["spec"]["schedulerName"] == "flowplan"
    for i in range(4):
        create_pod(api, owned_pod(job, f"train-{i}"))
    create_pod(api, owned_pod(job, "train-lab", labels={"flowplan.io/gang": "lab"}))  # the label wins
    create_pod(api, pod_body("lab-1", cpu="1", limit="2", annotations=dict(ANNOTATIONS), labels={"flowplan.io/gang": "lab"}))
    sts = create_owner(k8s_sandbox, "StatefulSet", "web", 4, template())
    for i in range(2):  # 2 of 4 so far
        create_pod(api, owned_pod(sts, f"web-{i}"))
    ghost = dict(job, metadata={**job["metadata"], "name": "ghost", "uid": "00000000-0000-0000-0000-000000000001"})
    ghost.update(kind="ReplicaSet", apiVersion="apps/v1")  # no such ReplicaSet on the server: NotFound
    for i in range(3):
        create_pod(api, owned_pod(ghost, f"ghost-{i}"))
    custom = dict(job, metadata={**job["metadata"], "name": "bert"}, kind="TrainJob", apiVersion="example.org/v1")
    for i in range(2):
        create_pod(api, owned_pod(custom, f"bert-{i}"))

    ad = adapter_for(k8s_sandbox)
    calls: list[str] = []
    real = ad.apps.read_namespaced_replica_set

    def counted(name: str, namespace: str, **kw: Any) -> Any:
        calls.append(name)
        return real(name, namespace, **kw)

    ad.apps.read_namespaced_replica_set = counted
    snap = ad.observe()
    jobs = {j.id: j for j in snap.jobs}
    assert set(jobs) == {"job/train", "lab", "replicaset/ghost", "trainjob/bert"}, jobs
    train = jobs["job/train"]
    assert (train.status, train.replicas, train.min_cpu_millis, train.max_cpu_millis) == ("pending", 4, 1000, 2000)
    assert [p.name for p in ad.last.gangs["job/train"].members] == [f"train-{i}" for i in range(4)]
    assert ad.last.gangs["job/train"].by_owner and not ad.last.gangs["lab"].by_owner
    assert [p.name for p in ad.last.gangs["lab"].members] == ["lab-1", "train-lab"]
    assert ad.last.waiting["statefulset/web"] == "2 of 4 pods exist (StatefulSet web spec.replicas); waiting for the rest"
    assert jobs["replicaset/ghost"].replicas == 3
    why = ad.last.owner_fallback["replicaset/ghost"]
    assert why.startswith("owner ReplicaSet default/ghost: not_found:") and why.endswith("the gang is the 3 pods seen"), why
    assert "kind TrainJob (example.org): its desired count is not read" in ad.last.owner_fallback["trainjob/bert"]
    assert jobs["trainjob/bert"].replicas == 2
    assert set(ad.last.owner_fallback) == {"replicaset/ghost", "trainjob/bert"}
    assert calls == ["ghost"]  # one read per owner per observe, though 3 pods name it
    ad.close()


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_a_jobs_pods_are_placed_all_or_none(k8s_sandbox: Any, tmp_path: Path) -> None:
    """Every node has 3.5 cores left (a foreign pod holds the rest): the Job's 4 pods at 1 core each
    fit on none, so two daemon intervals bind none of them, though 3 would fit on any node. Freeing
    one node, the next interval binds all 4 to it."""
    from adapters.base import WallClock
    from adapters.daemon import Daemon
    from planner.policies import make_policy
    from store import StateStore

    api = core(k8s_sandbox)
    for node in k8s_sandbox.nodes:
        create_pod(api, pod_body(f"hog-{node}", cpu="28500m", limit=None, node=node, scheduler="default-scheduler"))
    job = create_owner(k8s_sandbox, "Job", "batch4", 4, template())
    for i in range(4):
        create_pod(api, owned_pod(job, f"batch4-{i}"))

    store = StateStore(str(tmp_path / "state.db"))
    ad = adapter_for(k8s_sandbox)
    ad.store = store
    daemon = Daemon(ad, make_policy("flowplan", time_limit=1.0), WallClock(), store, interval=0.2)
    _, tick = daemon.run(max_ticks=2)
    assert tick is not None and all(o.ok for o in tick.outcomes), tick
    assert [p["spec"].get("nodeName") for p in owned_by(api, "Job", "batch4")] == [None] * 4  # not one placed
    assert [(j.status, j.replicas) for j in tick.snapshot.jobs if j.id == "job/batch4"] == [("pending", 4)]
    assert "job/batch4" in {u.job for u in tick.plan.unserved}, tick.plan.model_dump_json()[:2000]

    free = k8s_sandbox.nodes[2]
    free_node_and_start(api, daemon, free, "job/batch4", 4)
    assert [p["spec"].get("nodeName") for p in owned_by(api, "Job", "batch4")] == [free] * 4
    store.close()
    ad.close()


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_a_statefulsets_gang_migrates_whole_and_keeps_its_owner(k8s_sandbox: Any) -> None:
    from kubernetes import client

    from adapters.kubernetes.sandbox import api_client

    n0, n1, _ = k8s_sandbox.nodes
    api = core(k8s_sandbox)
    sts = create_owner(k8s_sandbox, "StatefulSet", "ps", 2, template())
    for i in range(2):
        create_pod(api, owned_pod(sts, f"ps-{i}", node=n0))
    ad = adapter_for(k8s_sandbox)
    [job] = ad.observe().jobs
    assert (job.id, job.status, job.node, job.replicas) == ("statefulset/ps", "running", n0, 2)
    [outcome] = ad.apply([Change("statefulset/ps", "migrate", n1, 1500, 0, replicas=2, from_node=n0)])
    assert outcome.ok and "re-created 2 pods" in outcome.message, outcome
    wait_for(
        lambda: [p["metadata"]["name"] for p in owned_by(api, "StatefulSet", "ps")] == ["ps-0-r1", "ps-1-r1"], 30, "old gone"
    )
    moved = owned_by(api, "StatefulSet", "ps")
    assert [p["spec"]["nodeName"] for p in moved] == [n1, n1]
    assert {p["metadata"]["ownerReferences"][0]["uid"] for p in moved} == {sts["metadata"]["uid"]}
    [job] = ad.observe().jobs
    assert (job.id, job.status, job.node, job.replicas) == ("statefulset/ps", "running", n1, 2)
    assert job.allocation is not None and job.allocation.cpu_millis == 1500
    apps = client.AppsV1Api(api_client(k8s_sandbox))
    now = json.loads(apps.read_namespaced_stateful_set("ps", NAMESPACE, _preload_content=False).data)
    assert now["spec"]["replicas"] == 2 and now["metadata"]["generation"] == sts["metadata"]["generation"]  # untouched
    ad.close()
