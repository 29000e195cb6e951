"""``flowplan simulate``'s progress (issue 16): drawn by rich on a terminal, plain lines when piped.

Cases, on the embedded demo run by the real simulated cluster:

- piped (a subprocess, standard error a pipe): no escape codes; one line per run; the live table
  for *every* policy's run (not only FlowPlan's), each ending with all jobs finished;
- on a terminal (standard error replaced by a stream that says it is one; rich is told the same):
  a bar per policy and seed that reaches every job finished, the live table's rows redrawn in
  place (cursor movement), and each run's line.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest


def test_piped_progress_is_plain_lines_with_a_table_for_every_policy() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "flowplan", "simulate", "--policy", "flowplan", "--policy", "docker"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert "\x1b[" not in err and "\r" not in err
    for policy in ("flowplan", "docker"):
        assert len(re.findall(rf"^{policy} seed 0: makespan \S+, mean JCT", err, re.M)) == 1, err
        heads = re.findall(rf"^{policy} seed 0  t=\S+  finished (\d+)/(\d+)", err, re.M)
        assert len(heads) >= 2, err  # at the start, every 10 simulated minutes, and at the end
        assert heads[-1][0] == heads[-1][1] == "6"
    assert "JOB" in err and "cifar10-urgent" in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_rich_draws_a_bar_per_run_and_redraws_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from flowplan.cli import main

    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("LINES", "40")
    assert main(["simulate", "--policy", "docker", "--policy", "fifo", "--seeds", "2", "--live"]) == 0
    out = term.getvalue()
    assert "\x1b[" in out and "\x1b[1A" in out  # drawn, and redrawn in place
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    for label in ("docker seed 0", "docker seed 1", "fifo seed 0", "fifo seed 1"):
        assert re.search(rf"{label}\s+━+\s+6/6 jobs", plain), label  # its bar, complete
        assert f"{label}: makespan" in plain
    assert "cifar10-urgent" in plain and "DEADLINE" in plain  # the live table's rows
