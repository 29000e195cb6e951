"""A throwaway PostgreSQL server for the state store's tests: Debian's binaries, a temp dir, a free port.

``initdb`` and ``pg_ctl`` come from ``/usr/lib/postgresql/<version>/bin`` (the ``postgresql``
package; ``.ci/run`` installs it), else from ``PATH``. The cluster listens on 127.0.0.1 only, with
password (SCRAM) authentication over TCP for the user :data:`USER`, and is stopped and deleted when
the test session ends. PostgreSQL refuses to run as root, so when the tests run as root the server
runs as the ``postgres`` user the package creates (else ``nobody``).

Durability is off (``fsync=off``): the tests check the store's semantics and its transactions, not
the server's disk writes, and the machine is shared.

In CI (``CI`` set) missing binaries or a server that does not start fail the tests; elsewhere they
skip them with the reason.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from itertools import count
from pathlib import Path
from typing import Any

import pytest

USER = "flowplan"
PASSWORD = "s3cret-pw"


def unavailable(reason: str) -> None:
    """Fail in CI, skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL required in CI: {reason}")
    pytest.skip(f"no PostgreSQL server: {reason}")


def bin_dir() -> Path | None:
    """The newest Debian PostgreSQL bin directory with initdb and pg_ctl, else the one on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name or 0))
    for d in reversed(found):
        if (Path(d) / "initdb").is_file() and (Path(d) / "pg_ctl").is_file():
            return Path(d)
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    return Path(initdb).parent if initdb and pg_ctl else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresCluster:
    """One server; :meth:`new_database` gives each test a fresh, empty database of its own."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.user: str | None = None  # the OS user the server runs as (None: ourselves)
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    pwd.getpwnam(name)
                except KeyError:
                    continue
                self.user = name
                break
        self.dir = Path(tempfile.mkdtemp(prefix="flowplan-pg-"))
        self.data = self.dir / "data"
        self.port = 0
        self._names = count()

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, Any] = {}
        if self.user is not None:
            kwargs = {"user": self.user, "group": pwd.getpwnam(self.user).pw_gid, "extra_groups": []}
        return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=self.dir, **kwargs)

    def start(self) -> None:
        pwfile = self.dir / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            for p in (self.dir, pwfile):
                os.chown(p, entry.pw_uid, entry.pw_gid)
        init = self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", USER, f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256", "--auth-local=trust", "--no-sync", "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {(init.stderr or init.stdout).strip()[-500:]}")
        for _attempt in range(3):  # a free port can be taken between our check and the server's bind
            self.port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.dir} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=60 "
                "-c shared_buffers=32MB"
            )
            up = self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "-t", "60",
                           "-o", options, "start")  # fmt: skip
            if up.returncode == 0:
                return
        log = (self.dir / "log").read_text() if (self.dir / "log").exists() else ""
        raise RuntimeError(f"pg_ctl start failed: {(up.stderr or up.stdout).strip()[-300:]} {log.strip()[-500:]}")

    def stop(self) -> None:
        if self.data.exists():
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str = "postgres", *, password: str = PASSWORD, user: str = USER) -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh empty database; returns its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def start_cluster() -> PostgresCluster:
    """A started cluster, or fail (CI) / skip (elsewhere) saying why not."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("the psycopg driver is not installed (pip install -e '.[dev]')")
    bindir = bin_dir()
    if bindir is None:
        unavailable("initdb / pg_ctl not found in /usr/lib/postgresql/*/bin or on PATH (apt-get install postgresql)")
        raise AssertionError  # unreachable: unavailable() fails or skips
    cluster = PostgresCluster(bindir)
    try:
        cluster.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        cluster.stop()
        unavailable(f"cannot start a throwaway cluster with {bindir}: {exc}")
    return cluster
