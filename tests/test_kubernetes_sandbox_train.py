"""``flowplan sandbox train``: made-up training of the sandbox's pods from measured curves.

Against the real kube-apiserver of the session's sandbox (tests/k8s_env.py) and a real state store
file. The clock is a counter the test advances (the trainer's only stand-in): epochs follow from
the measured speed at each pod's CPU request, checked here against ``GroundTruth.epoch_seconds``.

Cases: a bound pod gets one point per whole epoch with the measured curve's values, and is marked
Succeeded at its planned epochs; an unbound pod is left alone; a pod with an unknown model is left
alone with one line; a pod replaced by a migration resumes from its last whole epoch; the command
itself runs to the end and exits 0, and a bad kubeconfig is one line and exit 2.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from k8s_env import NAMESPACE, core, create_pod, get_pod, pod_body, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("k8s_no_pods")]


def _pod(name: str, model: str, node: str | None, epochs: int, cpu: str = "1") -> dict[str, Any]:
    from adapters.kubernetes.sandbox_train import MODEL_ANNOTATION

    annotations = {MODEL_ANNOTATION: model, "flowplan.io/target.max_epochs": str(epochs)}
    return pod_body(name, cpu=cpu, limit="4", node=node, annotations=annotations, labels={"flowplan.io/job": name})


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _trainer(info: Any, tmp_path: Path, clock: Clock) -> Any:
    from adapters.kubernetes.sandbox_train import SandboxTrainer
    from store import StateStore

    return SandboxTrainer(core(info), StateStore(tmp_path / "state.db"), NAMESPACE, speedup=10.0, clock=clock)


def test_bound_pods_train_by_the_measured_curves_and_finish(k8s_sandbox: Any, tmp_path: Path) -> None:
    from adapters.sim.truth import GroundTruth, TraceLibrary

    api = core(k8s_sandbox)
    node = k8s_sandbox.nodes[0]
    create_pod(api, _pod("cifar", "cifar10/128", node, epochs=3))
    create_pod(api, _pod("waiting", "cifar10/128", None, epochs=3))
    create_pod(api, _pod("odd", "resnet9000/7", node, epochs=3))
    clock = Clock()
    trainer = _trainer(k8s_sandbox, tmp_path, clock)
    first = trainer.step()
    assert any(line.startswith("cifar: plays cifar10/128 on " + node) for line in first)
    assert [line for line in first if line.startswith("odd:")] == [
        "odd: left alone: model: unknown model 'resnet9000' (known: bert, cifar10, deepspeech2, imagenet, ncf, yolov3)"
    ]
    assert not any(line.startswith("waiting:") for line in first)  # not bound: not training
    truth = GroundTruth(TraceLibrary.bundled(), "cifar10", 128, "cpu")
    per_epoch = truth.epoch_seconds(1000, 0) / 10.0  # speedup 10, 1 CPU requested
    clock.now += 2.5 * per_epoch
    second = trainer.step()
    history = trainer.store.history("cifar")
    assert [p.epoch for p in history] == [1.0, 2.0]
    assert [p.metric for p in history] == pytest.approx([truth.metric(1.0), truth.metric(2.0)])
    assert not any(line.startswith("odd:") for line in second)  # said once
    clock.now += 1.0 * per_epoch
    third = trainer.step()
    assert "cifar: done (3 epochs): pod cifar Succeeded" in third
    assert (get_pod(api, "cifar") or {})["status"]["phase"] == "Succeeded"
    assert trainer.finished == {"cifar"} and "cifar" not in trainer.playing
    assert [p.epoch for p in trainer.store.history("cifar")] == [1.0, 2.0, 3.0]


def test_a_replaced_pod_resumes_from_its_last_whole_epoch(k8s_sandbox: Any, tmp_path: Path) -> None:
    api = core(k8s_sandbox)
    n0, n1 = k8s_sandbox.nodes[:2]
    create_pod(api, _pod("mover", "ncf/256", n0, epochs=10))
    clock = Clock()
    trainer = _trainer(k8s_sandbox, tmp_path, clock)
    trainer.step()
    per_epoch = trainer.playing["mover"].truth.epoch_seconds(1000, 0) / 10.0
    clock.now += 2.6 * per_epoch
    trainer.step()
    assert trainer.playing["mover"].epoch == pytest.approx(2.6)
    # A migration: the old pod goes, a new one with the same job runs on another node.
    api.delete_namespaced_pod("mover", NAMESPACE, grace_period_seconds=0, _preload_content=False)
    wait_for(lambda: get_pod(api, "mover") is None, 30, "old pod gone")
    create_pod(api, _pod("mover", "ncf/256", n1, epochs=10))
    lines = trainer.step()
    assert f"mover: plays ncf/256 on {n1}, resumes at epoch 2 (10 epochs)" in lines
    assert trainer.playing["mover"].epoch == 2.0  # the 0.6 epoch since the last point is lost


def test_the_command_runs_to_the_end_and_refuses_a_bad_kubeconfig(k8s_sandbox: Any, tmp_path: Path) -> None:
    api = core(k8s_sandbox)
    create_pod(api, _pod("quick", "ncf/256", k8s_sandbox.nodes[0], epochs=1, cpu="4"))
    state = tmp_path / "state.db"
    cmd = [sys.executable, "-m", "flowplan", "sandbox", "train", "--state", str(state)]
    cmd += ["--kubeconfig", k8s_sandbox.kubeconfig, "--speedup", "1000", "--every", "0.5", "--for", "60"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "quick: done (1 epochs): pod quick Succeeded" in done.stdout
    assert "all 1 pod(s) done" in done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "flowplan", "sandbox", "train", "--state", str(state), "--kubeconfig", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "--kubeconfig" in bad.stderr and "Traceback" not in bad.stderr


#: A task and a target on the accuracy (the measured cifar10 curve's metric).
TASK = {
    "flowplan.io/task": "cifar10",
    "flowplan.io/target.metric": "accuracy",
    "flowplan.io/target.direction": "higher",
    "flowplan.io/target.tier1": "0.9",
}


def test_a_finished_pods_curve_is_the_prior_of_the_next_pod_of_its_task(k8s_sandbox: Any, tmp_path: Path) -> None:
    """Pod ``first`` (annotation ``flowplan.io/task: cifar10``) trains 3 epochs of the measured
    cifar10 curve and is marked Succeeded; the Kubernetes adapter on the same state store records its
    run, and with a new pod of the task, not yet bound, the snapshot carries first's curve in its
    ``curve_priors``."""
    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.sandbox import api_client

    api = core(k8s_sandbox)
    first = _pod("first", "cifar10/128", k8s_sandbox.nodes[0], epochs=3)
    first["metadata"]["annotations"].update(TASK)
    create_pod(api, first)
    clock = Clock()
    trainer = _trainer(k8s_sandbox, tmp_path, clock)
    trainer.step()
    clock.now += 3.5 * trainer.playing["first"].truth.epoch_seconds(1000, 0) / 10.0
    trainer.step()
    assert (get_pod(api, "first") or {})["status"]["phase"] == "Succeeded"
    adapter = KubernetesAdapter(api_client(k8s_sandbox), namespaces=[NAMESPACE], store=trainer.store)
    second = _pod("second", "cifar10/128", None, epochs=3)
    second["metadata"]["annotations"].update(TASK)
    create_pod(api, second)
    snap = adapter.observe()
    jobs = {j.id: j for j in snap.jobs}
    assert (jobs["first"].status, jobs["second"].status) == ("finished", "pending")
    (curves,) = snap.curve_priors
    assert (curves.task, [r.job for r in curves.runs]) == ("cifar10", ["first"])
    assert [p.metric for p in curves.runs[0].points] == pytest.approx([p.metric for p in trainer.store.history("first")])
