"""Gangs spanning nodes, and count changes through the owner, on Kubernetes (adapters/kubernetes/gangs.py,
spread.py, owners.py), against a real kube-apiserver with kwok's fake kubelets.

Nothing of the API is mocked (tests/k8s_env.py). Two parts are stood in for, each at the lowest level:

- one test makes a Binding fail midway: it wraps the adapter's Binding call to delete, through the
  real API, the pod about to be bound, so the server's own 404 answers the Binding;
- there is no kube-controller-manager in the sandbox, so nothing makes a Job's pods: the test
  creates the Job on the real server and, where its controller would (at first, and once FlowPlan
  has raised ``spec.parallelism``), creates its pods from the template with a controller
  ``ownerReference`` (tests/k8s_env.py ``create_owner``, ``owned_pod``).

Case matrix:

- the daemon (the real planner): a gang of 4 that no node can hold (``max-nodes: 2``) is started 2 + 2
  in one interval, and the next interval changes nothing;
- without a server: the gang annotations (``min-replicas``, ``max-replicas``, ``max-nodes``,
  ``elastic``) parsed, each bad value one line naming the key and value; rank order by
  ``flowplan.io/rank``, by Kubernetes' index, by name (a replacement keeps its place); where each pod
  goes for a placement, moving the fewest;
- observe: a gang of 4 bound 2 + 2 on two nodes (``max-nodes: 2``) is running with that placement,
  rank 0's node first; the same over more nodes than ``max-nodes`` is pending, with a note; bad
  annotations (``min-replicas: x``, ``max-nodes: 0``, a rank claimed twice) make the gang unmanaged
  with a note naming the key and the value;
- start: a change list with a placement that is not its change's replicas is refused whole, nothing
  applied; a pending gang of 4 planned 3 + 1 is bound as planned (rank 0 and the next two on the
  first node); a Binding that fails midway leaves no pod of a spread start bound;
- migrate: a spread gang moves to another placement, every pod re-created and bound where planned;
- count: a Job's gang of 3 pending pods planned at 4 over two nodes: ``spec.parallelism`` goes
  3 → 4, nothing is bound, the outcome says it is in progress and the gang waits for its fourth
  pod; once the test makes it (as the controller would), the next start binds all four as planned.
  A StatefulSet's running gang of 3 (not elastic) planned at 2: its pods are asked to checkpoint and
  re-created unbound, ``spec.replicas`` goes 3 → 2; once the test removes one pod (as the controller
  would), the next start binds the two. An elastic StatefulSet gang of 2 resized to 3 over two
  nodes: no checkpoint, nothing re-created, ``spec.replicas`` 2 → 3; the start after the third pod
  appears binds only it, the two running pods untouched (their UIDs kept).
- Kubeflow's training jobs (real CustomResourceDefinitions; no training operator runs, so the test
  makes their pods as it would): a PyTorchJob's gang is the pods seen without its CRD, its count
  fixed; with it, a plan for 4 raises ``Worker`` 2 → 3 (``Master`` kept). A TFJob's Chief + 2 workers
  are one gang whose plan for 4 raises ``Worker`` 2 → 3 (``Chief`` kept); a TFJob whose parameter
  server asks other bounds than its workers is unmanaged, naming the pods that differ.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_env import NAMESPACE, core, create_owner, create_pod, get_pod, owned_pod, pod_body, pods, wait_for

from adapters.base import Change
from adapters.kubernetes.annotations import AnnotationError, gang_bounds
from adapters.kubernetes.pods import pod_view
from adapters.kubernetes.spread import assign, ranked, shares_of
from planner.snapshot import Share

GANG = "flowplan.io/gang"
BOUNDS = {"flowplan.io/min_cpu_millis": "1000", "flowplan.io/max_cpu_millis": "2000"}


def gang_pod(name: str, gang: str, *, node: str | None = None, extra: dict[str, str] | None = None) -> dict[str, Any]:
    return pod_body(name, cpu="1", limit="2", node=node, annotations={**BOUNDS, **(extra or {})}, labels={GANG: gang})


def adapter_for(info: Any) -> Any:
    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.sandbox import api_client

    return KubernetesAdapter(api_client(info), namespaces=[NAMESPACE], read_logs=False, checkpoint_timeout=20)


def where(api: Any, prefix: str) -> dict[str, str | None]:
    """Live pods whose name starts with ``prefix``: name -> node."""
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName")
        for p in pods(api)
        if p["metadata"]["name"].startswith(prefix) and not p["metadata"].get("deletionTimestamp")
    }


# -- without a server ----------------------------------------------------------------------------------


BAD_BOUNDS = {
    "min-replicas not a number": (
        {"flowplan.io/min-replicas": "x"},
        "annotation flowplan.io/min-replicas: must be a whole number from 1 to 1024 ('x')",
    ),
    "max-nodes zero": (
        {"flowplan.io/max-nodes": "0"},
        "annotation flowplan.io/max-nodes: must be a whole number from 1 to 1024 ('0')",
    ),
    "max-replicas huge": (
        {"flowplan.io/max-replicas": "1e9"},
        "annotation flowplan.io/max-replicas: must be a whole number from 1 to 1024 ('1e9')",
    ),
    "min above max": (
        {"flowplan.io/min-replicas": "5", "flowplan.io/max-replicas": "4"},
        "annotation flowplan.io/min-replicas: 5 exceeds flowplan.io/max-replicas 4 ('5')",
    ),
    "elastic not a boolean": (
        {"flowplan.io/elastic": "maybe"},
        "annotation flowplan.io/elastic: expected true or false ('maybe')",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BOUNDS))
def test_bad_gang_annotations_are_one_line_naming_key_and_value(case: str) -> None:
    annotations, must = BAD_BOUNDS[case]
    with pytest.raises(AnnotationError) as info:
        gang_bounds(annotations)
    assert str(info.value) == must


def _view(name: str, node: str | None = None, **annotations: str) -> Any:
    return pod_view(gang_pod(name, "g", node=node, extra=annotations))


def test_bounds_ranks_and_assignment_without_a_server() -> None:
    b = gang_bounds(
        {
            "flowplan.io/min-replicas": "2",
            "flowplan.io/max-replicas": "8",
            "flowplan.io/max-nodes": "3",
            "flowplan.io/elastic": "True",
        }
    )
    assert (b.min_replicas, b.max_replicas, b.max_nodes, b.elastic) == (2, 8, 3, True)
    assert gang_bounds({}) == type(b)()  # nothing declared: one node, not elastic
    # by flowplan.io/rank first, then Kubernetes' index, then the name less a replacement's -r<n>
    pods_ = [
        _view("w-9"),
        _view("w-10-r2"),
        _view("z", **{"flowplan.io/rank": "0"}),
        _view("a", **{"batch.kubernetes.io/job-completion-index": "1"}),
    ]
    assert [p.name for p in ranked("g", pods_)] == ["z", "a", "w-10-r2", "w-9"]
    with pytest.raises(AnnotationError, match=r"pods x and y both claim annotation flowplan.io/rank \('0'\)"):
        ranked("g", [_view("x", **{"flowplan.io/rank": "0"}), _view("y", **{"flowplan.io/rank": "0"})])
    with pytest.raises(
        AnnotationError, match=r"pod x: annotation flowplan.io/rank: must be a whole number from 0 to 1023 \('-1'\)"
    ):
        ranked("g", [_view("x", **{"flowplan.io/rank": "-1"})])
    # where each pod goes: rank 0 to the first node; a bound pod stays while its node has room
    gang = [_view("p0", "b"), _view("p1", "a"), _view("p2"), _view("p3", "c")]
    target, astray = assign((("a", 2), ("b", 2)), gang)
    assert target == {"p0": "a", "p1": "a", "p2": "b", "p3": "b"} and [p.name for p in astray] == ["p0", "p3"]
    target, astray = assign((("b", 3), ("a", 1)), gang)
    assert target == {"p0": "b", "p1": "a", "p2": "b", "p3": "b"} and [p.name for p in astray] == ["p3"]
    assert shares_of(gang) == (("b", 1), ("a", 1), ("c", 1))


# -- against the sandbox ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_a_spread_gang_runs_with_its_placement_moves_whole_and_bad_annotations_are_notes(k8s_sandbox: Any) -> None:
    api = core(k8s_sandbox)
    n0, n1, n2 = k8s_sandbox.nodes
    two = {"flowplan.io/max-nodes": "2"}
    for i, node in enumerate((n1, n0, n1, n0)):  # rank 0 (wide-0) on n1
        create_pod(api, gang_pod(f"wide-{i}", "wide", node=node, extra=two))
    for i, node in enumerate((n0, n1, n2)):  # three nodes, max-nodes 2: pending
        create_pod(api, gang_pod(f"three-{i}", "three", node=node, extra=two))
    create_pod(api, gang_pod("badmin-0", "badmin", extra={"flowplan.io/min-replicas": "x"}))
    create_pod(api, gang_pod("badmin-1", "badmin", extra={"flowplan.io/min-replicas": "x"}))
    create_pod(api, gang_pod("badnodes-0", "badnodes", node=n2, extra={"flowplan.io/max-nodes": "0"}))
    ad = adapter_for(k8s_sandbox)
    jobs = {j.id: j for j in ad.observe().jobs}
    assert set(jobs) == {"wide", "three"}, jobs
    wide = jobs["wide"]
    assert (wide.status, wide.node, wide.replicas, wide.max_nodes) == ("running", n1, 4, 2)
    assert wide.placement == [Share(node=n1, replicas=2), Share(node=n0, replicas=2)]
    assert wide.allocation is not None and wide.allocation.cpu_millis == 1000
    assert (
        jobs["three"].status == "pending"
        and "over 3 nodes, more than annotation flowplan.io/max-nodes 2" in ad.last.waiting["three"]
    )
    assert (
        ad.last.unmanaged["default/badmin-0"]
        == "annotation flowplan.io/min-replicas: must be a whole number from 1 to 1024 ('x')"
    )
    assert (
        ad.last.unmanaged["default/badnodes-0"] == "annotation flowplan.io/max-nodes: must be a whole number from 1 to 1024 ('0')"
    )
    node_labels = {n.name: n.labels for n in ad.observe().nodes}
    assert "flowplan.io/max-nodes" in node_labels[n2]["flowplan.io/unmanaged.badnodes-0"]

    # migrate 2 + 2 on (n1, n0) -> 3 + 1 on (n2, n1): every pod re-created, bound where planned
    [out] = ad.apply([Change("wide", "migrate", n2, 1000, 0, replicas=4, from_node=n1, placement=((n2, 3), (n1, 1)))])
    assert out.ok and "re-created 4 pods" in out.message and f"bound at 3 on {n2}, 1 on {n1}" in out.message, out
    wait_for(lambda: sorted(where(api, "wide")) == [f"wide-{i}-r1" for i in range(4)], 30, "old pods gone")
    assert where(api, "wide") == {"wide-0-r1": n2, "wide-1-r1": n2, "wide-2-r1": n2, "wide-3-r1": n1}
    wide = next(j for j in ad.observe().jobs if j.id == "wide")
    assert (wide.status, wide.node, wide.placement) == ("running", n2, [Share(node=n2, replicas=3), Share(node=n1, replicas=1)])
    [again] = ad.apply([Change("wide", "migrate", n2, 1000, 0, replicas=4, from_node=n2, placement=((n2, 3), (n1, 1)))])
    assert again.ok and again.message.startswith("already at"), again  # idempotent
    ad.close()


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_a_pending_gang_is_started_where_planned_all_or_none(k8s_sandbox: Any) -> None:
    api = core(k8s_sandbox)
    n0, n1, _ = k8s_sandbox.nodes
    two = {"flowplan.io/max-nodes": "2"}
    for i in range(4):
        create_pod(api, gang_pod(f"sp-{i}", "sp", extra={**two, "flowplan.io/rank": str(3 - i)}))  # sp-3 is rank 0
    for i in range(4):
        create_pod(api, gang_pod(f"fr-{i}", "fr", extra=two))
    ad = adapter_for(k8s_sandbox)
    jobs = {j.id: j for j in ad.observe().jobs}
    assert (jobs["sp"].status, jobs["sp"].replicas, jobs["sp"].placement) == ("pending", 4, None)

    # a placement that is not the change's replicas: the list is refused whole, nothing applied
    bad = [
        Change("fr", "start", n0, 1000, 0, replicas=4),
        Change("sp", "start", n1, 1000, 0, replicas=4, placement=((n1, 3), (n0, 2))),
    ]
    refused = ad.apply(bad)
    must = f"job sp: placement 3 on {n1}, 2 on {n0} is not its 4 replicas with rank 0 on {n1}"
    assert [(o.ok, o.error) for o in refused] == [(False, "invalid")] * 2 and refused[1].message == must, refused
    assert refused[0].message == f"job fr: not applied, the plan was refused: {must}"
    assert set(where(api, "fr").values()) == {None}

    [out] = ad.apply([Change("sp", "start", n1, 1000, 0, replicas=4, placement=((n1, 3), (n0, 1)))])
    assert out.ok, out
    assert where(api, "sp") == {"sp-3": n1, "sp-2": n1, "sp-1": n1, "sp-0": n0}  # by rank: 3 on n1, then 1 on n0
    sp = next(j for j in ad.observe().jobs if j.id == "sp")
    assert (sp.status, sp.node, sp.placement) == ("running", n1, [Share(node=n1, replicas=3), Share(node=n0, replicas=1)])

    real = ad.api.create_namespaced_pod_binding
    calls: list[str] = []

    def bind(name: str, namespace: str, body: Any, **kw: Any) -> Any:
        calls.append(name)
        if len(calls) == 4:  # the last pod goes away just before its Binding: the server answers 404
            api.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _preload_content=False)
            wait_for(lambda: get_pod(api, name) is None, 30, f"{name} deleted")
        return real(name, namespace, body, **kw)

    ad.api.create_namespaced_pod_binding = bind
    [failed] = ad.apply([Change("fr", "start", n0, 1000, 0, replicas=4, placement=((n0, 2), (n1, 2)))])
    assert (failed.ok, failed.error) == (False, "not_found"), failed
    assert f"binding fr-3 to {n1} failed" in failed.message and "re-created unbound" in failed.message, failed
    assert calls == ["fr-0", "fr-1", "fr-2", "fr-3"]
    assert set(where(api, "fr").values()) == {None}  # none bound: all or nothing, over both nodes
    ad.close()


def _apis(info: Any) -> tuple[Any, Any]:
    from kubernetes import client

    from adapters.kubernetes.sandbox import api_client

    return client.BatchV1Api(api_client(info)), client.AppsV1Api(api_client(info))


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_a_jobs_gang_grows_through_spec_parallelism(k8s_sandbox: Any) -> None:
    """A Job's gang of 3 pending pods (``max-replicas: 4``) planned at 4 over two nodes: FlowPlan
    raises ``spec.parallelism`` 3 -> 4, binds nothing yet, and the outcome says the change is in
    progress; the gang waits for its fourth pod. The test then makes it, as the Job controller would
    (none runs in the sandbox); the next start binds all four as planned. (kwok completes a Job's
    pod once it runs, so the pods' nodes are checked, not the job's state after.)"""
    batch, _ = _apis(k8s_sandbox)
    api = core(k8s_sandbox)
    n0, n1, _ = k8s_sandbox.nodes
    annotations = {**BOUNDS, "flowplan.io/min-replicas": "2", "flowplan.io/max-replicas": "4", "flowplan.io/max-nodes": "2"}
    job = create_owner(k8s_sandbox, "Job", "grow", 3, pod_body("template", cpu="1", limit="2", annotations=annotations))
    for i in range(3):
        create_pod(api, owned_pod(job, f"grow-{i}"))
    ad = adapter_for(k8s_sandbox)
    [gang] = ad.observe().jobs
    assert (gang.id, gang.status, gang.replicas, gang.min_replicas, gang.max_nodes) == ("job/grow", "pending", 4, 2, 2)

    change = Change("job/grow", "start", n0, 1000, 0, replicas=4, placement=((n0, 2), (n1, 2)))
    [out] = ad.apply([change])
    assert (out.ok, out.error) == (False, "transient"), out
    assert "scaled Job default/grow spec.parallelism 3 -> 4" in out.message and "in progress" in out.message, out
    assert batch.read_namespaced_job("grow", NAMESPACE).spec.parallelism == 4
    assert set(where(api, "grow").values()) == {None}  # nothing bound before the gang is whole
    assert ad.observe().jobs == [] and "3 of 4 pods exist (Job grow spec.parallelism)" in ad.last.waiting["job/grow"]

    # a Job that may run only 3 pods at once (spec.completions 3): never more replicas than that,
    # and a change asking more is refused, naming the cap, with nothing done
    template = pod_body("template", cpu="1", limit="2", annotations=annotations)
    capped = create_owner(k8s_sandbox, "Job", "cap", 3, template, completions=3)
    for i in range(3):
        create_pod(api, owned_pod(capped, f"cap-{i}"))
    assert {j.id: j.replicas for j in ad.observe().jobs} == {"job/cap": 3}  # job/grow waits for its 4th pod
    [no] = ad.apply([Change("job/cap", "start", n0, 1000, 0, replicas=4, placement=((n0, 2), (n1, 2)))])
    assert (no.ok, no.error) == (False, "invalid"), no
    cap = "Job default/cap: spec.completions 3 caps its pods at 3; the plan asks 4"
    assert no.message == f"job job/cap: Job default/cap not scaled to 4 ({cap})", no
    assert batch.read_namespaced_job("cap", NAMESPACE).spec.parallelism == 3 and set(where(api, "cap").values()) == {None}

    create_pod(api, owned_pod(job, "grow-3"))  # as the Job controller would, for parallelism 4
    gang = next(j for j in ad.observe().jobs if j.id == "job/grow")
    assert (gang.status, gang.replicas) == ("pending", 4)
    [start] = ad.apply([change])
    assert start.ok, start
    assert where(api, "grow") == {"grow-0": n0, "grow-1": n0, "grow-2": n1, "grow-3": n1}
    ad.close()


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_a_running_statefulsets_gang_shrinks_by_restart_through_spec_replicas(k8s_sandbox: Any) -> None:
    """A StatefulSet's gang of 3 runs on n0 (not elastic). The plan asks 2: the pods are asked to
    checkpoint and re-created unbound (a restart, as a migration), ``spec.replicas`` goes 3 -> 2, and
    the outcome says the change is in progress. The test removes the highest-ranked pod, as the
    StatefulSet controller would (none runs in the sandbox); the next start binds the two."""
    _, apps = _apis(k8s_sandbox)
    api = core(k8s_sandbox)
    n0, n1, _ = k8s_sandbox.nodes
    annotations = {**BOUNDS, "flowplan.io/min-replicas": "1", "flowplan.io/max-nodes": "2"}
    sts = create_owner(k8s_sandbox, "StatefulSet", "st", 3, pod_body("template", cpu="1", limit="2", annotations=annotations))
    for i in range(3):
        create_pod(api, owned_pod(sts, f"st-{i}", node=n0))
    wait_for(
        lambda: all((get_pod(api, f"st-{i}") or {}).get("status", {}).get("phase") == "Running" for i in range(3)), 30, "Running"
    )
    ad = adapter_for(k8s_sandbox)
    [gang] = ad.observe().jobs
    assert (gang.status, gang.node, gang.replicas, gang.min_replicas, gang.placement) == ("running", n0, 3, 1, None)

    [out] = ad.apply([Change("statefulset/st", "migrate", n0, 1000, 0, replicas=2, from_node=n0)])
    assert (out.ok, out.error) == (False, "transient"), out
    assert "re-created 3 pods" in out.message and "StatefulSet default/st spec.replicas 3 -> 2" in out.message, out
    assert json_of(apps.read_namespaced_stateful_set("st", NAMESPACE, _preload_content=False))["spec"]["replicas"] == 2
    wait_for(lambda: sorted(where(api, "st")) == ["st-0-r1", "st-1-r1", "st-2-r1"], 30, "old pods gone")
    assert set(where(api, "st").values()) == {None}
    assert ad.observe().jobs == [] and "waiting for its controller to remove the rest" in ad.last.waiting["statefulset/st"]

    api.delete_namespaced_pod("st-2-r1", NAMESPACE, grace_period_seconds=0, _preload_content=False)  # as the controller would
    wait_for(lambda: "st-2-r1" not in where(api, "st"), 30, "st-2-r1 removed")
    [gang] = ad.observe().jobs
    assert (gang.status, gang.replicas) == ("pending", 2)
    [start] = ad.apply([Change("statefulset/st", "start", n1, 1000, 0, replicas=2)])
    assert start.ok, start
    assert where(api, "st") == {"st-0-r1": n1, "st-1-r1": n1}
    [gang] = ad.observe().jobs
    assert (gang.status, gang.node, gang.replicas, gang.placement) == ("running", n1, 2, None)
    ad.close()


def json_of(resp: Any) -> Any:
    import json

    return json.loads(resp.data)


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_an_elastic_gang_grows_live_and_keeps_its_running_pods(k8s_sandbox: Any) -> None:
    """A StatefulSet's elastic gang of 2 runs on n0. The plan resizes it to 3 (2 on n0, 1 on n1):
    no checkpoint, no pod re-created, ``spec.replicas`` 2 -> 3, in progress. Once the test makes the
    third pod (as the StatefulSet controller would; none runs in the sandbox), the gang is pending
    (partly bound) and the next start binds only the new pod, to n1; the two running pods stay."""
    _, apps = _apis(k8s_sandbox)
    api = core(k8s_sandbox)
    n0, n1, _ = k8s_sandbox.nodes
    annotations = {**BOUNDS, "flowplan.io/max-replicas": "3", "flowplan.io/max-nodes": "2", "flowplan.io/elastic": "true"}
    sts = create_owner(k8s_sandbox, "StatefulSet", "el", 2, pod_body("template", cpu="1", limit="2", annotations=annotations))
    uids = {create_pod(api, owned_pod(sts, f"el-{i}", node=n0))["metadata"]["uid"] for i in range(2)}
    ad = adapter_for(k8s_sandbox)
    [gang] = ad.observe().jobs
    assert (gang.status, gang.replicas, gang.elastic, gang.placement) == ("running", 3, True, [Share(node=n0, replicas=2)])

    change = Change("statefulset/el", "resize", n0, 1000, 0, replicas=3, from_node=n0, placement=((n0, 2), (n1, 1)))
    [out] = ad.apply([change])
    assert (out.ok, out.error) == (False, "transient") and "re-created" not in out.message, out
    assert "StatefulSet default/el spec.replicas 2 -> 3" in out.message, out
    assert json_of(apps.read_namespaced_stateful_set("el", NAMESPACE, _preload_content=False))["spec"]["replicas"] == 3
    assert ad.observe().jobs == [] and "2 of 3 pods exist" in ad.last.waiting["statefulset/el"]

    create_pod(api, owned_pod(sts, "el-2"))  # as the StatefulSet controller would
    [gang] = ad.observe().jobs
    assert gang.status == "pending" and "some pods unbound" in ad.last.waiting["statefulset/el"]
    [start] = ad.apply([Change("statefulset/el", "start", n0, 1000, 0, replicas=3, placement=((n0, 2), (n1, 1)))])
    assert start.ok and "re-created" not in start.message, start
    assert where(api, "el") == {"el-0": n0, "el-1": n0, "el-2": n1}
    assert {(get_pod(api, f"el-{i}") or {})["metadata"]["uid"] for i in range(2)} == uids  # never re-created
    [gang] = ad.observe().jobs
    assert (gang.status, gang.node, gang.placement) == ("running", n0, [Share(node=n0, replicas=2), Share(node=n1, replicas=1)])
    ad.close()


PYTORCH_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "pytorchjobs.kubeflow.org"},
    "spec": {
        "group": "kubeflow.org",
        "names": {"kind": "PyTorchJob", "plural": "pytorchjobs", "singular": "pytorchjob", "listKind": "PyTorchJobList"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


def _pytorch_pods(api: Any, owner: dict[str, Any], names: list[str], bounds: dict[str, dict[str, str]] | None = None) -> None:
    """The pods the training operator would make for ``owner``: a controller ``ownerReference`` to it;
    ``bounds``: other CPU bounds for some of them (by name)."""
    ref = {k: owner[k] for k in ("apiVersion", "kind")} | {
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    annotations = {**BOUNDS, "flowplan.io/max-replicas": "4", "flowplan.io/max-nodes": "2"}
    for name in names:
        body = pod_body(name, cpu="1", limit="2", annotations={**annotations, **(bounds or {}).get(name, {})})
        body["metadata"]["ownerReferences"] = [ref]
        create_pod(api, body)


def _crd(kind: str, plural: str) -> dict[str, Any]:
    """A CustomResourceDefinition of a Kubeflow training job, as ``PYTORCH_CRD`` (any spec accepted)."""
    crd = copy.deepcopy(PYTORCH_CRD)
    crd["metadata"]["name"] = f"{plural}.kubeflow.org"
    crd["spec"]["names"] = {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"}
    return crd


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_a_pytorchjobs_gang_grows_its_workers_only_where_the_crd_exists(k8s_sandbox: Any) -> None:
    """Pods owned by a PyTorchJob: with no PyTorchJob CRD on the server, the owner cannot be read
    (404), so the gang is the pods seen, its count fixed. With the CRD (a real CustomResourceDefinition
    on the real server; no training operator runs, so the test makes the job's pods as it would),
    the count is Master + Worker replicas, and a plan for 4 raises ``Worker`` 2 -> 3, Master kept."""
    from kubernetes import client

    from adapters.kubernetes.sandbox import api_client

    admin = api_client(k8s_sandbox)
    ext, custom = client.ApiextensionsV1Api(admin), client.CustomObjectsApi(admin)
    api = core(k8s_sandbox)
    n0, n1, _ = k8s_sandbox.nodes
    ghost = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "uid": "00000000-0000-0000-0000-0000000000aa"},
    }
    _pytorch_pods(api, ghost, ["pt-master-0", "pt-worker-0"])
    ad = adapter_for(k8s_sandbox)
    [gang] = ad.observe().jobs
    assert (gang.id, gang.replicas, gang.min_replicas) == ("pytorchjob/pt", 2, None)
    assert "no PyTorchJob CRD on the server" in ad.last.owner_fallback["pytorchjob/pt"]
    assert "its count stays 2" in ad.last.fixed_count["pytorchjob/pt"]
    [refused] = ad.apply([Change("pytorchjob/pt", "start", n0, 1000, 0, replicas=3)])
    assert (refused.ok, refused.error) == (
        False,
        "conflict",
    ) and "the plan asks 3 replicas, the gang has 2 pods" in refused.message
    for p in ("pt-master-0", "pt-worker-0"):
        api.delete_namespaced_pod(p, NAMESPACE, grace_period_seconds=0, _preload_content=False)

    ext.create_custom_resource_definition(PYTORCH_CRD, _preload_content=False)
    try:
        wait_for(lambda: _served(custom), 30, "the PyTorchJob CRD served")
        template = {"spec": pod_body("t")["spec"]}
        body = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "pt", "namespace": NAMESPACE},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": template},
                    "Worker": {"replicas": 2, "template": template},
                }
            },
        }
        owner = json_of(
            custom.create_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "pytorchjobs", body, _preload_content=False)
        )
        wait_for(lambda: sorted(where(api, "pt")) == [], 30, "the first pods gone")
        _pytorch_pods(api, owner, ["pt-master-0", "pt-worker-0", "pt-worker-1"])
        [gang] = ad.observe().jobs
        assert (gang.id, gang.status, gang.replicas, gang.min_replicas) == ("pytorchjob/pt", "pending", 4, 3)
        assert ad.last.owner_fallback == {} and ad.last.fixed_count == {}
        [out] = ad.apply([Change("pytorchjob/pt", "start", n0, 1000, 0, replicas=4, placement=((n0, 2), (n1, 2)))])
        assert (out.ok, out.error) == (False, "transient"), out
        assert "PyTorchJob default/pt spec.pytorchReplicaSpecs.Worker.replicas 2 -> 3" in out.message, out
        specs = json_of(
            custom.get_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "pytorchjobs", "pt", _preload_content=False)
        )
        assert {r: s["replicas"] for r, s in specs["spec"]["pytorchReplicaSpecs"].items()} == {"Master": 1, "Worker": 3}
        assert (
            ad.observe().jobs == []
            and "3 of 4 pods exist (PyTorchJob pt spec.pytorchReplicaSpecs)" in ad.last.waiting["pytorchjob/pt"]
        )
    finally:
        ext.delete_custom_resource_definition("pytorchjobs.kubeflow.org", _preload_content=False)
    ad.close()


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_a_tfjobs_workers_are_scaled_and_its_chief_kept(k8s_sandbox: Any) -> None:
    """A TFJob (Chief 1 + Worker 2; a real CustomResourceDefinition on the real server, its pods made
    as the training operator would): one gang of 3 pods, and a plan for 4 raises ``Worker`` 2 -> 3,
    the Chief kept. A TFJob whose parameter server asks other bounds than its workers is unmanaged,
    saying which pods differ (without the training operator's role label, a PS pod is a replica)."""
    api = core(k8s_sandbox)
    n0, n1, _ = k8s_sandbox.nodes
    with kubeflow_crd(k8s_sandbox, "TFJob", "tfjobs") as custom:
        template = {"spec": pod_body("t")["spec"]}

        def tfjob(name: str, roles: dict[str, int]) -> dict[str, Any]:
            specs = {role: {"replicas": k, "template": template} for role, k in roles.items()}
            body = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "namespace": NAMESPACE}}
            body["spec"] = {"tfReplicaSpecs": specs}
            made = custom.create_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "tfjobs", body, _preload_content=False)
            return json_of(made)

        _pytorch_pods(api, tfjob("tf", {"Chief": 1, "Worker": 2}), ["tf-chief-0", "tf-worker-0", "tf-worker-1"])
        ps_bounds = {"flowplan.io/min_cpu_millis": "500", "flowplan.io/max_cpu_millis": "500"}
        _pytorch_pods(
            api, tfjob("tfps", {"PS": 1, "Worker": 2}), ["tfps-ps-0", "tfps-worker-0", "tfps-worker-1"], {"tfps-ps-0": ps_bounds}
        )
        ad = adapter_for(k8s_sandbox)
        [gang] = ad.observe().jobs
        assert (gang.id, gang.status, gang.replicas, gang.min_replicas) == ("tfjob/tf", "pending", 4, 3)
        assert ad.last.owner_fallback == {} and ad.last.fixed_count == {}
        why = " ".join(v for k, v in ad.last.unmanaged.items() if k.startswith(f"{NAMESPACE}/tfps-"))
        assert "disagree on annotation flowplan.io/max_cpu_millis" in why and "tfps-ps-0" in why, ad.last.unmanaged
        [out] = ad.apply([Change("tfjob/tf", "start", n0, 1000, 0, replicas=4, placement=((n0, 2), (n1, 2)))])
        assert (out.ok, out.error) == (False, "transient"), out
        assert "TFJob default/tf spec.tfReplicaSpecs.Worker.replicas 2 -> 3" in out.message, out
        specs = json_of(
            custom.get_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "tfjobs", "tf", _preload_content=False)
        )
        assert {r: s["replicas"] for r, s in specs["spec"]["tfReplicaSpecs"].items()} == {"Chief": 1, "Worker": 3}
        assert "3 of 4 pods exist (TFJob tf spec.tfReplicaSpecs)" in (ad.observe(), ad.last.waiting["tfjob/tf"])[1]
    ad.close()


@contextlib.contextmanager
def kubeflow_crd(info: Any, kind: str, plural: str) -> Iterator[Any]:
    """A Kubeflow training job's CustomResourceDefinition on the sandbox, served, removed after: yields
    the ``CustomObjectsApi``."""
    from kubernetes import client

    from adapters.kubernetes.sandbox import api_client

    admin = api_client(info)
    ext, custom = client.ApiextensionsV1Api(admin), client.CustomObjectsApi(admin)
    ext.create_custom_resource_definition(_crd(kind, plural), _preload_content=False)
    try:
        wait_for(lambda: _served(custom, plural), 30, f"the {kind} CRD served")
        yield custom
    finally:
        ext.delete_custom_resource_definition(f"{plural}.kubeflow.org", _preload_content=False)


def _served(custom: Any, plural: str = "pytorchjobs") -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        custom.list_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, plural, _preload_content=False)
        return True
    except ApiException:
        return False


@pytest.mark.slow
@pytest.mark.usefixtures("k8s_no_pods")
def test_the_daemon_spreads_a_gang_no_node_can_hold(k8s_sandbox: Any, tmp_path: Any) -> None:
    """The real planner and daemon: a gang of 4 pods at 12 cores each (``max-nodes: 2``) fits on no
    32-core node; one interval starts it 2 + 2 on two nodes, and the next changes nothing."""
    from adapters.base import WallClock
    from adapters.daemon import Daemon
    from planner.policies import make_policy
    from store import StateStore

    api = core(k8s_sandbox)
    big = {"flowplan.io/min_cpu_millis": "12000", "flowplan.io/max_cpu_millis": "12000", "flowplan.io/max-nodes": "2"}
    for i in range(4):
        create_pod(api, pod_body(f"big-{i}", cpu="12", limit="12", annotations=big, labels={GANG: "big"}))
    store = StateStore(str(tmp_path / "state.db"))
    ad = adapter_for(k8s_sandbox)
    ad.store = store
    daemon = Daemon(ad, make_policy("flowplan", time_limit=2.0), WallClock(), store, interval=0.2)
    _, tick = daemon.run(max_ticks=1)
    assert tick is not None and all(o.ok for o in tick.outcomes), tick and tick.outcomes
    [start] = tick.changes
    assert (start.kind, start.replicas, len(start.placement or ())) == ("start", 4, 2), start
    (n_a, k_a), (n_b, k_b) = start.placement or ()
    assert (k_a, k_b) == (2, 2) and where(api, "big") == {"big-0": n_a, "big-1": n_a, "big-2": n_b, "big-3": n_b}
    _, again = daemon.run(max_ticks=1)
    assert again is not None and again.changes == [], again and again.changes
    [job] = again.snapshot.jobs
    assert (job.status, job.node, job.placement) == ("running", n_a, [Share(node=n_a, replicas=2), Share(node=n_b, replicas=2)])
    store.close()
    ad.close()
