"""The ``flowplan`` command line, run as a real subprocess.

Bad-input matrix (each: exit code 2, exactly one line on stderr naming the file and the field, no
traceback, nothing written to --out):

    not JSON · truncated JSON · JSON but not an object · wrong apiVersion · unknown field ·
    missing required field · NaN · Infinity · negative capacity · unknown node name ·
    duplicate node · duplicate job · min > max · running job without a node · tier 2 worse than
    tier 1 · missing file · directory instead of file · bad --time-limit · unknown --solver

Good paths: table and JSON output, --out written atomically, schemas are valid JSON Schema
documents, ``flowplan check`` accepts a plan it produced and rejects a tampered one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import random_snapshot

GOOD: dict[str, Any] = {
    "apiVersion": "flowplan/v1",
    "time": 1000.0,
    "nodes": [{"name": "a", "cpu_millis": 8000, "memory_mib": 16000}, {"name": "b", "cpu_millis": 4000}],
    "jobs": [
        {
            "id": "j1",
            "status": "running",
            "node": "a",
            "allocation": {"cpu_millis": 2000},
            "min_cpu_millis": 1000,
            "max_cpu_millis": 8000,
        },
        {"id": "j2", "status": "pending", "min_cpu_millis": 1000, "max_cpu_millis": 4000},
    ],
}


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flowplan", *args], input=stdin, capture_output=True, text=True, timeout=120)


def _mut(path: list[Any], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(GOOD))
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()

BAD_SNAPSHOTS: dict[str, tuple[str, str]] = {
    # case: (file content, text the error must contain)
    "not json": ("this is not json", "not valid JSON"),
    "truncated json": ('{"time": 1, "nodes": [', "not valid JSON"),
    "not an object": ("[1, 2, 3]", "a snapshot is a JSON object"),
    "wrong apiVersion": (json.dumps(_mut(["apiVersion"], "flowplan/v9")), "apiVersion"),
    "unknown field": (json.dumps(_mut(["nodes", 0, "cpus"], 4)), "nodes[0].cpus"),
    "missing time": (json.dumps(_mut(["time"], _DELETE)), "time"),
    "nan": (json.dumps(GOOD).replace('"time": 1000.0', '"time": NaN'), "time"),
    "infinity": (
        json.dumps(_mut(["jobs", 0, "checkpoint_seconds"], 1)).replace(
            '"checkpoint_seconds": 1', '"checkpoint_seconds": Infinity'
        ),
        "jobs[0].checkpoint_seconds",
    ),
    "negative capacity": (json.dumps(_mut(["nodes", 1, "cpu_millis"], -4000)), "nodes[1].cpu_millis"),
    "unknown node": (json.dumps(_mut(["jobs", 0, "node"], "zzz")), "jobs[0].node"),
    "duplicate node": (json.dumps(_mut(["nodes", 1, "name"], "a")), "nodes[1].name"),
    "duplicate job": (json.dumps(_mut(["jobs", 1, "id"], "j1")), "jobs[1].id"),
    "min above max": (json.dumps(_mut(["jobs", 1, "min_cpu_millis"], 9000)), "jobs[1]"),
    "running without node": (json.dumps(_mut(["jobs", 0, "node"], None)), "jobs[0]"),
    "tier2 worse than tier1": (
        json.dumps(_mut(["jobs", 1, "target"], {"direction": "higher", "tier1": {"value": 0.9}, "tier2": {"value": 0.8}})),
        "jobs[1].target",
    ),
    "negative priority": (json.dumps(_mut(["jobs", 1, "priority"], -1)), "jobs[1].priority"),
}


@pytest.mark.parametrize("case", sorted(BAD_SNAPSHOTS))
def test_bad_snapshot_one_line_exit_2(case: str, tmp_path: Path) -> None:
    content, must = BAD_SNAPSHOTS[case]
    f = tmp_path / "snap.json"
    f.write_text(content)
    out = tmp_path / "plan.json"
    r = run("plan", str(f), "--out", str(out))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert str(f) in lines[0] and must in lines[0], lines[0]
    assert r.stdout == ""
    assert not out.exists()


@pytest.mark.parametrize(
    "args,must",
    [
        (["plan", "/no/such/file.json"], "no such file"),
        (["plan", "."], "directory"),
        (["plan", "-", "--time-limit", "-3"], "--time-limit"),
        (["plan", "-", "--time-limit", "abc"], "--time-limit"),
        (["plan", "-", "--solver", "gurobi"], "--solver"),
        (["schema", "nothing"], "which"),
    ],
)
def test_bad_arguments(args: list[str], must: str) -> None:
    r = run(*args, stdin=json.dumps(GOOD))
    assert r.returncode == 2
    assert must in r.stderr and "Traceback" not in r.stderr


def test_table_output() -> None:
    r = run("plan", "-", stdin=json.dumps(GOOD))
    assert r.returncode == 0, r.stderr
    assert "JOB" in r.stdout and "j1" in r.stdout and "j2" in r.stdout
    assert "solver: cpsat" in r.stdout and "Why:" in r.stdout


@pytest.mark.parametrize("solver", ["cpsat", "pulp", "greedy"])
def test_json_output_and_check_roundtrip(solver: str, tmp_path: Path) -> None:
    snap = random_snapshot(11, n_nodes=3, n_jobs=9)
    sf = tmp_path / "snap.json"
    sf.write_text(snap.model_dump_json())
    pf = tmp_path / "plan.json"
    r = run("plan", str(sf), "--solver", solver, "--format", "json", "--out", str(pf), "--time-limit", "2")
    assert r.returncode == 0, r.stderr
    plan = json.loads(pf.read_text())
    assert plan["apiVersion"] == "flowplan/v1" and plan["kind"] == "Plan"
    assert {a["job"] for a in plan["assignments"]} == {j.id for j in snap.jobs if j.status != "finished"}
    assert set(plan["solver"]) >= {"status", "seconds", "gap"}
    ok = run("check", str(sf), str(pf))
    assert ok.returncode == 0 and "plan is valid" in ok.stdout
    # Tamper: push one placed job far over its node's capacity.
    placed = [a for a in plan["assignments"] if a["node"]]
    assert placed
    placed[0]["cpu_millis"] = 10**8
    pf.write_text(json.dumps(plan))
    bad = run("check", str(sf), str(pf))
    assert bad.returncode == 1 and "violation" in bad.stdout


@pytest.mark.parametrize("which", ["snapshot", "plan"])
def test_schema_is_json_schema(which: str) -> None:
    r = run("schema", which)
    assert r.returncode == 0
    schema = json.loads(r.stdout)
    assert schema["type"] == "object" and "properties" in schema
    assert schema["additionalProperties"] is False


def test_help_mentions_every_command() -> None:
    r = run("--help")
    assert r.returncode == 0
    for cmd in ("plan", "schema", "check"):
        assert cmd in r.stdout
