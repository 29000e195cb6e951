"""Where a run's progress goes: JSON lines on stdout, or batched HTTP posts to the FlowPlan service.

**JSON lines** are what ``adapters.logs``' ``jsonl`` format reads (the Docker adapter from the
container's log, ``flowplan logs`` from a file)::

    {"event": "declare", "max_epochs": 30, "schedule": {"kind": "cosine"}, "time": 1767000000.0}
    {"event": "started", "epoch": 0, "time": 1767000000.1}
    {"epoch": 0.5, "loss": 1.93, "time": 1767000004.2, "step": 12}
    {"epoch": 1, "loss": 1.61, "metric": 0.4378, "time": 1767000008.3}
    {"event": "checkpoint", "epoch": 1, "path": "/ckpt/job.npz", "time": 1767000008.9}
    {"event": "delivered", "epoch": 3, "path": "/ckpt/job.delivered.npz", "time": 1767000020.0}
    {"event": "finished", "epoch": 30, "time": 1767000200.0}

**HTTP** posts points to ``POST {url}/v1/jobs/{job}/metrics`` (``{"points": [...]}``; the token from
``FLOWPLAN_TOKEN``), from a background thread: batched (every ``flush_seconds`` or ``batch`` points),
retried with exponential backoff (0.5 s doubling to 30 s, with jitter) while the service is down or
answers 5xx/408/429, in a bounded buffer (the oldest points dropped past ``buffer`` points, counted
and warned about). The ingest is idempotent by (job, epoch), so a retried batch never double-counts.
A batch the service refuses (another 4xx: a bad token, a malformed point) is dropped with a warning:
sending it again would not help. Nothing here raises into the training loop; a service that is down
costs the job a warning (once per outage) and the memory of the buffer.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from typing import Any, TextIO

log = logging.getLogger("flowplan.sdk")

#: Seconds of backoff after the first failure, and the most it grows to.
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0


def json_line(record: dict[str, Any]) -> str:
    """One record as the line the log reader expects (finite numbers only: NaN is written as null)."""
    return json.dumps(record, separators=(", ", ": "), allow_nan=False, default=str)


class StdoutReporter:
    """Writes each record as one JSON line and flushes (a container's log is read while it runs)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def emit(self, record: dict[str, Any]) -> None:
        stream = self.stream if self.stream is not None else sys.stdout
        try:
            stream.write(json_line(record) + "\n")
            stream.flush()
        except (OSError, ValueError) as exc:  # a closed stdout must not stop the training
            log.warning("flowplan.sdk: cannot write progress: %s", exc)

    def point(self, point: dict[str, Any]) -> None:
        self.emit(point)

    def close(self, timeout: float = 0.0) -> int:
        return 0


class HttpReporter:
    """Points to the service's ingest endpoint, from a background thread (see the module docstring)."""

    def __init__(
        self,
        url: str,
        job: str,
        *,
        token: str | None = None,
        flush_seconds: float = 2.0,
        batch: int = 500,
        buffer: int = 100_000,
        timeout: float = 5.0,
    ) -> None:
        self.endpoint = url.rstrip("/") + "/v1/jobs/" + urllib.parse.quote(job, safe="/") + "/metrics"
        self.token = token
        self.flush_seconds = flush_seconds
        self.batch = batch
        self.timeout = timeout
        self._queue: deque[dict[str, Any]] = deque(maxlen=buffer)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self.sent = 0
        self.dropped = 0
        self.refused = 0
        self._down_since: float | None = None
        self._backoff = 0.0
        self._thread = threading.Thread(target=self._run, name="flowplan-sdk-http", daemon=True)
        self._thread.start()

    # -- the training loop's side (never blocks on the network, never raises) ------------------
    def point(self, point: dict[str, Any]) -> None:
        with self._lock:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 10_000 == 0:
                    log.warning("flowplan.sdk: %d point(s) dropped: the buffer of %d is full", self.dropped, self._queue.maxlen)
            self._queue.append({k: v for k, v in point.items() if k in ("time", "epoch", "loss", "metric")})
            full = len(self._queue) >= self.batch
        if full:
            self._wake.set()

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def close(self, timeout: float = 10.0) -> int:
        """Send what is buffered (waiting at most ``timeout`` seconds) and stop; the points left unsent."""
        self._closing.set()
        self._wake.set()
        self._thread.join(timeout)
        left = self.pending()
        if left:
            log.warning("flowplan.sdk: %d point(s) not sent to %s (the service did not answer in time)", left, self.endpoint)
        return left

    # -- the background thread -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self._backoff or self.flush_seconds)
            self._wake.clear()
            while self.pending() and self._send_one():
                pass
            if self._closing.is_set() and not self.pending():
                return

    def _send_one(self) -> bool:
        """Post the oldest batch; True when it was taken (stored or refused for good)."""
        with self._lock:
            points = [self._queue[i] for i in range(min(self.batch, len(self._queue)))]
        status, detail = self._post(points)
        if status == 200 or (400 <= status < 500 and status not in (408, 429)):
            with self._lock:
                for _ in range(min(len(points), len(self._queue))):
                    self._queue.popleft()
            if status == 200:
                self.sent += len(points)
                if self._down_since is not None:
                    log.warning(
                        "flowplan.sdk: %s answers again after %.0f s; sending the buffered points",
                        self.endpoint,
                        time.monotonic() - self._down_since,
                    )
                self._down_since = None
            else:
                self.refused += len(points)
                log.warning("flowplan.sdk: %d point(s) refused by %s (%d): %s", len(points), self.endpoint, status, detail)
            self._backoff = 0.0
            return True
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning("flowplan.sdk: cannot report to %s (%s); buffering and retrying", self.endpoint, detail)
        self._backoff = min(BACKOFF_MAX, max(BACKOFF_FIRST, self._backoff * 2)) * random.uniform(0.8, 1.2)
        return False

    def _post(self, points: list[dict[str, Any]]) -> tuple[int, str]:
        body = json.dumps({"points": points}, allow_nan=False).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.endpoint, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                resp.read()
                return int(resp.status), "ok"
        except urllib.error.HTTPError as exc:
            try:
                detail = exc.read(500).decode("utf-8", "replace")
            except OSError:
                detail = str(exc)
            return int(exc.code), detail
        except (OSError, ValueError) as exc:  # refused, reset, timed out, DNS: the service is not there
            return 0, f"{type(exc).__name__}: {exc}"
