"""Every recorded framework log (``tests/fixtures/logs``, real runs) read to the points a person reads off it.

The expected values were read off the raw files by hand (``cat -v``), not from the parser's output.
Case matrix, one row per fixture: the format that read it, the number of points at epoch ends and
inside epochs, the first and last points, and every epoch end with its loss and metric. Then, for
all fixtures: feeding byte by byte, or in the 4 KiB bursts of an unbuffered pipe, gives the same
points as feeding the file whole; points inside an epoch move forward and carry no metric; a pipe
and a terminal recording of the same run give the same epoch ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from adapters.logs import LogPoint, LogReader, merge_points, read_log

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"


@dataclass(frozen=True)
class Case:
    path: str
    format: str
    ends: list[tuple[float, float | None, float | None]]  # (epoch, loss, metric) of every point not inside an epoch
    first: tuple[float, float | None]  # (epoch, loss) of the first point
    inside: int | None = None  # points inside epochs (None: not pinned, only checked to be > 0)
    steps_per_epoch: float | None = None
    times: list[float] = field(default_factory=list)


KERAS_ENDS = [(1.0, 2.0320, 0.6000), (2.0, 1.3867, 0.7556), (3.0, 0.9027, 0.8278)]
LIGHTNING_ENDS = [(1.0, 1.22, 0.792), (2.0, 0.331, 0.911), (3.0, 0.368, 0.919)]
TQDM_ENDS = [(1.0, 0.6641, 0.8917), (2.0, 0.2514, 0.9111), (3.0, 0.0263, 0.9528)]  # the bar's last loss, the summary's val_acc
HF_LOSSES = [2.249, 2.057, 1.794, 1.506, 1.267, 1.035, 0.877, 0.7587, 0.6914, 0.6175, 0.6153, 0.588, 0.5608]

CASES = {
    "pytorch-example": Case(
        "pytorch/pytorch-example.log", "pytorch",
        # the test line's accuracy, joined with the next train line at the same epoch ("[0/1437]")
        ends=[(1.0, 1.909567, 254 / 360), (2.0, 1.085342, 285 / 360), (3.0, None, 308 / 360)],
        first=(0.0, 2.310898), inside=13,
    ),
    "pytorch-freeform": Case(
        "pytorch/pytorch-freeform.log", "key-value",
        ends=[(1.0, 2.0516, 0.7667), (2.0, 0.6484, 0.8778), (3.0, 0.2668, 0.9444), (4.0, 0.1748, 0.9333), (5.0, 0.1571, 0.9333)],
        first=(1.0, 2.0516), inside=0,
    ),
    "pytorch-flowcon": Case(
        "pytorch/pytorch-flowcon.log", "key-value",
        ends=[(1.0, 2.0516, None), (2.0, 0.6484, None), (3.0, 0.2668, None), (4.0, 0.1748, None), (5.0, 0.1571, None)],
        first=(1.0, 2.0516), inside=0, times=[1795411837.0] * 5,
    ),
    "pytorch-steps": Case(
        "pytorch/pytorch-steps.log", "key-value",
        ends=[(10 / 23, 2.1580, None), (20 / 23, 1.7033, None), (30 / 23, 0.8250, None), (40 / 23, 0.4730, None),
              (50 / 23, 0.3339, None), (60 / 23, 0.1903, None)],
        first=(10 / 23, 2.1580), inside=0, steps_per_epoch=23,
    ),
    "keras-pipe": Case("keras/keras-fit-pipe.log", "keras", KERAS_ENDS, first=(1 / 90, 2.5583)),
    "keras-pty": Case("keras/keras-fit-pty.log", "keras", KERAS_ENDS, first=(1 / 90, 2.5583)),
    "keras-verbose2": Case("keras/keras-fit-verbose2.log", "keras", KERAS_ENDS, first=(1.0, 2.0320), inside=0),
    "lightning-rich-pipe": Case(
        "lightning/lightning-rich-pipe.log", "progress-bar", [(3.0, 0.368, 0.919)], first=(3.0, 0.368), inside=0
    ),
    "lightning-rich-pty": Case(
        "lightning/lightning-rich-pty.log", "progress-bar", [(1.0, 1.225, 0.792), *LIGHTNING_ENDS[1:]], first=(1 / 23, 2.311)
    ),
    "lightning-tqdm-pipe": Case("lightning/lightning-tqdm-pipe.log", "progress-bar", LIGHTNING_ENDS, first=(1 / 23, 2.31)),
    "hf-trainer": Case(
        "transformers/hf-trainer-pipe.log", "hf-trainer",
        ends=[(0.2222, 2.249, None), (0.4444, 2.057, None), (0.6667, 1.794, None), (0.8889, 1.506, None), (1.0, None, 0.875),
              (1.111, 1.267, None), (1.333, 1.035, None), (1.556, 0.877, None), (1.778, 0.7587, None), (2.0, 0.6914, 0.8833),
              (2.222, 0.6175, None), (2.444, 0.6153, None), (2.667, 0.588, None), (2.889, 0.5608, None),
              (3.0, None, 0.9)],
        first=(0.2222, 2.249), inside=0,
    ),
    "jsonl": Case(
        "jsonl/jsonl.log", "jsonl",
        ends=[(1.0, 1.791774, 0.791667), (2.0, 0.619611, 0.897222), (3.0, 0.302201, 0.933333), (4.0, 0.209217, 0.936111)],
        first=(1.0, 1.791774), inside=0, times=[1795411858.6174765, 1795411858.64923, 1795411858.6867938, 1795411858.72272],
    ),
    "tqdm-colour-pipe": Case("tqdm/tqdm-colour-pipe.log", "progress-bar", TQDM_ENDS, first=(1 / 45, 2.3206)),
    "tqdm-colour-pty": Case("tqdm/tqdm-colour-pty.log", "progress-bar", TQDM_ENDS, first=(1 / 45, 2.3206)),
}  # fmt: skip


def _read(case: Case) -> tuple[list[LogPoint], LogReader]:
    points, _, reader = read_log((FIXTURES / case.path).read_bytes(), steps_per_epoch=case.steps_per_epoch)
    return points, reader


def _triples(points: list[LogPoint]) -> list[tuple[float, float | None, float | None]]:
    return [(p.epoch, p.loss, p.metric) for p in points]


def _same(got: list[tuple[float, float | None, float | None]], want: list[tuple[float, float | None, float | None]]) -> bool:
    """Equal row by row, numbers to 1e-4 (values are printed with 4 decimals), None only where None."""
    if len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > 1e-4):
                return False
    return True


@pytest.mark.parametrize("name", list(CASES))
def test_fixture_read_to_the_points_read_by_hand(name: str) -> None:
    case = CASES[name]
    points, reader = _read(case)
    assert reader.recognised.most_common(1)[0][0] == case.format
    ends = [p for p in points if not p.partial]
    inside = [p for p in points if p.partial]
    assert _same(_triples(ends), case.ends), _triples(ends)
    assert (points[0].epoch, points[0].loss) == pytest.approx(case.first, abs=1e-4)
    if case.inside is None:
        assert len(inside) > 10
    else:
        assert len(inside) == case.inside
    if case.times:
        assert [p.time for p in ends] == case.times
    assert reader.overlong == 0


def test_hf_trainer_losses_in_order_and_summary_skipped() -> None:
    points, _ = _read(CASES["hf-trainer"])
    assert [p.loss for p in points if p.loss is not None] == HF_LOSSES
    assert 1.103 not in [p.loss for p in points]  # the run summary's train_loss is no point


def test_pytorch_example_train_lines_are_fractions_of_the_epoch() -> None:
    points, _ = _read(CASES["pytorch-example"])
    train = [(p.epoch, p.loss) for p in points if p.loss is not None]
    # "Train Epoch: 1 [320/1437 (22%)]\tLoss: 2.260607" and "Train Epoch: 3 [1280/1437 (87%)]\tLoss: 0.658782"
    assert train[1] == pytest.approx((320 / 1437, 2.260607))
    assert train[-1] == pytest.approx((2 + 1280 / 1437, 0.658782))
    assert train[5] == pytest.approx((1.0, 1.909567))  # "Train Epoch: 2 [0/1437 (0%)]": one epoch done
    assert points[5].metric == pytest.approx(254 / 360) and not points[5].partial  # joined with the test line


def test_keras_terminal_last_redraw_of_an_epoch() -> None:
    points, _ = _read(CASES["keras-pty"])
    inside = [p for p in points if p.partial]
    assert (inside[-1].epoch, inside[-1].loss) == pytest.approx((2 + 89 / 90, 0.9031))  # "89/90 ... loss: 0.9031"


def test_steps_without_steps_per_epoch_are_counted_not_guessed() -> None:
    points, _, reader = read_log((FIXTURES / CASES["pytorch-steps"].path).read_bytes())
    assert points == [] and reader.unplaced == 6


@pytest.mark.parametrize("name", list(CASES))
def test_points_inside_epochs_move_forward_and_carry_no_metric(name: str) -> None:
    points, _ = _read(CASES[name])
    inside = [p for p in points if p.partial]
    assert all(p.metric is None and p.loss is not None for p in inside)
    for a, b in zip(inside, inside[1:], strict=False):
        assert b.epoch > a.epoch


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_fed_in_pieces_equals_fed_whole(name: str, piece: int) -> None:
    case = CASES[name]
    raw = (FIXTURES / case.path).read_bytes()
    if piece == 1 and len(raw) > 15000:
        raw = raw[:15000]  # byte by byte through the first 15 kB keeps the run short
    whole, _, _ = read_log(raw, steps_per_epoch=case.steps_per_epoch)
    reader = LogReader(steps_per_epoch=case.steps_per_epoch)
    items = []
    for i in range(0, len(raw), piece):
        items += reader.feed(raw[i : i + piece])
    items += reader.close()
    assert merge_points([i for i in items if isinstance(i, LogPoint)]) == whole


@pytest.mark.parametrize(("pipe", "pty"), [("keras-pipe", "keras-pty"), ("tqdm-colour-pipe", "tqdm-colour-pty")])
def test_pipe_and_terminal_recordings_agree(pipe: str, pty: str) -> None:
    a, _ = _read(CASES[pipe])
    b, _ = _read(CASES[pty])
    assert _triples([p for p in a if not p.partial]) == _triples([p for p in b if not p.partial])


def test_speed_events_from_the_bars_own_rates() -> None:
    """``90/90 - 1s - 7ms/step`` (then 10 and 9 ms) is 0.63, 0.90, 0.81 s an epoch; tqdm's
    ``3/45 [00:00<00:00, 304.12it/s`` is 45 / 304.12 s; logs without a rate give none."""
    _, events, _ = read_log((FIXTURES / "keras/keras-fit-verbose2.log").read_bytes())
    assert [(e.epoch, e.detail["seconds_per_epoch"]) for e in events if e.kind == "speed"] == [
        (1.0, pytest.approx(0.63)),
        (2.0, pytest.approx(0.90)),
        (3.0, pytest.approx(0.81)),
    ]
    _, events, _ = read_log((FIXTURES / "tqdm/tqdm-colour-pipe.log").read_bytes())
    speeds = [e for e in events if e.kind == "speed"]
    assert speeds[0].epoch == pytest.approx(3 / 45) and speeds[0].detail["seconds_per_epoch"] == pytest.approx(45 / 304.12)
    assert all(b.epoch >= a.epoch + 0.25 for a, b in zip(speeds, speeds[1:], strict=False))
    for path in ("pytorch/pytorch-example.log", "jsonl/jsonl.log", "transformers/hf-trainer-pipe.log"):
        assert not [e for e in read_log((FIXTURES / path).read_bytes())[1] if e.kind == "speed"]
