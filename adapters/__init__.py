"""Adapters: observe a cluster as a Snapshot, apply a Plan's actions to it (next issues).

Planned: a simulated cluster (the embedded default), Docker (docker-py) and Kubernetes. Each will
implement one small protocol: observe → Snapshot; apply actions idempotently per request id;
report errors as data. May import ``planner`` and ``models``, never ``api``.
"""

__all__: list[str] = []
