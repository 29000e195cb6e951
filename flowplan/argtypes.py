"""Argument types shared by the subcommands: a bad value becomes argparse's one-line usage error (exit 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def whole(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """A whole number in ``[lo, hi]`` (no upper bound when ``hi`` is None)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {text}" if hi is None else f"must be {lo}-{hi}, got {text}")
        return v

    return parse


def positive(text: str) -> float:
    """A finite number > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (v > 0 and v < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return v
