"""Tables for a person: ``rich`` where a terminal is attached (column widths fitted to it, long cells
folded, states coloured), plain aligned text when piped or redirected, so scripts and logs read the
same columns. rich is a well-kept library for exactly this; writing width fitting and colour
handling by hand would be the alternative."""

from __future__ import annotations

import sys
from typing import TextIO

#: Cell values shown in colour on a terminal.
STYLES = {"MISS": "bold red", "NO": "bold red", "met": "green", "yes": "green", "Waiting": "yellow", "Pausing": "yellow"}


def plain(rows: list[list[str]], header: list[str]) -> list[str]:
    """Aligned columns, two spaces apart, a dashed rule under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header).rstrip(), fmt.format(*["-" * w for w in widths]).rstrip()]
    out += [fmt.format(*r).rstrip() for r in rows]
    return out


def rich_lines(rows: list[list[str]], header: list[str], *, right_from: int | None = None, width: int | None = None) -> list[str]:
    """The table drawn by rich for a terminal (colours included), as lines; columns from
    ``right_from`` on are right-aligned (numbers). Plain lines when it is wider than the terminal."""
    import io
    import shutil

    from rich import box
    from rich.console import Console
    from rich.table import Table

    width = width or shutil.get_terminal_size().columns
    flat = plain(rows, header)
    if max(len(line) for line in flat) > width:
        return flat  # rich would fold every cell; the terminal's own wrapping of plain rows reads better
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    for i, h in enumerate(header):
        table.add_column(h, overflow="fold", justify="right" if right_from is not None and i >= right_from else "left")
    for r in rows:
        table.add_row(*(f"[{STYLES[c.split(' ')[0]]}]{c}[/]" if c.split(" ")[0] in STYLES else c for c in r))
    buf = io.StringIO()
    Console(file=buf, force_terminal=True, width=width, highlight=False).print(table)
    return buf.getvalue().rstrip("\n").splitlines()


def for_stream(stream: TextIO | None = None) -> bool:
    """Whether tables written to ``stream`` (standard output) should be rich: a terminal is attached."""
    out = stream if stream is not None else sys.stdout
    return bool(out.isatty())


def emit(rows: list[list[str]], header: list[str], stream: TextIO | None = None, *, force_terminal: bool = False) -> None:
    """Write the table to ``stream`` (standard output): rich on a terminal, plain text otherwise."""
    out = stream if stream is not None else sys.stdout
    if force_terminal or out.isatty():
        out.write("\n".join(rich_lines(rows, header)) + "\n")
        return
    out.write("\n".join(plain(rows, header)) + "\n")
