"""The state store shared by the HTTP service and the daemon (SQLite, WAL, schema migrations).

Layer: below ``api`` and ``adapters``, above ``planner``; imports only the standard library,
pydantic and the planner's contracts (see ``.importlinter``).
"""

from store.errors import MigrationError, SchemaTooNew, StoreError
from store.migrations import MIGRATIONS
from store.sqlite import ActionRecord, ActionStatus, JobRecord, Lease, PointStats, StateStore

__all__ = [
    "MIGRATIONS",
    "ActionRecord",
    "ActionStatus",
    "JobRecord",
    "Lease",
    "MigrationError",
    "PointStats",
    "SchemaTooNew",
    "StateStore",
    "StoreError",
]
