"""Training progress from the logs frameworks print: PyTorch, Keras, Lightning, Hugging Face, tqdm, JSON lines.

Pure Python (no framework needed), incremental (bytes in any pieces), bounded in memory. Used by the
Docker adapter to build each job's history and by ``flowplan logs`` to show what FlowPlan extracts.
Start with :class:`LogReader`; the formats, and what each one's numbers mean, are in
:mod:`adapters.logs.formats`; ``docs/logs.md`` has the table and the recorded fixtures.

It lives under ``adapters/`` because reading a job's output is how an adapter observes it (the
Kubernetes adapter reads pod logs the same way); the CLI sits above the adapters and may use it. It
imports nothing from the planner or from the Docker and Kubernetes clients (``.importlinter``).
"""

from adapters.logs.declare import Declaration, declaration
from adapters.logs.formats import FORMATS
from adapters.logs.points import LogEvent, LogPoint
from adapters.logs.reader import FORMAT_NAMES, LogReader, describe_formats, is_json_progress, merge_points, read_log
from adapters.logs.terminal import Frame, FrameSplitter

__all__ = [
    "FORMATS",
    "Declaration",
    "FORMAT_NAMES",
    "Frame",
    "FrameSplitter",
    "LogEvent",
    "LogPoint",
    "LogReader",
    "declaration",
    "describe_formats",
    "is_json_progress",
    "merge_points",
    "read_log",
]
