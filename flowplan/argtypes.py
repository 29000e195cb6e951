"""Argument types shared by the subcommands: a bad value becomes argparse's one-line usage error (exit 2)."""

from __future__ import annotations

import argparse
import math
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


def seconds(lo: float, hi: float) -> Callable[[str], float]:
    """Seconds in ``[lo, hi]`` (NaN refused by the comparison, infinity by the bound)."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo:g} and {hi:g} seconds, got {text}")
        return v

    return parse


def positive_seconds(text: str) -> float:
    """Seconds in (0, 3600]."""
    v = finite(text)
    if not (0 < v <= 3600):
        raise argparse.ArgumentTypeError(f"must be > 0 and <= 3600 seconds, got {text}")
    return v


def finite(text: str) -> float:
    """Any finite number."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be finite, got {text}")
    return v


def positive(text: str) -> float:
    """A finite number > 0."""
    v = finite(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return v


def fraction_0_10(text: str) -> float:
    """A fraction in [0, 10] (0.05: 5 %)."""
    v = finite(text)
    if not (0 <= v <= 10):
        raise argparse.ArgumentTypeError(f"must be between 0 and 10 (0.05 = 5 %), got {text}")
    return v


def positive_epochs(text: str) -> float:
    """Epochs in (0, 1,000,000]."""
    v = finite(text)
    if not (0 < v <= 1_000_000):
        raise argparse.ArgumentTypeError(f"must be > 0 and <= 1000000 epochs, got {text}")
    return v
