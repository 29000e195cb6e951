"""benchmarks/optimum.py: the offline optimum of a one-host CPU scenario, and its exact replay.

Case matrix:

- the inputs are the simulator's: the equal split replayed from them gives the simulator's own
  Docker-default run of the README demo (seed 0) to a tenth of a second, mean JCT and makespan;
- a small program (three of the demo's jobs, a makespan budget two steps past the equal split's)
  solves to optimality, its schedule replays to completion within the budget, never gives a job
  more than its maximum nor the host more than its cores, and beats the equal split's mean JCT;
- bad options: a scenario with several hosts or GPU jobs, or an unknown one: a one-line error.

Nothing is faked: the demo's jobs are drawn by the simulator from the measured curves and speeds;
the program is solved by PuLP's bundled CBC.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, benchmark_module

from adapters.sim.run import simulate
from adapters.sim.scenario import load_scenario
from adapters.sim.truth import TraceLibrary
from planner.policies import make_policy

SCRIPT = REPO / "benchmarks" / "optimum.py"


@pytest.fixture(scope="module")
def optimum() -> Any:
    return benchmark_module("optimum.py")


def test_the_equal_split_replayed_is_the_simulators_docker_run(optimum: Any, data_dir: Path) -> None:
    library = TraceLibrary.from_dir(data_dir)
    scenario = load_scenario(optimum.DEMO)
    run = simulate(scenario, make_policy("docker"), "docker", 0, library, record_timeline=False)
    jobs, capacity = optimum.known_jobs(scenario, 0, library)
    mean, makespan, met = optimum.figures(jobs, optimum.replay(jobs, capacity, None, 15.0))
    assert abs(mean - run.mean_jct) < 0.1
    assert abs(makespan - run.makespan) < 0.1
    assert met == f"{run.qoe_met}/{run.qoe_total}"


def test_a_small_program_is_solved_and_its_schedule_runs(optimum: Any, data_dir: Path) -> None:
    library = TraceLibrary.from_dir(data_dir)
    jobs, capacity = optimum.known_jobs(load_scenario(optimum.DEMO), 0, library)
    jobs = [j for j in jobs if j.id in ("cifar10", "ncf-0", "ncf-1")]
    fair = optimum.figures(jobs, optimum.replay(jobs, capacity, None, 15.0))
    t0 = min(j.arrival for j in jobs)
    budget = t0 + fair[1] + 30.0  # the equal split's makespan, plus two steps (the program's ends are whole steps)
    shares, status = optimum.optimum(jobs, capacity, 15.0, budget + 15.0, budget, 60.0)
    assert status == "Optimal"
    assert np.all(shares <= np.array([[j.hi] for j in jobs]) + 1e-6)
    assert np.all(shares.sum(axis=0) <= capacity + 1e-6)
    mean, makespan, _ = optimum.figures(jobs, optimum.replay(jobs, capacity, shares, 15.0))
    assert makespan <= budget - t0
    assert mean < fair[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "specon-4nodes"], "one host only"),
        (["--scenario", "nope"], "no scenario 'nope'"),
    ],
)
def test_bad_options_get_one_line(args: list[str], message: str, data_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--data", str(data_dir)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr
