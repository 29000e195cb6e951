"""The Kubernetes adapter and daemon against a real kube-apiserver + etcd, with kwok's fake kubelets.

No mock of the API anywhere: every call goes to the sandbox's API server (tests/k8s_env.py).

Case matrix:

- observe: FlowPlan pods (``schedulerName: flowplan`` or the ``flowplan.io/job`` label) are jobs,
  other pods are not and their requests come off their node's capacity; a cordoned node is not
  schedulable and says why; a pod with a bad annotation is unmanaged and named;
- placement: a pending ``schedulerName: flowplan`` pod is bound by one daemon tick (observe → plan →
  diff → apply, a real Binding), and runs on a sandbox node;
- resize in place: a running pod's CPU request and limit change through the ``resize`` subresource,
  its UID unchanged; applying the same change again is a no-op reported ``ok``; a Guaranteed pod
  stays Guaranteed (its limit moves with its request); after the kubelet
  reported a resize ``Infeasible`` (the ``PodResizePending`` condition), the pod is re-created;
- migration: the job ends with one pod, on the target node, the old pod gone, and the server's own
  watch shows the order: checkpoint requested, the replacement created unbound, the old pod
  deleted, and only once it is gone the replacement bound; an old pod that outlives the wait
  (a long grace period) leaves an error outcome and a pending replacement that a ``start`` binds
  only once the old pod has ended; a pause ends with one unbound pod that waits for FlowPlan
  (``schedulerName: flowplan``) and a pending job;
- failures are outcomes, never exceptions, one per kind the server gives:
  ``not_found`` (pod deleted after observe), ``conflict`` (the replacement's name is taken; the old
  pod is left running), ``invalid`` (a replacement name over 253 characters), ``forbidden`` (a token
  RBAC grants nothing), ``engine_down`` (nothing listens where the server should be);
- a pod that ended since the observe: a resize, move or pause of one that Succeeded is ok with
  nothing changed, of one that Failed a ``conflict``; neither is re-created nor patched; a deliver
  of one that Succeeded is ok (its final model; the job then reads delivered), of one that Failed a
  ``conflict`` (never delivered);
- ``flowplan snapshot --adapter kubernetes`` writes a snapshot that ``flowplan plan`` and
  ``flowplan check`` accept; ``flowplan daemon --adapter kubernetes`` (a process) binds pending pods;
  a missing kubeconfig, a server that is down and a port in use are one line and exit code 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from k8s_env import core, create_pod, delete_all_pods, get_pod, pod_body, pods, wait_for

from adapters.base import Change

pytestmark = pytest.mark.slow
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@pytest.fixture(autouse=True)
def _clean(k8s_sandbox: Any) -> Any:
    api = core(k8s_sandbox)
    delete_all_pods(api)
    for node in k8s_sandbox.nodes:  # uncordon
        api.patch_node(node, {"spec": {"unschedulable": None}}, _preload_content=False, _content_type=MERGE)
    yield
    delete_all_pods(api)


def adapter_for(info: Any, token: str | None = None) -> Any:
    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.sandbox import api_client

    return KubernetesAdapter(api_client(info, token), namespaces=["default"])


def running(api: Any, name: str) -> dict[str, Any]:
    return wait_for(
        lambda: (p := get_pod(api, name)) and (p.get("status") or {}).get("phase") == "Running" and p, 30, f"{name} Running"
    )


def test_observe_jobs_foreign_pods_cordon_and_bad_annotations(k8s_sandbox: Any) -> None:
    api = core(k8s_sandbox)
    n0, n1, n2 = k8s_sandbox.nodes
    create_pod(api, pod_body("a", node=n0, annotations={"flowplan.io/min_cpu_millis": "300", "flowplan.io/priority": "2"}))
    create_pod(api, pod_body("b", scheduler="default-scheduler", labels={"flowplan.io/job": "job-b"}))
    create_pod(api, pod_body("web", cpu="4", limit=None, node=n2, scheduler="default-scheduler"))
    create_pod(api, pod_body("bad", annotations={"flowplan.io/max_cpu_millis": "lots"}))
    api.patch_node(n1, {"spec": {"unschedulable": True}}, _preload_content=False, _content_type=MERGE)
    running(api, "a")

    adapter = adapter_for(k8s_sandbox)
    snap = adapter.observe()
    jobs = {j.id: j for j in snap.jobs}
    assert set(jobs) == {"a", "job-b"}
    a = jobs["a"]
    assert (a.status, a.node, a.min_cpu_millis, a.max_cpu_millis, a.priority) == ("running", n0, 300, 2000, 2.0)
    assert a.allocation is not None and (a.allocation.cpu_millis, a.allocation.cpu_limit_millis) == (500, None)
    assert jobs["job-b"].status == "pending" and jobs["job-b"].node is None
    nodes = {n.name: n for n in snap.nodes}
    assert nodes[n2].cpu_millis == 32000 - 4000  # the foreign pod's request
    assert nodes[n0].cpu_millis == 32000  # FlowPlan's own pods are jobs, not a reduction
    assert not nodes[n1].schedulable and "cordoned" in nodes[n1].labels["flowplan.io/not-schedulable"]
    assert "annotation flowplan.io/max_cpu_millis" in adapter.last.unmanaged["default/bad"]


def test_pending_pod_is_bound_by_a_daemon_tick(k8s_sandbox: Any, tmp_path: Path) -> None:
    from adapters.base import WallClock
    from adapters.daemon import Daemon
    from planner.policies import make_policy
    from store import StateStore

    api = core(k8s_sandbox)
    create_pod(api, pod_body("pending-job", cpu="500m", limit="2"))
    assert get_pod(api, "pending-job")["spec"].get("nodeName") is None  # no scheduler runs: it waits for FlowPlan

    store = StateStore(str(tmp_path / "state.db"))
    adapter = adapter_for(k8s_sandbox)
    adapter.store = store
    daemon = Daemon(adapter, make_policy("flowplan", time_limit=1.0), WallClock(), store, interval=1.0)
    count, tick = daemon.run(max_ticks=1)
    store.close()
    assert count == 1 and tick is not None
    assert [(c.kind, c.job) for c in tick.changes] == [("start", "pending-job")], tick.plan.model_dump_json(indent=1)[:3000]
    assert all(o.ok for o in tick.outcomes), tick.outcomes
    pod = running(api, "pending-job")
    assert pod["spec"]["nodeName"] == tick.changes[0].node and pod["spec"]["nodeName"] in k8s_sandbox.nodes


def test_running_pod_cpu_changes_in_place(k8s_sandbox: Any) -> None:
    api = core(k8s_sandbox)
    node = k8s_sandbox.nodes[0]
    create_pod(api, pod_body("resize-me", cpu="500m", limit="2", node=node))
    before = running(api, "resize-me")
    adapter = adapter_for(k8s_sandbox)
    adapter.observe()

    change = Change(job="resize-me", kind="resize", node=node, cpu_millis=1500, gpus=0, from_node=node)
    [outcome] = adapter.apply([change])
    assert outcome.ok, outcome
    after = get_pod(api, "resize-me")
    assert after is not None
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # the same pod: resized, not re-created
    res = after["spec"]["containers"][0]["resources"]
    assert res["requests"]["cpu"] == "1500m" and res["limits"]["cpu"] == "2"
    assert res["requests"]["memory"] == "256Mi"  # untouched

    snap = adapter.observe()
    [job] = snap.jobs
    assert job.allocation is not None and job.allocation.cpu_millis == 1500
    [again] = adapter.apply([change])
    assert again.ok and "already" in again.message


def test_guaranteed_pod_stays_guaranteed(k8s_sandbox: Any) -> None:
    """Requests equal to limits (QoS Guaranteed): the limit moves with the request, or the server refuses the resize."""
    api = core(k8s_sandbox)
    node = k8s_sandbox.nodes[2]
    body = pod_body("steady", cpu="1", limit="1", node=node)
    body["spec"]["containers"][0]["resources"]["requests"]["memory"] = "512Mi"
    create_pod(api, body)
    running(api, "steady")
    adapter = adapter_for(k8s_sandbox)
    adapter.observe()
    [outcome] = adapter.apply([Change(job="steady", kind="resize", node=node, cpu_millis=750, gpus=0, from_node=node)])
    assert outcome.ok, outcome
    pod = get_pod(api, "steady")
    assert pod is not None and pod["status"]["qosClass"] == "Guaranteed"
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "750m"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "750m"


def test_resize_the_kubelet_found_infeasible_is_a_re_create(k8s_sandbox: Any) -> None:
    """The kubelet's verdict is written as a kubelet writes it (the pod status); kwok does not judge resizes."""
    api = core(k8s_sandbox)
    node = k8s_sandbox.nodes[0]
    create_pod(api, pod_body("too-big", cpu="500m", limit="2", node=node, labels={"flowplan.io/job": "too-big"}))
    before = running(api, "too-big")
    condition = {
        "type": "PodResizePending",
        "status": "True",
        "reason": "Infeasible",
        "message": "Node didn't have enough capacity",
    }
    api.patch_namespaced_pod_status(
        "too-big", "default", {"status": {"conditions": [condition]}}, _preload_content=False, _content_type=STRATEGIC
    )
    adapter = adapter_for(k8s_sandbox)
    adapter.observe()
    assert adapter.last.placed["too-big"].pod.resize == "Infeasible: Node didn't have enough capacity"

    [outcome] = adapter.apply([Change(job="too-big", kind="resize", node=node, cpu_millis=1500, gpus=0, from_node=node)])
    assert outcome.ok and "re-created" in outcome.message, outcome
    wait_for(lambda: get_pod(api, "too-big") is None, 30, "old pod gone")
    [new] = pods(api)
    assert new["metadata"]["uid"] != before["metadata"]["uid"] and new["spec"]["nodeName"] == node
    assert new["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1500m"


class PodEvents:
    """The server's own record of what happened to the pods of ``default``, in order (a watch in a thread)."""

    def __init__(self, info: Any) -> None:
        import threading

        from kubernetes import watch

        self.api = core(info)
        self.events: list[tuple[str, str, str | None, bool]] = []  # (type, pod, node, being deleted)
        version = json.loads(self.api.list_namespaced_pod("default", _preload_content=False).data)["metadata"]["resourceVersion"]
        self.w = watch.Watch()
        self.stream = self.w.stream(
            self.api.list_namespaced_pod, "default", resource_version=version, timeout_seconds=120, deserialize=False
        )
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for ev in self.stream:
                o = ev["object"]
                meta = o["metadata"]
                self.events.append((ev["type"], meta["name"], o["spec"].get("nodeName"), bool(meta.get("deletionTimestamp"))))
        except Exception:  # closed by stop()
            pass

    def stop(self) -> None:
        self.w.stop()
        if self.w._resp is not None:
            try:
                self.w._resp.shutdown()
            except (OSError, ValueError):
                # The stream's socket is closed already, or its connection was released (urllib3 2.x:
                # "Cannot shutdown socket as self._sock_shutdown is not set"; once in CI, session 34):
                # the server ended the watch, so it is stopped.
                pass

    def first(self, cond: Any) -> int:
        return next(i for i, e in enumerate(self.events) if cond(e))


def test_migration_ends_with_one_pod_on_the_new_node(k8s_sandbox: Any) -> None:
    api = core(k8s_sandbox)
    src, dst = k8s_sandbox.nodes[0], k8s_sandbox.nodes[1]
    create_pod(api, pod_body("mover", node=src, labels={"flowplan.io/job": "mover"}))
    old = running(api, "mover")
    adapter = adapter_for(k8s_sandbox)
    adapter.observe()

    seen = PodEvents(k8s_sandbox)
    [outcome] = adapter.apply([Change(job="mover", kind="migrate", node=dst, cpu_millis=750, gpus=0, from_node=src)])
    assert outcome.ok, outcome
    assert get_pod(api, "mover") is None  # gone before apply returned: the replacement was bound after
    wait_for(lambda: any(e[1] == "mover-r1" and e[2] == dst for e in seen.events), 10, "the binding's event")
    seen.stop()
    asked = seen.first(lambda e: e[1] == "mover" and e[0] == "MODIFIED" and not e[3])  # the checkpoint request
    created = seen.first(lambda e: e[1] == "mover-r1" and e[0] == "ADDED")
    deleting = seen.first(lambda e: e[1] == "mover" and e[3])
    gone = seen.first(lambda e: e[1] == "mover" and e[0] == "DELETED")
    bound = seen.first(lambda e: e[1] == "mover-r1" and e[2] is not None)
    assert asked < created < deleting < gone < bound, seen.events
    assert seen.events[created][2] is None  # created unbound: it cannot start before the checkpoint
    print(f"migration: {outcome.message}")
    [new] = [p for p in pods(api) if p["metadata"]["labels"].get("flowplan.io/job") == "mover"]
    assert new["spec"]["nodeName"] == dst and new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["metadata"]["annotations"]["flowplan.io/replaces"] == "mover"
    assert new["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "750m"
    running(api, new["metadata"]["name"])
    [job] = adapter.observe().jobs
    assert (job.id, job.node, job.status) == ("mover", dst, "running")


def test_an_old_pod_that_outlives_the_wait_leaves_its_replacement_pending(k8s_sandbox: Any) -> None:
    """kwok removes a deleted pod at its deletionTimestamp (the grace period), as a kubelet whose
    container takes its whole grace period to checkpoint would: 30 s here, past the adapter's 1 s."""
    api = core(k8s_sandbox)
    src, dst = k8s_sandbox.nodes[0], k8s_sandbox.nodes[1]
    body = pod_body("slow", node=src)
    body["spec"]["terminationGracePeriodSeconds"] = 30
    create_pod(api, body)
    running(api, "slow")
    adapter = adapter_for(k8s_sandbox)
    adapter.checkpoint_timeout = 1.0
    adapter.observe()
    [outcome] = adapter.apply([Change(job="slow", kind="migrate", node=dst, cpu_millis=500, gpus=0, from_node=src)])
    assert (outcome.ok, outcome.error) == (False, "transient"), outcome
    assert "still terminating after 1 s" in outcome.message and "waits unbound" in outcome.message, outcome.message
    old = get_pod(api, "slow")
    assert old is not None and old["metadata"].get("deletionTimestamp") and old["spec"]["nodeName"] == src
    assert get_pod(api, "slow-r1")["spec"].get("nodeName") is None

    [job] = adapter.observe().jobs  # the job is its pending replacement
    assert (job.id, job.status) == ("slow", "pending")
    [early] = adapter.apply([Change(job="slow", kind="start", node=dst, cpu_millis=500, gpus=0)])
    assert (early.ok, early.error) == (False, "transient") and "still terminating" in early.message, early
    assert get_pod(api, "slow-r1")["spec"].get("nodeName") is None

    api.delete_namespaced_pod("slow", "default", grace_period_seconds=0, _preload_content=False)  # its checkpoint is done
    wait_for(lambda: get_pod(api, "slow") is None, 30, "old pod gone")
    adapter.observe()
    [started] = adapter.apply([Change(job="slow", kind="start", node=dst, cpu_millis=500, gpus=0)])
    assert started.ok, started
    assert running(api, "slow-r1")["spec"]["nodeName"] == dst


def test_pause_leaves_one_pending_pod_for_flowplan(k8s_sandbox: Any) -> None:
    api = core(k8s_sandbox)
    node = k8s_sandbox.nodes[0]
    create_pod(api, pod_body("napper", node=node, scheduler="default-scheduler", labels={"flowplan.io/job": "napper"}))
    running(api, "napper")
    adapter = adapter_for(k8s_sandbox)
    adapter.observe()
    [outcome] = adapter.apply([Change(job="napper", kind="pause", node=None, cpu_millis=500, gpus=0, from_node=node)])
    assert outcome.ok, outcome
    wait_for(lambda: get_pod(api, "napper") is None, 30, "old pod gone")
    [new] = pods(api)
    assert new["spec"].get("nodeName") is None and new["spec"]["schedulerName"] == "flowplan"
    [job] = adapter.observe().jobs
    assert (job.id, job.status, job.node) == ("napper", "pending", None)


def test_a_pod_that_ended_since_the_observe_is_not_brought_back(k8s_sandbox: Any, caplog: Any) -> None:
    """A plan made while a job printed its last epoch reaches the server after its pod ended (its
    phase written as a kubelet writes it): a resize, move or pause of a pod that Succeeded is moot,
    ok with nothing changed; of a pod that Failed, a ``conflict``. Neither is re-created (a
    replacement would run a finished job again) nor patched."""
    api = core(k8s_sandbox)
    n0, n1 = k8s_sandbox.nodes[0], k8s_sandbox.nodes[1]
    names = ("done-resize", "done-move", "done-pause", "failed-move", "failed-resize")
    for name in names:
        create_pod(api, pod_body(name, node=n0, labels={"flowplan.io/job": name}))
    for name in names:
        running(api, name)
    adapter = adapter_for(k8s_sandbox)
    adapter.observe()
    for name in names:  # as a kubelet writes it
        status = {"status": {"phase": "Failed" if name.startswith("failed") else "Succeeded"}}
        if name == "failed-resize":
            status["status"]["reason"] = "Evicted"  # the pod's own reason, as the kubelet writes it on an eviction
        api.patch_namespaced_pod_status(name, "default", status, _preload_content=False, _content_type=MERGE)

    def ended() -> bool:
        return all((get_pod(api, n) or {}).get("status", {}).get("phase") in ("Succeeded", "Failed") for n in names)

    wait_for(ended, 10, "the pods ended")
    before = {n: get_pod(api, n) for n in names}

    outcomes = adapter.apply(
        [
            Change(job="done-resize", kind="resize", node=n0, cpu_millis=1500, gpus=0, from_node=n0),
            Change(job="done-move", kind="migrate", node=n1, cpu_millis=500, gpus=0, from_node=n0),
            Change(job="done-pause", kind="pause", node=None, cpu_millis=500, gpus=0, from_node=n0),
            Change(job="failed-move", kind="migrate", node=n1, cpu_millis=500, gpus=0, from_node=n0),
            Change(job="failed-resize", kind="resize", node=n0, cpu_millis=1500, gpus=0, from_node=n0),
        ]
    )
    delivered, refused = adapter.apply(
        [
            Change(job="done-resize", kind="deliver", node=n0, cpu_millis=0, gpus=0),
            Change(job="failed-move", kind="deliver", node=n0, cpu_millis=0, gpus=0),
        ]
    )
    assert delivered.ok and "final model" in delivered.message, delivered
    assert (refused.ok, refused.error) == (False, "conflict") and "nothing to deliver" in refused.message, refused
    with caplog.at_level("WARNING", logger="flowplan.kubernetes"):
        jobs = {j.id: j for j in adapter.observe().jobs}
        adapter.observe()  # a failed pod is said once, not at every observe while it stays
    said = sorted(r.getMessage() for r in caplog.records if "(counted as finished)" in r.getMessage())
    assert said == [f"job {n}: pod {n} failed (counted as finished)" for n in ("failed-move", "failed-resize")], said
    assert jobs["done-resize"].delivered and not jobs["failed-move"].delivered
    # How each failed, for flowplan status --all: the pod's reason, else its container's, else "Failed".
    assert {n: jobs[n].failure for n in names} == {
        "done-resize": None,
        "done-move": None,
        "done-pause": None,
        "failed-move": "Failed",
        "failed-resize": "Evicted",
    }
    print("\n".join(f"{o.change.job}: {o.ok} {o.error} {o.message}" for o in outcomes))
    assert [(o.ok, o.error) for o in outcomes] == [(True, None)] * 3 + [(False, "conflict")] * 2, outcomes
    assert [o.message.startswith("finished before the") for o in outcomes] == [True] * 3 + [False] * 2
    assert all("Failed" in o.message for o in outcomes[3:]), outcomes
    assert sorted(p["metadata"]["name"] for p in pods(api)) == sorted(names)  # no replacement made
    for name in names:
        after = get_pod(api, name)
        assert after is not None and after["metadata"].get("deletionTimestamp") is None
        assert after["spec"] == before[name]["spec"]  # not resized
        assert "flowplan.io/checkpoint-requested" not in (after["metadata"].get("annotations") or {})


def test_failures_are_outcomes_of_each_kind(k8s_sandbox: Any) -> None:
    from adapters.kubernetes import KubernetesAdapter, KubernetesAdapterError
    from adapters.kubernetes.sandbox import api_client, free_port

    api = core(k8s_sandbox)
    n0, n1 = k8s_sandbox.nodes[0], k8s_sandbox.nodes[1]
    long_name = "l" * 250
    for name in ("gone", "taken", long_name):
        create_pod(api, pod_body(name, node=n0))
    create_pod(api, pod_body("taken-r1", scheduler="default-scheduler"))  # the name a replacement of "taken" would get
    adapter = adapter_for(k8s_sandbox)
    adapter.observe()
    api.delete_namespaced_pod("gone", "default", grace_period_seconds=0, _preload_content=False)
    wait_for(lambda: get_pod(api, "gone") is None, 30, "pod deleted")

    def move(job: str) -> Change:
        return Change(job=job, kind="migrate", node=n1, cpu_millis=500, gpus=0, from_node=n0)

    outcomes = adapter.apply([move("gone"), move("taken"), move(long_name)])
    assert [(o.ok, o.error) for o in outcomes] == [(False, "not_found"), (False, "conflict"), (False, "invalid")], outcomes
    taken = get_pod(api, "taken")
    assert taken is not None and taken["spec"]["nodeName"] == n0 and taken["metadata"].get("deletionTimestamp") is None
    assert "flowplan.io/checkpoint-requested" not in (taken["metadata"].get("annotations") or {})  # request withdrawn

    viewer = KubernetesAdapter(api_client(k8s_sandbox, k8s_sandbox.viewer_token), namespaces=["default"])
    with pytest.raises(KubernetesAdapterError) as err:
        viewer.observe()
    assert err.value.kind == "forbidden"
    viewer.last = adapter.last  # what an admin saw; the viewer's writes are refused
    [forbidden] = viewer.apply([Change(job="taken", kind="resize", node=n0, cpu_millis=900, gpus=0, from_node=n0)])
    assert (forbidden.ok, forbidden.error) == (False, "forbidden")

    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = f"https://127.0.0.1:{free_port()}"
    cfg.verify_ssl = False
    cfg.retries = False
    down = KubernetesAdapter(client.ApiClient(cfg))
    with pytest.raises(KubernetesAdapterError) as err:
        down.observe()
    assert err.value.kind == "engine_down"
    down.last = adapter.last
    [unreachable] = down.apply([move("taken")])
    assert (unreachable.ok, unreachable.error) == (False, "engine_down")


def flowplan(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "flowplan", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_snapshot_cli_output_passes_plan_and_check(k8s_sandbox: Any, tmp_path: Path) -> None:
    api = core(k8s_sandbox)
    create_pod(api, pod_body("cli-a", node=k8s_sandbox.nodes[0], annotations={"flowplan.io/target.tier1": "0.5"}))
    create_pod(api, pod_body("cli-b"))
    running(api, "cli-a")
    snap, plan = tmp_path / "snap.json", tmp_path / "plan.json"
    done = flowplan(
        "snapshot",
        "--adapter",
        "kubernetes",
        "--kubeconfig",
        k8s_sandbox.kubeconfig,
        "--namespace",
        "default",
        "--out",
        str(snap),
    )
    assert done.returncode == 0, done.stderr
    done = flowplan("plan", str(snap), "--format", "json", "--out", str(plan))
    assert done.returncode == 0, done.stderr
    done = flowplan("check", str(snap), str(plan))
    assert done.returncode == 0 and "plan is valid" in done.stdout, done.stdout + done.stderr


def test_daemon_cli_binds_pending_pods(k8s_sandbox: Any, tmp_path: Path) -> None:
    api = core(k8s_sandbox)
    for name in ("cli-d0", "cli-d1"):
        create_pod(api, pod_body(name))
    args = ["daemon", "--adapter", "kubernetes", "--kubeconfig", k8s_sandbox.kubeconfig, "--namespace", "default"]
    done = flowplan(*args, "--interval", "1", "--max-ticks", "2", "--state", str(tmp_path / "state.db"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "start cli-d0" in done.stdout and "FAILED" not in done.stdout, done.stdout
    for name in ("cli-d0", "cli-d1"):
        assert running(api, name)["spec"]["nodeName"] in k8s_sandbox.nodes


def test_cli_errors_are_one_line(k8s_sandbox: Any, tmp_path: Path) -> None:
    import json

    from adapters.kubernetes.sandbox import free_port

    done = flowplan("snapshot", "--adapter", "kubernetes", "--kubeconfig", str(tmp_path / "nope"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--kubeconfig" in done.stderr, done.stderr
    config = json.loads(Path(k8s_sandbox.kubeconfig).read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(json.dumps(config))
    done = flowplan("snapshot", "--adapter", "kubernetes", "--kubeconfig", str(dead))
    assert done.returncode == 2 and "engine_down" in done.stderr and "Traceback" not in done.stderr, done.stderr
    port = str(k8s_sandbox.ports["apiserver"])
    done = flowplan("sandbox", "up", "--port", port, "--etcd-port", "20379", "--dir", str(tmp_path / "sb"))
    assert done.returncode == 2 and f"port {port}" in done.stderr and "in use" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
