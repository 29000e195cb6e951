"""Progress read from a real MLflow tracking server (``mlflow server``, SQLite backend, loopback).

Nothing is faked: the tests start ``mlflow server`` from the ``mlflow`` package (a dev dependency,
not a runtime one) on a free loopback port, log runs with MLflow's own client, and read them back
with :mod:`adapters.logs.mlflow` over HTTP. The curve logged is a measured one: CIFAR-10 validation
accuracy per epoch at batch size 128 (AdaptDL OSDI'21 traces, ``../shared/data``).

Cases:
- first read: the tagged run's points, epochs counted from 1 (the run logs ``epoch`` from 0);
- more logged, read again: only the new points (and an unchanged run is not re-read);
- a run without the tag, or with another job's tag, is ignored;
- steps without an ``epoch`` metric are placed with a declared steps-per-epoch, else counted unplaced;
- an unreachable server: one line naming it, no traceback;
- ``flowplan logs --mlflow URI --job ID`` prints the points (JSON) and exits 2 with one line when unreachable;
- the Docker adapter's progress store (``LogProgress.read_mlflow``, what ``--mlflow`` on the daemon and
  ``flowplan snapshot`` runs per job each interval) keeps the points in a real SQLite state store, the
  cursor in its key-value table, and a server that went down is one warning, not a crash;
- the Kubernetes adapter given ``mlflow=`` (``--mlflow`` with ``--adapter kubernetes``): a pod's tagged
  run on a real kube-apiserver's FlowPlan pod, read into the job's history, then only what is new;
- ``--mlflow`` that is not an http(s) address (either adapter): one line, exit 2.

Without ``mlflow`` installed the tests skip, except in CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, real_curve

from adapters.docker.progress import LogProgress
from adapters.logs.mlflow import MetricKeys, MlflowClient, MlflowCursor, MlflowError, read_job

#: Starting ``mlflow server`` (its SQLite schema migrations, a gunicorn/uvicorn worker and job
#: consumers) took 25-76 s here on a shared 2-core machine.
pytestmark = pytest.mark.slow


def mlflow_missing(reason: str) -> None:
    """Fail in CI, skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"mlflow required in CI: {reason}")
    pytest.skip(f"mlflow not available: {reason}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        import mlflow  # noqa: F401
    except ImportError as exc:
        mlflow_missing(str(exc))
    exe = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or shutil.which("mlflow")
    if exe is None:
        mlflow_missing("no mlflow command beside this Python")
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    cmd = [exe, "server", "--backend-store-uri", f"sqlite:///{tmp}/m.db", "--default-artifact-root", str(tmp / "art")]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    log = (tmp / "server.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(tmp / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def client(server: str):  # type: ignore[no-untyped-def]
    import mlflow

    return mlflow.MlflowClient(tracking_uri=server)


CURVE = [float(v) for v in real_curve("cifar10", 128)]


def log_epochs(client, run_id: str, first: int, last: int, t0: int) -> None:  # type: ignore[no-untyped-def]
    """Epochs ``first..last-1`` (0-based, as a Keras or Lightning loop numbers them) of the measured curve."""
    for e in range(first, last):
        client.log_metric(run_id, "epoch", e, timestamp=t0 + e * 1000, step=e)
        client.log_metric(run_id, "val_accuracy", CURVE[e], timestamp=t0 + e * 1000, step=e)


def test_reads_tagged_run_incrementally_and_ignores_others(server: str, client) -> None:  # type: ignore[no-untyped-def]
    exp = client.create_experiment("flowplan-incremental")
    run = client.create_run(exp, tags={"flowplan.job": "cifar-a"}).info.run_id
    untagged = client.create_run(exp).info.run_id
    other = client.create_run(exp, tags={"flowplan.job": "cifar-b"}).info.run_id
    t0 = 1_700_000_000_000
    log_epochs(client, run, 0, 5, t0)
    log_epochs(client, untagged, 0, 8, t0)
    log_epochs(client, other, 0, 8, t0)

    reader = MlflowClient(server)
    first, cursor = read_job(reader, "cifar-a", MlflowCursor())
    assert first.runs == [run]
    assert [p.epoch for p in first.points] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [p.metric for p in first.points] == CURVE[:5]
    assert first.points[0].time == t0 / 1000

    again, cursor = read_job(reader, "cifar-a", MlflowCursor.from_dict(json.loads(json.dumps(cursor.as_dict()))))
    assert again.points == [], "nothing new was logged"

    log_epochs(client, run, 5, 9, t0)
    more, cursor = read_job(reader, "cifar-a", cursor)
    assert [p.epoch for p in more.points] == [6.0, 7.0, 8.0, 9.0]
    assert [p.metric for p in more.points] == CURVE[5:9]

    nobody, _ = read_job(reader, "no-such-job", MlflowCursor())
    assert nobody.runs == [] and nobody.points == []


def test_steps_need_steps_per_epoch(server: str, client) -> None:  # type: ignore[no-untyped-def]
    """A run logging ``loss`` at global steps (no ``epoch`` metric): placed only with steps per epoch."""
    exp = client.create_experiment("flowplan-steps")
    run = client.create_run(exp, tags={"flowplan.job": "steps"}).info.run_id
    t0 = 1_700_000_000_000
    for k, acc in enumerate(CURVE[:4], start=1):
        client.log_metric(run, "train_loss", 1.0 - acc, timestamp=t0 + k, step=k * 50)
    reader = MlflowClient(server)
    blind, _ = read_job(reader, "steps", MlflowCursor())
    assert blind.points == [] and blind.unplaced == 4
    placed, _ = read_job(reader, "steps", MlflowCursor(), steps_per_epoch=50, keys=MetricKeys(loss=("train_loss",)))
    assert [p.epoch for p in placed.points] == [1.0, 2.0, 3.0, 4.0]
    assert [p.loss for p in placed.points] == pytest.approx([1.0 - a for a in CURVE[:4]])


def test_unreachable_server_is_one_line() -> None:
    reader = MlflowClient(f"http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(MlflowError) as info:
        read_job(reader, "cifar-a", MlflowCursor())
    assert "unreachable" in str(info.value) and "\n" not in str(info.value)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "flowplan", *args], capture_output=True, text=True, env=env, timeout=120)


def test_logs_command(server: str, client) -> None:  # type: ignore[no-untyped-def]
    exp = client.create_experiment("flowplan-cli")
    run = client.create_run(exp, tags={"flowplan.job": "cli-job"}).info.run_id
    log_epochs(client, run, 0, 3, 1_700_000_000_000)
    out = run_cli("logs", "--mlflow", server, "--job", "cli-job", "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [p["epoch"] for p in doc["points"]] == [1.0, 2.0, 3.0]
    assert [p["metric"] for p in doc["points"]] == CURVE[:3]

    down = run_cli("logs", "--mlflow", f"http://127.0.0.1:{free_port()}", "--job", "cli-job")
    assert down.returncode == 2
    assert len(down.stderr.strip().splitlines()) == 1 and "unreachable" in down.stderr
    assert "Traceback" not in down.stderr


def test_progress_store_reads_mlflow(server: str, client, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    from store import StateStore

    exp = client.create_experiment("flowplan-store")
    run = client.create_run(exp, tags={"flowplan.job": "stored"}).info.run_id
    t0 = 1_700_000_000_000
    log_epochs(client, run, 0, 4, t0)
    store = StateStore(tmp_path / "state.db")
    progress = LogProgress(store, "docker", logging.getLogger("test.mlflow"))
    reader = MlflowClient(server)
    assert progress.read_mlflow("stored", reader)
    log_epochs(client, run, 4, 6, t0)
    assert progress.read_mlflow("stored", reader)
    # a fresh LogProgress on the same store (a restarted daemon) goes on from the stored cursor
    again = LogProgress(store, "docker", logging.getLogger("test.mlflow"))
    assert again.read_mlflow("stored", reader)
    history = store.history("stored")
    assert [p.epoch for p in history] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert [p.metric for p in history] == CURVE[:6]
    assert json.loads(store.get_kv("docker.mlflow.stored"))["seen"][run]["val_accuracy"][0] == 5

    down = MlflowClient(f"http://127.0.0.1:{free_port()}", timeout=2)
    with caplog.at_level(logging.WARNING, logger="test.mlflow"):
        assert not again.read_mlflow("stored", down)
        assert not again.read_mlflow("stored", down)
    warnings = [r.getMessage() for r in caplog.records if r.name == "test.mlflow"]
    assert len(warnings) == 1 and "unreachable" in warnings[0]
    assert len(store.history("stored")) == 6


@pytest.mark.usefixtures("k8s_no_pods")
def test_the_kubernetes_adapter_reads_a_pods_mlflow_runs(server: str, client, k8s_sandbox: Any) -> None:  # type: ignore[no-untyped-def]
    """A pending FlowPlan pod on the real kube-apiserver (no log to read), and a run tagged with its
    job id on the real tracking server: the adapter given ``mlflow=`` has the run's
    points in the job's history, and the next observe adds only what was logged since."""
    from k8s_env import NAMESPACE, core, create_pod, pod_body

    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.sandbox import api_client

    create_pod(core(k8s_sandbox), pod_body("mlf"))
    exp = client.create_experiment("flowplan-k8s")
    run = client.create_run(exp, tags={"flowplan.job": "mlf"}).info.run_id
    t0 = 1_700_000_000_000
    log_epochs(client, run, 0, 3, t0)
    ad = KubernetesAdapter(api_client(k8s_sandbox), namespaces=[NAMESPACE], mlflow=server)
    [job] = ad.observe().jobs
    assert job.id == "mlf" and [(p.epoch, p.metric) for p in job.history] == list(zip([1.0, 2.0, 3.0], CURVE[:3], strict=True))
    log_epochs(client, run, 3, 5, t0)
    [job] = ad.observe().jobs
    assert [p.epoch for p in job.history] == [1.0, 2.0, 3.0, 4.0, 5.0]
    ad.close()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(["--mlflow", "mlflow:5000"], "--mlflow 'mlflow:5000'", id="not-http"),
        pytest.param(["--adapter", "kubernetes", "--mlflow", "mlflow:5000"], "--mlflow 'mlflow:5000'", id="kubernetes-not-http"),
    ],
)
def test_snapshot_mlflow_usage(args: list[str], says: str) -> None:
    out = run_cli("snapshot", *args)
    assert out.returncode == 2
    assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
