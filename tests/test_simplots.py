"""``flowplan simulate --out``'s plots (issue 16: readable at 5 and at 50 jobs).

Cases: the demo written as PNGs by the real command (6 jobs: a colour and legend entry each);
band naming at many jobs, on a recording stand-in for matplotlib's Axes (only ``text`` is
called): a band thick for long enough is named inside itself, a thin one is not, and no two names
land on each other.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")


def test_the_demo_writes_its_plots(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "flowplan", "simulate", "--out", str(tmp_path), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    for name in ("jct-cdf.png", "allocation.png", "eta-flowplan.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


class _Axes:
    def __init__(self) -> None:
        self.texts: list[tuple[float, float, str]] = []

    def text(self, x: float, y: float, s: str, **_: Any) -> None:
        self.texts.append((x, y, s))


def test_bands_are_named_inside_themselves_where_thick_and_names_do_not_collide() -> None:
    from flowplan.simplots import _label_bands

    xs = [float(t) for t in range(21)]  # minutes
    thick = [8.0] * 21  # 8 of 32 cores all along
    thin = [0.5] * 21
    late = [0.0] * 10 + [10.0] * 11  # thick in the second half only
    twin = [8.0] * 21  # as thick as "thick", right above it: its name must not sit on the other's
    ax = _Axes()
    _label_bands(ax, xs, ["thick", "thin", "late", "twin"], [thick, thin, late, twin], 32.0)
    named = {s: (x, y) for x, y, s in ax.texts}
    assert "thin" not in named
    assert set(named) == {"thick", "late", "twin"}
    order = {"thick": thick, "thin": thin, "late": late, "twin": twin}
    for name, (x, y) in named.items():
        k = int(x)  # the step the name sits on (bands are drawn as steps from each minute)
        below = sum(order[other][k] for other in list(order)[: list(order).index(name)])
        assert below < y < below + order[name][k], name  # inside its own band there
    assert named["late"][0] >= 10.0  # where it is thick
    points = list(named.values())
    for i, (x1, y1) in enumerate(points):
        for x2, y2 in points[i + 1 :]:
            assert abs(x1 - x2) > 0.13 * 20 or abs(y1 - y2) > 0.06 * 32
