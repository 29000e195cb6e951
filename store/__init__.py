"""The state store shared by the HTTP service and the daemon (SQLite, WAL, schema migrations).

Layer: below ``api`` and ``adapters``, above ``planner``; imports only the standard library,
pydantic and the planner's contracts (see ``.importlinter``).
"""

from store.errors import MigrationError, SchemaTooNew, StoreError
from store.migrations import MIGRATIONS
from store.speeds import PRIOR_MAX_JOBS, PRIOR_MIN_EPOCHS, SpeedRecord, prior_from
from store.sqlite import ActionRecord, ActionStatus, JobRecord, Lease, PointStats, StateStore

__all__ = [
    "MIGRATIONS",
    "PRIOR_MAX_JOBS",
    "PRIOR_MIN_EPOCHS",
    "ActionRecord",
    "ActionStatus",
    "JobRecord",
    "Lease",
    "MigrationError",
    "PointStats",
    "SchemaTooNew",
    "SpeedRecord",
    "StateStore",
    "StoreError",
    "prior_from",
]
