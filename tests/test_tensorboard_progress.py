"""Progress from TensorBoard event files (``adapters/logs/tensorboard.py``, ``flowplan logs --tensorboard``,
the Docker adapter's ``flowplan.tensorboard`` label).

The event files in ``tests/fixtures/tensorboard/`` were written by real runs of PyTorch's
``SummaryWriter``, Lightning's ``TensorBoardLogger``, Hugging Face's ``Trainer`` and Keras'
``TensorBoard`` callback on TensorFlow (``record/``, ``versions.json``); they are decoded with the
tensorboard package's own ``Event`` message. The Docker test runs a real engine: a container writes
the recorded Lightning file into its own filesystem a few hundred bytes at a time (records cut in
the middle, as a live writer leaves them), and the adapter reads it through the engine's archive
API while it grows.

Case matrix:

- each framework's file: the points, their epochs (PyTorch's global steps over the declared steps per
  epoch; Lightning's ``epoch`` index, training steps inside the epoch and the validation at its end
  completing it; Hugging Face's fractional ``train/epoch``; Keras' ``epoch_*`` values at the index,
  its ``train/`` and ``validation/`` folders one run), losses and accuracies, pinned;
- reading a file in arbitrary pieces with the cursor gives the same points as reading it whole;
  a record cut short, and the newest step (its values may be in two reads), are left for the next
  read unless it is final; a corrupt record ends the read with a problem named;
  a file shorter than its cursor (re-created) is read from its start;
- ``flowplan logs --tensorboard``: a table, JSON, and one-line errors (no path; no event file; steps
  with no epoch and no ``--steps-per-epoch``); the event files of a tar archive;
- the Docker adapter: a container labelled ``flowplan.tensorboard=/tb`` that writes the file while
  it runs has the file's points in its history, read as it grows, each epoch once, the newest step
  once it has stopped; a bad label is one line.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from adapters.logs.tensorboard import (
    TensorBoardCursor,
    files_in_tar,
    files_under,
    read_files,
    records,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "tensorboard"


def _read(name: str, steps_per_epoch: float | None = None) -> Any:
    read, _ = read_files(files_under(FIXTURES / name), TensorBoardCursor(), steps_per_epoch=steps_per_epoch)
    return read


def _pts(read: Any) -> list[tuple[float, float | None, float | None, bool]]:
    r = lambda v: None if v is None else round(v, 4)  # noqa: E731
    return [(round(p.epoch, 4), r(p.loss), r(p.metric), p.partial) for p in read.points]


def test_pytorch_summary_writer_steps_over_the_declared_steps_per_epoch() -> None:
    read = _read("pytorch-writer", steps_per_epoch=23)
    got = _pts(read)
    assert len(got) == 16 and read.unplaced == 0 and not read.problems
    assert got[0] == (round(5 / 23, 4), 2.2841, None, True)  # Loss/train at global step 5
    assert [g for g in got if g[2] is not None] == [
        (1.0, None, 0.7667, False),
        (2.0, None, 0.8778, False),
        (3.0, None, 0.9444, False),
    ]
    # Without the steps per epoch nothing places them: counted, no point.
    bare = _read("pytorch-writer")
    assert bare.points == [] and bare.unplaced == 16


def test_lightning_epoch_index_training_steps_inside_and_validation_completing_it() -> None:
    got = _pts(_read("lightning-logger"))
    assert got[:5] == [
        (0.0, 2.1863, None, True),
        (0.0, 1.9039, None, True),
        (0.0, 1.5756, None, True),
        (0.0, 1.2362, None, True),
        (1.0, None, 0.7917, False),
    ]
    assert [g for g in got if g[2] is not None] == [
        (1.0, None, 0.7917, False),
        (2.0, None, 0.9111, False),
        (3.0, None, 0.9194, False),
    ]


def test_hugging_face_fractional_epochs_and_eval_accuracy() -> None:
    got = _pts(_read("hf-trainer"))
    assert got[0] == (0.2222, 2.2493, None, True)
    assert [g for g in got if g[2] is not None] == [
        (1.0, None, 0.875, False),
        (2.0, 0.6914, 0.8833, False),
        (3.0, None, 0.9, False),
    ]
    assert all(a[0] <= b[0] for a, b in zip(got, got[1:], strict=False))


def test_keras_train_and_validation_folders_are_one_run_its_epoch_values_done_at_the_index() -> None:
    """Keras' callback (TensorFlow 2 tensor summaries): ``epoch_loss`` in ``train/``, the validation's
    ``epoch_accuracy`` in ``validation/``, both at the epoch index from 0, written when it ends."""
    read = _read("keras-callback")
    assert sorted(read.files) == [f for f in read.files if f.startswith(("train/", "validation/"))] and len(read.files) == 2
    assert _pts(read) == [(1.0, 2.1024, 0.6528, False), (2.0, 1.4325, 0.725, False), (3.0, 0.9, 0.7806, False)]


@pytest.mark.parametrize("piece", [1, 37, 200, 4096])
def test_reading_in_pieces_gives_the_points_of_one_read(piece: int) -> None:
    """The file as a live writer leaves it after every ``piece`` bytes: each read decodes only what
    was appended, a record cut short and the newest step wait for the next read (the last read is
    final), and together they give the whole read."""
    (name, data), *_ = files_under(FIXTURES / "hf-trainer").items()
    whole = _pts(read_files({name: data}, TensorBoardCursor())[0])
    cursor, got = TensorBoardCursor(), []
    ends = [*range(piece, len(data), piece), len(data)]
    for end in ends:
        kept = TensorBoardCursor.from_dict(json.loads(json.dumps(cursor.as_dict())))  # as the store keeps it
        read, cursor = read_files({name: data[:end]}, kept, final=end == ends[-1])
        assert not read.problems
        got += _pts(read)
    assert sorted(got) == sorted(whole) and cursor.offsets[name] == len(data)


def test_a_corrupt_record_ends_the_read_and_a_recreated_file_starts_over() -> None:
    (name, data), *_ = files_under(FIXTURES / "lightning-logger").items()
    payloads, end, problem = records(data)
    assert problem is None and end == len(data) and len(payloads) == 36
    cut = records(data[:-3])
    assert cut[2] is None and len(cut[0]) == 35  # the last record is still being written: no problem
    bad = bytearray(data)
    bad[800] ^= 0xFF
    read, cursor = read_files({name: bytes(bad)}, TensorBoardCursor())
    assert len(read.problems) == 1 and "corrupt record" in read.problems[0] and cursor.offsets[name] < 800
    assert read.points and max(p.epoch for p in read.points) < 3.0
    # The file re-created shorter than the cursor: read from its start again.
    again, _ = read_files({name: data[:400]}, TensorBoardCursor(offsets={name: len(data)}))
    assert again.points and again.points[0].loss == pytest.approx(2.1863, abs=1e-4)


def test_event_files_of_a_tar_archive() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(FIXTURES / "lightning-logger", arcname="tb")
        tar.add(FIXTURES / "record" / "record.py", arcname="tb/record.py")  # not an event file: left out
    files = files_in_tar(buf.getvalue())
    assert list(files) == [next(f"tb/{k}" for k in files_under(FIXTURES / "lightning-logger"))]
    assert _pts(read_files(files, TensorBoardCursor())[0]) == _pts(_read("lightning-logger"))


def _logs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowplan", "logs", *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )


def test_flowplan_logs_tensorboard_table_json_and_one_line_errors(tmp_path: Path) -> None:
    out = _logs("--tensorboard", str(FIXTURES / "lightning-logger"))
    assert out.returncode == 0, out.stderr
    assert "16 point(s) (13 inside an epoch" in out.stdout and "0.9194" in out.stdout
    doc = json.loads(_logs("--tensorboard", str(FIXTURES / "hf-trainer"), "--format", "json").stdout)
    assert doc["points"][-1]["epoch"] == 3.0 and doc["points"][-1]["metric"] == pytest.approx(0.9)
    assert len(doc["files"]) == 1 and doc["files"][0].startswith("runs/")
    for args, must in [
        ((str(tmp_path / "nothing"),), "no such file or directory"),
        ((str(tmp_path),), "no TensorBoard event file"),
        ((str(FIXTURES / "pytorch-writer"),), "no step placed"),
    ]:
        bad = _logs("--tensorboard", *args)
        assert bad.returncode == 2 and must in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert "give --steps-per-epoch N" in _logs("--tensorboard", str(FIXTURES / "pytorch-writer")).stderr
    placed = json.loads(
        _logs("--tensorboard", str(FIXTURES / "pytorch-writer"), "--steps-per-epoch", "23", "--format", "json").stdout
    )
    assert len(placed["points"]) == 16


#: Run in the container: write the recorded Lightning event file into /tb (the container's own
#: filesystem, no volume) 300 bytes at a time, then exit as a finished job does.
WRITER = """
import sys, time, pathlib
data = pathlib.Path(sys.argv[1]).read_bytes()
out = pathlib.Path("/tb/version_0"); out.mkdir(parents=True)
f = open(out / pathlib.Path(sys.argv[1]).name, "wb")
for i in range(0, len(data), 300):
    f.write(data[i:i + 300]); f.flush(); time.sleep(1.0)
"""


@pytest.mark.slow
def test_the_docker_adapter_reads_a_containers_event_files_as_they_grow(docker_engines: Any, tmp_path: Path) -> None:
    from docker_env import create_job, python_mounts
    from test_docker_engine import _clean, adapter_for, job_of, wait_for  # noqa: F401 (_clean: autouse)

    from adapters.docker.labels import parse_labels

    (rel, _), *_ = files_under(FIXTURES / "lightning-logger").items()
    (tmp_path / "w.py").write_text(WRITER)
    fixture = FIXTURES / "lightning-logger" / rel
    main = docker_engines.engines[0]
    create_job(
        main.url,
        "fp-tb",
        "tb",
        tmp_path,
        labels={"flowplan.tensorboard": "/tb"},
        command=[python_mounts()[0], "/w/w.py", f"/fx/{fixture.name}"],
        extra_binds=[f"{tmp_path}:/w:ro", f"{fixture}:/fx/{fixture.name}:ro"],
    )
    ad = adapter_for(docker_engines)
    seen = []

    def grown() -> bool:
        job = job_of(ad, "tb")
        seen.append(len(job.history) if job else 0)
        return bool(job and any(p.metric is not None and p.epoch == 3.0 for p in job.history))

    wait_for(grown, 60, "the last validation point read from the container", every=0.7)
    job = job_of(ad, "tb")
    assert job.status == "finished"  # its newest step was read once it stopped writing
    assert len({x for x in seen if x}) >= 2, seen  # read while it grew, not at once
    epochs = [p.epoch for p in job.history]
    assert epochs == sorted(set(epochs)) == [0.0, 1.0, 2.0, 3.0]  # one point an epoch, the first
    assert [p.metric for p in job.history if p.metric is not None] == pytest.approx([0.7917, 0.9111, 0.9194], abs=1e-4)
    with pytest.raises(Exception, match=r"label flowplan.tensorboard: expected an absolute path in the container \('tb'\)"):
        parse_labels({"flowplan.job": "x", "flowplan.tensorboard": "tb"})


def test_without_the_tensorboard_package_the_daemon_says_so_once(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    """The daemon installed without the ``tensorboard`` extra: a job labelled ``flowplan.tensorboard``
    is not read, with one warning naming the missing package and the extra (not one a job an interval,
    and no failed observe). The package is hidden from the import system; no engine is called."""
    from adapters.docker import DockerAdapter, HostSpec
    from adapters.docker.engine import view
    from adapters.docker.labels import parse_labels

    monkeypatch.setitem(sys.modules, "tensorboard.compat.tensorflow_stub.pywrap_tensorflow", None)
    ad = DockerAdapter([HostSpec("a", "unix:///nonexistent.sock", cpu_millis=8000)])
    c = view({"Id": "t", "Name": "/x", "State": {"Status": "running"}, "Config": {"Labels": {}}, "HostConfig": {}})
    labels = parse_labels({"flowplan.job": "x", "flowplan.tensorboard": "/tb"})
    assert labels is not None
    for _ in range(3):
        ad._read_tensorboard("x", "a", c, labels)
    said = [r.getMessage() for r in caplog.records if "tensorboard" in r.getMessage()]
    assert len(said) == 1 and "pip install 'flowplan[tensorboard]'" in said[0], said
