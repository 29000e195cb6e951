"""Real Docker engines for the tests: private engines side by side, a local image, job containers.

No registry is reachable here, so the image is a few empty directories and symlinks imported with
``docker import`` (126 bytes), and each job container bind-mounts, read-only, the host's ``/usr``,
this Python and the site-packages that hold numpy and scikit-learn, plus ``examples/jobs`` and the
repository's ``flowplan/`` package at ``/sdk/flowplan`` (on ``PYTHONPATH``: the job imports
``flowplan.sdk``, which is the standard library only). A directory on the host plays the shared
checkpoint volume (NFS in a real cluster).

The tests run their own engines (``EngineSet``), never the machine's main one: separate ``dockerd``
processes with their own data root, exec root, pid file and socket, ``--bridge=none`` and
``--iptables=false`` (training containers run with ``--network none``, and the replicas of a gang,
which the adapter creates, with host networking: neither needs a bridge). Two
sessions running the tests at once, or a daemon on the main engine, cannot see each other's containers.

In CI (``CI`` set) a missing engine fails the tests; elsewhere it skips them.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "examples" / "jobs"
IMAGE = "flowplan/rootfs:local"


def engine_missing(reason: str) -> None:
    """Fail in CI, skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"Docker engine required in CI: {reason}")
    pytest.skip(f"no Docker engine: {reason}")


def api(url: str) -> Any:
    import docker

    return docker.APIClient(base_url=url, version="1.41", timeout=30)


def ping(url: str) -> bool:
    try:
        return bool(api(url).ping())
    except Exception:
        return False


def rootfs_tar() -> bytes:
    """A root filesystem of empty directories and the merged-/usr symlinks of Debian."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("usr", "etc", "tmp", "proc", "sys", "dev", "root", "ckpt", "jobs", "var/tmp"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d in ("tmp", "var/tmp") else 0o755
            tar.addfile(info)
        for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")):
            info = tarfile.TarInfo(link)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"), ("etc/group", "root:x:0:\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def ensure_image(url: str) -> None:
    client = api(url)
    if client.images(name=IMAGE):
        return
    client.import_image_from_data(rootfs_tar(), repository=IMAGE.split(":")[0], tag=IMAGE.split(":")[1])


def python_mounts() -> tuple[str, list[str], list[str]]:
    """The interpreter's path, the read-only binds it needs, and PYTHONPATH entries (venv site-packages)."""
    import numpy
    import sklearn

    interpreter = os.path.realpath(sys.executable)
    dirs = {"/usr", sys.base_prefix}
    pythonpath: list[str] = []
    for mod in (numpy, sklearn):
        site = str(Path(mod.__file__ or "").resolve().parents[1])
        if not site.startswith(sys.base_prefix + os.sep):
            dirs.add(site)
            if site not in pythonpath:
                pythonpath.append(site)
    binds = [f"{d}:{d}:ro" for d in sorted(dirs) if d != "/"]
    return interpreter, binds, pythonpath


def create_job(
    url: str,
    name: str,
    job_id: str,
    ckpt_dir: Path,
    *,
    labels: dict[str, str] | None = None,
    args: list[str] | None = None,
    cpus: float | None = None,
    cpu_quota: int | None = None,
    cpuset: str | None = None,
    command: list[str] | None = None,
    start: bool = True,
    extra_binds: list[str] | None = None,
    extra_env: list[str] | None = None,
) -> str:
    """Create (and start) a container running ``examples/jobs/train_digits.py`` as job ``job_id``.

    ``command`` runs something else instead (with the same mounts, and ``extra_binds``; ``extra_env``
    as ``NAME=value``); ``cpuset`` pins it to those CPUs.
    """
    client = api(url)
    interpreter, binds, pythonpath = python_mounts()
    binds = [*binds, f"{JOBS}:/jobs:ro", f"{REPO / 'flowplan'}:/sdk/flowplan:ro", f"{ckpt_dir}:/ckpt", *(extra_binds or [])]
    hc: dict[str, Any] = {"binds": binds, "network_mode": "none"}
    if cpus is not None:
        hc["nano_cpus"] = int(cpus * 1e9)
    if cpu_quota is not None:
        hc.update(cpu_quota=cpu_quota, cpu_period=100_000)
    if cpuset is not None:
        hc["cpuset_cpus"] = cpuset
    env = [f"FLOWPLAN_JOB={job_id}", "FLOWPLAN_CHECKPOINT_DIR=/ckpt", "PYTHONUNBUFFERED=1", *(extra_env or [])]
    env.append("PYTHONPATH=" + ":".join(["/sdk", *pythonpath]))
    res = client.create_container(
        IMAGE,
        command=command or [interpreter, "/jobs/train_digits.py", *(args or [])],
        name=name,
        labels={"flowplan.job": job_id, **(labels or {})},
        environment=env,
        host_config=client.create_host_config(**hc),
    )
    if start:
        client.start(res["Id"])
    return str(res["Id"])


def job_logs(engines: Any, job_id: str, tail: int = 40) -> str:
    """Every container of ``job_id`` on ``engines`` (an ``EngineSet``): its name, labels' role and rank,
    state and exit code, then the last ``tail`` lines of its log. For a test's failure message: a
    container that exited early says why here, and its engine is gone once the session ends."""
    out: list[str] = []
    for e in engines.engines:
        try:
            client = api(e.url)
            found = client.containers(all=True, filters={"label": f"flowplan.job={job_id}"})
        except Exception as exc:
            out.append(f"--- {e.name}: not read ({exc})")
            continue
        for c in sorted(found, key=lambda c: c["Names"][0]):
            labels = c["Labels"]
            who = f"{labels.get('flowplan.role', 'worker')} {labels.get('flowplan.rank', '?')}"
            out.append(f"--- {c['Names'][0].lstrip('/')} ({who}) on {e.name}: {c['Status']}")
            try:
                text = client.logs(c["Id"], tail=tail).decode(errors="replace").rstrip()
            except Exception as exc:
                text = f"(log not read: {exc})"
            out.extend("    " + line for line in text.splitlines())
    return "\n".join(out) or f"(no container of job {job_id})"


def remove_jobs(url: str) -> None:
    """Remove every container carrying a ``flowplan.job`` label (test clean-up)."""
    try:
        client = api(url)
        for c in client.containers(all=True, filters={"label": "flowplan.job"}):
            client.remove_container(c["Id"], force=True)
    except Exception:
        pass


@dataclass
class Engine:
    name: str
    url: str
    root: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    extra_args: list[str] = field(default_factory=list)

    def stop(self) -> None:
        """Stop this engine like a host shutting down (its containers get SIGTERM first)."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def start(self) -> None:
        assert self.root is not None
        sock = self.root / "docker.sock"
        log = open(self.root / "dockerd.log", "ab")  # noqa: SIM115 (kept open for the process)
        self.proc = subprocess.Popen(
            [
                "dockerd",
                f"--data-root={self.root / 'data'}",
                f"--exec-root={self.root / 'exec'}",
                f"--pidfile={self.root / 'docker.pid'}",
                f"--host=unix://{sock}",
                "--bridge=none",
                "--iptables=false",
                "--ip-masq=false",
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd {self.name} exited: see {self.root / 'dockerd.log'}")
            if sock.exists() and ping(self.url):
                return
            time.sleep(0.3)
        raise RuntimeError(f"dockerd {self.name} did not answer within 60 s")


@dataclass
class EngineSet:
    """Private engines and a checkpoint directory they share (bind-mounted into every job)."""

    engines: list[Engine]
    ckpt: Path
    tmp: Path
    started: list[Engine] = field(default_factory=list)

    def close(self) -> None:
        for e in self.engines:
            remove_jobs(e.url)
        for e in self.started:
            e.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def start_engines(count: int, extra_args: list[str] | None = None) -> EngineSet:
    """``count`` private engines (their own data root, exec root, socket), with the image imported.

    ``extra_args`` go to every ``dockerd`` (e.g. ``--cgroup-parent=/fp-side``).

    Private engines, not the machine's main one: other sessions may run the same tests or a daemon
    on the main engine at the same time, and each would see (and remove) the other's containers.
    """
    if shutil.which("dockerd") is None:
        engine_missing("dockerd is not installed (bash .ci/run installs docker.io)")
    if os.geteuid() != 0:
        engine_missing("starting private Docker engines needs root")
    # Short paths: a unix socket path must stay under 108 bytes.
    tmp = Path(tempfile.mkdtemp(prefix="fpd-", dir="/tmp"))
    ckpt = tmp / "ckpt"
    ckpt.mkdir()
    engines: list[Engine] = []
    es = EngineSet(engines, ckpt, tmp)
    try:
        for i in range(count):
            root = tmp / f"e{i}"
            root.mkdir()
            e = Engine(f"e{i}", f"unix://{root / 'docker.sock'}", root, extra_args=list(extra_args or []))
            e.start()
            engines.append(e)
            es.started.append(e)
            ensure_image(e.url)
    except Exception as exc:
        es.close()
        if os.environ.get("CI"):
            raise
        pytest.skip(f"cannot start a private Docker engine: {exc}")
    return es
