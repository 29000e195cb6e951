"""Watches of FlowPlan's pods against a real kube-apiserver: the daemon re-plans when a job arrives or ends.

Case matrix (``adapters.kubernetes.watch.PodWatch``, every event from the real server's watch):

- a pending ``schedulerName: flowplan`` pod, and a pending pod with only the ``flowplan.io/job``
  label, each wake the daemon ("pending"), a pod both watches see once; binding a pod wakes nothing; a pod that ends
  (``Succeeded``, written to its status as a kubelet writes it) wakes once ("ended"), a deleted one
  again ("deleted"); a pod that is not FlowPlan's wakes nothing;
- a watch the server ends (``timeoutSeconds``, made 1 s here) is resumed from its last
  ``resourceVersion``: events after several such ends still arrive, none twice;
- a watch RBAC forbids fails in one line naming the verb (``last_error``), and nothing is woken;
- ``flowplan daemon --adapter kubernetes --interval 30`` (a process): a pending pod created after
  its first interval is bound long before the 30 s heartbeat (the time is printed; the assertion
  only says "before the heartbeat", with 10 s to spare), and the line says what woke it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from k8s_env import NAMESPACE, core, create_pod, get_pod, pod_body, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("k8s_no_pods")]
MERGE = "application/merge-patch+json"


class Seen:
    """What a PodWatch reported, for the test to wait on."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, ev: Any) -> None:
        self.events.append(ev)

    def kinds(self, pod: str) -> list[str]:
        return [e.kind for e in self.events if e.name == pod]


def watching(info: Any, seen: Seen, token: str | None = None) -> Any:
    from adapters.kubernetes.sandbox import api_client
    from adapters.kubernetes.watch import PodWatch

    w = PodWatch(api_client(info, token), [NAMESPACE], seen, retry=0.5).start()
    return w


def bind(api: Any, name: str, node: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    api.create_namespaced_pod_binding(name, NAMESPACE, body, _preload_content=False)


def test_pods_arriving_and_ending_wake_and_nothing_else_does(k8s_sandbox: Any) -> None:
    api = core(k8s_sandbox)
    seen = Seen()
    w = watching(k8s_sandbox, seen)
    try:
        assert w.wait_connected(10), w.last_error
        create_pod(api, pod_body("w-pending"))
        create_pod(api, pod_body("w-labelled", scheduler="default-scheduler", labels={"flowplan.io/job": "w-labelled"}))
        create_pod(api, pod_body("w-web", scheduler="default-scheduler"))  # not FlowPlan's
        create_pod(api, pod_body("w-both", labels={"flowplan.io/job": "w-both"}))  # seen by both watches
        wait_for(lambda: "pending" in seen.kinds("w-pending") and "pending" in seen.kinds("w-labelled"), 10, "pending wakes")
        bind(api, "w-pending", k8s_sandbox.nodes[0])
        wait_for(lambda: (get_pod(api, "w-pending") or {}).get("status", {}).get("phase") == "Running", 30, "Running")
        time.sleep(1)
        assert seen.kinds("w-pending") == ["pending"]  # bound and Running: no news

        status = {"status": {"phase": "Succeeded"}}
        api.patch_namespaced_pod_status("w-pending", NAMESPACE, status, _preload_content=False, _content_type=MERGE)
        wait_for(lambda: "ended" in seen.kinds("w-pending"), 10, "the end wakes")
        api.delete_namespaced_pod("w-pending", NAMESPACE, grace_period_seconds=0, _preload_content=False)
        wait_for(lambda: "deleted" in seen.kinds("w-pending"), 10, "the deletion wakes")
        assert seen.kinds("w-pending") == ["pending", "ended", "deleted"]
        assert seen.kinds("w-web") == [] and seen.kinds("w-labelled") == ["pending"]
        assert seen.kinds("w-both") == ["pending"]  # reported once
        assert w.last_error is None
    finally:
        w.close()


def test_a_watch_the_server_ends_is_resumed(k8s_sandbox: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import adapters.kubernetes.watch as watch_mod

    monkeypatch.setattr(watch_mod, "WATCH_SECONDS", 1)  # the server ends each watch request after 1 s
    api = core(k8s_sandbox)
    seen = Seen()
    w = watching(k8s_sandbox, seen)
    try:
        assert w.wait_connected(10), w.last_error
        time.sleep(3.5)  # several ends and resumptions
        create_pod(api, pod_body("w-late"))
        wait_for(lambda: "pending" in seen.kinds("w-late"), 10, "an event after the resumptions")
        time.sleep(2.5)  # more resumptions: the pod is not reported again (resumed from its version)
        assert seen.kinds("w-late") == ["pending"]
        assert w.last_error is None
    finally:
        w.close()


def test_a_forbidden_watch_is_one_line_naming_the_verb(k8s_sandbox: Any) -> None:
    seen = Seen()
    w = watching(k8s_sandbox, seen, token=k8s_sandbox.viewer_token)  # RBAC grants the viewer nothing
    try:
        wait_for(lambda: w.last_error is not None, 10, "the watch fails")
        text = str(w.last_error)
        print(f"forbidden watch: {text}")
        assert text.startswith("forbidden: 403") and "cannot list resource" in text and "\n" not in text
        assert seen.events == []
    finally:
        w.close()


def test_daemon_binds_a_new_pending_pod_long_before_its_heartbeat(k8s_sandbox: Any, tmp_path: Path) -> None:
    api = core(k8s_sandbox)
    out = tmp_path / "daemon.log"
    argv = [sys.executable, "-m", "flowplan", "daemon", "--adapter", "kubernetes", "--kubeconfig", k8s_sandbox.kubeconfig]
    argv += ["--namespace", NAMESPACE, "--lease-namespace", NAMESPACE, "--lease-name", "fp-watch", "--interval", "30"]
    argv += ["--state", str(tmp_path / "state.db"), "--verbose"]
    root = Path(__file__).resolve().parents[1]
    with open(out, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=root)
    try:
        wait_for(lambda: "jobs 0" in out.read_text(), 60, "the daemon's first interval")
        first = time.monotonic()
        create_pod(api, pod_body("w-new"))
        created = time.monotonic()
        pod = wait_for(lambda: (p := get_pod(api, "w-new")) and p["spec"].get("nodeName") and p, 40, "w-new bound")
        took = time.monotonic() - created
        print(f"pending pod bound {took:.2f} s after it was created (interval 30 s, debounce 0.4 s)")
        assert pod["spec"]["nodeName"] in k8s_sandbox.nodes
        assert time.monotonic() - first < 20, "bound only by the heartbeat"  # the heartbeat is 30 s after the first interval
        text = out.read_text()
        assert "[woken: pending pod default/w-new" in text and "pod watches" in text, text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "Traceback" not in out.read_text(), out.read_text()
