"""``--state``, as every command that reads or writes the state store takes it: a SQLite file (the
default) or a ``postgresql://`` URL that several daemons and service replicas share.

A store that cannot be opened is one line naming ``--state`` and its value, the URL's password
replaced by ``***`` (exit code 2 through :class:`flowplan.cli.UsageError`), never a traceback.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

#: The state store the daemon, the service and the operator commands share unless told otherwise.
DEFAULT_STATE = "flowplan-state.db"

STATE_METAVAR = "PATH|URL"

#: Plans a long-running writer keeps (``--keep-plans``): a day of plans at the daemon's 30-s interval.
DEFAULT_KEEP_PLANS = 2880
#: Plans that keep their snapshot (``--keep-snapshots``, what ``flowplan explain --plan`` replays): an
#: hour at the daemon's 30-s interval. A 1,000-job snapshot with its histories is megabytes; kept for
#: every plan it grew the store by gigabytes a day.
DEFAULT_KEEP_SNAPSHOTS = 120


def state_help(use: str, *, default: str | None = DEFAULT_STATE) -> str:
    """``--state``'s help: ``use`` says what the command does with the store."""
    tail = f" (default: {default})" if default else ""
    return (
        f"{use}: a SQLite file, or a postgresql://USER@HOST:PORT/DB URL that several daemons and service replicas "
        f"share (the password from PGPASSWORD or ~/.pgpass keeps it off the command line){tail}"
    )


def add_state_argument(p: argparse.ArgumentParser, use: str, **kwargs: Any) -> None:
    """Add ``--state`` to ``p`` (``kwargs``: argparse's, e.g. ``required=True`` or ``default=None``)."""
    default = kwargs.pop("default", DEFAULT_STATE)
    p.add_argument(
        "--state",
        default=default,
        metavar=STATE_METAVAR,
        help=state_help(use, default=None if kwargs.get("required") else default),
        **kwargs,
    )


def add_retention_arguments(p: argparse.ArgumentParser) -> None:
    """``--keep-plans`` and ``--keep-snapshots``, for the commands that save a plan every interval or
    request (``store.StateStore``'s ``keep_plans`` and ``keep_snapshots``)."""
    from flowplan.argtypes import whole

    p.add_argument(
        "--keep-plans",
        type=whole(1),
        default=DEFAULT_KEEP_PLANS,
        metavar="N",
        help=f"keep the newest N plans in the state store, with their actions; older ones are deleted as new ones "
        f"are saved, except a plan whose action is still pending (default: {DEFAULT_KEEP_PLANS}, a day at 30-s intervals)",
    )
    p.add_argument(
        "--keep-snapshots",
        type=whole(1),
        default=DEFAULT_KEEP_SNAPSHOTS,
        metavar="N",
        help=f"keep the snapshot of the newest N plans (what flowplan explain --plan replays); older plans keep the "
        f"plan only (default: {DEFAULT_KEEP_SNAPSHOTS}, an hour at 30-s intervals)",
    )


def shown(location: str) -> str:
    """``location`` as it may be printed (a URL's password hidden)."""
    from store import redact

    return redact(location)


def is_url(location: str) -> bool:
    from store import is_url as url

    return url(location)


def exists(location: str) -> bool:
    """Whether a store may be there to read: a URL (its server says), or a file that exists."""
    return is_url(location) or location == ":memory:" or Path(location).is_file()


def foreign_file(location: str) -> bool:
    """Whether ``location`` is a SQLite file (or an empty one) without FlowPlan's tables: a reader must
    not open it, since opening a store creates them. Asked read-only; False where it cannot tell (a URL,
    a file SQLite cannot read: opening it says why)."""
    import sqlite3
    from urllib.parse import quote

    if is_url(location) or location == ":memory:":
        return False
    try:
        db = sqlite3.connect(f"file:{quote(str(Path(location).resolve()))}?mode=ro", uri=True)
        try:
            found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return False
    return found is None


def _nonempty(location: str) -> bool:
    """Whether ``location`` is a file with something in it (an empty one may become a store)."""
    if is_url(location) or location == ":memory:":
        return False
    try:
        return Path(location).stat().st_size > 0
    except OSError:
        return False


def open_store(
    location: str,
    *,
    synchronous: str = "FULL",
    must_exist: bool = False,
    keep_plans: int | None = None,
    keep_snapshots: int | None = None,
) -> Any:
    """The :class:`store.StateStore` at ``location``; a :class:`flowplan.cli.UsageError` when it cannot be
    opened. ``must_exist``: a SQLite file that is not there, or that has no FlowPlan tables (an empty
    file, another program's database), is an error (readers): it is neither created nor written to.
    Without it (writers) a missing or empty file becomes a store, and another program's database (a
    non-empty SQLite file without FlowPlan's tables) is refused, left as it was.
    ``keep_plans`` / ``keep_snapshots``: the store's bounds on the plans it keeps (None: all)."""
    from flowplan.cli import UsageError
    from store import ConnectError, StateStore, StoreError

    where = f"--state {shown(location)}"
    if must_exist and not exists(location):
        raise UsageError(f"{where}: no state store there (flowplan daemon or flowplan simulate --state writes one)")
    if must_exist and foreign_file(location):
        raise UsageError(
            f"{where}: not a FlowPlan state store (a file without its tables; flowplan daemon or flowplan simulate "
            "--state writes one)"
        )
    if not must_exist and _nonempty(location) and foreign_file(location):
        # A writer would add its tables to another program's database: refused, the file left as it is.
        raise UsageError(f"{where}: another program's SQLite database (no FlowPlan tables); name a new file or a FlowPlan store")
    if not is_url(location) and location != ":memory:" and not Path(location).parent.is_dir():
        raise UsageError(f"{where}: directory {Path(location).parent} does not exist")
    try:
        return StateStore(
            location,
            synchronous="NORMAL" if synchronous == "NORMAL" else "FULL",
            keep_plans=keep_plans,
            keep_snapshots=keep_snapshots,
        )
    except ConnectError as exc:
        raise UsageError(f"{where}: {exc.reason}") from None
    except (StoreError, OSError) as exc:
        raise UsageError(f"{where}: {exc}") from None
    except Exception as exc:  # the driver's: not a database file, no right to create the tables, ...
        line = " ".join(str(exc).split()) or type(exc).__name__
        raise UsageError(f"{where}: cannot open the state store ({line})") from None
