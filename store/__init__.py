"""The state store shared by the HTTP service and the daemon: a SQLite file (WAL) by default, or a
PostgreSQL database (a ``postgresql://`` URL) that several replicas share; schema migrations on both.

Layer: below ``api`` and ``adapters``, above ``planner``; imports only the standard library,
pydantic and the planner's contracts (see ``.importlinter``).
"""

from store.backend import is_url, redact
from store.curves import CURVE_PRIOR_MAX_POINTS, CURVE_PRIOR_MAX_RUNS, task_curves_from
from store.errors import ConnectError, MigrationError, SchemaTooNew, StoreError
from store.migrations import MIGRATIONS
from store.speeds import PRIOR_MAX_JOBS, PRIOR_MIN_EPOCHS, SpeedRecord, declared_json, prior_from
from store.state import ActionRecord, ActionStatus, JobRecord, Lease, PointStats, StateStore

__all__ = [
    "CURVE_PRIOR_MAX_POINTS",
    "CURVE_PRIOR_MAX_RUNS",
    "MIGRATIONS",
    "PRIOR_MAX_JOBS",
    "PRIOR_MIN_EPOCHS",
    "ActionRecord",
    "ActionStatus",
    "ConnectError",
    "JobRecord",
    "Lease",
    "MigrationError",
    "PointStats",
    "SchemaTooNew",
    "SpeedRecord",
    "StateStore",
    "StoreError",
    "declared_json",
    "is_url",
    "prior_from",
    "redact",
    "task_curves_from",
]
