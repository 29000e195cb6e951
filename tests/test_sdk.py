"""``flowplan.sdk``, the training-side SDK, with real parts: the log reader, a real service, real signals.

Case matrix:

- import: ``import flowplan.sdk`` in a fresh interpreter loads no heavy module (numpy, pydantic,
  ortools, the planner, the adapters...);
- schedules: every form of issue 13 passes; named bad shapes fail naming the key;
- stdout round trip: what a run prints is what ``adapters.logs`` reads (points with fractional
  epochs, the declare event with max_epochs and schedule, started/checkpoint/delivered/finished),
  and what the Docker adapter keeps of it (the declaration);
- requests: a real child process hears SIGTERM (checkpoint, exit 75), SIGUSR1 (deliver), a flag
  file and a downward-API annotations file whose value changes; a second SIGTERM ends it at once;
- HTTP: points reach a real ``flowplan serve`` over a socket; with the service down the loop is not
  slowed or broken (a warning), and the points arrive once the service is up on that port; killed
  and started again, it gets the points buffered meanwhile, each once; a refused batch is dropped.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import flowplan.sdk as sdk
from adapters.docker.progress import LogCursor, read_lines
from adapters.logs import Declaration, declaration, read_log

REPO = Path(__file__).resolve().parents[1]


def test_import_loads_only_the_standard_library() -> None:
    code = (
        "import sys, flowplan.sdk\n"
        "heavy = ('numpy', 'scipy', 'pydantic', 'ortools', 'pulp', 'rich', 'planner', 'models', 'adapters', 'api',"
        " 'store', 'fastapi', 'httpx', 'docker', 'kubernetes')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


GOOD_SCHEDULES = {
    "constant": {"kind": "constant"},
    "step": {"kind": "step", "milestones": [30, 60], "gamma": 0.1},
    "exp": {"kind": "exp", "gamma": 0.93},
    "cosine": {"kind": "cosine"},
    "warmup_cosine": {"kind": "warmup_cosine", "warmup": 10},
    "warmup_linear": {"kind": "warmup_linear", "warmup": 5},
    "plateau": {"kind": "plateau", "factor": 0.5, "patience": 4, "min_lr": 1e-06},
}

BAD_SCHEDULES = {
    "not a dict": ("cosine", "schedule:"),
    "unknown kind": ({"kind": "cyclic"}, "schedule.kind"),
    "no kind": ({"milestones": [3]}, "schedule.kind"),
    "missing milestones": ({"kind": "step", "gamma": 0.1}, "schedule.milestones"),
    "milestones not increasing": ({"kind": "step", "milestones": [60, 30]}, "schedule.milestones"),
    "milestone not a number": ({"kind": "step", "milestones": ["30"]}, "schedule.milestones[0]"),
    "gamma above 1": ({"kind": "exp", "gamma": 1.5}, "schedule.gamma"),
    "gamma NaN": ({"kind": "exp", "gamma": float("nan")}, "schedule.gamma"),
    "typo in a key": ({"kind": "warmup_cosine", "warmpu": 10}, "schedule.warmpu"),
    "negative warmup": ({"kind": "warmup_linear", "warmup": -1}, "schedule.warmup"),
    "bool patience": ({"kind": "plateau", "patience": True}, "schedule.patience"),
}


@pytest.mark.parametrize("name", GOOD_SCHEDULES)
def test_every_schedule_form_of_the_issue_passes_unchanged(name: str) -> None:
    assert sdk.check_schedule(GOOD_SCHEDULES[name]) == GOOD_SCHEDULES[name]


@pytest.mark.parametrize("name", BAD_SCHEDULES)
def test_a_bad_schedule_is_refused_at_init_naming_the_key(name: str) -> None:
    schedule, key = BAD_SCHEDULES[name]
    with pytest.raises(sdk.ScheduleError, match=key.replace("[", r"\[").replace("]", r"\]")):
        sdk.init("j", schedule=schedule, signals=False, stream=io.StringIO())


def run_to_text(**kw: Any) -> str:
    buf = io.StringIO()
    run = sdk.init("digits", stream=buf, signals=False, min_point_seconds=0.0, **kw)
    run.log(0.25, loss=2.1, step=10)
    run.log(0.5, loss=1.9, step=20)
    run.log(1, loss=1.5, metric=0.61)
    run.log(1.5, loss=float("inf"))
    run.log(2, loss=1.1, metric=0.72)
    run.checkpoint_done("/ckpt/digits.npz")
    run.delivered("/ckpt/digits.delivered.npz", metric=0.72)
    run.finish()
    return buf.getvalue()


def test_stdout_round_trips_through_the_log_reader() -> None:
    schedule = {"kind": "step", "milestones": [30, 60], "gamma": 0.1}
    text = run_to_text(max_epochs=90, schedule=schedule)
    assert all(json.loads(line) for line in text.splitlines())  # every line is one JSON object
    points, events, reader = read_log(text)
    assert [(p.epoch, p.loss, p.metric) for p in points] == [
        (0.25, 2.1, None),
        (0.5, 1.9, None),
        (1.0, 1.5, 0.61),
        (2.0, 1.1, 0.72),
    ]
    assert all(p.time is not None and p.format == "jsonl" for p in points)
    kinds = [e.kind for e in events]
    assert kinds == ["declare", "started", "loss_not_finite", "checkpoint", "delivered", "finished"]
    by = {e.kind: e for e in events}
    assert by["declare"].detail == {"max_epochs": 90, "schedule": schedule}
    assert declaration(by["declare"].as_dict()) == Declaration(90.0, schedule)
    assert by["checkpoint"].epoch == 2 and by["checkpoint"].detail["path"] == "/ckpt/digits.npz"
    assert by["delivered"].detail["metric"] == 0.72
    assert dict(reader.recognised) == {"jsonl": len(text.splitlines())}  # every line read, as JSON


def test_the_docker_adapter_reads_the_same_lines_and_keeps_the_declaration() -> None:
    """The container-log path: engine-stamped lines through ``read_lines``, as the adapter reads them."""
    text = run_to_text(max_epochs=90, schedule={"kind": "cosine"})
    raw = "".join(f"2026-11-23T09:00:{i:02d}.000000000Z {line}\n" for i, line in enumerate(text.splitlines()))
    progress, _ = read_lines(raw.encode(), LogCursor(), 0.0, final=True)
    assert [p["epoch"] for p in progress.points] == [0.25, 0.5, 1.0, 2.0]
    decl = [d for d in map(declaration, progress.events) if d is not None]
    assert decl == [Declaration(90.0, {"kind": "cosine"})]
    assert [e["event"] for e in progress.events if e["event"] in ("checkpoint", "delivered")] == ["checkpoint", "delivered"]


def test_points_inside_an_epoch_are_thinned_but_epoch_ends_never_are() -> None:
    buf = io.StringIO()
    run = sdk.init("j", stream=buf, signals=False, min_point_seconds=60.0)
    for i in range(1, 101):
        run.log(i / 50, loss=1.0 / i)  # 50 steps an epoch, all within a second
    run.log(2.5, loss=0.1, metric=0.5)  # a metric always goes out
    run.log(float("nan"), loss=0.1)  # a bad epoch: left out, no exception
    run.log(3, loss="not a number")  # a bad loss: left out, no exception
    points, _, _ = read_log(buf.getvalue())
    assert [p.epoch for p in points] == [0.02, 1.0, 2.0, 2.5]


# -- requests heard by a real process ------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys, time
    import flowplan.sdk as sdk

    run = sdk.init("kid", control_dir=sys.argv[1], min_point_seconds=0)
    print("ready", flush=True)
    step = 0
    while step < 4000:
        step += 1
        time.sleep(0.005)
        if run.should_deliver():
            run.delivered("/m/kid.delivered")
        if run.should_checkpoint():
            run.checkpoint_done("/m/kid.ckpt", epoch=step / 100)  # exits 75: SIGTERM or a flag asked to stop
        if step % 100 == 0:
            run.log(step / 100, loss=1.0 / step)
    run.finish()
    """
)


class Child:
    def __init__(self, control: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(control)], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        first = [self.proc.stdout.readline() for _ in range(2)]
        assert '"started"' in first[0] and first[1].strip() == "ready", first  # the handlers are installed

    def events(self, timeout: float = 30) -> tuple[int, list[dict[str, Any]]]:
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    def wait_for(self, kind: str, timeout: float = 20) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("{") and json.loads(line).get("event") == kind:
                return json.loads(line)
        raise AssertionError(f"no {kind} event within {timeout} s")


def test_sigterm_checkpoints_and_exits_75_and_sigusr1_delivers(tmp_path: Path) -> None:
    child = Child(tmp_path)
    child.proc.send_signal(signal.SIGUSR1)
    got = child.wait_for("delivered")
    assert got["path"] == "/m/kid.delivered"
    child.proc.send_signal(signal.SIGTERM)
    code, events = child.events()
    assert code == sdk.EX_CHECKPOINTED
    kinds = [e["event"] for e in events if "event" in e]
    assert kinds == ["requested", "checkpoint"], kinds
    assert events[0]["by"] == "SIGTERM" and events[1]["path"] == "/m/kid.ckpt"


def test_flag_files_and_the_annotations_file_are_requests(tmp_path: Path) -> None:
    child = Child(tmp_path)
    (tmp_path / "kid.deliver").touch()
    assert child.wait_for("requested")["by"].startswith("flag file")
    child.wait_for("delivered")
    assert not (tmp_path / "kid.deliver").exists()  # taken
    ann = tmp_path / "annotations"
    ann.write_text('flowplan.io/job="kid"\nflowplan.io/deliver-requested="2026-11-23T09:00:00Z"\n')
    assert "deliver-requested" in child.wait_for("requested")["by"]
    child.wait_for("delivered")
    # The same value again is no new request; a new value is, and a checkpoint request stops the job.
    ann.write_text(
        'flowplan.io/deliver-requested="2026-11-23T09:00:00Z"\nflowplan.io/checkpoint-requested="2026-11-23T09:01:00Z"\n'
    )
    code, events = child.events()
    assert code == sdk.EX_CHECKPOINTED
    kinds = [(e["event"], e.get("what")) for e in events if "event" in e]
    assert kinds == [("requested", "checkpoint"), ("checkpoint", None)], kinds


def test_a_second_sigterm_ends_a_loop_that_does_not_look(tmp_path: Path) -> None:
    code = "import time, flowplan.sdk as s\nr = s.init('x')\nprint('ready', flush=True)\ntime.sleep(60)\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and "started" in proc.stdout.readline() and "ready" in proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert proc.poll() is None  # the first asks for a checkpoint: the loop would see it between batches
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == -signal.SIGTERM


def test_read_annotations_parses_the_downward_api_format() -> None:
    text = 'a="1"\nflowplan.io/deliver-requested="2026-11-23T09:00:00Z"\nq="say \\"hi\\""\nbroken line\n'
    assert sdk.read_annotations(text) == {"a": "1", "flowplan.io/deliver-requested": "2026-11-23T09:00:00Z", "q": 'say "hi"'}


# -- HTTP to a real service ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stored_epochs(url: str, job: str) -> list[float]:
    """[first epoch, last epoch, points] of the job as the service reports it ([] when it knows none)."""
    resp = httpx.get(f"{url}/v1/jobs/{job}", timeout=10)
    if resp.status_code == 404:
        return []
    resp.raise_for_status()
    h = resp.json()["history"]
    return [h["first_epoch"], h["last_epoch"], h["points"]]


def wait_until(pred: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    return pred()


def test_http_reports_to_a_real_service_and_survives_it_being_down(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from test_api_support import ServeProcess

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    caplog.set_level(logging.WARNING, logger="flowplan.sdk")
    buf = io.StringIO()
    run = sdk.init("sdk/job-1", report="auto", url=url, stream=buf, signals=False, min_point_seconds=0.0)
    reporter = run._points
    assert isinstance(reporter, sdk.HttpReporter)
    reporter.flush_seconds = 0.2
    # The service is down: the loop goes on at full speed, nothing raises.
    t0 = time.monotonic()
    for i in range(1, 21):
        run.log(i / 4, loss=2.0 / i, metric=0.5 + i / 100 if i % 4 == 0 else None)
    assert time.monotonic() - t0 < 0.5
    assert wait_until(lambda: any("cannot report" in r.getMessage() for r in caplog.records), 10)
    assert reporter.pending() == 20 and reporter.sent == 0
    # Events still go to stdout (the service has no events endpoint): the log path sees them.
    assert [json.loads(line)["event"] for line in buf.getvalue().splitlines()] == ["started"]

    server = ServeProcess(tmp_path / "state.db", None, "--port", str(port)).start()
    try:
        assert server.url.endswith(f":{port}")
        got = wait_until(lambda: stored_epochs(url, "sdk/job-1") == [0.25, 5.0, 20], 60)
        assert got, stored_epochs(url, "sdk/job-1")
        assert any("answers again" in r.getMessage() for r in caplog.records)
        # It goes away (killed) while the job runs on, and comes back on the same port and state.
        server.kill()
        for i in range(21, 25):
            run.log(i / 4, loss=2.0 / i)
        outages = lambda: sum("cannot report" in r.getMessage() for r in caplog.records)  # noqa: E731
        assert wait_until(lambda: outages() == 2, 20), outages()
        assert reporter.pending() == 4
        server = ServeProcess(tmp_path / "state.db", None, "--port", str(port)).start()
        run.finish(timeout=30)
        assert reporter.pending() == 0 and reporter.sent == 24 and reporter.refused == 0
        assert stored_epochs(url, "sdk/job-1") == [0.25, 6.0, 24]  # every point once
        detail = httpx.get(f"{url}/v1/jobs/sdk/job-1", timeout=10).json()["history"]
        assert detail["last_loss"] == pytest.approx(2.0 / 24)
    finally:
        server.stop()


def test_http_drops_a_batch_the_service_refuses_and_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from test_api_support import ServeProcess

    caplog.set_level(logging.WARNING, logger="flowplan.sdk")
    server = ServeProcess(tmp_path / "state.db", {"FLOWPLAN_TOKEN": "right"}).start()
    try:
        run = sdk.init("tok", report="http", url=server.url, token="wrong", stream=io.StringIO(), signals=False)
        run.log(1, loss=1.0)
        run.finish(timeout=20)
        reporter = run._points
        assert isinstance(reporter, sdk.HttpReporter)
        assert reporter.refused == 1 and reporter.pending() == 0
        assert any("refused" in r.getMessage() and "401" in r.getMessage() for r in caplog.records)
    finally:
        server.stop()


# -- the example job, without an engine --------------------------------------------------------------


def digits_job(ckpt: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    env.pop("FLOWPLAN_CONTROL_DIR", None)
    cmd = [sys.executable, str(REPO / "examples/jobs/train_digits.py"), "--checkpoint-dir", str(ckpt), "--work", "5", *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_the_example_job_stops_on_a_flag_file_and_resumes_where_an_uninterrupted_run_is(tmp_path: Path) -> None:
    """``train_digits.py`` through the SDK: the flag file ``<job>.checkpoint`` (its control directory
    is its checkpoint directory) checkpoints and exits 75; the next run prints ``resumed`` at that
    epoch and ends with the same accuracy, epoch for epoch, as a run never interrupted."""
    ckpt = tmp_path / "cut"
    first = digits_job(ckpt, "--job", "c", "--epochs", "400")
    assert first.stdout is not None
    for line in first.stdout:
        if line.startswith('{"epoch": 2,'):
            (ckpt / "c.checkpoint").touch()  # seen within a second (the SDK looks at most once a second)
            break
    rest, _ = first.communicate(timeout=60)
    assert first.returncode == sdk.EX_CHECKPOINTED, rest
    stop = [e for e in json_lines(rest) if e.get("event") == "checkpoint"]
    assert stop and stop[0]["epoch"] >= 2 and not (ckpt / "c.checkpoint").exists()
    held = stop[0]["epoch"]
    epochs = str(held + 2)

    whole = digits_job(tmp_path / "whole", "--job", "w", "--epochs", epochs)
    out, _ = whole.communicate(timeout=120)
    assert whole.returncode == 0
    expected = {p["epoch"]: p["metric"] for p in json_lines(out) if "event" not in p}
    assert sorted(expected) == list(range(1, held + 3))

    second = digits_job(ckpt, "--job", "c", "--epochs", epochs)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0
    lines = json_lines(out)
    assert lines[0] == {**lines[0], "event": "declare", "max_epochs": held + 2, "schedule": {"kind": "constant"}}
    assert lines[1]["event"] == "resumed" and lines[1]["epoch"] == held
    resumed = {p["epoch"]: p["metric"] for p in lines if "event" not in p}
    assert sorted(resumed) == [held + 1, held + 2]
    assert resumed == {e: expected[e] for e in resumed}  # the same run, epoch for epoch
