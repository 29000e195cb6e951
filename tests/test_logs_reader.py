"""The log reader on hand-made edge cases (the recorded framework logs are in ``test_logs_fixtures.py``).

Case matrix:

- terminal: ``\\r`` redraws vs ``\\n`` and ``\\r\\n`` line ends (also split across pieces), ``\\b``
  overwrites, ANSI colours and cursor moves, a UTF-8 character split across pieces, a tab;
- bounded memory: a 50 MB line without a newline is skipped (counted), the next line is read, and
  the reader never holds more than its frame limit; random bytes and NaN/inf losses never raise;
- NaN and inf losses: no point, a ``loss_not_finite`` event; a NaN accuracy is dropped;
- JSON lines win over other formats once seen; events pass through with their fields;
- epochs from 0 vs from 1 (first epoch seen), bare FlowCon ``Loss:`` lines numbered after the last;
- resuming: a reader restored from another's ``state()`` goes on as if it had read everything;
- options: a forced format reads only that one; bad options are ``ValueError``s.
"""

from __future__ import annotations

import json
import random

import pytest

from adapters.logs import FrameSplitter, LogEvent, LogPoint, LogReader, read_log
from adapters.logs.terminal import clean


def _frames(*pieces: bytes | str) -> list[tuple[str, bool]]:
    s = FrameSplitter()
    out = []
    for p in pieces:
        out += s.feed(p)
    out += s.close()
    return [(f.text, f.final) for f in out]


def test_redraws_line_ends_and_split_crlf() -> None:
    assert _frames("a 1\rb 2\r\nc 3\nd") == [("a 1", False), ("b 2", True), ("c 3", True), ("d", True)]
    assert _frames("b 2\r", "\nc") == [("b 2", True), ("c", True)]  # "\r\n" split across two pieces
    assert _frames("b 2\r", "c") == [("b 2", False), ("c", True)]


def test_backspaces_colours_tabs_and_split_utf8() -> None:
    assert clean("loss: 0.25\b\b\b\b") == "loss: 0.25"  # Keras: backspaces then "\r"; nothing is erased
    assert clean("abc\b\bXY") == "aXY"
    assert clean("\x1b[32mepoch 1\x1b[0m\tloss \x1b[1m0.5\x1b[0m\x1b[2K\x1b[1A") == "epoch 1 loss 0.5"
    raw = "Epoch 1/3: 100%|██████████| 45/45 [00:00<00:00, loss=0.6641]\n".encode()
    assert _frames(*[raw[i : i + 1] for i in range(len(raw))]) == _frames(raw)


def test_a_huge_line_is_skipped_with_bounded_memory() -> None:
    reader = LogReader()
    chunk = b"x" * 1_000_000
    for _ in range(50):
        assert reader.feed(chunk) == []
        assert reader.splitter._size <= reader.splitter.max_frame
    items = reader.feed(b"\nepoch: 1 loss: 0.5\n") + reader.close()
    assert [(p.epoch, p.loss) for p in items if isinstance(p, LogPoint)] == [(1.0, 0.5)]
    assert reader.overlong == 1


def test_random_bytes_never_raise() -> None:
    rng = random.Random(13)
    for _ in range(200):
        raw = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 400)))
        raw += rng.choice([b"", b"{'epoch': ", b'{"epoch": 1, "loss": ', b"Train Epoch: 1 [", b"\x1b[", b"Epoch 1/", b"\r\b"])
        read_log(raw)
    for text in ["{'epoch': [[[[" + "[" * 5000, '{"epoch": ' + "[" * 100000 + "}", "{'epoch': 1, 'loss': 1e999999}", "Loss: --1"]:
        read_log(text + "\n")


@pytest.mark.parametrize(
    "line",
    [
        "epoch: 3 loss: nan acc: 0.5",
        '{"epoch": 3, "loss": NaN, "metric": 0.5}',
        "{'loss': 'inf', 'epoch': 3.0}",
        "Train Epoch: 3 [0/100 (0%)]\tLoss: nan",
        "Loss: -inf",
    ],
)
def test_non_finite_losses_are_events_not_points(line: str) -> None:
    points, events, _ = read_log(line + "\n")
    assert all(p.loss is None for p in points)
    assert [e.kind for e in events] == ["loss_not_finite"]


def test_json_wins_and_events_keep_their_fields() -> None:
    log = "\n".join(
        [
            "Loss: 0.9",
            json.dumps({"epoch": 1, "loss": 0.9, "metric": 0.5, "time": 10.0}),
            "Loss: 0.7",
            "epoch: 2 loss: 0.7",
            json.dumps({"event": "delivered", "epoch": 1, "path": "/ckpt/a.npz"}),
            '{"epoch": -1, "loss": 1}',
            "{not json",
        ]
    )
    points, events, reader = read_log(
        log + "\n",
    )
    # the Loss line before any JSON, and the JSON line of the same epoch, joined
    assert [(p.epoch, p.loss, p.metric, p.time) for p in points] == [(1.0, 0.9, 0.5, 10.0)]
    assert [e.as_dict() for e in events] == [{"event": "delivered", "epoch": 1.0, "time": None, "path": "/ckpt/a.npz"}]
    assert reader.json_only


def test_epoch_numbering() -> None:
    zero, _, _ = read_log("epoch 0 loss 1.0\nepoch 1 loss 0.5\n")
    one, _, _ = read_log("epoch 1 loss 1.0\nepoch 2 loss 0.5\n")
    assert [p.epoch for p in zero] == [p.epoch for p in one] == [1.0, 2.0]
    bare, _, _ = read_log("Loss: 2.0\nnoise\nLoss: 1.5\n", last_epoch=4.0)
    assert [(p.epoch, p.loss) for p in bare] == [(5.0, 2.0), (6.0, 1.5)]
    inside, _, _ = read_log("epoch 2 step 25/100 loss 0.7\n")
    assert [(p.epoch, p.partial) for p in inside] == [(1.25, True)]
    stamp, _, _ = read_log(
        "epoch: 1 loss: 0.5 time: 12.5\nepoch: 2 loss: 0.4 Time: 1795411837\n",
    )
    assert [p.time for p in stamp] == [None, 1795411837.0]  # a duration is no timestamp


def test_a_bar_without_an_epoch_is_no_epoch_per_redraw() -> None:
    """A bare ``tqdm(loader)`` with ``set_postfix(loss=...)`` redrawn at 1 % to 7 % of one epoch was
    read by key-value as seven finished epochs (its postfix's ``loss=`` a bare loss line each time)."""
    redrawn = "".join(f"\r  {i}%|#         | {i * 10}/1000 [00:0{i}<00:10,  5.00it/s, loss={1 / i:.3f}]" for i in range(1, 8))
    described = "".join(
        f"train:  {i}%|#         | {i * 10}/1000 [00:0{i}<00:10,  5.00it/s, loss={1 / i:.3f}]\n" for i in range(1, 8)
    )
    for log in (redrawn + "\n", described):
        points, _, reader = read_log(log)
        assert points == [] and reader.recognised["key-value"] == 0, [(p.epoch, p.loss) for p in points]
    # A bare loss line after such a bar is still the next epoch's.
    points, _, _ = read_log(redrawn + "\nLoss: 0.1\n")
    assert [(p.epoch, p.loss) for p in points] == [(1.0, 0.1)]


def test_resumed_reader_goes_on_where_the_first_stopped() -> None:
    raw = open_fixture("lightning/lightning-tqdm-pipe.log")
    lines = raw.split(b"\n")
    half = b"\n".join(lines[: len(lines) // 2]) + b"\n"
    rest = b"\n".join(lines[len(lines) // 2 :])
    whole, _, _ = read_log(raw)
    first = LogReader()
    items = first.feed(half)
    second = LogReader()
    second.restore(json.loads(json.dumps(first.state())))
    items += second.feed(rest) + second.close()
    assert [i for i in items if isinstance(i, LogPoint)] == whole


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"formats": {"keras": {"held": {"nope": 1}}}},
        {"formats": {"keras": {"current": "x"}}, "last": {"k": [1]}},
        {"last_epoch": "x"},
    ],
)
def test_a_damaged_state_starts_afresh(state: dict) -> None:
    text = "Epoch 1/2\n1/2 - 0s - loss: 0.9 - accuracy: 0.1\n2/2 - 0s - loss: 0.5 - accuracy: 0.7\n"
    reader = LogReader()
    reader.restore(state)
    items = reader.feed(text) + reader.close()
    fresh, _, _ = read_log(text)
    assert [i for i in items if isinstance(i, LogPoint)] == fresh
    assert [(p.epoch, p.loss, p.metric) for p in fresh] == [(0.5, 0.9, None), (1.0, 0.5, 0.7)]


def test_forced_format_and_bad_options() -> None:
    points, _, _ = read_log("epoch: 1 loss: 0.5\nTrain Epoch: 1 [10/100 (10%)]\tLoss: 0.9\n", only="pytorch")
    assert [(p.epoch, p.loss) for p in points] == [(0.1, 0.9)]
    with pytest.raises(ValueError, match="unknown log format 'nope'"):
        LogReader(only="nope")
    with pytest.raises(ValueError, match="steps per epoch"):
        LogReader(steps_per_epoch=0)


def test_events_and_points_are_typed() -> None:
    items = LogReader().feed('{"event": "checkpoint"}\nepoch: 1 loss: 0.5\n')
    assert isinstance(items[0], LogEvent) and isinstance(items[1], LogPoint)


def open_fixture(path: str) -> bytes:
    from pathlib import Path

    return (Path(__file__).resolve().parent / "fixtures" / "logs" / path).read_bytes()
