"""The HTTP service (FastAPI): plan requests, metric ingestion, job targets, live predictions.

Uses the same Snapshot/Plan contracts and the same checker as the CLI, and the state store shared
with the daemon. May import ``store``, ``planner`` and ``models``, never ``adapters``.
"""

from api.app import create_app
from api.settings import ApiSettings, SettingsError

__all__ = ["ApiSettings", "SettingsError", "create_app"]
