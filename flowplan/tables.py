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


def emit(rows: list[list[str]], header: list[str], stream: TextIO | None = None, *, force_terminal: bool = False) -> None:
    """Write the table to ``stream`` (standard output): rich on a terminal, plain text otherwise."""
    out = stream if stream is not None else sys.stdout
    if force_terminal or out.isatty():
        from rich import box
        from rich.console import Console
        from rich.table import Table

        table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
        for h in header:
            table.add_column(h, overflow="fold")
        for r in rows:
            table.add_row(*(f"[{STYLES[c.split(' ')[0]]}]{c}[/]" if c.split(" ")[0] in STYLES else c for c in r))
        Console(file=out, force_terminal=force_terminal or None, highlight=False).print(table)
        return
    out.write("\n".join(plain(rows, header)) + "\n")
