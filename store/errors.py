"""Errors of the state store.

Error tree::

    StoreError             base of everything the store raises on purpose
    ├── SchemaTooNew       the database was written by a newer FlowPlan (its schema version is unknown here)
    └── MigrationError     a migration script failed; the database was left at its previous version

``sqlite3`` errors other than these (a locked database past the busy timeout, a full disk) are not
translated: they are operational failures, not user mistakes.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class for state-store errors."""


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
