"""benchmarks/alibaba_fractions.py and alibaba_replay.py on the real Alibaba GPU trace, end to end.

Case matrix:

- the snapshot sample: every node and pod is the trace's (counts, fractions as ``gpu_milli``), it is
  a valid snapshot, and FlowPlan's plan of it passes the independent checker;
- the replay sample is a valid scenario of the trace's nodes and requests (fractions kept, nothing
  above 4 GPUs), and the script replays a small window through the simulator for a baseline and
  FlowPlan, printing each policy's row;
- ``--lifetimes``: every node and pod of the trace (CPU-only ones too), each arriving at its
  creation time and running its own lifetime, read here from the CSVs independently; a window of
  it simulated under the Kubernetes default runs each pod exactly its lifetime (plus its start-up);
- bad options: a one-line error naming the option, exit 2.

Nothing is faked: ``../shared/data/alibaba-gpu-v2023`` and the measured Pollux curves, the real
simulator and planner.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, benchmark_module

from adapters.sim.run import simulate
from adapters.sim.scenario import parse_scenario
from adapters.sim.truth import TraceLibrary
from planner import PlannerConfig, check_plan, plan
from planner.policies import make_policy

SCRIPT = REPO / "benchmarks" / "alibaba_replay.py"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # the replay imports alibaba_fractions beside it
    return benchmark_module("alibaba_fractions.py"), benchmark_module("alibaba_replay.py")


def test_the_snapshot_sample_is_the_trace_and_plans_through_the_checker(bench: tuple[Any, Any], data_dir: Path) -> None:
    fractions, _ = bench
    trace = data_dir / "alibaba-gpu-v2023"
    snap = fractions.load_snapshot(8, 40, seed=1, pods_file="gpushare40", data=trace)
    with (trace / "openb_node_list_gpu_node.csv").open() as f:
        nodes = {r["sn"]: r for r in csv.DictReader(f)}
    assert len(snap.nodes) == 8 and all(n.gpus == int(nodes[n.name]["gpu"]) for n in snap.nodes)
    assert len(snap.jobs) == 40 and any(j.gpu_milli is not None for j in snap.jobs)
    got = plan(snap, PlannerConfig(time_limit=2)).plan
    assert check_plan(snap, got) == []


def test_the_replay_sample_is_a_scenario_of_the_trace(bench: tuple[Any, Any], data_dir: Path) -> None:
    _, replay = bench
    library = TraceLibrary.from_dir(data_dir)
    doc, counts = replay.scenario_doc(
        library, data_dir / "alibaba-gpu-v2023", nodes=6, pods=60, seed=2, pods_file="gpushare40", span_hours=0.5, max_epochs=2
    )
    sc = parse_scenario(doc)
    jobs = sc.draw(0, library, data_dir)
    assert len(jobs) + counts["left_out"] == 60 and len(sc.nodes) == 6
    assert all(j.min_gpus == j.max_gpus <= replay.MAX_GPUS for j in jobs)
    assert any(j.gpu_milli is not None for j in jobs) and all(j.epochs <= 2 for j in jobs)
    assert max(j.arrival for j in jobs) <= 0.5 * 3600 + 1e-6


def test_the_lifetimes_replay_is_the_whole_trace_as_it_ran(bench: tuple[Any, Any], data_dir: Path) -> None:
    _, replay = bench
    library = TraceLibrary.from_dir(data_dir)
    trace = data_dir / "alibaba-gpu-v2023"
    doc, counts = replay.scenario_doc(
        library, trace, nodes=10**5, pods=10**6, seed=0, pods_file="default", span_hours=None, max_epochs=3, lifetimes=True
    )
    with (trace / "openb_node_list_all_node.csv").open() as f:
        assert len(doc["nodes"]) == sum(1 for _ in csv.DictReader(f))
    with (trace / "openb_pod_list_default.csv").open() as f:
        pods = {r["name"]: r for r in csv.DictReader(f)}
    assert len(doc["jobs"]) + counts["left_out"] == len(pods) and len(doc["jobs"]) > 8000
    first = min(int(r["creation_time"]) for r in pods.values())
    for job in doc["jobs"]:
        r = pods[job["id"]]
        began = int(r["scheduled_time"]) if r["scheduled_time"] else int(r["creation_time"])
        assert job["arrival"] == int(r["creation_time"]) - first
        assert job["duration_seconds"] == max(int(r["deletion_time"]) - began, 1)
        assert (job["kind"] == "cpu") == (int(r["num_gpu"]) == 0)
        assert job["min_cpu_millis"] == job["max_cpu_millis"] == max(int(r["cpu_milli"]), 1)
    assert max(j["max_gpus"] for j in doc["jobs"]) == 8  # kept: no measured speed-up is read
    sc = parse_scenario(doc)
    assert len(sc.draw(0, library, data_dir)) == len(doc["jobs"])


def test_a_lifetimes_window_runs_each_pod_its_lifetime(bench: tuple[Any, Any], data_dir: Path) -> None:
    _, replay = bench
    library = TraceLibrary.from_dir(data_dir)
    doc, _ = replay.scenario_doc(
        library, data_dir / "alibaba-gpu-v2023", nodes=40, pods=60, seed=3, pods_file="default", span_hours=1,
        max_epochs=3, interval=600, lifetimes=True,
    )  # fmt: skip
    run = simulate(parse_scenario(doc), make_policy("kubernetes"), "kubernetes", 0, library, data=data_dir)
    assert run.finished and run.checker_failures == 0
    lives = {j["id"]: j["duration_seconds"] for j in doc["jobs"]}
    assert any(j["kind"] == "cpu" for j in doc["jobs"]) and len(run.jobs) == len(lives)
    for j in run.jobs:
        assert j.start is not None and j.finish is not None and j.migrations == j.pauses == 0
        assert j.finish - j.start == pytest.approx(10 + lives[j.id], abs=1e-3)  # 10 s: its start-up


def test_the_replay_runs_end_to_end(data_dir: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--nodes", "4", "--pods", "16", "--span-hours", "0.2", "--max-epochs", "1",
         "--policies", "kubernetes,flowplan", "--data", str(data_dir)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = [line.split()[0] for line in r.stdout.splitlines() if line.startswith(("kubernetes ", "flowplan "))]
    assert rows == ["kubernetes", "flowplan"], r.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--nodes", "0"], "--nodes: 0 (at least 1)"),
        (["--span-hours", "0"], "--span-hours: 0.0 (must be > 0)"),
        (["--policies", "nope", "--pods", "5", "--nodes", "2"], "--policies: policy: unknown policy 'nope'"),
    ],
)
def test_bad_options_are_one_line_errors(args: list[str], needle: str) -> None:
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr
