"""``benchmarks/e2e_docker.py e2e --repeat N``: the summary of several side-by-side runs.

The two runs are real (session 41, ``--side-by-side 0 1 --work 120``, this change's daemon against
Docker's default): their JSON lines as the benchmark printed them, less the daemon log's path. In
the first the daemon missed the 25-s deadline by 1.3 s and ended the batch 7.1 % later; in the
second it met it and ended 2.9 % sooner.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import e2e_docker  # noqa: E402

RUNS = json.loads((Path(__file__).parent / "data" / "e2e" / "side-by-side-s41.json").read_text())


def _by_mode(runs: list[list[dict]]) -> list[dict[str, dict]]:
    return [{r["mode"]: r for r in run} for run in runs]


def test_the_summary_counts_each_condition_from_the_runs() -> None:
    lines = e2e_docker.summarize(_by_mode(RUNS), 25.0)
    text = "\n".join(lines)
    assert lines[0] == "2 run(s), the daemon against Docker's default in each:"
    assert "+7.1%" in lines[2] and "26.3 s!" in lines[2]  # the miss is marked
    assert "-2.9%" in lines[3] and "24.9 s " in lines[3] + " "
    assert "mean over 2 run(s): makespan +2.1% (-2.9 to +7.1), mean JCT +1.0% (-10.3 to +12.2); pauses 2.0 a run" in text
    assert "deadline (25 s) met: default 0 of 2, daemon 1 of 2" in text
    assert "deadline met and makespan no longer than the default's: 1 of 2" in text


def test_an_unfinished_run_is_shown_and_left_out_of_the_means() -> None:
    runs = copy.deepcopy(RUNS)
    runs[0][1]["makespan_s"] = None  # the daemon's side of the first run did not finish every job
    runs[0][1]["mean_jct_s"] = None
    lines = e2e_docker.summarize(_by_mode(runs), 25.0)
    assert "not every job finished" in lines[2]
    assert any(x.startswith("mean over 1 run(s): makespan -2.9%") for x in lines)
    assert lines[-1] == "deadline met and makespan no longer than the default's: 1 of 2"


def test_without_a_deadline_the_mean_jct_is_the_condition() -> None:
    runs = copy.deepcopy(RUNS)
    for run in runs:
        for mode in run:
            for job in mode["jobs"].values():
                job["prioritised"] = False
    lines = e2e_docker.summarize(_by_mode(runs), 25.0)
    assert not any("deadline" in x for x in lines)
    assert lines[-1] == "mean JCT no worse than the default's: 1 of 2"


def test_the_daemons_own_cpu_is_summed_where_the_runs_recorded_it() -> None:
    """Runs recorded before the benchmark read the daemon's CPU have no such line; with it, the
    mean, the range and the share of the daemon's node over the makespan (1000m here)."""
    assert not any("own CPU" in x for x in e2e_docker.summarize(_by_mode(RUNS), 25.0))
    runs = copy.deepcopy(RUNS)
    runs[0][1]["daemon_cpu_s"] = 3.0
    runs[1][1]["daemon_cpu_s"] = 2.0
    by = _by_mode(runs)
    share = [100 * c * 1000 / (r["daemon"]["cpu"] * r["daemon"]["makespan_s"]) for c, r in zip((3.0, 2.0), by, strict=True)]
    want = f"the daemon's own CPU: 2.50 s a run (2.00 to 3.00), {sum(share) / 2:.1f}% of its node's CPU over the makespan"
    assert want in e2e_docker.summarize(by, 25.0)


def test_a_deadline_the_default_meets_is_called_not_tight() -> None:
    """On a faster machine than the one ``--tight`` was set on, Docker's default meets the deadline
    too (session 43: 18-19 s against 25 s) and the runs test nothing; the summary says so and what
    ``--tight`` would bind (0.7 of the default's median time). Here the two runs' default times
    (31.8 and 38.9 s) are made to fall inside a 40-s deadline."""
    assert not any("not tight" in x for x in e2e_docker.summarize(_by_mode(RUNS), 25.0))
    lines = e2e_docker.summarize(_by_mode(RUNS), 40.0)
    assert "deadline (40 s) met: default 2 of 2, daemon 2 of 2 (! = missed)" in lines
    assert lines[-1] == (
        "the deadline was not tight here: the default met it in 2 of 2; its time to 0.93 was 35.4 s (median), "
        "so --tight 25 (0.7 of that) makes it bind"
    ), lines[-1]
