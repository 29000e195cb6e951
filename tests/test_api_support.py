"""Helpers for the API tests (no tests here): a real uvicorn server on a free loopback port, in a
thread of the test process or as a ``flowplan serve`` child process; and :func:`hold_worker`, which
the pool tests run in a service worker process."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

REPO = Path(__file__).resolve().parents[1]


class ThreadServer:
    """``app`` served by uvicorn over real HTTP on 127.0.0.1 (a free port), in a daemon thread, with its
    lifespan: the app's worker processes start with the server and are joined when it stops."""

    def __init__(self, app: FastAPI) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()


def hold_worker(fifo: str) -> int:
    """Runs in a service worker process: waits until the test writes into ``fifo`` (a named pipe) and
    closes it, then returns the worker's process id. The test decides when the worker is free again."""
    with open(fifo) as fh:
        fh.read()
    return os.getpid()


class ServeProcess:
    """``python -m flowplan serve --port 0 --state PATH`` as a child process; ``url`` is read from the
    line it prints once it listens."""

    LISTENING = re.compile(r"listening on (http://\S+)")

    def __init__(self, state: Path, env: Mapping[str, str] | None = None, *extra: str) -> None:
        self.cmd = [
            sys.executable,
            "-m",
            "flowplan",
            "serve",
            "--port",
            "0",
            "--state",
            str(state),
            "--log-level",
            "warning",
            *extra,
        ]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.log: list[str] = []

    def start(self, timeout: float = 60.0) -> ServeProcess:
        self.proc = subprocess.Popen(
            self.cmd, cwd=REPO, env=self.env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            seen.append(line)
            m = self.LISTENING.search(line)
            if m:
                self.url = m.group(1)
                # Keep draining stderr so the child never blocks on a full pipe; keep it for failures.
                self.log = seen
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.kill()
        raise RuntimeError("flowplan serve did not start:\n" + "".join(seen))

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, exactly like a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=20)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
