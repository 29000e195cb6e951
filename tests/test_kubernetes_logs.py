"""Progress from pod logs, read through a real kube-apiserver from kwok's kubelet API.

Nothing is faked: the sandbox's kwok serves ``pods/log`` as a kubelet does (the API server proxies
the request to it over TLS), from a file in the CRI format a container runtime writes, named by a
kwok ``Logs`` object (``adapters.kubernetes.sandbox.serve_pod_log``). What is "made up" is only who
wrote the file: the lines are a recorded real Keras run (``tests/fixtures/logs``) and the real
output of ``flowplan.sdk`` run in a subprocess, each stamped as a runtime stamps it.

Case matrix:

- a framework log (Keras, recorded) becomes the job's history; read in two parts (the second
  half appended after the first observe), the points are those of the whole file, each once, and
  a point the HTTP ingest gave first for an epoch is kept (merged, not duplicated);
- the SDK's output: ``declare`` fills the target's ``max_epochs`` and the job's ``schedule``,
  ``delivered`` makes the job delivered; after a migration the replacement pod's log (new UID)
  continues the same job's history, which keeps its epochs, declaration and delivery;
- a pod being deleted (a migration's old pod, checkpointing within its grace period) is still
  read: the lines it prints while terminating reach the job's history;
- a pod whose log cannot be read (no ``Logs`` object: kwok answers with an error) keeps its store
  history, the failure is in ``last.log_failed`` and logged once over two observes (at info level:
  a kubelet answers so while a container starts), and observe does not fail; RBAC without
  ``pods/log`` is a warning (``tests/test_kubernetes_leader.py`` checks it is needed).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from k8s_env import NAMESPACE, core, create_pod, get_pod, pod_body, wait_for

from adapters.base import Change

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("k8s_no_pods")]

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
KERAS_ENDS = [(1.0, 2.0320, 0.6000), (2.0, 1.3867, 0.7556), (3.0, 0.9027, 0.8278)]  # as tests/test_logs_fixtures.py reads them
TARGET = {"flowplan.io/target.metric": "accuracy", "flowplan.io/target.tier1": "0.95"}


def running(api: Any, name: str) -> dict[str, Any]:
    return wait_for(
        lambda: (p := get_pod(api, name)) and (p.get("status") or {}).get("phase") == "Running" and p, 30, f"{name} Running"
    )


def stamped(lines: list[str], start: float, step: float = 0.01) -> str:
    """``lines`` as a runtime's log file: one CRI entry per line, ``step`` seconds apart from ``start``."""
    from adapters.kubernetes.sandbox import cri_log_line

    return "".join(cri_log_line(start + step * i, line) for i, line in enumerate(lines))


def serve(info: Any, pod: str, path: Path, text: str) -> None:
    from adapters.kubernetes.sandbox import serve_pod_log

    path.write_text(text)
    serve_pod_log(info, NAMESPACE, pod, path)


def observe_until(adapter: Any, job: str, cond: Any, what: str) -> Any:
    """Observe until ``cond(job)`` holds (kwok sees a new ``Logs`` object from its watch a moment later)."""

    def once() -> Any:
        j = next((j for j in adapter.observe().jobs if j.id == job), None)
        return j if j is not None and cond(j) else None

    return wait_for(once, 20, what)


def adapter_for(info: Any, store: Any = None) -> Any:
    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.sandbox import api_client

    return KubernetesAdapter(api_client(info), namespaces=[NAMESPACE], store=store)


def test_a_framework_log_becomes_the_jobs_history_read_in_parts(k8s_sandbox: Any, tmp_path: Path) -> None:
    from adapters.docker.memory import MemoryStore
    from planner.snapshot import MetricPoint

    api = core(k8s_sandbox)
    create_pod(api, pod_body("keras", node=k8s_sandbox.nodes[0]))
    running(api, "keras")
    lines = (FIXTURES / "keras" / "keras-fit-pipe.log").read_text().split("\n")
    # 40 s between lines: the second read's sinceSeconds (back to the last line read, plus 30 s of
    # slack) leaves the first lines out on the server side, so the reading is incremental for real
    step = 40.0
    start = time.time() - step * len(lines) - 60
    half = len(lines) // 2
    store = MemoryStore()
    store.add_points("keras", [MetricPoint(time=start, epoch=1.0, loss=9.5)])  # the HTTP ingest was first for epoch 1
    adapter = adapter_for(k8s_sandbox, store)
    path = tmp_path / "keras.log"
    serve(k8s_sandbox, "keras", path, stamped(lines[:half], start, step))
    job = observe_until(adapter, "keras", lambda j: len(j.history) > 1, "the first half's points")
    first = [p.epoch for p in job.history]

    path.write_text(stamped(lines, start, step))  # the rest of the run, appended as a runtime appends
    job = observe_until(adapter, "keras", lambda j: j.history[-1].epoch == 3.0, "the whole run's points")
    ends = [(p.epoch, p.loss, p.metric) for p in job.history if p.epoch.is_integer()]
    print(f"keras: first read epochs {first}, then {[p.epoch for p in job.history]}")
    assert ends[0] == (1.0, 9.5, None)  # the ingest's point for epoch 1 stays, not duplicated
    assert [e[0] for e in ends] == [1.0, 2.0, 3.0]
    for (epoch, loss, metric), (want_e, want_l, want_m) in zip(ends[1:], KERAS_ENDS[1:], strict=True):
        assert epoch == want_e and loss == pytest.approx(want_l) and metric == pytest.approx(want_m)
    epochs = [p.epoch for p in job.history]
    assert epochs == sorted(set(epochs))  # one point per epoch
    assert adapter.last.log_failed == {}
    again = adapter.observe()  # nothing new: the same history
    assert [p.epoch for p in next(j for j in again.jobs if j.id == "keras").history] == epochs


def sdk_output(first: int, last: int, *, declare: bool, deliver_at: int | None) -> list[str]:
    """What ``flowplan.sdk`` prints for epochs ``first``..``last`` (a real run of it, in a subprocess)."""
    declared = "max_epochs=12, schedule={'kind': 'step', 'milestones': [6], 'gamma': 0.1}, " if declare else ""
    code = f"""
import flowplan.sdk as sdk
run = sdk.init("sdk-job", {declared}report="stdout")
for e in range({first}, {last + 1}):
    run.log(e, loss=2.0 / e, metric=0.5 + 0.04 * e)
    if e == {deliver_at}:
        run.delivered("/ckpt/sdk-job.delivered", metric=0.5 + 0.04 * e)
run.finish(stopped=True)
"""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    return out.stdout.splitlines()


def test_sdk_declare_and_delivered_reach_the_job_and_survive_a_migration(k8s_sandbox: Any, tmp_path: Path) -> None:
    api = core(k8s_sandbox)
    n0, n1 = k8s_sandbox.nodes[0], k8s_sandbox.nodes[1]
    create_pod(api, pod_body("sdk-job", node=n0, annotations=TARGET))
    old_uid = running(api, "sdk-job")["metadata"]["uid"]
    adapter = adapter_for(k8s_sandbox)
    [before] = [j for j in adapter.observe().jobs if j.id == "sdk-job"]
    assert before.target is not None and before.target.max_epochs is None and not before.delivered

    serve(k8s_sandbox, "sdk-job", tmp_path / "a.log", stamped(sdk_output(1, 3, declare=True, deliver_at=3), time.time() - 30))
    job = observe_until(adapter, "sdk-job", lambda j: len(j.history) == 3, "the SDK's three epochs")
    assert job.target.max_epochs == 12  # declared by the job, no annotation set it
    assert job.schedule is not None and job.schedule.kind == "step"
    assert job.delivered  # its log said so; FlowPlan never asked
    assert "flowplan.io/deliver-requested" not in get_pod(api, "sdk-job")["metadata"]["annotations"]

    [outcome] = adapter.apply([Change(job="sdk-job", kind="migrate", node=n1, cpu_millis=500, gpus=0, from_node=n0)])
    assert outcome.ok, outcome
    new = wait_for(lambda: (p := get_pod(api, "sdk-job-r1")) and p["spec"].get("nodeName") == n1 and p, 30, "replacement bound")
    running(api, "sdk-job-r1")
    # the replacement resumes from its checkpoint: its own log (a new UID) goes on from epoch 4
    serve(
        k8s_sandbox, "sdk-job-r1", tmp_path / "b.log", stamped(sdk_output(4, 5, declare=False, deliver_at=None), time.time() - 5)
    )
    job = observe_until(adapter, "sdk-job", lambda j: j.node == n1 and len(j.history) == 5, "the replacement's epochs")
    assert [p.epoch for p in job.history] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert job.history[3].loss == pytest.approx(0.5)
    assert job.target.max_epochs == 12 and job.delivered  # kept by job, not by pod
    assert new["metadata"]["uid"] != old_uid


def test_a_terminating_pods_last_lines_are_read(k8s_sandbox: Any, tmp_path: Path) -> None:
    api = core(k8s_sandbox)
    body = pod_body("going", node=k8s_sandbox.nodes[0])
    body["spec"]["terminationGracePeriodSeconds"] = 30  # kwok removes it at its deletionTimestamp
    create_pod(api, body)
    running(api, "going")
    create_pod(api, pod_body("going-r1", labels={"flowplan.io/job": "going"}))  # its replacement, pending
    adapter = adapter_for(k8s_sandbox)
    path = tmp_path / "going.log"
    start = time.time() - 20
    serve(k8s_sandbox, "going", path, stamped(sdk_output(1, 2, declare=False, deliver_at=None), start))
    observe_until(adapter, "going", lambda j: len(j.history) == 2, "the first two epochs")
    api.delete_namespaced_pod("going", NAMESPACE, _preload_content=False)  # graceful: 30 s to checkpoint
    wait_for(lambda: (get_pod(api, "going") or {}).get("metadata", {}).get("deletionTimestamp"), 10, "terminating")
    path.write_text(stamped(sdk_output(1, 3, declare=False, deliver_at=None), start))  # epoch 3, then its checkpoint
    job = observe_until(adapter, "going", lambda j: len(j.history) == 3, "the epoch printed while terminating")
    assert job.status == "pending"  # the job is its replacement; the old pod's lines still count
    api.delete_namespaced_pod("going", NAMESPACE, grace_period_seconds=0, _preload_content=False)


def test_a_log_that_cannot_be_read_keeps_the_history_and_is_noted_once(
    k8s_sandbox: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from adapters.docker.memory import MemoryStore
    from planner.snapshot import MetricPoint

    api = core(k8s_sandbox)
    create_pod(api, pod_body("silent", node=k8s_sandbox.nodes[2]))
    running(api, "silent")
    store = MemoryStore()
    store.add_points("silent", [MetricPoint(time=1.0, epoch=1.0, loss=1.5), MetricPoint(time=2.0, epoch=2.0, loss=1.2)])
    adapter = adapter_for(k8s_sandbox, store)
    with caplog.at_level(logging.INFO, logger="flowplan.kubernetes"):
        for _ in range(2):
            [job] = [j for j in adapter.observe().jobs if j.id == "silent"]
            assert [p.loss for p in job.history] == [1.5, 1.2]
    why = adapter.last.log_failed["silent"]
    print(f"log of a pod without a Logs object: {why}")
    said = [r for r in caplog.records if "log of pod default/silent not read" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO, said
