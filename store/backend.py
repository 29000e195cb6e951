"""What :class:`store.state.StateStore` needs of a database, and which one a location names.

A location is a path (SQLite, :mod:`store.sqlite`; the default) or a ``postgresql://`` URL
(PostgreSQL, :mod:`store.postgres`). The store writes its SQL once, with ``?`` placeholders and the
upsert syntax both engines share (``INSERT … ON CONFLICT … DO UPDATE / DO NOTHING``, ``RETURNING``).
What differs is kept here, small and explicit:

===================  ===============================  ==========================================
difference           SQLite                           PostgreSQL
===================  ===============================  ==========================================
placeholders         ``?``                            ``%s`` (rewritten by the backend)
a write transaction  ``BEGIN IMMEDIATE``: one writer  ``BEGIN`` (read committed): writers run side
                     at a time, whatever it touches   by side, so a read-then-write locks what it
                                                      reads: :meth:`Backend.serialize` (an advisory
                                                      lock) or :attr:`Backend.row_lock`
schema scripts       as written (:mod:`store.migrations`)  :func:`store.postgres.ddl`: ``REAL`` is
                                                      ``DOUBLE PRECISION``, ``INTEGER`` ``BIGINT``,
                                                      autoincrement an identity, no ``WITHOUT ROWID``
JSON columns         ``TEXT``                         ``TEXT`` as well (no JSON operators are used)
the lease clock      this process's wall clock        the server's (replicas on several hosts)
===================  ===============================  ==========================================
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

#: The URL schemes that name a PostgreSQL database (libpq accepts both).
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_url(location: str) -> bool:
    """Whether ``location`` names a PostgreSQL database rather than a SQLite file."""
    return location.lower().startswith(POSTGRES_SCHEMES)


def redact(location: str) -> str:
    """``location`` as it may be printed: a URL's password (in the user part or the query) becomes
    ``***``. Works on a malformed URL too (its message must not show the password either)."""
    if not is_url(location):
        return location
    scheme, rest = location.split("://", 1)
    head, sep, query = rest.partition("?")
    at = head.rfind("@")  # the user part ends at the last '@' before the query (a password may hold one)
    if at != -1 and ":" in head[:at]:
        head = head[:at].split(":", 1)[0] + ":***" + head[at:]
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", query)
    return f"{scheme}://{head}{sep}{query}"


class Cursor(Protocol):
    """The part of a DB-API cursor the store uses."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Backend(Protocol):
    """One connection to the store's database. Not thread-safe: the store guards it with a lock."""

    #: ``"sqlite"`` or ``"postgresql"``.
    dialect: str
    #: Appended to a ``SELECT`` whose rows the transaction then updates (`` FOR UPDATE`` on PostgreSQL).
    row_lock: str

    @property
    def error(self) -> type[Exception]:
        """The driver's base error class: a migration statement that raises one of these failed."""
        ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run ``sql`` once per row; returns the number of rows changed."""
        ...

    def begin(self) -> None:
        """Open a write transaction."""
        ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def serialize(self, what: str) -> None:
        """Inside a write transaction: wait until no other write transaction that serialises on
        ``what`` is open, and hold ``what`` until this one ends."""
        ...

    def clock(self) -> float:
        """Unix seconds, as every process sharing the database sees them (leases expire by it)."""
        ...

    def ddl(self, script: str) -> str:
        """A schema script of :mod:`store.migrations` in this dialect."""
        ...

    def close(self) -> None: ...


def open_backend(location: str, *, synchronous: str, busy_timeout: float) -> Backend:
    """The backend for ``location`` (see the module docstring). Raises :class:`store.errors.StoreError`
    (a bad URL, an unreachable server, refused credentials) or ``OSError`` (a file that cannot be created)."""
    if is_url(location):
        from store.postgres import PostgresBackend

        return PostgresBackend(location, lock_timeout=busy_timeout)
    from store.sqlite import SQLiteBackend

    return SQLiteBackend(location, synchronous=synchronous, busy_timeout=busy_timeout)
