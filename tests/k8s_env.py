"""A real Kubernetes control plane for the tests: :class:`adapters.kubernetes.sandbox.Sandbox` on free ports.

The binaries (etcd, kube-apiserver, kwok) are built by ``deploy/sandbox/build.sh`` into
``~/.cache/flowplan/bin`` (``.ci/run`` builds them). In CI (``CI`` set) missing binaries fail the
tests; elsewhere they skip them, with the command that builds them.

Helpers make FlowPlan pods as a user would write them: ``schedulerName: flowplan``, bounds in
``flowplan.io/*`` annotations, one container with a CPU request and limit.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

NAMESPACE = "default"


def start_sandbox(directory: Path, nodes: int = 3, gpus: int = 0) -> tuple[Any, Any]:
    from adapters.kubernetes.sandbox import BUILD_HINT, Sandbox, free_port, missing_binaries

    missing = missing_binaries()
    if missing:
        reason = f"{missing[0]} missing; build with: {BUILD_HINT}"
        if os.environ.get("CI"):
            pytest.fail(f"Kubernetes sandbox binaries required in CI: {reason}")
        pytest.skip(f"no Kubernetes sandbox binaries: {reason}")
    ports = {"apiserver": free_port(), "etcd": free_port(), "etcd_peer": free_port(), "kubelet": free_port()}
    sandbox = Sandbox(directory / "sandbox", ports=ports)
    info = sandbox.up(nodes, gpus)
    return sandbox, info


def core(info: Any, token: str | None = None) -> Any:
    from kubernetes import client

    from adapters.kubernetes.sandbox import api_client

    return client.CoreV1Api(api_client(info, token))


def pod_body(
    name: str,
    *,
    cpu: str = "500m",
    limit: str | None = "2",
    node: str | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    scheduler: str = "flowplan",
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "256Mi"}}
    if limit is not None:
        resources["limits"] = {"cpu": limit, "memory": "512Mi"}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "train", "image": "flowplan/train:local", "resources": resources}],
        "terminationGracePeriodSeconds": 1,
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations or {}, "labels": labels or {}},
        "spec": spec,
    }


def create_pod(api: Any, body: dict[str, Any]) -> dict[str, Any]:
    import json

    resp = api.create_namespaced_pod(NAMESPACE, body, _preload_content=False)
    return dict(json.loads(resp.data))


def get_pod(api: Any, name: str) -> dict[str, Any] | None:
    import json

    from kubernetes.client.exceptions import ApiException

    try:
        return dict(json.loads(api.read_namespaced_pod(name, NAMESPACE, _preload_content=False).data))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def pods(api: Any) -> list[dict[str, Any]]:
    import json

    return list(json.loads(api.list_namespaced_pod(NAMESPACE, _preload_content=False).data)["items"])


def free_node_and_start(api: Any, daemon: Any, node: str, job: str, replicas: int) -> Any:
    """Delete the foreign pod ``hog-<node>`` and run one daemon interval: its tick, after checking
    that the interval's one change for ``job`` starts all ``replicas`` on ``node`` and every change is ok."""
    api.delete_namespaced_pod(f"hog-{node}", NAMESPACE, grace_period_seconds=0, _preload_content=False)
    wait_for(lambda: get_pod(api, f"hog-{node}") is None, 30, "hog deleted")
    _, tick = daemon.run(max_ticks=1)
    assert tick is not None
    starts = [c for c in tick.changes if c.job == job]
    assert [(c.kind, c.node, c.replicas) for c in starts] == [("start", node, replicas)], tick.changes
    assert all(o.ok for o in tick.outcomes), tick.outcomes
    return tick


#: What :func:`create_owner` makes, by kind: (API group/version, the count's field in the spec).
OWNER_KINDS = {"Job": ("batch/v1", "parallelism"), "StatefulSet": ("apps/v1", "replicas"), "ReplicaSet": ("apps/v1", "replicas")}


def create_owner(
    info: Any, kind: str, name: str, count: int, template: dict[str, Any], completions: int | None = None
) -> dict[str, Any]:
    """A Job (``parallelism`` = ``count``, and ``completions`` if given), StatefulSet or ReplicaSet
    (``replicas``) whose pod template is ``template`` (a :func:`pod_body`), as the server returns it.
    There is no controller-manager in the sandbox: nothing makes its pods (:func:`owned_pod` does, as
    the controller would). One of that name left by an earlier test is replaced."""
    import json

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from adapters.kubernetes.sandbox import api_client

    api_version, count_field = OWNER_KINDS[kind]
    spec = copy.deepcopy(template["spec"])
    spec.pop("nodeName", None)
    labels = {"app": name}
    tmpl = {"metadata": {"labels": labels, "annotations": dict(template["metadata"]["annotations"])}, "spec": spec}
    body: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": NAMESPACE}}
    if kind == "Job":
        spec["restartPolicy"] = "Never"
        body["spec"] = {"parallelism": count, "template": tmpl}
        if completions is not None:
            body["spec"]["completions"] = completions
    else:
        body["spec"] = {count_field: count, "selector": {"matchLabels": labels}, "template": tmpl}
        if kind == "StatefulSet":
            body["spec"]["serviceName"] = name
    calls = {
        "Job": (client.BatchV1Api, "namespaced_job"),
        "StatefulSet": (client.AppsV1Api, "namespaced_stateful_set"),
        "ReplicaSet": (client.AppsV1Api, "namespaced_replica_set"),
    }
    api_class, suffix = calls[kind]
    api = api_class(api_client(info))
    try:
        # Background: no finalizer (a Job's default, orphan, waits for the garbage collector, not here)
        getattr(api, "delete_" + suffix)(name, NAMESPACE, propagation_policy="Background", _preload_content=False)
        wait_for(lambda: not _exists(getattr(api, "read_" + suffix), name), 30, f"{kind} {name} deleted")
    except ApiException as exc:
        if exc.status != 404:
            raise
    resp = getattr(api, "create_" + suffix)(NAMESPACE, body, _preload_content=False)
    return dict(json.loads(resp.data))


def _exists(read: Any, name: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        read(name, NAMESPACE, _preload_content=False)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def owned_pod(
    owner: dict[str, Any], name: str, *, node: str | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod of ``owner`` (from :func:`create_owner`) as its controller would make it: the template's
    labels, annotations and spec, and a controller ``ownerReference`` to the owner."""
    tmpl = owner["spec"]["template"]
    meta = {
        "name": name,
        "namespace": NAMESPACE,
        "labels": {**(tmpl["metadata"].get("labels") or {}), **(labels or {})},
        "annotations": dict(tmpl["metadata"].get("annotations") or {}),
        "ownerReferences": [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    spec = copy.deepcopy(tmpl["spec"])
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def delete_all_pods(api: Any) -> None:
    from kubernetes.client.exceptions import ApiException

    for p in pods(api):
        try:
            api.delete_namespaced_pod(p["metadata"]["name"], NAMESPACE, grace_period_seconds=0, _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:  # gone between the list and the delete (a graceful deletion ending): fine
                raise
    wait_for(lambda: not pods(api), 30, "pods deleted")


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for: {what}")


RBAC = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "rbac.yaml"


def rbac_objects(namespace: str, drop: tuple[str, str, str] | None = None) -> list[dict[str, Any]]:
    """``deploy/kubernetes/rbac.yaml`` as ``kubectl apply -k`` would place it in ``namespace`` (the
    namespaced objects and the ServiceAccount subjects moved there), less the verb ``drop`` =
    (kind/name of the role, resource, verb)."""
    import yaml

    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    for d in docs:
        if d["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            d["metadata"]["namespace"] = namespace
        for s in d.get("subjects") or []:
            if s["kind"] == "ServiceAccount":
                s["namespace"] = namespace
        if drop is not None and f"{d['kind']}/{d['metadata']['name']}" == drop[0]:
            for rule in d["rules"]:
                if drop[1] in rule["resources"]:
                    rule["verbs"] = [v for v in rule["verbs"] if v != drop[2]]
            d["rules"] = [r for r in d["rules"] if r["verbs"]]
    return docs


def apply_rbac(info: Any, namespace: str, drop: tuple[str, str, str] | None = None) -> None:
    """Create or replace the RBAC objects (and the namespace) on the sandbox, as admin."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from adapters.kubernetes.sandbox import api_client

    admin = api_client(info)
    core_api, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    try:
        core_api.create_namespace({"metadata": {"name": namespace}}, _preload_content=False)
    except ApiException as exc:
        if exc.status != 409:
            raise
    calls = {
        "ServiceAccount": (core_api.create_namespaced_service_account, core_api.replace_namespaced_service_account),
        "ClusterRole": (rbac.create_cluster_role, rbac.replace_cluster_role),
        "ClusterRoleBinding": (rbac.create_cluster_role_binding, rbac.replace_cluster_role_binding),
        "Role": (rbac.create_namespaced_role, rbac.replace_namespaced_role),
        "RoleBinding": (rbac.create_namespaced_role_binding, rbac.replace_namespaced_role_binding),
    }
    for d in rbac_objects(namespace, drop):
        create, replace = calls[d["kind"]]
        ns = [d["metadata"]["namespace"]] if "namespace" in d["metadata"] else []
        try:
            create(*ns, d, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise
            replace(d["metadata"]["name"], *ns, d, _preload_content=False)
    wait_rbac(info, namespace, drop)


def rbac_rules(namespace: str, drop: tuple[str, str, str] | None = None) -> list[tuple[str, str, str]]:
    """Every (kind/name of the role, resource, verb) the RBAC objects grant, less ``drop``."""
    out = []
    for d in rbac_objects(namespace, drop):
        for rule in d.get("rules") or []:
            for resource in rule["resources"]:
                out.extend((f"{d['kind']}/{d['metadata']['name']}", resource, verb) for verb in rule["verbs"])
    return out


def _allowed(info: Any, namespace: str, rule: tuple[str, str, str]) -> bool:
    """Whether the API server's authorizer lets the ServiceAccount do ``rule`` (a SubjectAccessReview)."""
    import json

    from kubernetes import client

    from adapters.kubernetes.sandbox import api_client

    _, resource, verb = rule
    res, _, sub = resource.partition("/")
    attrs: dict[str, str] = {"verb": verb, "resource": res, "subresource": sub}
    if res == "leases":
        attrs.update(group="coordination.k8s.io", namespace=namespace, name="flowplan-daemon")
    elif res == "pods":
        attrs.update(namespace=NAMESPACE)
    elif res in ("jobs", "statefulsets", "replicasets"):
        attrs.update(group="batch" if res == "jobs" else "apps", namespace=NAMESPACE)
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:flowplan",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            "resourceAttributes": attrs,
        },
    }
    api = client.AuthorizationV1Api(api_client(info))
    return bool(json.loads(api.create_subject_access_review(body, _preload_content=False).data)["status"].get("allowed"))


def wait_rbac(info: Any, namespace: str, drop: tuple[str, str, str] | None = None) -> None:
    """Until the authorizer (which reads RBAC from a cache) grants every rule and denies ``drop``."""
    rules = rbac_rules(namespace, drop)
    wait_for(
        lambda: all(_allowed(info, namespace, r) for r in rules) and (drop is None or not _allowed(info, namespace, drop)),
        30,
        f"RBAC in effect for namespace {namespace} (without {drop})",
    )


def service_account_kubeconfig(info: Any, namespace: str, path: Path, name: str = "flowplan") -> str:
    """A kubeconfig with a token minted for the ServiceAccount (TokenRequest API), as a pod would have one."""
    import json

    resp = core(info).create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": 3600}}, _preload_content=False
    )
    token = json.loads(resp.data)["status"]["token"]
    config = json.loads(Path(info.kubeconfig).read_text())
    config["users"] = [{"name": name, "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = name
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return str(path)
