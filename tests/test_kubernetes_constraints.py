"""A pod's node constraints (``nodeSelector``, required node affinity) kept by the Kubernetes adapter.

FlowPlan binds its pods itself: no scheduler reads their constraints, so the adapter must, or it
would bind a pod where the kubelet refuses it. Case matrix:

- ``node_constraints`` (pure): a nodeSelector; an affinity ``In`` on ``nvidia.com/gpu.product`` (a
  choice of GPU models) and on another label (one value); the two sources combined; every form it
  cannot express (several terms, ``NotIn``, ``Exists``, ``matchFields``, several values on another
  label, no model left) refused with the field named;
- against a real kube-apiserver + etcd with kwok's kubelets (tests/k8s_env.py): the snapshot's jobs
  carry the constraints, a pod it cannot express is unmanaged and named, and one daemon tick binds
  each pod only to a node its constraints allow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from k8s_env import core, create_pod, delete_all_pods, get_pod, pod_body, wait_for

from adapters.kubernetes.pods import GPU_PRODUCT_LABEL, PlacementError, node_constraints

MERGE = "application/merge-patch+json"


def _affinity(*exprs: dict[str, Any], terms: int = 1) -> dict[str, Any]:
    term = {"matchExpressions": list(exprs)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term] * terms}}}


def _pod(**spec: Any) -> dict[str, Any]:
    return {"spec": spec}


def test_what_the_contract_can_say_is_read() -> None:
    assert node_constraints(_pod()) == ({}, None)
    assert node_constraints(_pod(nodeSelector={"zone": "b"})) == ({"zone": "b"}, None)
    gpu = {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": ["V100M32", "V100M16"]}
    zone = {"key": "zone", "operator": "In", "values": ["b"]}
    assert node_constraints(_pod(affinity=_affinity(gpu, zone))) == ({"zone": "b"}, ["V100M16", "V100M32"])
    both = _pod(nodeSelector={GPU_PRODUCT_LABEL: "V100M16"}, affinity=_affinity(gpu))
    assert node_constraints(both) == ({}, ["V100M16"])
    preferred = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]}}
    assert node_constraints(_pod(affinity=preferred)) == ({}, None)


@pytest.mark.parametrize(
    ("pod", "needle"),
    [
        (_pod(affinity=_affinity({"key": "zone", "operator": "In", "values": ["a"]}, terms=2)), "2 terms"),
        (_pod(affinity=_affinity({"key": "zone", "operator": "NotIn", "values": ["a"]})), "matchExpressions[0]: zone NotIn"),
        (_pod(affinity=_affinity({"key": "zone", "operator": "Exists"})), "zone Exists"),
        (_pod(affinity=_affinity({"key": "zone", "operator": "In", "values": ["a", "b"]})), "one value per label"),
        (
            _pod(nodeSelector={"zone": "a"}, affinity=_affinity({"key": "zone", "operator": "In", "values": ["b"]})),
            "zone In ['b']",
        ),
        (
            _pod(
                nodeSelector={GPU_PRODUCT_LABEL: "T4"},
                affinity=_affinity({"key": GPU_PRODUCT_LABEL, "operator": "In", "values": ["V100M16"]}),
            ),
            "leaves no GPU model",
        ),
        (
            {
                "spec": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}
                                ]
                            }
                        }
                    }
                }
            },
            "matchFields",
        ),  # fmt: skip
    ],
)
def test_what_it_cannot_say_is_refused_naming_the_field(pod: dict[str, Any], needle: str) -> None:
    with pytest.raises(PlacementError) as e:
        node_constraints(pod)
    assert needle in str(e.value) and "spec.affinity" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_the_adapter_keeps_them_and_binds_only_where_they_allow(k8s_sandbox: Any, tmp_path: Path) -> None:
    from adapters.base import WallClock
    from adapters.daemon import Daemon
    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.sandbox import api_client
    from planner.policies import make_policy
    from store import StateStore

    api = core(k8s_sandbox)
    delete_all_pods(api)
    n0, n1, n2 = k8s_sandbox.nodes
    marks = {n0: {"zone": "a", GPU_PRODUCT_LABEL: "T4"}, n1: {"zone": "b", GPU_PRODUCT_LABEL: "V100M16"},
             n2: {"zone": "a", GPU_PRODUCT_LABEL: "V100M32"}}  # fmt: skip
    for node, labels in marks.items():
        api.patch_node(node, {"metadata": {"labels": labels}}, _preload_content=False, _content_type=MERGE)
    try:
        zonal = pod_body("zonal")
        zonal["spec"]["nodeSelector"] = {"zone": "b"}
        either = pod_body("either")
        either["spec"]["affinity"] = _affinity({"key": GPU_PRODUCT_LABEL, "operator": "In", "values": ["V100M16", "V100M32"]})
        t4 = pod_body("t4-only")
        t4["spec"]["nodeSelector"] = {GPU_PRODUCT_LABEL: "T4"}
        odd = pod_body("odd")
        odd["spec"]["affinity"] = _affinity({"key": "zone", "operator": "NotIn", "values": ["a"]})
        for body in (zonal, either, t4, odd):
            create_pod(api, body)

        adapter = KubernetesAdapter(api_client(k8s_sandbox), namespaces=["default"])
        snap = adapter.observe()
        jobs = {j.id: j for j in snap.jobs}
        assert set(jobs) == {"zonal", "either", "t4-only"}
        assert jobs["zonal"].node_selector == {"zone": "b"} and jobs["zonal"].gpu_type is None
        assert jobs["either"].gpu_type == ["V100M16", "V100M32"] and jobs["t4-only"].gpu_type == "T4"
        assert "zone NotIn ['a'] cannot be planned" in adapter.last.unmanaged["default/odd"]

        store = StateStore(str(tmp_path / "state.db"))
        adapter.store = store
        daemon = Daemon(adapter, make_policy("flowplan", time_limit=1.0), WallClock(), store, interval=1.0)
        count, tick = daemon.run(max_ticks=1)
        store.close()
        assert count == 1 and tick is not None and all(o.ok for o in tick.outcomes), tick.outcomes
        allowed = {"zonal": {n1}, "either": {n1, n2}, "t4-only": {n0}}
        for name, nodes in allowed.items():
            pod = wait_for(lambda n=name: (p := get_pod(api, n)) and p["spec"].get("nodeName") and p, 30, f"{name} bound")
            assert pod["spec"]["nodeName"] in nodes, (name, pod["spec"]["nodeName"])
        assert get_pod(api, "odd")["spec"].get("nodeName") is None  # type: ignore[index]  # left alone
    finally:
        delete_all_pods(api)
        for node, labels in marks.items():
            api.patch_node(node, {"metadata": {"labels": dict.fromkeys(labels)}}, _preload_content=False, _content_type=MERGE)
