"""Parameter servers on Kubernetes (issue 17): a Kubeflow TFJob's ``PS`` pods are its servers, placed
beside its workers, the same number on each of their nodes, and scaled through the TFJob.

Real parts: a real kube-apiserver (the session's sandbox, kwok nodes), a real TFJob
CustomResourceDefinition, the real adapter over HTTP. Faked at the lowest level, because nothing here
runs Kubeflow's training operator: its pods are made by the test as the operator would (its
``training.kubeflow.org/replica-type`` and ``replica-index`` labels, a controller ``ownerReference``
to the TFJob), and so are the pods it would add when the TFJob's ``PS`` replicas are raised.

- without a server: the server annotations (``flowplan.io/min-servers``, ``max-servers``,
  ``server-form``) fail in one line naming the key and the value; parameter servers that disagree
  on their CPU request, or have none, make the gang unmanaged, naming the pods;
- observe: a TFJob of 2 workers and 2 servers is one job of 2 replicas whose ``servers`` are the PS
  pods' requests and the annotations' bounds, which the planner plans (the checker passes it); a
  start whose second server's Binding fails (the pod deleted just before it) leaves no pod bound;
  the next start binds each node's worker and one server there;
  then it runs with ``allocation.servers`` 1;
- a plan for 2 servers on each node raises the TFJob's ``PS`` replicas 2 -> 4 after a checkpoint-
  restart of the whole gang (new servers are a new shape); once the two new servers exist, a start
  binds two on each node;
- servers bound where its workers are not make the job pending with a note, and the next start
  gathers them.
"""

from __future__ import annotations

from typing import Any

import pytest
from k8s_env import NAMESPACE, core, create_pod, pod_body, wait_for
from test_kubernetes_spread_gangs import BOUNDS, adapter_for, json_of, kubeflow_crd, where

from adapters.base import Change
from adapters.kubernetes.annotations import AnnotationError, gang_bounds
from adapters.kubernetes.gangs import REPLICA_INDEX, REPLICA_TYPE, GangError, role_counts, server_role
from adapters.kubernetes.pods import pod_view
from planner import check_plan, plan
from planner.snapshot import ServerRole, Share

GANG_BOUNDS = {
    **BOUNDS,
    "flowplan.io/max-nodes": "2",
    "flowplan.io/min-servers": "2",
    "flowplan.io/max-servers": "4",
}


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"flowplan.io/min-servers": "0"}, "annotation flowplan.io/min-servers: must be a whole number from 1 to 1024 ('0')"),
        (
            {"flowplan.io/min-servers": "5", "flowplan.io/max-servers": "4"},
            "annotation flowplan.io/min-servers: 5 exceeds flowplan.io/max-servers 4 ('5')",
        ),
        ({"flowplan.io/server-form": "bsp"}, "annotation flowplan.io/server-form: expected optimus or coach ('bsp')"),
    ],
)
def test_bad_server_annotations_are_one_line(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(AnnotationError) as e:
        gang_bounds(annotations)
    assert str(e.value) == message


def _ps_view(name: str, cpu: str | None) -> Any:
    body = pod_body(name, cpu=cpu or "0", limit=None, labels={REPLICA_TYPE: "ps"})
    if cpu is None:
        del body["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    return pod_view(body)


def test_server_role_from_the_ps_pods() -> None:
    """The role is the PS pods' requests and the annotations' bounds; without bounds, the servers it
    has; a count that cannot change pins both; pods that disagree, or no CPU request, are refused."""
    bounds = gang_bounds({"flowplan.io/min-servers": "1", "flowplan.io/max-servers": "6", "flowplan.io/server-form": "coach"})
    two = [_ps_view("a", "500m"), _ps_view("b", "500m")]
    assert server_role("j", two, bounds, None) == ServerRole(min=1, max=6, cpu_millis=500, memory_mib=256, form="coach")
    assert server_role("j", two, gang_bounds({}), None) == ServerRole(min=2, max=2, cpu_millis=500, memory_mib=256)
    assert server_role("j", two, bounds, "a gang by label").model_dump()["max"] == 2
    with pytest.raises(GangError, match=r"^gang j: parameter servers a and c disagree on CPU request \('500m' vs '1'\)$"):
        server_role("j", [two[0], _ps_view("c", "1")], bounds, None)
    with pytest.raises(GangError, match=r"^gang j: parameter server n has no CPU request"):
        server_role("j", [_ps_view("n", None)], bounds, None)


def test_a_waiting_kubeflow_gang_says_which_role_is_short() -> None:
    """The waiting note counts the pods of each role; a role with none seen (its template without
    ``schedulerName: flowplan``, so FlowPlan never sees its pods) gets a hint; pods without the
    operator's role label get no breakdown."""
    workers = [pod_view(pod_body(f"w{i}", labels={REPLICA_TYPE: "worker"})) for i in range(2)]
    hint = "; a role's pods are FlowPlan's only with schedulerName: flowplan or the label flowplan.io/job"
    assert role_counts({"PS": 2, "Worker": 2}, workers) == ": PS 0 of 2, Worker 2 of 2" + hint
    assert role_counts({"Worker": 3}, workers) == ": Worker 2 of 3"
    assert role_counts({"PS": 2, "Worker": 2}, [pod_view(pod_body("x"))]) == ""
    assert role_counts({}, workers) == ""


def _operator_pod(owner: dict[str, Any], role: str, i: int) -> dict[str, Any]:
    """Pod ``i`` of ``role`` that Kubeflow's training operator would make for ``owner`` (not created)."""
    ref = {k: owner[k] for k in ("apiVersion", "kind")} | {
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    name = owner["metadata"]["name"]
    labels = {REPLICA_TYPE: role.lower(), REPLICA_INDEX: str(i), "training.kubeflow.org/job-name": name}
    if role == "PS":  # its own template: its own request, no FlowPlan bounds
        body = pod_body(f"{name}-ps-{i}", cpu="500m", limit=None, labels=labels)
    else:
        body = pod_body(f"{name}-worker-{i}", cpu="1", limit="2", annotations=GANG_BOUNDS, labels=labels)
    body["metadata"]["ownerReferences"] = [ref]
    return body


def _operator_pods(api: Any, owner: dict[str, Any], role: str, indexes: range) -> None:
    for i in indexes:
        create_pod(api, _operator_pod(owner, role, i))


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_a_tfjobs_servers_go_beside_its_workers_and_scale_through_the_tfjob(k8s_sandbox: Any) -> None:
    api = core(k8s_sandbox)
    n0, n1, n2 = k8s_sandbox.nodes
    with kubeflow_crd(k8s_sandbox, "TFJob", "tfjobs") as custom:
        template = {"spec": pod_body("t")["spec"]}
        body = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf", "namespace": NAMESPACE}}
        body["spec"] = {
            "tfReplicaSpecs": {"PS": {"replicas": 2, "template": template}, "Worker": {"replicas": 2, "template": template}}
        }
        owner = json_of(
            custom.create_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "tfjobs", body, _preload_content=False)
        )
        _operator_pods(api, owner, "Worker", range(2))
        _operator_pods(api, owner, "PS", range(2))
        ad = adapter_for(k8s_sandbox)

        snap = ad.observe()
        [job] = snap.jobs
        assert (job.id, job.status, job.replicas, job.max_nodes) == ("tfjob/tf", "pending", 2, 2)
        assert job.servers == ServerRole(min=2, max=4, cpu_millis=500, memory_mib=256)
        assert ad.last.unmanaged == {} and ad.last.waiting == {}
        planned = plan(snap).plan  # the planner places it, servers and all, and the checker passes it
        [a] = planned.assignments
        nodes = len(a.placement) if a.placement else 1
        assert a.node is not None and a.servers is not None and 2 <= a.servers * nodes <= 4 and check_plan(snap, planned) == []

        spread = ((n0, 1), (n1, 1))
        start = Change("tfjob/tf", "start", n0, 1000, 0, replicas=2, placement=spread, servers=1)
        # All or none: the second server goes away just before its Binding (the server answers 404),
        # so every pod bound by this start is re-created unbound.
        real = ad.api.create_namespaced_pod_binding

        def bind(name: str, namespace: str, body: Any, **kw: Any) -> Any:
            if name == "tf-ps-1":
                api.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _preload_content=False)
                wait_for(lambda: "tf-ps-1" not in where(api, "tf-"), 30, "tf-ps-1 deleted")
            return real(name, namespace, body, **kw)

        ad.api.create_namespaced_pod_binding = bind
        [failed] = ad.apply([start])
        ad.api.create_namespaced_pod_binding = real
        assert (failed.ok, failed.error) == (False, "not_found"), failed
        assert f"binding parameter server tf-ps-1 to {n1} failed" in failed.message and "re-created unbound" in failed.message
        wait_for(lambda: len(where(api, "tf-")) == 3, 30, "the bound pods replaced")
        assert set(where(api, "tf-").values()) == {None}  # none bound: workers and servers alike
        create_pod(api, _operator_pod(owner, "PS", 1))  # the operator makes it again
        ad.observe()

        [out] = ad.apply([start])
        assert out.ok, out
        assert f"bound its 2 parameter servers, 1 on each of {n0}, {n1}" in out.message, out
        roles = {name: ("ps" if "-ps-" in name else "worker", n) for name, n in where(api, "tf-").items()}
        assert sorted(roles.values()) == [("ps", n0), ("ps", n1), ("worker", n0), ("worker", n1)]
        [job] = ad.observe().jobs
        assert (job.status, job.placement) == ("running", [Share(node=n0, replicas=1), Share(node=n1, replicas=1)])
        assert job.allocation is not None and job.allocation.servers == 1
        [again] = ad.apply([Change("tfjob/tf", "start", n0, 1000, 0, replicas=2, placement=spread, servers=1)])
        assert again.ok and again.message.startswith("already bound"), again

        # Two servers on each node: the whole gang checkpoints and is re-created unbound, PS 2 -> 4.
        more = Change("tfjob/tf", "migrate", n0, 1000, 0, replicas=2, from_node=n0, placement=spread, servers=2)
        [out] = ad.apply([more])
        assert (out.ok, out.error) == (False, "transient"), out
        assert "spec.tfReplicaSpecs.PS.replicas 2 -> 4" in out.message and "and 4 parameter servers (now 2)" in out.message
        specs = json_of(
            custom.get_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "tfjobs", "tf", _preload_content=False)
        )
        assert {r: s["replicas"] for r, s in specs["spec"]["tfReplicaSpecs"].items()} == {"PS": 4, "Worker": 2}
        wait_for(lambda: len(where(api, "tf-")) == 4, 30, "the old pods gone")
        assert set(where(api, "tf-").values()) == {None}  # re-created unbound: a restart
        assert (
            ad.observe().jobs == []
            and "4 of 6 pods exist (TFJob tf spec.tfReplicaSpecs: PS 2 of 4, Worker 2 of 2); waiting"
            in ad.last.waiting["tfjob/tf"]
        )

        _operator_pods(api, owner, "PS", range(2, 4))
        [job] = ad.observe().jobs
        assert job.status == "pending" and job.servers is not None and job.servers.max == 4
        [out] = ad.apply([Change("tfjob/tf", "start", n0, 1000, 0, replicas=2, placement=spread, servers=2)])
        assert out.ok, out
        nodes = [n for name, n in where(api, "tf-").items() if "-ps-" in name]
        assert sorted(nodes) == sorted([n0, n0, n1, n1])
        [job] = ad.observe().jobs
        assert job.status == "running" and job.allocation is not None and job.allocation.servers == 2

        # A server bound off its workers' nodes: pending, with a note; the next start gathers it.
        stray = next(name for name, n in where(api, "tf-ps-").items() if n == n1)
        api.delete_namespaced_pod(stray, NAMESPACE, grace_period_seconds=0, _preload_content=False)
        wait_for(lambda: stray not in where(api, "tf-"), 30, "the server gone")
        body = _operator_pod(owner, "PS", int(stray.rsplit("-", 1)[-1]))
        body["spec"]["nodeName"] = n2
        create_pod(api, body)
        [job] = ad.observe().jobs
        assert job.status == "pending" and "parameter servers not the same number on each" in ad.last.waiting["tfjob/tf"]
        [out] = ad.apply([Change("tfjob/tf", "start", n0, 1000, 0, replicas=2, placement=spread, servers=2)])
        assert out.ok and "re-created unbound" in out.message, out
        [job] = ad.observe().jobs
        assert job.status == "running" and job.allocation is not None and job.allocation.servers == 2
        assert n2 not in where(api, "tf-").values()
    ad.close()
