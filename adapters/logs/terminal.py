"""Bytes from a training process, as a terminal would show them: frames of text, read incrementally.

A *frame* is what one line of the terminal showed before the program moved on:

- ``\\n`` (or ``\\r\\n``) ends a line: its last state is a frame that is ``final``;
- ``\\r`` alone is a redraw (tqdm, Keras, Lightning progress bars): the state before it is a frame
  that is not final, and the next text replaces it;
- ``\\b`` moves the cursor back one column; what follows overwrites (Keras ends each redraw with as
  many ``\\b`` as the line is wide, then ``\\r``, so the text before them is kept);
- ANSI escape sequences (colours, cursor moves) and other control characters are dropped; a tab is a space.

Data may arrive in any pieces (a container without ``PYTHONUNBUFFERED`` writes in 4 or 8 KiB
bursts that split lines, UTF-8 characters and ``\\r\\n`` pairs): the unfinished tail is kept until the
next piece, and feeding a log byte by byte gives the same frames as feeding it whole.

Memory is bounded: a frame longer than ``max_frame`` characters is no progress line; the rest of it
is skipped (not buffered) up to the next line break, and it is counted in ``overlong``.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

#: CSI (``ESC [ ... final``), OSC (``ESC ] ... BEL`` or ``ESC ] ... ESC \\``), and two-character escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x07\x0b-\x1f\x7f]")
_BREAK = re.compile(r"[\r\n]")

MAX_FRAME = 64 * 1024


@dataclass(frozen=True)
class Frame:
    """One state of one terminal line: its text (escapes removed) and whether a newline ended it."""

    text: str
    final: bool


class FrameSplitter:
    """Incremental: :meth:`feed` pieces of output, get the frames they completed; :meth:`close` at the end."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self.overlong = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._parts: list[str] = []
        self._size = 0
        self._skipping = False
        self._cr_pending = False  # a "\r" ended the last piece: "\r\n" or a redraw, the next piece tells

    def feed(self, data: bytes | str) -> list[Frame]:
        text = self._decoder.decode(data) if isinstance(data, bytes) else data
        out: list[Frame] = []
        pos = 0
        if self._cr_pending and text:
            self._cr_pending = False
            if text[0] == "\n":
                self._end(out, final=True)
                pos = 1
            else:
                self._end(out, final=False)
        for m in _BREAK.finditer(text, pos):
            self._add(text[pos : m.start()])
            pos = m.end()
            if m.group() == "\n":
                self._end(out, final=True)
            elif pos < len(text):
                if text[pos] == "\n":
                    continue  # "\r\n": the "\n" ends the line
                self._end(out, final=False)
            else:
                self._cr_pending = True
        self._add(text[pos:])
        return out

    def close(self) -> list[Frame]:
        """The end of the output: the unfinished last line is a final frame."""
        out: list[Frame] = []
        self._add(self._decoder.decode(b"", final=True))
        self._cr_pending = False
        self._end(out, final=True)
        return out

    def state(self) -> dict[str, object]:
        """The unfinished last line (at most ``max_frame`` characters), to go on in another splitter."""
        return {"tail": "".join(self._parts), "skipping": self._skipping, "cr": self._cr_pending}

    def restore(self, state: dict[str, object]) -> None:
        tail = state.get("tail", "")
        if not isinstance(tail, str) or len(tail) > self.max_frame:
            raise ValueError("splitter state: tail is not a string within the frame limit")
        self._parts, self._size = ([tail], len(tail)) if tail else ([], 0)
        self._skipping = bool(state.get("skipping", False))
        self._cr_pending = bool(state.get("cr", False))

    def _add(self, piece: str) -> None:
        if not piece or self._skipping:
            return
        if self._size + len(piece) > self.max_frame:
            self._skipping = True
            self._parts, self._size = [], 0
            return
        self._parts.append(piece)
        self._size += len(piece)

    def _end(self, out: list[Frame], *, final: bool) -> None:
        if self._skipping:
            self._skipping = False
            self.overlong += 1
            return
        raw = "".join(self._parts)
        self._parts, self._size = [], 0
        text = clean(raw)
        if text.strip():
            out.append(Frame(text, final))


def clean(raw: str) -> str:
    """A frame's text as seen: escapes dropped, backspaces applied, tabs as spaces."""
    text = _ANSI.sub("", raw) if "\x1b" in raw else raw
    if "\b" in text:
        text = _apply_backspaces(text)
    text = text.replace("\t", " ")
    return _CONTROL.sub("", text)


def _apply_backspaces(text: str) -> str:
    buf: list[str] = []
    cursor = 0
    for ch in text:
        if ch == "\b":
            cursor = max(0, cursor - 1)
        elif cursor < len(buf):
            buf[cursor] = ch
            cursor += 1
        else:
            buf.append(ch)
            cursor += 1
    return "".join(buf)
