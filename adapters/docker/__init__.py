"""The Docker adapter: Docker hosts as nodes, containers labelled ``flowplan.job`` as jobs.

Start with :class:`DockerAdapter` (what it assumes is in its module docstring), the labels in
:mod:`adapters.docker.labels`, gangs in :mod:`adapters.docker.gangs`, and ``docs/docker.md``. Needs
the ``docker`` extra (docker-py).
"""

from adapters.docker.adapter import DOWN_LABEL, RESUMABLE_EXITS, UNMANAGED_PREFIX, DockerAdapter, Observation
from adapters.docker.engine import HostSpec
from adapters.docker.errors import DockerAdapterError, LabelError, classify
from adapters.docker.gpu import gpu_request
from adapters.docker.labels import JobLabels, job_labels, parse_labels
from adapters.docker.memory import MemoryStore, ProgressStore
from adapters.docker.progress import LogCursor, read_lines

__all__ = [
    "DOWN_LABEL",
    "RESUMABLE_EXITS",
    "UNMANAGED_PREFIX",
    "DockerAdapter",
    "DockerAdapterError",
    "HostSpec",
    "JobLabels",
    "LabelError",
    "LogCursor",
    "MemoryStore",
    "Observation",
    "ProgressStore",
    "classify",
    "gpu_request",
    "job_labels",
    "parse_labels",
    "read_lines",
]
