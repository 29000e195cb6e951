"""Progress of ``flowplan simulate``: drawn by ``rich`` where a terminal is attached, plain lines when piped.

On a terminal, one live view on standard error, redrawn in place: a progress bar per policy and
seed (jobs finished of the run's jobs, simulated time, wall time), and with ``live`` the table of
who holds what in the run going now, with each job's epoch and predicted finish, redrawn every
interval (at most ten times a second of wall time). Piped or redirected (a log, CI), nothing is
redrawn: each run prints one line when it ends, and with ``live`` the table every ``every``
simulated seconds and at the run's end, so a log stays short and greppable.

rich draws the bars and the live region (terminal width, cursor movement, colours); the
alternative was the hand-written ``\\r`` bar and ANSI cursor codes this module replaced.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from adapters.loop import Tick
    from adapters.sim.cluster import SimCluster

#: Redraw the live view at most this often (wall seconds): a long scenario has thousands of intervals.
REDRAW_SECONDS = 0.1


def fmt_t(seconds: float | None) -> str:
    """Simulated time as m:ss or h:mm:ss (``-`` when unknown)."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


HEADER = ["JOB", "STATE", "NODE", "CPU", "GPU", "EPOCH", "ETA", "DEADLINE"]


def table_rows(cluster: SimCluster, tick: Tick) -> list[list[str]]:
    """Who holds what now: one row per job that has arrived (times from the run's start)."""
    eta = {a.job: a.predictions.eta_finish for a in tick.plan.assignments}
    rows = []
    for j in cluster.jobs.values():
        if j.status == "future":
            continue
        e = eta.get(j.spec.id)
        state = j.status if j.blocked_until <= cluster.t or j.status != "running" else "starting"
        dl = j.spec.tier1_deadline
        rows.append(
            [
                j.spec.id,
                state,
                j.node or "-",
                "-" if j.status == "finished" else f"{j.cpu_millis / 1000:.2f}",
                "-" if j.status == "finished" else str(j.gpus),
                f"{j.progress:.1f}/{j.spec.epochs}",
                fmt_t(None if e is None else e - cluster.t0),
                fmt_t(None if dl is None else dl - cluster.t0),
            ]
        )
    # Running and starting jobs first, then waiting, then finished: what moves is on top.
    order = {"running": 0, "starting": 0, "pending": 1, "paused": 1, "finished": 2}
    rows.sort(key=lambda r: order.get(r[1], 1))
    return rows


class SimProgress:
    """Progress for every run of one ``flowplan simulate``; ``labels`` name the runs in order, ``live``
    those whose table is shown. Use :meth:`run` for each run's tick hook, :meth:`ended` after it,
    :meth:`close` at the end. ``stream`` (standard error) and ``terminal`` (whether it is one) can be
    given for tests."""

    def __init__(
        self,
        labels: Sequence[str],
        live: set[str],
        *,
        quiet: bool = False,
        every: float = 600.0,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        width: int | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(self.stream.isatty()) if terminal is None else terminal
        self.quiet, self.live_labels, self.every = quiet, live, every
        self._view: Any = None
        self._table: Any = None
        if self.quiet or not self.tty:
            return
        from rich.console import Console, Group
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(file=self.stream, force_terminal=True, width=width, highlight=False)
        self.bars = Progress(
            TextColumn("{task.description}", style="bold"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("jobs  t={task.fields[t]}"),
            TimeElapsedColumn(),
            console=self.console,
        )
        self.tasks = {label: self.bars.add_task(label, total=None, t="-", start=False) for label in labels}
        self._group = Group
        self._view = Live(Group(self.bars), console=self.console, auto_refresh=False, transient=False)
        self._view.start()
        self._drawn = -math.inf

    # -- per run -----------------------------------------------------------------------------------

    def run(self, label: str) -> Callable[[SimCluster, Tick], None]:
        """The tick hook of the run ``label``."""
        live = label in self.live_labels
        shown = [-math.inf]
        if self._view is not None:
            self.bars.start_task(self.tasks[label])

        def on_tick(cluster: SimCluster, tick: Tick) -> None:
            if self.quiet:
                return
            done = sum(1 for j in cluster.jobs.values() if j.status == "finished")
            total = len(cluster.jobs)
            t = tick.time - cluster.t0
            if self._view is not None:
                self.bars.update(self.tasks[label], completed=done, total=total, t=fmt_t(t))
                if live:
                    self._table = self._rich_table(label, cluster, tick, done, total)
                now = time.monotonic()
                if now - self._drawn >= REDRAW_SECONDS or done == total:
                    self._drawn = now
                    self._redraw()
                return
            if live and (t - shown[0] >= self.every or done == total):
                shown[0] = t
                self._plain_table(label, cluster, tick, done, total)

        return on_tick

    def ended(self, label: str, line: str) -> None:
        """The run ``label`` is over: its one line (above the live view on a terminal)."""
        if self.quiet:
            return
        if self._view is not None:
            task = self.tasks[label]
            self.bars.stop_task(task)
            self._table = None
            self._view.console.print(line)
            self._redraw()
            return
        self.stream.write(line + "\n")
        self.stream.flush()

    def note(self, line: str) -> None:
        """A line that is no run's (above the live view on a terminal)."""
        if self.quiet:
            return
        if self._view is not None:
            self._view.console.print(line)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._view is not None:
            self._table = None
            self._redraw()
            self._view.stop()
            self._view = None

    # -- drawing -----------------------------------------------------------------------------------

    def _redraw(self) -> None:
        parts = [self.bars] if self._table is None else [self.bars, self._table]
        self._view.update(self._group(*parts), refresh=True)

    def _rich_table(self, label: str, cluster: SimCluster, tick: Tick, done: int, total: int) -> Any:
        from rich import box
        from rich.table import Table

        rows = table_rows(cluster, tick)
        room = max(self.console.size.height - len(self.tasks) - 6, 3)
        more = len(rows) - room if len(rows) > room else 0
        title = f"{label}  t={fmt_t(tick.time - cluster.t0)}  finished {done}/{total}  plan {tick.plan_seconds * 1000:.0f} ms"
        table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", header_style="bold", pad_edge=False)
        for i, h in enumerate(HEADER):
            table.add_column(h, justify="left" if i < 3 else "right", no_wrap=True)
        for r in rows[: len(rows) - more]:
            style = "dim" if r[1] == "finished" else ("yellow" if r[1] in ("pending", "paused", "starting") else None)
            table.add_row(*r, style=style)
        if more:
            table.caption = f"... and {more} more job(s)"
        return table

    def _plain_table(self, label: str, cluster: SimCluster, tick: Tick, done: int, total: int) -> None:
        from flowplan.tables import plain

        head = f"{label}  t={fmt_t(tick.time - cluster.t0)}  finished {done}/{total}  plan {tick.plan_seconds * 1000:.0f} ms"
        lines = [head, *("  " + line for line in plain(table_rows(cluster, tick), HEADER))]
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
