"""Spread independent per-item work (the per-job model fits) over the machine's cores.

``fan_out(fn, items, costs, processes)`` returns ``[fn(x) for x in items]``, computed in
``processes`` groups of about equal total ``cost``: the first group in this process, each other in a
child process forked for the call, which sends its results back through a pipe (pickled). The
result does not depend on how the work was split: every item is computed by the same code on the
same input, wherever it runs; a child that fails (or cannot be started) has its group computed here.

Fork, not spawn: a spawned child would import NumPy, SciPy and the planner again (seconds), more
than the work it takes over; a forked one starts in milliseconds with everything loaded. The child
runs only ``fn`` (pure NumPy work here) and exits with ``os._exit`` (multiprocessing's fork start
does), so the threads and locks of the parent it does not inherit are never touched. Where fork is
not available (not POSIX), or in a daemonic process (which may not have children), everything runs
here.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


def _groups(costs: Sequence[float], k: int) -> list[list[int]]:
    """Item indices in ``k`` groups of about equal total cost: largest first, each to the lightest
    group so far (ties to the lowest group). Deterministic; each group keeps the items' order."""
    order = sorted(range(len(costs)), key=lambda i: (-costs[i], i))
    load = [0.0] * k
    groups: list[list[int]] = [[] for _ in range(k)]
    for i in order:
        g = min(range(k), key=lambda j: (load[j], j))
        groups[g].append(i)
        load[g] += costs[i]
    return [sorted(g) for g in groups]


def _child(fn: Callable[[Any], Any], items: list[Any], conn: Connection) -> None:
    try:
        payload = pickle.dumps(("ok", [fn(x) for x in items]), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001  (the parent computes the group itself; the reason is kept)
        payload = pickle.dumps(("error", f"{type(exc).__name__}: {exc}"))
    try:
        conn.send_bytes(payload)
    except OSError:  # the parent is gone (interrupted): nobody to tell
        pass
    finally:
        conn.close()


def _can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods() and not multiprocessing.current_process().daemon


def fan_out(fn: Callable[[T], R], items: Sequence[T], costs: Sequence[float], processes: int) -> list[R]:
    """``[fn(x) for x in items]``, in up to ``processes`` processes (see the module docstring)."""
    k = min(processes, len(items))
    if k <= 1 or not _can_fork():
        return [fn(x) for x in items]
    groups = _groups(costs, k)
    ctx = multiprocessing.get_context("fork")
    children: list[tuple[list[int], Any, Connection | None]] = []
    for group in groups[1:]:
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(fn, [items[i] for i in group], send), daemon=True)
        try:
            proc.start()
        except OSError:  # no more processes: this one computes the group
            recv.close()
            children.append((group, None, None))
            continue
        finally:
            send.close()
        children.append((group, proc, recv))
    out: list[Any] = [None] * len(items)
    for i in groups[0]:
        out[i] = fn(items[i])
    for group, proc, conn in children:
        got: Any = None
        if conn is not None:
            try:
                got = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError, pickle.UnpicklingError):
                got = None
            finally:
                conn.close()
        if proc is not None:
            proc.join()
        if got is not None and got[0] == "ok" and len(got[1]) == len(group):
            for i, r in zip(group, got[1], strict=True):
                out[i] = r
        else:
            for i in group:
                out[i] = fn(items[i])
    return out
