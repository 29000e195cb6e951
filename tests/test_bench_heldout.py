"""benchmarks/heldout.py: random held-out workloads drawn from the measured data, and the script end to end.

Case matrix:

- every generated workload is a valid scenario whose jobs draw from the real traces (no invented
  curves), its TOML reads back as the same document, and its jobs contend for the cores;
- the same generator seed gives the same workloads (a set is named by its seed);
- the script end to end over a real simulation (FlowPlan and Docker's default, one workload):
  exit 0, the per-workload line and the summary printed, results.json written;
- bad options: a one-line error naming the option, exit 2.

Nothing is faked: the simulator runs the real planner on the measured curves of ``../shared/data``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, benchmark_module

from adapters.sim.scenario import parse_scenario
from adapters.sim.truth import TraceLibrary

SCRIPT = REPO / "benchmarks" / "heldout.py"


@pytest.fixture
def heldout(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # it imports results.py beside it, as when run
    return benchmark_module("heldout.py")


def test_workloads_are_valid_contended_scenarios_on_real_curves(heldout: Any, data_dir: Path) -> None:
    library = TraceLibrary.from_dir(data_dir)
    sizes = {m: heldout.batch_sizes(data_dir, m) for m in heldout.MODELS}
    assert all(len(s) >= 5 for s in sizes.values()), sizes  # every measured batch size is a candidate
    rng = np.random.default_rng(3)
    for i in range(12):
        doc = heldout.workload(rng, i, sizes)
        assert tomllib.loads(heldout.to_toml(doc)) == doc
        sc = parse_scenario(doc)
        jobs = sc.draw(0, library, data_dir)
        capacity = sum(n.cpu_millis for n in sc.nodes)
        assert sum(j.max_cpu_millis for j in jobs) > capacity, doc["description"]
        assert all(j.max_cpu_millis <= min(n.cpu_millis for n in sc.nodes) for j in jobs)
        assert {j.model for j in jobs} <= set(heldout.MODELS)


def test_the_generator_seed_names_the_workload_set(heldout: Any, data_dir: Path) -> None:
    sizes = {m: heldout.batch_sizes(data_dir, m) for m in heldout.MODELS}
    first = [heldout.workload(np.random.default_rng(5), i, sizes) for i in range(3)]
    again = [heldout.workload(np.random.default_rng(5), i, sizes) for i in range(3)]
    other = [heldout.workload(np.random.default_rng(6), i, sizes) for i in range(3)]
    assert first == again and first != other


def test_script_end_to_end(tmp_path: Path, data_dir: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--count", "1", "--seeds", "1", "--policies", "flowplan,docker",
         "--generator-seed", "2", "--data", str(data_dir), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "heldout-00 " in r.stdout and "flowplan mean JCT vs docker: mean" in r.stdout
    assert "no worse than docker on both mean JCT and makespan on" in r.stdout
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert len(rows) == 1 and rows[0]["flowplan_mean_jct_pct"] is not None
    assert (tmp_path / "heldout-00.toml").is_file()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--policies", "flowplan,oracle"], "--policies: 'flowplan,oracle' must include flowplan and docker"),
        (["--count", "0"], "--count: 0 (at least 1)"),
        (["--data", "/nonexistent"], "--data: /nonexistent has no measured curves"),
    ],
)
def test_bad_options_are_one_line_errors(args: list[str], needle: str) -> None:
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr
