"""The shipped example snapshots: built from the real data, plannable, and showing their setting.

Cases: each file regenerates byte-identically from ``../shared/data``; each plans with every backend
and passes the checker with every active job placed or explained; the SpeCon setting migrates at
least one job; the QoE setting meets some tier-1 deadlines and misses others; the FlowCon setting
keeps everything on its single node.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from planner import PlannerConfig, check_plan, load_snapshot, plan

SNAPSHOTS = REPO / "examples" / "snapshots"
NAMES = ["flowcon-1node", "specon-4nodes", "qoe-deadlines"]


def test_builder_reproduces_the_shipped_files(tmp_path: Path, data_dir: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(REPO / "examples" / "build_snapshots.py"), "--data", str(data_dir), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    for name in NAMES:
        assert (tmp_path / f"{name}.json").read_bytes() == (SNAPSHOTS / f"{name}.json").read_bytes(), name


@pytest.mark.parametrize("solver", ["cpsat", "pulp", "greedy"])
@pytest.mark.parametrize("name", NAMES)
def test_example_plans_and_checks(name: str, solver: str) -> None:
    snap = load_snapshot(SNAPSHOTS / f"{name}.json")
    p = plan(snap, PlannerConfig(solver=solver, time_limit=5)).plan
    assert check_plan(snap, p) == []
    assert len(p.assignments) == sum(j.status != "finished" for j in snap.jobs)
    for a in p.assignments:
        assert a.explanation
    for u in p.unserved:
        assert u.reason
    if solver != "greedy":
        assert p.solver.status in ("optimal", "feasible")


def test_specon_migrates() -> None:
    snap = load_snapshot(SNAPSHOTS / "specon-4nodes.json")
    p = plan(snap).plan
    assert p.objective.migrations >= 1
    assert any(a.action == "migrate" for a in p.assignments)


def test_qoe_meets_some_and_misses_some() -> None:
    snap = load_snapshot(SNAPSHOTS / "qoe-deadlines.json")
    p = plan(snap).plan
    assert p.objective.tier1_met >= 1 and p.objective.tier1_missed >= 1


def test_flowcon_single_node() -> None:
    snap = load_snapshot(SNAPSHOTS / "flowcon-1node.json")
    p = plan(snap).plan
    assert {a.node for a in p.assignments} <= {snap.nodes[0].name, None}
    assert p.objective.migrations == 0
