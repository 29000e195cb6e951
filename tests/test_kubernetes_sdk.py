"""``flowplan.sdk`` hears the Kubernetes adapter's requests through the pod's downward-API volume.

Against the sandbox's real API server (kwok's fake kubelets run no container, so the one faked part
is the kubelet's projection of ``metadata.annotations`` into the volume's file, rendered here as the
kubelet writes it: ``key="value"`` lines, sorted, values Go-quoted). Case matrix:

- the annotation names the adapter writes are the ones the SDK reads;
- the example pod spec (``examples/kubernetes/submit_pods.py``: the volume, ``FLOWPLAN_CONTROL_DIR``)
  is accepted by the API server;
- the adapter's ``deliver`` annotates the pod; the projected file is a deliver request for the SDK,
  once (the same value again is none);
- a migration's replacement keeps the volume and the environment and carries neither request: a
  resumed job is not asked again.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from k8s_env import NAMESPACE, core, create_pod, get_pod, pods, wait_for

import flowplan.sdk as sdk
from adapters.base import Change
from adapters.kubernetes.annotations import CHECKPOINT_REQUESTED, DELIVER_REQUESTED

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("k8s_no_pods")]
REPO = Path(__file__).resolve().parents[1]


def example_pod(name: str, node: str) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("submit_pods", REPO / "examples" / "kubernetes" / "submit_pods.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    body: dict[str, Any] = mod.pod(name, NAMESPACE, 0)
    body["spec"]["nodeName"] = node
    body["spec"]["terminationGracePeriodSeconds"] = 1
    return body


def project(pod: dict[str, Any], directory: Path) -> Path:
    """What the kubelet writes for a ``fieldRef: metadata.annotations`` item (sorted ``key="value"`` lines)."""
    ann = pod["metadata"].get("annotations") or {}
    path = directory / "annotations"
    path.write_text("\n".join(f"{k}={json.dumps(v)}" for k, v in sorted(ann.items())))
    return path


def test_the_adapter_writes_the_annotations_the_sdk_reads() -> None:
    assert (sdk.CHECKPOINT_ANNOTATION, sdk.DELIVER_ANNOTATION) == (CHECKPOINT_REQUESTED, DELIVER_REQUESTED)


def test_deliver_reaches_the_sdk_through_the_projected_annotations(k8s_sandbox: Any, tmp_path: Path) -> None:
    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.sandbox import api_client

    api = core(k8s_sandbox)
    src, dst = k8s_sandbox.nodes[0], k8s_sandbox.nodes[1]
    create_pod(api, example_pod("reader", src))
    wait_for(lambda: (p := get_pod(api, "reader")) and p["status"].get("phase") == "Running", 30, "reader Running")
    adapter = KubernetesAdapter(api_client(k8s_sandbox), namespaces=[NAMESPACE])
    adapter.observe()
    control = sdk.Control("reader", tmp_path, signals=False)
    project(get_pod(api, "reader") or {}, tmp_path)
    control.poll(force=True)
    assert control.deliver is None and control.checkpoint is None  # nothing asked yet

    [out] = adapter.apply([Change(job="reader", kind="deliver", node=src, cpu_millis=250, gpus=0, from_node=src)])
    assert out.ok, out
    pod = get_pod(api, "reader") or {}
    project(pod, tmp_path)
    control.poll(force=True)
    assert control.deliver is not None and DELIVER_REQUESTED in control.deliver.by
    assert pod["metadata"]["annotations"][DELIVER_REQUESTED] in control.deliver.by
    control.deliver = None  # delivered
    control.poll(force=True)
    assert control.deliver is None  # the same value is not a new request

    adapter.observe()
    [out] = adapter.apply([Change(job="reader", kind="migrate", node=dst, cpu_millis=250, gpus=0, from_node=src)])
    assert out.ok, out
    wait_for(lambda: get_pod(api, "reader") is None, 30, "old pod gone")
    [new] = pods(api)
    container = new["spec"]["containers"][0]
    assert {"name": "FLOWPLAN_CONTROL_DIR", "value": "/etc/flowplan"} in container["env"]
    assert container["volumeMounts"][0]["mountPath"] == "/etc/flowplan"
    assert new["spec"]["volumes"][0]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == "metadata.annotations"
    fresh = tmp_path / "new"
    fresh.mkdir()
    project(new, fresh)
    resumed = sdk.Control("reader", fresh, signals=False)
    resumed.poll(force=True)
    assert resumed.deliver is None and resumed.checkpoint is None
