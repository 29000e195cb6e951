"""Hand-written plans for the checker's tests: a plan dict around given assignments, one field of an
assignment changed, and the one-line refusal of a snapshot dict. Shared by the contract tests of
GPU fractions and of gangs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from planner.errors import SnapshotError
from planner.io import validate_snapshot
from planner.plan import ObjectiveTerms, PlanSummary, Predictions, SolverReport


def assignment(job: str, node: str | None, action: str, **fields: Any) -> dict[str, Any]:
    """One assignment (1,000 millicores when placed), hand-written predictions and explanation."""
    pred = Predictions(seconds_per_epoch=None, epoch=0.0, basis="hand-written").model_dump()
    return {"job": job, "node": node, "cpu_millis": 1000 if node is not None else 0, "action": action,
            "predictions": pred, "explanation": "hand-written", **fields}  # fmt: skip


def plan_dict(assignments: list[dict[str, Any]], unserved: Sequence[str] = ()) -> dict[str, Any]:
    """A plan of ``assignments``; ``unserved`` names the jobs left without a node."""
    terms: dict[str, int | None] = dict.fromkeys(ObjectiveTerms.model_fields, 0)
    terms["makespan_seconds"] = None
    solver = SolverReport(name="hand", status="trivial", seconds=0.0, gap=None, time_limit=1.0)
    placed = sum(a["node"] is not None for a in assignments)
    return {
        "time": 0.0,
        "snapshot_digest": "",
        "assignments": assignments,
        "unserved": [{"job": j, "reason": "hand-written"} for j in unserved],
        "objective": terms,
        "solver": solver.model_dump(),
        "summary": PlanSummary(active_jobs=len(assignments), placed=placed, unserved=len(unserved), finished_jobs=0).model_dump(),
    }


def set_field(d: dict[str, Any], job: str, **fields: Any) -> dict[str, Any]:
    """``d`` with ``job``'s assignment updated by ``fields``."""
    next(a for a in d["assignments"] if a["job"] == job).update(fields)
    return d


def refused_in_one_line(snapshot: dict[str, Any], must: str) -> None:
    """``snapshot`` is refused by the contract in one line that contains ``must``."""
    with pytest.raises(SnapshotError) as err:
        validate_snapshot(snapshot)
    text = str(err.value)
    assert "\n" not in text and must in text, text
