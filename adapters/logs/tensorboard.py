"""Training progress from TensorBoard event files (``events.out.tfevents.*``), read incrementally.

What PyTorch's ``SummaryWriter``, Lightning's ``TensorBoardLogger``, Hugging Face's ``report_to=
"tensorboard"`` and TensorFlow's ``tf.summary`` write: a file of TFRecords (a little-endian 64-bit
length, its masked CRC-32C, the payload, the payload's masked CRC-32C), each payload an ``Event``
protocol buffer, whose ``summary.value`` entries carry the scalars: a tag and a ``simple_value``
(PyTorch, Lightning, Hugging Face) or a one-number ``tensor`` (TensorFlow 2). The records are split
and checked here (a few lines); the payloads are decoded with TensorBoard's own ``Event`` message
(the ``tensorboard`` package: the schema is its, not copied).

A writer appends to its file while the job runs, so a :class:`TensorBoardCursor` keeps, per file, the
bytes read up to the end of the last complete record: the next read decodes only what was appended,
and a record still being written is left for it. A record whose CRC does not match ends the read
of that file (``problems`` says where); nothing past it is guessed at.

How scalars become the snapshot's points (:mod:`adapters.logs.points`): per *run* (the directory of
an event file: Lightning's ``version_0/``, Hugging Face's ``runs/<date>/``; Keras' ``train/`` and
``validation/`` are one run, the validation's tags prefixed ``validation/``; a restarted job that
writes a new file into the same directory goes on counting there), values are grouped by step;
``epoch`` is the first of :attr:`TensorBoardKeys.epoch` logged at that step (Lightning's ``epoch``,
the index of the epoch in progress, from 0: a training step's loss is inside it, the validation at
its end completes it; Hugging Face's fractional ``train/epoch``, epochs completed; Keras'
``epoch_*`` values, logged at the epoch's index when it ends: the index plus one), else the step over the declared steps
per epoch (``flowplan.steps_per_epoch``, ``--steps-per-epoch``), else the step is counted in
``unplaced``; ``loss`` the first of :attr:`TensorBoardKeys.loss`, ``metric`` of
:attr:`TensorBoardKeys.metric`; ``time`` the event's wall time.
"""

from __future__ import annotations

import io
import posixpath
import struct
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.logs.points import LogPoint, StepValues, finite, points_by_step

#: What names an event file (``events.out.tfevents.<time>.<host>...``).
EVENT_FILE = "tfevents"
#: The most bytes of event files read in one go (a directory fetched from a container, the files of a path).
MAX_BYTES = 64 * 1024 * 1024
_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
# TensorFlow's DataType values of a scalar a tensor summary may hold, and how its raw bytes read.
_DTYPES = {1: ("float_val", "<f"), 2: ("double_val", "<d"), 19: ("half_val", "<e")}


class TensorBoardError(Exception):
    """Event files that could not be read: a path that is not there, or more than :data:`MAX_BYTES`."""


#: Keras' callback writes a run's training values into ``train/`` and its validation's into
#: ``validation/`` beside it: one run (their parent), the validation's tags under this prefix.
KERAS_VALIDATION = "validation/"
#: Keras' epoch-level values (``epoch_loss``, ``epoch_accuracy``) are logged at the epoch's index
#: (from 0) when it ends: such a step gets this value, the epochs completed (the index plus one).
KERAS_EPOCHS = "keras/epochs_done"


@dataclass(frozen=True)
class TensorBoardKeys:
    """Which scalar tags mean what (the first tag present at a step wins)."""

    epoch: tuple[str, ...] = ("epoch", "train/epoch", KERAS_EPOCHS)
    loss: tuple[str, ...] = ("loss", "train_loss", "train/loss", "Loss/train", "loss/train", "epoch_loss")
    metric: tuple[str, ...] = (
        "val_accuracy",
        "val_acc",
        "eval/accuracy",
        "Accuracy/val",
        "accuracy/val",
        KERAS_VALIDATION + "epoch_accuracy",
        "accuracy",
        "epoch_accuracy",
    )

    def all(self) -> frozenset[str]:
        """Every tag read: the keys, with Keras' validation tags as the file holds them (unprefixed)."""
        keys = (*self.epoch, *self.loss, *self.metric)
        return frozenset((*keys, *(k.removeprefix(KERAS_VALIDATION) for k in keys)))


def _run_of(name: str) -> tuple[str, str]:
    """The run an event file belongs to (its directory; Keras' ``train/`` and ``validation/``: their
    parent) and the prefix its tags get there."""
    folder = posixpath.dirname(name)
    base = posixpath.basename(folder)
    if base in ("train", KERAS_VALIDATION.rstrip("/")):
        return posixpath.dirname(folder), KERAS_VALIDATION if base != "train" else ""
    return folder, ""


@dataclass
class TensorBoardCursor:
    """Where reading left off: ``offsets[file]`` the bytes of each event file read (complete records
    only), ``base[run]`` 0 or 1, whether a run counts its epochs (or steps) from 0 or from 1."""

    offsets: dict[str, int] = field(default_factory=dict)
    base: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"offsets": self.offsets, "base": self.base}

    @classmethod
    def from_dict(cls, d: Any) -> TensorBoardCursor:
        if not isinstance(d, dict):
            return cls()
        offsets = d.get("offsets") if isinstance(d.get("offsets"), dict) else {}
        base = d.get("base") if isinstance(d.get("base"), dict) else {}
        return cls(
            offsets={str(k): int(v) for k, v in (offsets or {}).items() if isinstance(v, int) and v >= 0},
            base={str(k): int(v) for k, v in (base or {}).items() if v in (0, 1)},
        )


@dataclass
class TensorBoardRead:
    """What one read found: new points (sorted by epoch), the event files read, the steps not placed,
    and one line per file that could not be read to its end."""

    points: list[LogPoint]
    files: list[str]
    unplaced: int = 0
    problems: list[str] = field(default_factory=list)


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C, rotated and offset (TensorBoard's own implementation)."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as crc

    return int(crc(data))


def records(data: bytes, offset: int = 0) -> tuple[list[tuple[int, bytes]], int, str | None]:
    """The complete records of ``data`` from ``offset``: ``([(start, payload)], the offset after the
    last one, a problem or None)``. A record cut short (still being written) ends the list without a problem."""
    out: list[tuple[int, bytes]] = []
    while offset + _HEADER.size <= len(data):
        length, length_crc = _HEADER.unpack_from(data, offset)
        if masked_crc32c(data[offset : offset + 8]) != length_crc:
            return out, offset, f"a corrupt record length at byte {offset}"
        start = offset + _HEADER.size
        end = start + length + _CRC.size
        if end > len(data):
            break
        payload = data[start : start + length]
        if masked_crc32c(payload) != _CRC.unpack_from(data, start + length)[0]:
            return out, offset, f"a corrupt record at byte {offset}"
        out.append((offset, payload))
        offset = end
    return out, offset, None


def _tensor_value(tensor: Any) -> float | None:
    """The number a one-number tensor summary holds (TensorFlow 2's scalars), else None."""
    kind = _DTYPES.get(int(tensor.dtype))
    if kind is None:
        return None
    repeated, fmt = kind
    values = list(getattr(tensor, repeated))
    if len(values) == 1:
        return float(values[0])
    raw = bytes(tensor.tensor_content)
    if len(raw) == struct.calcsize(fmt):
        return float(struct.unpack(fmt, raw)[0])
    return None


def scalars(payload: bytes, tags: frozenset[str] | None = None) -> list[tuple[int, str, float, float]]:
    """``(step, tag, value, wall time)`` of every scalar one event holds (of ``tags`` only, when given)."""
    from tensorboard.compat.proto.event_pb2 import Event

    event = Event.FromString(payload)
    if not event.HasField("summary"):
        return []
    out = []
    for v in event.summary.value:
        if tags is not None and v.tag not in tags:
            continue
        if v.HasField("simple_value"):
            value: float | None = float(v.simple_value)
        elif v.HasField("tensor"):
            value = _tensor_value(v.tensor)
        else:
            continue
        value = finite(value)
        if value is not None:
            out.append((int(event.step), v.tag, value, float(event.wall_time)))
    return out


def read_files(
    files: Mapping[str, bytes],
    cursor: TensorBoardCursor,
    *,
    keys: TensorBoardKeys = TensorBoardKeys(),
    steps_per_epoch: float | None = None,
    final: bool = True,
) -> tuple[TensorBoardRead, TensorBoardCursor]:
    """The points the event ``files`` (path -> the whole file as it is now) hold past ``cursor``, and
    the advanced cursor (``cursor`` is not changed). A file shorter than its cursor (re-created) is
    read again from its start.

    A writer logs each scalar of a step as its own event (Hugging Face's ``train/loss`` then
    ``train/epoch``), so a file read while it grows may end between two values of one step. Unless
    ``final`` (the job is done writing), the newest step of each file is left for the next read (the
    cursor stops before its first record), so that its values are read together."""
    offsets = dict(cursor.offsets)
    base = dict(cursor.base)
    out = TensorBoardRead(points=[], files=[])
    runs: dict[str, dict[int, StepValues]] = {}
    wanted = keys.all()
    for name in sorted(files):
        if EVENT_FILE not in posixpath.basename(name):
            continue
        data = files[name]
        start = offsets.get(name, 0)
        if start > len(data):
            start = 0
        found, end, problem = records(data, start)
        out.files.append(name)
        if problem is not None:
            out.problems.append(f"{name}: {problem}; read up to it")
        decoded: list[tuple[int, list[tuple[int, str, float, float]]]] = []
        for at, payload in found:
            try:
                decoded.append((at, scalars(payload, wanted)))
            except Exception as exc:  # a payload protobuf cannot decode: reported, the rest read
                out.problems.append(f"{name}: an event that does not decode ({type(exc).__name__})")
        if not final:
            newest = max((v[0] for _, vals in decoded for v in vals), default=None)
            first = next((at for at, vals in decoded if any(v[0] == newest for v in vals)), None)
            if first is not None:
                decoded = [(at, vals) for at, vals in decoded if at < first]
                end = first
        offsets[name] = end
        run, prefix = _run_of(name)
        by_step = runs.setdefault(run, {})
        for _, vals in decoded:
            for step, tag, value, when in vals:
                logged = by_step.setdefault(step, {})
                logged[prefix + tag] = (value, when)
                if tag.startswith("epoch_"):
                    logged[KERAS_EPOCHS] = (float(step + 1), when)
    for run in sorted(runs):
        points, unplaced, run_base = points_by_step(
            runs[run],
            epoch_keys=keys.epoch,
            loss_keys=keys.loss,
            metric_keys=keys.metric,
            base=base.get(run),
            steps_per_epoch=steps_per_epoch,
            fmt="tensorboard",
            index_in_progress=True,
        )
        out.points += points
        out.unplaced += unplaced
        if run_base is not None:
            base[run] = run_base
    out.points.sort(key=lambda p: (p.epoch, p.time or 0.0))
    return out, TensorBoardCursor(offsets=offsets, base=base)


def files_under(path: Path) -> dict[str, bytes]:
    """Every event file at ``path`` (a file, or a directory searched recursively), by its path relative
    to ``path`` (a file: its name). Raises :class:`TensorBoardError` naming the path."""
    if path.is_file():
        found = [path]
        root = path.parent
    elif path.is_dir():
        found = sorted(p for p in path.rglob(f"*{EVENT_FILE}*") if p.is_file())
        root = path
    else:
        raise TensorBoardError(f"{path}: no such file or directory")
    total = sum(p.stat().st_size for p in found)
    if total > MAX_BYTES:
        raise TensorBoardError(f"{path}: {total} bytes of event files, more than the {MAX_BYTES} read at once")
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in found}


def files_in_tar(data: bytes) -> dict[str, bytes]:
    """The event files of a tar archive (what Docker's ``GET /containers/{id}/archive`` answers for a
    path), by their paths in it. Raises :class:`TensorBoardError` when they hold more than :data:`MAX_BYTES`."""
    out: dict[str, bytes] = {}
    total = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            if not member.isfile() or EVENT_FILE not in posixpath.basename(member.name):
                continue
            total += member.size
            if total > MAX_BYTES:
                raise TensorBoardError(f"more than {MAX_BYTES} bytes of event files")
            f = tar.extractfile(member)
            if f is not None:
                out[member.name] = f.read()
    return out
