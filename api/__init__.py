"""The HTTP service (FastAPI): plan requests, metric ingestion, job targets (next issue).

Will use the same Snapshot/Plan contracts and the same checker as the CLI. May import ``planner``
and ``models``, never ``adapters``.
"""

__all__: list[str] = []
