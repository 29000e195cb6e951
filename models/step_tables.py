"""Measured step-time tables of data-parallel training (the Pollux / AdaptDL OSDI'21 artifact).

One reader for the two tables every model folder ``traces/<model>/`` holds, shared by the placement
model's priors (:mod:`models.placement`), the simulator's ground truth (``adapters/sim/truth.py``) and
the speed benchmarks:

``placements.csv``   ``placement,local_bsz,step_time,sync_time``: a placement's digits are the
                     replicas on each node (``22`` = 2 nodes x 2 GPUs); 1-4 nodes, 1-16 replicas.
``scalability.csv``  ``num_nodes,num_replicas,local_bsz,step_time,sync_time``: 6-16 nodes, 6-64
                     replicas; how the replicas were spread over the nodes is not recorded.

``step_time`` [s] is one optimizer step at local batch ``local_bsz`` [samples per replica];
``sync_time`` [s] the part of it spent waiting for the gradient all-reduce (what compute did not hide),
so ``step_time - sync_time`` is the compute time (how the Pollux simulator reads them).

Reading only parses: a malformed row raises :class:`StepTableError` naming the file, line, field and
value; rows with a non-finite or non-positive time are kept as they are (callers decide).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

#: Folder of the traces inside the shared data folder.
TRACES = Path("adaptdl-osdi21") / "traces"


class StepTableError(ValueError):
    """A step-time table that cannot be read (missing file, missing column, unparsable value)."""


@dataclass(frozen=True)
class MeasuredStep:
    """One measured configuration of a data-parallel job."""

    #: Replicas on each node, as the table wrote it; ``None`` for ``scalability.csv`` rows (not recorded).
    placement: tuple[int, ...] | None
    nodes: int
    replicas: int
    #: Samples per replica per step.
    local_batch: int
    #: Seconds per optimizer step.
    step_seconds: float
    #: Seconds of the step spent waiting for the all-reduce.
    sync_seconds: float
    #: "placements" or "scalability".
    table: str


def parse_placement(text: str) -> tuple[int, ...]:
    """``"224"`` -> ``(2, 2, 4)``: one digit per node (the tables' nodes hold at most 9 GPUs)."""
    if not text or not text.isdigit():
        raise StepTableError(f"placement: expected one digit per node, got {text!r}")
    return tuple(int(c) for c in text)


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    if not path.is_file():
        raise StepTableError(f"{path}: no such file")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise StepTableError(f"{path}: missing column(s) {', '.join(missing)}")
        return [(i + 2, r) for i, r in enumerate(reader)]


def _number(path: Path, line: int, row: dict[str, str], field: str, kind: type[int] | type[float]) -> float:
    raw = row.get(field)
    try:
        return kind(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise StepTableError(f"{path}:{line}: {field}: not a number: {raw!r}") from None


def read_placements(path: Path) -> list[MeasuredStep]:
    """Rows of a ``placements.csv``."""
    out = []
    for line, r in _rows(path, ("placement", "local_bsz", "step_time", "sync_time")):
        try:
            placement = parse_placement(r["placement"])
        except StepTableError as exc:
            raise StepTableError(f"{path}:{line}: {exc}") from None
        out.append(
            MeasuredStep(
                placement,
                len(placement),
                sum(placement),
                int(_number(path, line, r, "local_bsz", int)),
                _number(path, line, r, "step_time", float),
                _number(path, line, r, "sync_time", float),
                "placements",
            )
        )
    return out


def read_scalability(path: Path) -> list[MeasuredStep]:
    """Rows of a ``scalability.csv``."""
    out = []
    for line, r in _rows(path, ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")):
        out.append(
            MeasuredStep(
                None,
                int(_number(path, line, r, "num_nodes", int)),
                int(_number(path, line, r, "num_replicas", int)),
                int(_number(path, line, r, "local_bsz", int)),
                _number(path, line, r, "step_time", float),
                _number(path, line, r, "sync_time", float),
                "scalability",
            )
        )
    return out


def read_model_steps(data: Path, model: str) -> list[MeasuredStep]:
    """Both tables of ``model`` under the shared data folder ``data`` (placements first)."""
    folder = Path(data) / TRACES / model
    return read_placements(folder / "placements.csv") + read_scalability(folder / "scalability.csv")


def table_models(data: Path) -> list[str]:
    """The models with a ``placements.csv`` under ``data``, sorted."""
    folder = Path(data) / TRACES
    return sorted(p.parent.name for p in folder.glob("*/placements.csv"))
