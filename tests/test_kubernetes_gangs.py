"""Gangs on Kubernetes (adapters/kubernetes/gangs.py): pods sharing a ``flowplan.io/gang`` label are one
job, placed on one node all or nothing, against a real kube-apiserver with kwok's fake kubelets.

Nothing of the API is mocked (tests/k8s_env.py). One test makes a Binding fail midway: it wraps the
adapter's Binding call to delete, through the real API, the pod about to be bound, so the server's
own 404 answers the Binding (the race a user deleting a pod would cause).

Case matrix:

- grouping, without a server: superseded pods, a declared size, pods that disagree, the state of a
  split gang;
- observe: a gang of 4 is one job with 4 replicas; a gang that declares more pods than exist waits
  (no job) and its bound pods come off their node; pods that disagree on a bound make the gang
  unmanaged with a note naming both pods and the annotation; a single pod with the gang's id too;
  a change asking a gang by label for another count is a ``conflict`` naming both counts;
- the daemon: a gang of 4 that fits on no node stays pending, all 4 pods unbound, while a single
  job beside it is placed; once a node has room, one daemon interval binds all 4 to it;
- all or none: a Binding that fails on the third pod leaves no pod of the gang bound (the two bound
  ones re-created unbound, naming what they replace), and the outcome says so;
- a split gang (pods bound to two nodes) is pending, and a start gathers all its pods on one node;
- a migration of the gang replaces every pod; an interrupted one (old and new pods both live) is
  settled by ``reconcile``, which deletes the superseded old pods;
- a migration binds no replacement while an old pod of the gang still terminates (its checkpoint):
  one old pod with a 30 s grace period (kwok removes a deleted pod at its deletionTimestamp, as a
  kubelet whose container takes its whole grace period to checkpoint would) against the adapter's
  1 s wait leaves every replacement unbound, and a start once that pod has ended binds them all;
- a gang one of whose pods Succeeded since the observe is not moved (ok, nothing re-created); one
  with a Failed pod is not delivered (a ``conflict``, no annotation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from k8s_env import NAMESPACE, core, create_pod, delete_all_pods, free_node_and_start, get_pod, pod_body, pods, wait_for

from adapters.base import Change
from adapters.kubernetes.gangs import GangError, agreed, declared_size, gang_status, split_superseded
from adapters.kubernetes.pods import pod_view

MERGE = "application/merge-patch+json"
GANG = "flowplan.io/gang"
SIZE = "flowplan.io/gang-size"


def gang_pod(
    name: str, gang: str, *, node: str | None = None, size: int | None = None, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    annotations = {"flowplan.io/min_cpu_millis": "1000", "flowplan.io/max_cpu_millis": "2000", **(extra or {})}
    if size is not None:
        annotations[SIZE] = str(size)
    return pod_body(name, cpu="1", limit="2", node=node, annotations=annotations, labels={GANG: gang})


# -- without a server ----------------------------------------------------------------------------------


def _view(name: str, *, node: str | None = None, phase: str = "Running", **annotations: str) -> Any:
    raw = gang_pod(name, "g", node=node)
    raw["metadata"]["annotations"].update(annotations)
    raw["status"] = {"phase": phase}
    return pod_view(raw)


def test_grouping_rules_without_a_server() -> None:
    a, b, a1 = _view("a"), _view("b"), _view("a-r1", **{"flowplan.io/replaces": "a"})
    assert split_superseded([a, b, a1]) == ([a1, b], [a])
    assert declared_size("g", [a, b]) is None
    assert declared_size("g", [_view("x", **{SIZE: "4"}), _view("y", **{SIZE: "4"})]) == 4
    with pytest.raises(GangError, match=r"pods x and y disagree on annotation flowplan.io/gang-size \('4' vs '3'\)"):
        declared_size("g", [_view("x", **{SIZE: "4"}), _view("y", **{SIZE: "3"})])
    with pytest.raises(GangError, match=r"flowplan.io/gang-size: must be a whole number from 1 to 1024 \('four'\)"):
        declared_size("g", [_view("x", **{SIZE: "four"})])
    with pytest.raises(GangError, match=r"pods a and b disagree on annotation flowplan.io/priority \('2' vs None\)"):
        agreed("g", [_view("a", **{"flowplan.io/priority": "2"}), b])
    agreed("g", [a, _view("b", **{"flowplan.io/checkpoint-requested": "now"})])  # written annotations may differ
    assert gang_status([_view("a", node="n0"), _view("b", node="n0")]) == ("running", "n0", None)
    assert gang_status([_view("a"), _view("b")])[:2] == ("pending", None)
    status, node, note = gang_status([_view("a", node="n0"), _view("b", node="n1")])
    assert (status, node) == ("pending", None) and note is not None and "a on n0, b on n1" in note
    assert gang_status([_view("a", node="n0", phase="Failed"), _view("b", node="n0")])[0] == "finished"
    assert gang_status([_view("a", node="n0", phase="Succeeded"), _view("b", node="n0")]) == ("running", "n0", None)


# -- against the sandbox ---------------------------------------------------------------------------------


@pytest.fixture
def api(k8s_sandbox: Any) -> Any:
    api = core(k8s_sandbox)
    delete_all_pods(api)
    yield api
    delete_all_pods(api)


def adapter_for(info: Any) -> Any:
    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.sandbox import api_client

    return KubernetesAdapter(api_client(info), namespaces=[NAMESPACE])


def members(api: Any, gang: str) -> list[dict[str, Any]]:
    return sorted(
        (
            p
            for p in pods(api)
            if (p["metadata"].get("labels") or {}).get(GANG) == gang and not p["metadata"].get("deletionTimestamp")
        ),
        key=lambda p: p["metadata"]["name"],
    )


def nodes_of(api: Any, gang: str) -> list[str | None]:
    return [p["spec"].get("nodeName") for p in members(api, gang)]


@pytest.mark.slow
def test_observe_groups_a_gang_and_names_what_is_wrong(k8s_sandbox: Any, api: Any) -> None:
    n0, n1, _ = k8s_sandbox.nodes
    for i in range(4):
        create_pod(api, gang_pod(f"four-{i}", "four", size=4))
    create_pod(api, gang_pod("half-0", "half", node=n0, size=3))  # 2 of 3 pods: waits
    create_pod(api, gang_pod("half-1", "half", node=n0, size=3))
    create_pod(api, gang_pod("odd-0", "odd"))
    create_pod(api, gang_pod("odd-1", "odd", extra={"flowplan.io/max_cpu_millis": "3000"}))
    create_pod(api, gang_pod("twin-0", "twin", node=n1))
    create_pod(api, pod_body("twin", node=n1))  # a single pod whose job id (its name) is the gang's

    ad = adapter_for(k8s_sandbox)
    snap = ad.observe()
    jobs = {j.id: j for j in snap.jobs}
    assert set(jobs) == {"four", "twin"}, jobs
    four = jobs["four"]
    assert (four.status, four.replicas, four.min_cpu_millis, four.max_cpu_millis) == ("pending", 4, 1000, 2000)
    assert "2 of 3 pods exist" in ad.last.waiting["half"]
    nodes = {n.name: n for n in snap.nodes}
    assert nodes[n0].cpu_millis == 32000 - 2 * 1000  # the waiting gang's bound pods hold their requests
    why = ad.last.unmanaged["default/odd-1"]
    assert "pods odd-0 and odd-1 disagree on annotation flowplan.io/max_cpu_millis ('2000' vs '3000')" in why, why
    assert "same job id" in ad.last.unmanaged["default/twin-0"]
    assert jobs["twin"].replicas == 1 and jobs["twin"].node == n1  # the single pod stays a job

    outcomes = ad.apply([Change("half", "start", n0, 1000, 0, replicas=3), Change("four", "start", n0, 1000, 0, replicas=3)])
    assert [(o.ok, o.error) for o in outcomes] == [(False, "not_found"), (False, "conflict")], outcomes
    must = "job four: the plan asks 3 replicas, the gang has 4 pods; a gang by label flowplan.io/gang: its count is its pods"
    assert outcomes[1].message == must, outcomes
    assert nodes_of(api, "four") == [None] * 4


@pytest.mark.slow
def test_a_gang_is_placed_whole_once_a_node_has_room(k8s_sandbox: Any, api: Any, tmp_path: Path) -> None:
    """Every node has 2.5 cores left (a foreign pod holds the rest): a gang of 4 pods at 1 core each
    fits on none, though the nodes together have 7.5 cores free, so it stays pending, all 4 pods
    unbound, through two daemon intervals; a single 1-core pod is placed meanwhile. Freeing one
    node, the next interval binds all 4 pods to it."""
    from adapters.base import WallClock
    from adapters.daemon import Daemon
    from planner.policies import make_policy
    from store import StateStore

    for node in k8s_sandbox.nodes:
        create_pod(api, pod_body(f"hog-{node}", cpu="29500m", limit=None, node=node, scheduler="default-scheduler"))
    for i in range(4):
        create_pod(api, gang_pod(f"gang4-{i}", "gang4", size=4))
    create_pod(api, pod_body("solo", cpu="1", limit="2", annotations={"flowplan.io/min_cpu_millis": "1000"}))

    store = StateStore(str(tmp_path / "state.db"))
    ad = adapter_for(k8s_sandbox)
    ad.store = store
    daemon = Daemon(ad, make_policy("flowplan", time_limit=1.0), WallClock(), store, interval=0.2)
    count, tick = daemon.run(max_ticks=2)
    assert tick is not None
    assert all(o.ok for o in tick.outcomes), tick.outcomes
    assert nodes_of(api, "gang4") == [None] * 4  # not one of them placed
    assert wait_for(lambda: (get_pod(api, "solo") or {}).get("spec", {}).get("nodeName"), 10, "solo bound")
    assert [j.status for j in tick.snapshot.jobs if j.id == "gang4"] == ["pending"]
    unserved = {u.job for u in tick.plan.unserved}
    assert "gang4" in unserved, tick.plan.model_dump_json()[:2000]

    free = k8s_sandbox.nodes[1]
    free_node_and_start(api, daemon, free, "gang4", 4)
    assert nodes_of(api, "gang4") == [free] * 4
    snap = ad.observe()
    [job] = [j for j in snap.jobs if j.id == "gang4"]
    assert (job.status, job.node, job.replicas) == ("running", free, 4)
    store.close()


@pytest.mark.slow
def test_a_binding_that_fails_midway_leaves_no_pod_bound(k8s_sandbox: Any, api: Any) -> None:
    node = k8s_sandbox.nodes[0]
    for i in range(4):
        create_pod(api, gang_pod(f"frail-{i}", "frail"))
    ad = adapter_for(k8s_sandbox)
    ad.observe()
    real = ad.api.create_namespaced_pod_binding
    calls: list[str] = []

    def bind(name: str, namespace: str, body: Any, **kw: Any) -> Any:
        calls.append(name)
        if len(calls) == 3:  # the pod goes away just before its Binding: the server answers 404
            api.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _preload_content=False)
            wait_for(lambda: get_pod(api, name) is None, 30, f"{name} deleted")
        return real(name, namespace, body, **kw)

    ad.api.create_namespaced_pod_binding = bind
    [outcome] = ad.apply([Change("frail", "start", node, 1000, 0, replicas=4)])
    assert (outcome.ok, outcome.error) == (False, "not_found"), outcome
    assert "gang not placed: binding frail-2" in outcome.message and "re-created unbound" in outcome.message, outcome
    left = members(api, "frail")
    assert [p["spec"].get("nodeName") for p in left] == [None, None, None]  # none bound: all or nothing
    replaced = sorted((p["metadata"]["annotations"] or {}).get("flowplan.io/replaces", "") for p in left)
    assert replaced == ["", "frail-0", "frail-1"]
    assert calls == ["frail-0", "frail-1", "frail-2"]


@pytest.mark.slow
def test_a_split_gang_is_gathered_by_its_start(k8s_sandbox: Any, api: Any) -> None:
    n0, n1, n2 = k8s_sandbox.nodes
    for i, node in enumerate((n0, n0, n1, None)):
        create_pod(api, gang_pod(f"split-{i}", "split", node=node))
    ad = adapter_for(k8s_sandbox)
    [job] = ad.observe().jobs
    assert (job.status, job.replicas) == ("pending", 4) and "split" in ad.last.waiting["split"]
    [outcome] = ad.apply([Change("split", "start", n2, 1000, 0, replicas=4)])
    assert outcome.ok, outcome
    wait_for(lambda: nodes_of(api, "split") == [n2] * 4, 30, "all four on n2")
    [job] = ad.observe().jobs
    assert (job.status, job.node, job.replicas) == ("running", n2, 4)


@pytest.mark.slow
def test_a_gang_migrates_whole_and_an_interrupted_one_is_settled(k8s_sandbox: Any, api: Any) -> None:
    n0, n1, _ = k8s_sandbox.nodes
    for i in range(3):
        create_pod(api, gang_pod(f"mig-{i}", "mig", node=n0))
    ad = adapter_for(k8s_sandbox)
    ad.observe()
    [outcome] = ad.apply([Change("mig", "migrate", n1, 1500, 0, replicas=3, from_node=n0)])
    assert outcome.ok and "re-created 3 pods" in outcome.message, outcome
    wait_for(lambda: [p["metadata"]["name"] for p in members(api, "mig")] == ["mig-0-r1", "mig-1-r1", "mig-2-r1"], 30, "old gone")
    assert nodes_of(api, "mig") == [n1] * 3
    assert {p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in members(api, "mig")} == {"1500m"}

    # Interrupted: the replacement of mig-0-r1 exists (on n0) but the old pod was never deleted.
    body = gang_pod("mig-0-r2", "mig", node=n0, extra={"flowplan.io/replaces": "mig-0-r1"})
    create_pod(api, body)
    [job] = ad.observe().jobs
    assert job.replicas == 3 and job.status == "pending"  # mig-0-r2 on n0, the others on n1: split
    assert [p.name for p in ad.last.gangs["mig"].duplicates] == ["mig-0-r1"]
    done = ad.reconcile()
    assert done == ["mig: deleted superseded gang pod mig-0-r1"], done
    wait_for(lambda: get_pod(api, "mig-0-r1") is None, 30, "superseded pod deleted")


@pytest.mark.slow
def test_a_gang_that_ended_since_the_observe_is_not_moved(k8s_sandbox: Any, api: Any) -> None:
    n0, n1, _ = k8s_sandbox.nodes
    for i in range(2):
        create_pod(api, gang_pod(f"end-{i}", "end", node=n0))
    wait_for(
        lambda: all((get_pod(api, f"end-{i}") or {}).get("status", {}).get("phase") == "Running" for i in range(2)), 30, "Running"
    )
    ad = adapter_for(k8s_sandbox)
    ad.observe()
    # Rank 0 ends (as a kubelet writes it) after the observe, before the plan's move reaches the server.
    api.patch_namespaced_pod_status(
        "end-0", NAMESPACE, {"status": {"phase": "Succeeded"}}, _preload_content=False, _content_type=MERGE
    )
    wait_for(lambda: (get_pod(api, "end-0") or {}).get("status", {}).get("phase") == "Succeeded", 10, "end-0 Succeeded")
    [outcome] = ad.apply([Change("end", "migrate", n1, 1500, 0, replicas=2, from_node=n0)])
    assert (outcome.ok, outcome.message) == (True, "finished before the move: nothing to move"), outcome
    assert [p["metadata"]["name"] for p in members(api, "end")] == ["end-0", "end-1"]  # nothing re-created
    assert nodes_of(api, "end") == [n0, n0]
    status = {"status": {"phase": "Failed"}}
    api.patch_namespaced_pod_status("end-1", NAMESPACE, status, _preload_content=False, _content_type=MERGE)
    wait_for(lambda: (get_pod(api, "end-1") or {}).get("status", {}).get("phase") == "Failed", 10, "end-1 Failed")
    [refused] = ad.apply([Change("end", "deliver", n0, 0, 0, replicas=2)])
    assert (refused.ok, refused.error) == (False, "conflict") and "end-1 Failed: nothing to deliver" in refused.message
    assert not any("flowplan.io/deliver-requested" in (p["metadata"].get("annotations") or {}) for p in members(api, "end"))


@pytest.mark.slow
def test_a_gang_migration_binds_no_replacement_before_every_old_pod_has_ended(k8s_sandbox: Any, api: Any) -> None:
    n0, n1, _ = k8s_sandbox.nodes
    create_pod(api, gang_pod("ck-0", "ck", node=n0))
    slow = gang_pod("ck-1", "ck", node=n0)
    slow["spec"]["terminationGracePeriodSeconds"] = 30
    create_pod(api, slow)
    for name in ("ck-0", "ck-1"):  # kwok runs them: a deleted pod then goes at its grace period, not at once
        wait_for(lambda n=name: (get_pod(api, n).get("status") or {}).get("phase") == "Running", 30, f"{name} Running")
    ad = adapter_for(k8s_sandbox)
    ad.checkpoint_timeout = 1.0
    ad.observe()
    [outcome] = ad.apply([Change("ck", "migrate", n1, 1500, 0, replicas=2, from_node=n0)])
    assert (outcome.ok, outcome.error) == (False, "transient"), outcome
    # ck-1 for sure (ck-0 too on a machine too busy to let kwok remove it within the second)
    assert "still terminating after 1 s" in outcome.message and "wait unbound" in outcome.message, outcome.message
    assert nodes_of(api, "ck") == [None, None]  # both replacements, neither bound
    old = get_pod(api, "ck-1")
    assert old is not None and old["metadata"].get("deletionTimestamp") and old["spec"]["nodeName"] == n0

    api.delete_namespaced_pod("ck-1", NAMESPACE, grace_period_seconds=0, _preload_content=False)  # its checkpoint is done
    wait_for(lambda: get_pod(api, "ck-1") is None and get_pod(api, "ck-0") is None, 30, "old pods gone")
    [job] = ad.observe().jobs
    assert (job.id, job.status, job.replicas) == ("ck", "pending", 2)
    [started] = ad.apply([Change("ck", "start", n1, 1500, 0, replicas=2)])
    assert started.ok, started
    assert nodes_of(api, "ck") == [n1, n1]
    assert [p["metadata"]["name"] for p in members(api, "ck")] == ["ck-0-r1", "ck-1-r1"]
