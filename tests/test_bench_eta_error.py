"""benchmarks/eta_error.py: how far each plan's predicted finish was from the real one.

Case matrix:

- one run's errors by hand: predictions made before a job's finish count (signed and over the
  time then left), those at or after it and jobs that never finished do not;
- the script end to end on a real `flowplan simulate --out` directory (the embedded demo, seed 0,
  FlowPlan only): exit 0 and one line with the prediction count and the errors;
- a directory with no runs of the policy says so; a path that is not a directory is a one-line
  error, exit 2.

Nothing is faked: the end-to-end case reads what the simulator wrote from the measured curves.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, benchmark_module

SCRIPT = REPO / "benchmarks" / "eta_error.py"


@pytest.fixture
def eta() -> Any:
    return benchmark_module("eta_error.py")


def test_one_runs_errors_by_hand(eta: Any) -> None:
    run = {
        "jobs": [{"id": "a", "finish": 100.0}, {"id": "b", "finish": None}],
        "eta": {"a": [[0.0, 120.0], [50.0, 90.0], [100.0, 100.0], [110.0, 130.0]], "b": [[0.0, 50.0]]},
    }
    got = eta.run_errors(run)
    assert got.signed == [20.0, -10.0]
    assert got.relative == pytest.approx([0.2, 0.2])
    s = got.summary()
    assert s["predictions"] == 2 and s["median_relative"] == pytest.approx(0.2) and s["median_abs_s"] == 15.0


def test_the_script_on_a_real_simulation(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    sim = [sys.executable, "-c", "from flowplan.__main__ import run; run()", "simulate", "--policy", "flowplan"]
    done = subprocess.run([*sim, "--seeds", "1", "--quiet", "--out", str(out)], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = subprocess.run([sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    line = got.stdout.strip()
    m = re.search(r"\(flowplan\): (\d+) predictions; error over the time left: median ([\d.]+) %", line)
    assert m is not None, line
    assert int(m.group(1)) > 20 and 0 <= float(m.group(2)) < 100


def test_no_runs_and_not_a_directory(tmp_path: Path) -> None:
    got = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert got.returncode == 0 and "no flowplan predictions" in got.stdout
    missing = tmp_path / "nope"
    got = subprocess.run([sys.executable, str(SCRIPT), str(missing)], capture_output=True, text=True)
    assert got.returncode == 2 and got.stderr.strip() == f"eta_error: {missing}: not a directory"
