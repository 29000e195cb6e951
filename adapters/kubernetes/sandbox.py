"""A local Kubernetes control plane for development and tests: real etcd and kube-apiserver, fake kubelets.

:class:`Sandbox` starts, in one directory (default ``~/.cache/flowplan/sandbox``):

- ``etcd`` on loopback (``--unsafe-no-fsync``: a sandbox's data is thrown away);
- ``kube-apiserver`` on loopback with its own self-signed serving certificate (``--cert-dir``), a
  service-account key pair made with ``openssl``, static bearer tokens (``admin`` in
  ``system:masters``; ``viewer`` in no group, so RBAC forbids it everything: the tests' Forbidden
  case), RBAC authorisation, and two admission plugins off because no controller-manager runs:
  ``ServiceAccount`` (nothing creates the ``default`` service accounts) and
  ``TaintNodesByCondition`` (nothing would lift the ``not-ready`` taint it puts on a new node);
- ``kwok`` (fake kubelets) managing the nodes annotated ``kwok.x-k8s.io/node=fake``, with its
  "fast" stages: a bound pod becomes Running at once, a deleted pod goes away at once; the pod
  stages are ``kwok-stages.yaml`` beside this module (its header says why and what changed). kwok
  also serves the kubelet's API on loopback (TLS with a self-signed certificate the API server
  checks), so ``pods/log`` works through the API server for a pod that has a kwok ``Logs`` object
  (its CRD is created at start; :func:`serve_pod_log`): the log is a file in the CRI format a
  container runtime writes (:func:`cri_log_line`), which kwok reads as the kubelet does
  (``sinceSeconds``, ``timestamps``...);
- N such nodes (``flowplan-node-0`` ...) with 32 CPUs, 256 GiB and G ``nvidia.com/gpu`` each.

No scheduler and no controller-manager run: pods with ``schedulerName: flowplan`` wait for FlowPlan.
It writes a kubeconfig (the admin token, the server's certificate as the CA) and ``sandbox.json``
(process ids, ports, tokens) so that :meth:`Sandbox.down` from another process stops exactly
those processes and removes the directory.

The binaries are built from Go modules by ``deploy/sandbox/build.sh`` into
``~/.cache/flowplan/bin/<name>-<version>`` (``FLOWPLAN_BIN_DIR`` overrides it); the versions are in
``versions.env`` beside this module. A missing binary, a port in use or a process that dies is a
:class:`SandboxError` with one line saying what to do.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
NODE_PREFIX = "flowplan-node-"
DEFAULT_PORTS = {"apiserver": 16443, "etcd": 12379, "etcd_peer": 12380, "kubelet": 16250}
#: The kwok custom resource that maps a pod's container logs to a file (``--enable-crds=Logs``).
LOGS_GROUP, LOGS_VERSION, LOGS_PLURAL = "kwok.x-k8s.io", "v1alpha1", "logs"
BUILD_HINT = (
    "bash deploy/sandbox/build.sh (from a FlowPlan checkout; about 25 minutes the first time on 2 cores, see docs/kubernetes.md)"
)


class SandboxError(RuntimeError):
    """The sandbox cannot start or stop; the message is one line saying why and what to do."""


def versions() -> dict[str, str]:
    """The pinned versions (``versions.env`` beside this module): KUBERNETES_VERSION, ETCD_VERSION, KWOK_VERSION."""
    out: dict[str, str] = {}
    for line in (Path(__file__).with_name("versions.env")).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def bin_dir() -> Path:
    return Path(os.environ.get("FLOWPLAN_BIN_DIR") or Path.home() / ".cache" / "flowplan" / "bin")


def default_dir() -> Path:
    return Path(os.environ.get("FLOWPLAN_SANDBOX_DIR") or Path.home() / ".cache" / "flowplan" / "sandbox")


def binaries() -> dict[str, Path]:
    """Where each binary of the pinned versions is (whether it exists or not)."""
    v = versions()
    d = bin_dir()
    return {
        "etcd": d / f"etcd-{v['ETCD_VERSION']}",
        "kube-apiserver": d / f"kube-apiserver-{v['KUBERNETES_VERSION']}",
        "kwok": d / f"kwok-{v['KWOK_VERSION']}",
    }


def missing_binaries() -> list[Path]:
    return [p for p in binaries().values() if not os.access(p, os.X_OK)]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own child that exited) is not alive.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


@dataclass
class SandboxInfo:
    """What ``sandbox.json`` holds: enough for another process to use or stop the sandbox."""

    directory: str
    kubeconfig: str
    server: str
    ports: dict[str, int]
    pids: dict[str, int]
    admin_token: str
    viewer_token: str
    nodes: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, directory: Path) -> SandboxInfo | None:
        path = directory / "sandbox.json"
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


class Sandbox:
    """One local control plane in ``directory`` (see the module docstring)."""

    def __init__(self, directory: Path | None = None, *, ports: Mapping[str, int] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_dir()
        self.ports = {**DEFAULT_PORTS, **(ports or {})}
        self.info: SandboxInfo | None = None

    # -- up -----------------------------------------------------------------------------------------

    def up(self, nodes: int = 3, gpus_per_node: int = 0, *, timeout: float = 90.0) -> SandboxInfo:
        """Start everything and create ``nodes`` fake nodes; return what ``sandbox.json`` records."""
        if nodes < 1 or nodes > 5000:
            raise SandboxError(f"--nodes {nodes}: must be between 1 and 5000")
        if gpus_per_node < 0 or gpus_per_node > 64:
            raise SandboxError(f"--gpus-per-node {gpus_per_node}: must be between 0 and 64")
        existing = SandboxInfo.load(self.directory)
        if existing is not None and any(_alive(p) for p in existing.pids.values()):
            where = "" if self.directory == default_dir() else f" --dir {self.directory}"
            raise SandboxError(f"a sandbox is already up in {self.directory}; run 'flowplan sandbox down{where}' first")
        missing = missing_binaries()
        if missing:
            raise SandboxError(f"{missing[0].name} not built (no {missing[0]}); build the binaries with: {BUILD_HINT}")
        if shutil.which("openssl") is None:
            raise SandboxError("openssl not found; install it (Debian: apt-get install openssl)")
        for name, port in self.ports.items():
            if _port_taken(port):
                raise SandboxError(f"port {port} ({name}) is already in use on 127.0.0.1; stop what uses it or pick other ports")
        if self.directory.exists():
            shutil.rmtree(self.directory)
        self.directory.mkdir(parents=True)
        info = SandboxInfo(
            directory=str(self.directory),
            kubeconfig=str(self.directory / "kubeconfig"),
            server=f"https://127.0.0.1:{self.ports['apiserver']}",
            ports=dict(self.ports),
            pids={},
            admin_token=secrets.token_hex(16),
            viewer_token=secrets.token_hex(16),
        )
        self.info = info
        try:
            self._start_etcd(info, timeout)
            self._make_kubelet_cert()
            self._start_apiserver(info, timeout)
            self._write_kubeconfig(info)
            self._create_logs_crd(info, timeout)
            self._start_kwok(info)
            info.nodes = self._create_nodes(info, nodes, gpus_per_node, timeout)
        except BaseException:
            self._stop(info)
            raise
        self._save(info)
        return info

    def _save(self, info: SandboxInfo) -> None:
        (self.directory / "sandbox.json").write_text(json.dumps(info.__dict__, indent=2))

    def _spawn(self, info: SandboxInfo, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        info.pids[name] = proc.pid
        self._save(info)  # recorded at once: a 'down' after a failed 'up' still finds it
        return proc

    def _wait(self, info: SandboxInfo, name: str, proc: subprocess.Popen[bytes], ready: Any, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc.poll() is not None:
                tail = _tail(self.directory / f"{name}.log")
                raise SandboxError(
                    f"{name} exited with {proc.returncode} while starting: {tail} (log: {self.directory}/{name}.log)"
                )
            if ready():
                return
            time.sleep(0.2)
        raise SandboxError(f"{name} not ready after {timeout:g} s (log: {self.directory}/{name}.log)")

    def _start_etcd(self, info: SandboxInfo, timeout: float) -> None:
        client = f"http://127.0.0.1:{info.ports['etcd']}"
        peer = f"http://127.0.0.1:{info.ports['etcd_peer']}"
        argv = [
            str(binaries()["etcd"]),
            "--name=flowplan",
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=flowplan={peer}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]
        proc = self._spawn(info, "etcd", argv)
        self._wait(info, "etcd", proc, lambda: _http_ok(f"{client}/health"), timeout)

    def _start_apiserver(self, info: SandboxInfo, timeout: float) -> None:
        d = self.directory
        _run(["openssl", "genrsa", "-out", str(d / "sa.key"), "2048"])
        _run(["openssl", "rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub")])
        (d / "tokens.csv").write_text(
            f'{info.admin_token},admin,flowplan-admin,"system:masters"\n{info.viewer_token},viewer,flowplan-viewer\n'
        )
        argv = [
            str(binaries()["kube-apiserver"]),
            f"--etcd-servers=http://127.0.0.1:{info.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={info.ports['apiserver']}",
            f"--cert-dir={d / 'certs'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--anonymous-auth=false",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            # pods/log goes to kwok's kubelet API at the node's InternalIP (its Hostname does not resolve)
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={d / 'kubelet.crt'}",
            "--profiling=false",
            "--v=1",
        ]
        proc = self._spawn(info, "kube-apiserver", argv)
        url = f"{info.server}/readyz"
        self._wait(info, "kube-apiserver", proc, lambda: _http_ok(url, token=info.admin_token), timeout)

    def _ca_file(self) -> Path:
        return self.directory / "certs" / "apiserver.crt"

    def _write_kubeconfig(self, info: SandboxInfo) -> None:
        import base64

        ca = base64.b64encode(self._ca_file().read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "flowplan-sandbox", "cluster": {"server": info.server, "certificate-authority-data": ca}}],
            "users": [{"name": "admin", "user": {"token": info.admin_token}}],
            "contexts": [{"name": "flowplan-sandbox", "context": {"cluster": "flowplan-sandbox", "user": "admin"}}],
            "current-context": "flowplan-sandbox",
        }
        path = Path(info.kubeconfig)
        path.write_text(json.dumps(config, indent=2))  # JSON is YAML: no YAML writer needed
        path.chmod(0o600)

    def _make_kubelet_cert(self) -> None:
        """kwok's serving certificate (self-signed, for 127.0.0.1): the API server checks it as the kubelet's."""
        d = self.directory
        _run(
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                "-keyout", str(d / "kubelet.key"), "-out", str(d / "kubelet.crt"),
                "-subj", "/CN=flowplan-sandbox-kubelet", "-addext", "subjectAltName=IP:127.0.0.1",
            ]
        )  # fmt: skip

    def _create_logs_crd(self, info: SandboxInfo, timeout: float) -> None:
        """The ``logs.kwok.x-k8s.io`` CRD, before kwok starts watching it (``--enable-crds=Logs``).

        Written here, not copied from kwok: the schema keeps every field (kwok checks what it reads).
        """
        from kubernetes import client

        ext = client.ApiextensionsV1Api(api_client(info))
        name = f"{LOGS_PLURAL}.{LOGS_GROUP}"
        body: dict[str, Any] = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {
                "group": LOGS_GROUP,
                "names": {"kind": "Logs", "listKind": "LogsList", "plural": LOGS_PLURAL, "singular": "logs"},
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": LOGS_VERSION,
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                ],
            },
        }
        ext.create_custom_resource_definition(cast(Any, body), _preload_content=False)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            crd = json.loads(cast(Any, ext.read_custom_resource_definition(name, _preload_content=False)).data)
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                return
            time.sleep(0.2)
        raise SandboxError(f"the kwok Logs CRD was not established within {timeout:g} s")

    def _start_kwok(self, info: SandboxInfo) -> None:
        argv = [
            str(binaries()["kwok"]),
            f"--kubeconfig={info.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--manage-nodes-with-label-selector=",
            "--manage-single-node=",
            "--cidr=10.244.0.0/16",
            "--node-ip=127.0.0.1",
            f"--node-port={info.ports['kubelet']}",
            f"--server-address=127.0.0.1:{info.ports['kubelet']}",
            f"--tls-cert-file={self.directory / 'kubelet.crt'}",
            f"--tls-private-key-file={self.directory / 'kubelet.key'}",
            "--enable-crds=Logs",
            "--node-lease-duration-seconds=40",
            f"--config={Path(__file__).with_name('kwok-stages.yaml')}",
        ]
        self._spawn(info, "kwok", argv)

    def _create_nodes(self, info: SandboxInfo, count: int, gpus: int, timeout: float) -> list[str]:
        from kubernetes import client

        api = client.CoreV1Api(api_client(info))
        names = [f"{NODE_PREFIX}{i}" for i in range(count)]
        capacity = {"cpu": "32", "memory": "256Gi", "pods": "110"}
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
        for name in names:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"},
                },
                "status": {"capacity": capacity, "allocatable": capacity},
            }
            api.create_node(cast(Any, body), _preload_content=False)  # plain JSON: a dict is what is sent
        end = time.monotonic() + timeout
        kwok_pid = info.pids["kwok"]
        while time.monotonic() < end:
            if not _alive(kwok_pid):
                raise SandboxError(f"kwok exited while starting: {_tail(self.directory / 'kwok.log')}")
            listed = json.loads(cast(Any, api.list_node(_preload_content=False)).data)["items"]
            ready = {
                n["metadata"]["name"]
                for n in listed
                if any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (n.get("status") or {}).get("conditions") or []
                )
            }
            if ready >= set(names):
                return names
            time.sleep(0.3)
        raise SandboxError(f"kwok did not make the nodes Ready within {timeout:g} s (log: {self.directory}/kwok.log)")

    # -- down -----------------------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop the processes ``sandbox.json`` names and remove the directory; lines of what was done."""
        info = SandboxInfo.load(self.directory)
        if info is None:
            if self.directory.exists():
                shutil.rmtree(self.directory)
                return [f"removed {self.directory} (no running sandbox recorded there)"]
            return [f"no sandbox in {self.directory}"]
        lines = self._stop(info)
        shutil.rmtree(self.directory, ignore_errors=True)
        lines.append(f"removed {self.directory}")
        return lines

    def _stop(self, info: SandboxInfo) -> list[str]:
        """SIGTERM each recorded process (kwok, then the API server, then etcd), SIGKILL after 10 s.

        Only a process still running the recorded binary is signalled: after a reboot the ids in
        ``sandbox.json`` may belong to someone else's processes."""
        lines = []
        for name in ("kwok", "kube-apiserver", "etcd"):
            pid = info.pids.get(name)
            if pid is None or not _alive(pid):
                continue
            if not _runs(pid, str(binaries()[name])):  # the id was reused (a reboot): not ours to stop
                lines.append(f"left pid {pid} alone: it is no longer {name}")
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            end = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < end:
                _reap(pid)
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
                _reap(pid, block=True)
            lines.append(f"stopped {name} (pid {pid})")
        return lines


def api_client(info: SandboxInfo, token: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` for the sandbox, as ``admin`` or with another ``token``."""
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = info.server
    cfg.ssl_ca_cert = str(Path(info.directory) / "certs" / "apiserver.crt")
    cfg.api_key = {"authorization": f"Bearer {token or info.admin_token}"}
    return client.ApiClient(cfg)


def serve_pod_log(info: SandboxInfo, namespace: str, pod: str, path: Path, container: str | None = None) -> None:
    """Make kwok serve the file ``path`` (CRI format: :func:`cri_log_line`) as the log of ``pod``
    (its container ``container``, else all), through ``pods/log`` on the API server: a kwok ``Logs``
    object named as the pod. kwok picks it up from its watch within a moment."""
    from kubernetes import client

    entry: dict[str, Any] = {"logsFile": str(path), "follow": False}
    if container is not None:
        entry["containers"] = [container]
    body = {
        "apiVersion": f"{LOGS_GROUP}/{LOGS_VERSION}",
        "kind": "Logs",
        "metadata": {"name": pod, "namespace": namespace},
        "spec": {"logs": [entry]},
    }
    api = client.CustomObjectsApi(api_client(info))
    api.create_namespaced_custom_object(LOGS_GROUP, LOGS_VERSION, namespace, LOGS_PLURAL, body, _preload_content=False)


def cri_log_line(t: float, text: str, stream: str = "stdout") -> str:
    """One line of a container log file as a CRI runtime writes it (``<RFC 3339 nano> stdout F text``)."""
    from datetime import UTC, datetime

    whole = int(t)
    stamp = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{round((t - whole) * 1e9):09d}Z {stream} F {text}\n"


def _runs(pid: int, program: str) -> bool:
    """Is process ``pid`` running ``program`` (its command line's first word)?"""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return True  # no /proc to ask: trust the recorded id
    return argv0 == program


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SandboxError(f"{' '.join(argv[:2])} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")


def _reap(pid: int, block: bool = False) -> None:
    try:
        os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        pass


def _http_ok(url: str, token: str | None = None) -> bool:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # readiness only: the certificate is checked by every real client
    try:
        with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _tail(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"
