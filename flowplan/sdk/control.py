"""How a training job hears "checkpoint now" and "deliver now", the same way under Docker and Kubernetes.

Three channels, all read by :class:`Control`, none needing anything inside the container but this module:

- **Signals** (Docker; and Kubernetes' pod deletion). ``SIGTERM``: checkpoint, then stop (the Docker
  adapter's pause and migration send it and wait for the exit; Kubernetes sends it when the pod is
  deleted, after the ``terminationGracePeriodSeconds`` the kill follows). ``SIGUSR1``: deliver (the
  Docker adapter's ``deliver``). A second ``SIGTERM`` while the first is still waiting ends the
  process at once, as if no handler were installed: a loop that never looks is not stuck.
- **The downward-API annotations file** (Kubernetes): ``$FLOWPLAN_CONTROL_DIR/annotations``, the
  pod's ``metadata.annotations`` projected by the kubelet (``key="value"`` lines). The Kubernetes
  adapter sets ``flowplan.io/checkpoint-requested`` before it replaces a pod and
  ``flowplan.io/deliver-requested`` to deliver, each with the time of the request. A value not seen
  before in this process is a request. The kubelet refreshes the file on its sync period (up to a
  minute or so), so the deletion's ``SIGTERM`` may come first: either one is enough.
- **Flag files** (anything else: a shared volume, ``docker exec touch``, a person):
  ``$FLOWPLAN_CONTROL_DIR/checkpoint`` or ``/<job>.checkpoint`` (checkpoint, then stop), and
  ``.../deliver`` or ``/<job>.deliver``. A flag is removed when taken (where the directory is
  writable; otherwise its modification time is remembered, and only a newer one counts again).

Signal handlers only set flags; the files are looked at, at most every ``poll_seconds``, when the
training loop asks (:meth:`Control.poll`). Nothing here raises into the training loop: an unreadable
directory is a warning, once.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger("flowplan.sdk")

CHECKPOINT_ANNOTATION = "flowplan.io/checkpoint-requested"
DELIVER_ANNOTATION = "flowplan.io/deliver-requested"
#: One ``key="value"`` line of a downward-API annotations file (values quoted as Go's %q writes them).
_ANNOTATION = re.compile(r'^([^=\s]+)="((?:[^"\\]|\\.)*)"\s*$')


def read_annotations(text: str) -> dict[str, str]:
    """The annotations of a downward-API ``metadata.annotations`` file (unparseable lines skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _ANNOTATION.match(line.strip())
        if m:
            out[m.group(1)] = re.sub(r"\\(.)", r"\1", m.group(2))
    return out


@dataclass
class Request:
    """A request taken: what (``checkpoint`` or ``deliver``) and where it came from."""

    what: str
    by: str
    time: float = field(default_factory=time.time)


class Control:
    """Pending checkpoint and delivery requests (see the module docstring for the channels)."""

    def __init__(
        self,
        job: str,
        control_dir: str | os.PathLike[str] | None = None,
        *,
        signals: bool = True,
        poll_seconds: float = 1.0,
    ) -> None:
        self.job = job
        self.dir = Path(control_dir) if control_dir else None
        self.poll_seconds = poll_seconds
        self.checkpoint: Request | None = None
        self.deliver: Request | None = None
        self.stop = False
        self._signalled: list[Request] = []  # set by handlers, taken by poll() (handlers only append)
        self._seen_annotations: dict[str, str] = {}
        self._seen_flags: dict[str, float] = {}
        self._last_poll = float("-inf")
        self._terms = 0
        self._warned = False
        self._previous: dict[int, Any] = {}
        if signals:
            self._install()

    # -- signals -------------------------------------------------------------------------------
    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.warning("flowplan.sdk: not in the main thread, no signal handlers (flag files only)")
            return
        for sig, handler in ((signal.SIGTERM, self._on_term), (signal.SIGUSR1, self._on_usr1)):
            try:
                self._previous[sig] = signal.signal(sig, handler)
            except (ValueError, OSError) as exc:  # not the main interpreter, or a platform without SIGUSR1
                log.warning("flowplan.sdk: cannot handle %s: %s", sig, exc)

    def restore(self) -> None:
        """Put back the signal handlers that were there before (``Run.finish`` does)."""
        for sig, previous in self._previous.items():
            try:
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                pass
        self._previous = {}

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self._terms += 1
        if self._terms > 1:
            # Asked twice: whoever sent it wants the process gone now.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self._signalled.append(Request("checkpoint", "SIGTERM"))

    def _on_usr1(self, signum: int, frame: FrameType | None) -> None:
        self._signalled.append(Request("deliver", "SIGUSR1"))

    # -- files ---------------------------------------------------------------------------------
    def poll(self, *, force: bool = False) -> None:
        """Take the requests that came since the last call (cheap: files at most every ``poll_seconds``)."""
        while self._signalled:
            self._take(self._signalled.pop(0))
        now = time.monotonic()
        if self.dir is None or (not force and now - self._last_poll < self.poll_seconds):
            return
        self._last_poll = now
        try:
            self._poll_annotations()
            for what in ("checkpoint", "deliver"):
                for name in (what, f"{self.job}.{what}"):
                    self._poll_flag(what, self.dir / name)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("flowplan.sdk: cannot read the control directory %s: %s", self.dir, exc)

    def _poll_annotations(self) -> None:
        assert self.dir is not None
        path = self.dir / "annotations"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return
        ann = read_annotations(text)
        for key, what in ((CHECKPOINT_ANNOTATION, "checkpoint"), (DELIVER_ANNOTATION, "deliver")):
            value = ann.get(key)
            if value is not None and self._seen_annotations.get(key) != value:
                self._seen_annotations[key] = value
                self._take(Request(what, f"annotation {key}={value}"))

    def _poll_flag(self, what: str, path: Path) -> None:
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return
        if self._seen_flags.get(str(path)) == mtime:
            return
        try:
            path.unlink()
        except OSError:
            self._seen_flags[str(path)] = mtime  # read-only: remember it, a newer one counts again
        self._take(Request(what, f"flag file {path}"))

    def _take(self, req: Request) -> None:
        if req.what == "checkpoint":
            self.stop = True
            if self.checkpoint is None:
                self.checkpoint = req
        elif self.deliver is None:
            self.deliver = req
