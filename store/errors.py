"""Errors of the state store.

Error tree::

    StoreError             base of everything the store raises on purpose
    ├── ConnectError       a PostgreSQL URL that is malformed, names a server that does not answer, or
    │                      whose credentials or database are refused; or its driver is not installed
    ├── SchemaTooNew       the database was written by a newer FlowPlan (its schema version is unknown here)
    └── MigrationError     a migration script failed; the database was left at its previous version

Every message names the store by its location: a path, or a URL with its password replaced by
``***`` (:func:`store.backend.redact`). Driver errors after the store opened (``sqlite3`` or
``psycopg``: a lock held past the timeout, a full disk, a connection lost) are not translated: they
are operational failures, not user mistakes.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class for state-store errors."""


class ConnectError(StoreError):
    """The database named by a URL cannot be used: see the error tree."""

    def __init__(self, location: str, reason: str) -> None:
        self.location, self.reason = location, reason
        super().__init__(f"state store {location}: {reason}")


class SchemaTooNew(StoreError):
    """The on-disk schema version is newer than the newest migration this code knows."""

    def __init__(self, path: str, found: int, known: int) -> None:
        self.path, self.found, self.known = path, found, known
        super().__init__(
            f"state store {path}: schema version {found} is newer than this FlowPlan knows ({known}); "
            "upgrade FlowPlan or point it at another state file"
        )


class MigrationError(StoreError):
    """Applying a migration failed (the transaction was rolled back)."""
