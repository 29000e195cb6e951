"""``flowplan logs``: in-process through ``flowplan.cli.main`` (one case as a real process, with a pipe).

Case matrix: every recorded fixture → exit 0 and its JSON points equal the library's; the table
names the format; standard input with a log arriving in bursts; ``--steps-per-epoch`` places a step
log (without it: one line saying so, exit 2); a missing file, a directory, an empty log, an
unrecognised log, a forced format that does not fit → one line on stderr, exit 2, no traceback;
a bad option value → argparse's usage error, exit 2.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_logs_fixtures import CASES, FIXTURES

from adapters.logs import read_log
from flowplan.cli import main


class _Stdin:
    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def flowplan(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``flowplan logs ARGS`` in this process; returns what a process would (code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = _Stdin(stdin or b""), out, err  # type: ignore[assignment]
    try:
        try:
            code = main(["logs", *args])
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    return subprocess.CompletedProcess(args, code, out.getvalue().encode(), err.getvalue().encode())


def test_every_fixture_as_json_matches_the_library() -> None:
    for name, case in CASES.items():
        args = [str(FIXTURES / case.path), "--format", "json"]
        if case.steps_per_epoch:
            args += ["--steps-per-epoch", str(case.steps_per_epoch)]
        res = flowplan(*args)
        assert res.returncode == 0, (name, res.stderr)
        doc = json.loads(res.stdout)
        points, events, _ = read_log((FIXTURES / case.path).read_bytes(), steps_per_epoch=case.steps_per_epoch)
        assert doc["points"] == [p.as_dict() for p in points], name
        assert set(doc["points"][0]) == {"epoch", "loss", "metric", "time"}
        assert len(doc["events"]) == len(events)
        assert case.format in doc["formats"]


def test_table_from_a_pipe_in_bursts_as_a_process() -> None:
    raw = (FIXTURES / "keras/keras-fit-pty.log").read_bytes()
    proc = subprocess.Popen([sys.executable, "-m", "flowplan", "logs", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None
    for i in range(0, len(raw), 1000):
        proc.stdin.write(raw[i : i + 1000])
        proc.stdin.flush()
    proc.stdin.close()
    stdout = proc.stdout.read() if proc.stdout is not None else b""
    assert proc.wait(timeout=60) == 0
    out = stdout.decode()
    assert out.startswith("<stdin>: ") and "read as keras" in out
    assert "    3.000      0.9027    0.8278" in out


def test_steps_per_epoch() -> None:
    path = str(FIXTURES / "pytorch/pytorch-steps.log")
    res = flowplan(path)
    assert res.returncode == 2 and res.stderr.decode().count("\n") == 1
    assert "--steps-per-epoch" in res.stderr.decode()
    res = flowplan(path, "--steps-per-epoch", "23", "--format", "json")
    assert res.returncode == 0
    assert json.loads(res.stdout)["points"][-1]["epoch"] == pytest.approx(60 / 23)


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        (["/nonexistent/train.log"], None, "/nonexistent/train.log: No such file or directory"),
        (["/tmp"], None, "/tmp: Is a directory"),
        (["-"], b"", "<stdin>: empty; formats understood: jsonl, hf-trainer, pytorch, keras, progress-bar, key-value"),
        (["-"], b"Downloading shards\nall done\n", "no training progress found in 2 line(s); formats understood: jsonl"),
        (["-", "--log-format", "keras"], b"epoch: 1 loss: 0.5\n", "no training progress found in 1 line(s) as keras"),
    ],
    ids=["missing", "directory", "empty", "unrecognised", "forced-format"],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], stdin: bytes | None, says: str) -> None:
    res = flowplan(*args, stdin=stdin)
    err = res.stderr.decode()
    assert res.returncode == 2 and err.count("\n") == 1 and says in err, err
    assert "Traceback" not in err and res.stdout == b""


@pytest.mark.parametrize("args", [["x", "--steps-per-epoch", "nan"], ["x", "--log-format", "csv"], ["x", "--format", "xml"]])
def test_bad_options_are_usage_errors(args: list[str], tmp_path: Path) -> None:
    res = flowplan(*args)
    assert res.returncode == 2 and b"usage: flowplan logs" in res.stderr and b"Traceback" not in res.stderr


def test_points_the_contract_refuses_are_left_out_as_the_adapters_leave_them_out() -> None:
    """A loss beyond the contract's ±1e12 (or an epoch beyond 1e9): the adapters drop the point, so
    ``flowplan logs`` does not show it as read; it warns in one line naming the epoch, the field and
    the value, and lists it under ``refused`` in the JSON. Every point refused: one line, exit 2."""
    log = b"epoch 1 loss=2.0\nepoch 2 loss=-1e300\nepoch 3 loss=1.5\n"
    res = flowplan("-", stdin=log)
    err = res.stderr.decode()
    assert res.returncode == 0 and err.count("\n") == 1, err
    assert "1 point(s) left out" in err and "epoch 2: loss:" in err and "(got -1e+300)" in err
    assert "1e+300" not in res.stdout.decode() and "    3.000      1.5000" in res.stdout.decode()
    doc = json.loads(flowplan("-", "--format", "json", stdin=log).stdout)
    assert [p["epoch"] for p in doc["points"]] == [1.0, 3.0]
    assert [r["epoch"] for r in doc["refused"]] == [2.0] and doc["refused"][0]["reason"].startswith("loss: ")
    assert "refused" not in json.loads(flowplan("-", "--format", "json", stdin=b"epoch 1 loss=2.0\n").stdout)
    res = flowplan("-", stdin=b"epoch 1 loss=1e13\n")
    err = res.stderr.decode()
    assert res.returncode == 2 and err.count("\n") == 1 and "every point read is one the snapshot contract refuses" in err
    assert "Traceback" not in err and res.stdout == b""
