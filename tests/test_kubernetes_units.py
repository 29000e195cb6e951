"""The Kubernetes adapter's pure parts, without a server.

Case matrix:

- quantities: CPU in millicores (``500m``, ``2``, ``0.25``, ``1e3m``), memory in MiB (``256Mi``,
  ``1Gi``, ``1G``); a bad quantity raises ``ValueError``;
- annotations: the Docker label table under ``flowplan.io/``; spec defaults fill what annotations
  leave out; a bad value, an unknown key, a target without a tier 1 name the *annotation*;
- errors: each HTTP status and connection failure maps to its kind;
- the replacement pod: new name, bound or not, new CPU, the job label and ``replaces`` set, the
  adapter's own request annotations dropped;
- sandbox down signals only processes still running the recorded binary (a reused id is left alone);
- CLI: ``sandbox up`` with the binaries missing names the build command; ``--nodes 0`` is a usage
  error; both one line, exit code 2, no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.kubernetes.adapter import next_name, replacement
from adapters.kubernetes.annotations import AnnotationError, parse_annotations
from adapters.kubernetes.errors import classify
from adapters.kubernetes.pods import GPU, mib, millis, pod_view


@pytest.mark.parametrize(
    ("text", "expected"),
    [("500m", 500), ("2", 2000), ("0.25", 250), ("1e3m", 1000), ("1k", 1_000_000), ("100u", 1)],
    ids=["millis", "cores", "fraction", "exponent", "kilo", "rounded-up"],
)
def test_cpu_quantities(text: str, expected: int) -> None:
    assert millis(text) == expected


@pytest.mark.parametrize(("text", "expected"), [("256Mi", 256), ("1Gi", 1024), ("1G", 953), ("1048576", 1)])
def test_memory_quantities(text: str, expected: int) -> None:
    assert mib(text) == expected


@pytest.mark.parametrize("text", ["lots", "", "1.2.3", "inf"])
def test_bad_quantity_raises(text: str) -> None:
    with pytest.raises(ValueError):
        millis(text)


def test_annotations_mirror_docker_labels_with_spec_defaults() -> None:
    parsed = parse_annotations(
        "job-a",
        {
            "flowplan.io/min_cpu_millis": "300",
            "flowplan.io/target.tier1": "0.9",
            "flowplan.io/target.direction": "higher",
            "flowplan.io/target.tier1.within": "600",
            "flowplan.io/checkpoint-requested": "2026-01-01T00:00:00Z",  # written by the adapter: not a bound
            "other.io/thing": "x",
        },
        created=1000.0,
        spec_defaults={"max_cpu_millis": "2000", "memory_mib": "256"},
    )
    f = parsed.fields
    assert (parsed.job_id, f["min_cpu_millis"], f["max_cpu_millis"], f["memory_mib"]) == ("job-a", 300, 2000, 256)
    assert f["target"].tier1.value == 0.9 and f["target"].tier1.deadline == 1600.0


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        ({"flowplan.io/max_cpu_millis": "lots"}, "annotation flowplan.io/max_cpu_millis: not a number ('lots')"),
        ({"flowplan.io/colour": "blue"}, "annotation flowplan.io/colour: unknown FlowPlan label"),
        ({"flowplan.io/target.tier2": "0.5"}, "annotation flowplan.io/target.tier1: missing (other flowplan.io/target.*"),
        (
            {"flowplan.io/min_cpu_millis": "900", "flowplan.io/max_cpu_millis": "100"},
            "annotations flowplan.io/min_cpu_millis and flowplan.io/max_cpu_millis: min_cpu_millis 900 exceeds",
        ),
    ],
    ids=["not-a-number", "unknown-key", "target-without-tier1", "min-above-max"],
)
def test_bad_annotation_is_named(annotations: dict[str, str], named: str) -> None:
    with pytest.raises(AnnotationError) as err:
        parse_annotations("j", annotations)
    assert str(err.value).startswith(named), str(err.value)
    assert "label flowplan." not in str(err.value)


def _api_exception(status: int, message: str) -> Exception:
    from kubernetes.client.exceptions import ApiException

    exc = ApiException(status=status, reason="Reason")
    exc.body = json.dumps({"kind": "Status", "message": message})
    return exc


@pytest.mark.parametrize(
    ("status", "kind"),
    [(401, "forbidden"), (403, "forbidden"), (404, "not_found"), (409, "conflict"), (422, "invalid"), (400, "invalid"),
     (429, "transient"), (500, "transient"), (503, "transient")],
)  # fmt: skip
def test_api_status_maps_to_kind(status: int, kind: str) -> None:
    got, message = classify(_api_exception(status, "the server's words"))
    assert got == kind and "the server's words" in message


def test_connection_failures_are_engine_down() -> None:
    import urllib3

    err = urllib3.exceptions.MaxRetryError(None, "/api", reason=ConnectionRefusedError("refused"))  # type: ignore[arg-type]
    assert classify(err)[0] == "engine_down"
    assert classify(ConnectionRefusedError("refused"))[0] == "engine_down"
    assert classify(TimeoutError("slow"))[0] == "transient"


def test_replacement_pod() -> None:
    raw = {
        "metadata": {
            "name": "train-r1",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {"app": "x"},
            "annotations": {"flowplan.io/checkpoint-requested": "t", "flowplan.io/priority": "2"},
        },
        "spec": {
            "nodeName": "n0",
            "schedulerName": "flowplan",
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "1", GPU: "1"}, "limits": {"cpu": "2", GPU: "1"}}}
            ],
        },
        "status": {"phase": "Running"},
    }  # fmt: skip
    old = pod_view(raw)
    body = replacement(old, "train", "n1", 750, 1500, 0)
    assert body["metadata"]["name"] == "train-r2" and "uid" not in body["metadata"] and "status" not in body
    assert body["metadata"]["labels"] == {"app": "x", "flowplan.io/job": "train"}
    assert body["metadata"]["annotations"] == {"flowplan.io/priority": "2", "flowplan.io/replaces": "train-r1"}
    assert body["spec"]["nodeName"] == "n1"
    assert body["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "750m"}, "limits": {"cpu": "1500m"}}
    paused = replacement(
        pod_view({**raw, "spec": {**raw["spec"], "schedulerName": "default-scheduler"}}), "train", None, 750, None, 1
    )
    assert "nodeName" not in paused["spec"] and paused["spec"]["schedulerName"] == "flowplan"
    assert raw["spec"]["nodeName"] == "n0"  # the old pod's JSON is not touched
    assert next_name("a") == "a-r1" and next_name("a-r9") == "a-r10" and next_name("a-rx") == "a-rx-r1"


def _flowplan(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowplan", *args], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )


@pytest.mark.parametrize("how", ["--kubeconfig", "KUBECONFIG"])
def test_a_kubeconfig_that_is_a_directory_is_named_as_one(tmp_path: Path, how: str) -> None:
    """Was "no such file", of a directory that is there."""
    flag = ["--kubeconfig", str(tmp_path)] if how == "--kubeconfig" else []
    env = {"KUBECONFIG": str(tmp_path)} if how == "KUBECONFIG" else {}
    done = _flowplan("snapshot", "--adapter", "kubernetes", *flag, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"{how}{' ' if flag else '='}{tmp_path}: is a directory, not a kubeconfig file" in done.stderr, done.stderr


def test_sandbox_up_without_binaries_names_the_build_command(tmp_path: Path) -> None:
    done = _flowplan("sandbox", "up", "--dir", str(tmp_path / "sb"), env={"FLOWPLAN_BIN_DIR": str(tmp_path / "empty")})
    assert done.returncode == 2, done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.startswith("flowplan: error")]
    assert "not built" in line and "deploy/sandbox/build.sh" in line
    assert "Traceback" not in done.stderr and not (tmp_path / "sb").exists()


def test_sandbox_up_bad_node_count_is_a_usage_error(tmp_path: Path) -> None:
    done = _flowplan("sandbox", "up", "--nodes", "0", env={})
    assert done.returncode == 2 and "--nodes" in done.stderr and "Traceback" not in done.stderr


def test_sandbox_down_leaves_a_reused_process_id_alone(tmp_path: Path) -> None:
    """After a reboot the recorded ids may be other processes': ``down`` signals only the recorded binaries."""
    from adapters.kubernetes.sandbox import Sandbox, SandboxInfo

    directory = tmp_path / "sb"
    directory.mkdir()
    info = SandboxInfo(
        directory=str(directory),
        kubeconfig=str(directory / "kubeconfig"),
        server="https://127.0.0.1:1",
        ports={},
        pids={"etcd": os.getpid()},  # this test's own process plays the stranger
        admin_token="a",
        viewer_token="v",
    )
    (directory / "sandbox.json").write_text(json.dumps(info.__dict__))
    lines = Sandbox(directory).down()
    assert f"left pid {os.getpid()} alone: it is no longer etcd" in lines
    assert not directory.exists()


DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"


def test_the_deployment_runs_a_daemon_command_the_cli_accepts() -> None:
    """The container's command line, as the kubelet expands it, parses with ``flowplan daemon``'s own parser."""
    import yaml

    from flowplan.cli import _parser

    [deployment] = [d for d in yaml.safe_load_all((DEPLOY / "deployment.yaml").read_text()) if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["flowplan"] and pod["serviceAccountName"] == "flowplan"
    argv = [a.replace("$(POD_NAME)", "flowplan-7d9c-abcde") for a in container["args"]]
    args = _parser().parse_args(argv)
    assert (args.adapter, args.identity, args.dry_run) == ("kubernetes", "flowplan-7d9c-abcde", False)
    assert args.lease_name == "flowplan-daemon" and args.lease_namespace is None  # the pod's own namespace


def test_the_kustomization_moves_every_object_and_subject_to_its_namespace(tmp_path: Path) -> None:
    """``kubectl kustomize`` with another namespace gives what the sandbox tests apply (k8s_env.rbac_objects)."""
    import shutil

    import yaml
    from k8s_env import rbac_objects

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl to render the kustomization")
    for f in DEPLOY.glob("*.yaml"):
        text = f.read_text()
        if f.name == "kustomization.yaml":
            text = text.replace("\nnamespace: flowplan\n", "\nnamespace: elsewhere\n")
        (tmp_path / f.name).write_text(text)
    done = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    rendered = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(done.stdout) if d}
    for want in rbac_objects("elsewhere"):
        assert rendered.pop((want["kind"], want["metadata"]["name"])) == want
    [(key, deployment)] = rendered.items()
    assert key == ("Deployment", "flowplan") and deployment["metadata"]["namespace"] == "elsewhere"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        pytest.param(
            ["--interval", "5", "--lease-duration", "3"], "--lease-duration 3: must be longer than --interval", id="short"
        ),
        pytest.param(["--lease-name", " "], "--lease-name: must not be empty", id="empty-name"),
    ],
)
def test_bad_lease_options_are_one_line(tmp_path: Path, flags: list[str], says: str) -> None:
    """Refused before any API call: the kubeconfig names a server nobody needs to reach."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    argv = ["daemon", "--adapter", "kubernetes", "--kubeconfig", str(tmp_path / "kubeconfig"), "--state", str(tmp_path / "s.db")]
    done = _flowplan(*argv, *flags, env={})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and says in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("status", "started"),
    [
        (
            {
                "startTime": "2026-11-30T04:00:00Z",
                "containerStatuses": [{"state": {"running": {"startedAt": "2026-11-30T04:00:07Z"}}}],
            },
            1796011207.0,
        ),
        ({"startTime": "2026-11-30T04:00:00Z", "containerStatuses": [{"state": {"waiting": {"reason": "x"}}}]}, 1796011200.0),
        ({"startTime": "2026-11-30T04:00:00Z"}, 1796011200.0),
        ({}, None),
    ],
    ids=["container-running", "container-waiting", "pod-start-only", "not-started"],
)
def test_a_pods_current_run_started_when_its_container_did(status: dict[str, object], started: float | None) -> None:
    """``Job.started`` of a pod: its container's ``state.running.startedAt`` (a restart's too), else
    the pod's ``startTime``; none before either."""
    view = pod_view({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}, "status": status})
    assert view.started == started


def test_how_a_failed_pod_failed_is_read_from_its_status() -> None:
    """``Job.failure`` (``flowplan status --all``): the pod's own reason first (an eviction), else its
    first container's termination (reason and exit code), else ``Failed``."""
    from adapters.kubernetes.adapter import _failure
    from adapters.kubernetes.pods import pod_view

    def failed(status: dict[str, object]) -> str:
        raw = {"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": {"containers": [{"name": "train"}]}}
        return _failure(pod_view({**raw, "status": {"phase": "Failed", **status}}))

    assert failed({"reason": "Evicted", "message": "low on memory"}) == "Evicted"
    oom = {"containerStatuses": [{"name": "train", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}
    assert failed(oom) == "OOMKilled (exit 137)"
    assert failed({"containerStatuses": [{"name": "train", "state": {"terminated": {"exitCode": 3}}}]}) == "exited (exit 3)"
    assert failed({}) == "Failed"
