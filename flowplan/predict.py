"""``flowplan predict``: fit a learning curve to a history file and say when it reaches a target.

The history is a CSV with a header naming at least ``epoch`` and ``metric`` (``time`` optional,
other columns ignored). Rows whose metric is empty or NaN are skipped (and counted); anything else
that is not a number is an error naming the row and column.

Work is bounded whatever the input: at most :data:`MAX_ROWS` rows, epochs up to :data:`MAX_EPOCH`
(the contracts' bound), cells up to :data:`MAX_CELL` characters, and the predicted curve is drawn
on at most :data:`MAX_GRID` epochs however far the horizon.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from models import CannotPredict, CurveFit, Direction, LRSchedule, fit_learning_curve

#: Most data rows read from a history (a run logged every step of 100 epochs fits).
MAX_ROWS = 100_000
#: Largest epoch accepted (as ``MetricPoint.epoch`` in the snapshot contract).
MAX_EPOCH = 1e9
#: Longest cell accepted, in characters (Python's csv module's own default limit).
MAX_CELL = 131_072
#: Most points of the predicted curve (spread evenly up to the horizon beyond this).
MAX_GRID = 2000


class HistoryError(Exception):
    """A history file that cannot be read (the message names the file, row and column)."""


@dataclass(frozen=True)
class History:
    epochs: np.ndarray
    values: np.ndarray
    skipped: int


def read_history(path: str) -> History:
    """Read a history CSV (``-``: standard input)."""
    if path == "-":
        import sys

        return parse_history(sys.stdin.read())
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise HistoryError("no such file") from None
    except IsADirectoryError:
        raise HistoryError("is a directory, not a CSV file") from None
    except (PermissionError, UnicodeDecodeError) as exc:
        raise HistoryError(f"cannot read: {exc}") from None
    return parse_history(text)


def parse_history(text: str) -> History:
    csv.field_size_limit(MAX_CELL)
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise HistoryError("empty file (expected a header with 'epoch' and 'metric')")
    names = [h.strip().lower() for h in header]
    for need in ("epoch", "metric"):
        if need not in names:
            raise HistoryError(f"header has no '{need}' column (found: {', '.join(names) or 'nothing'})")
    ie, im = names.index("epoch"), names.index("metric")
    epochs: list[float] = []
    values: list[float] = []
    skipped = 0
    try:
        for row_no, row in enumerate(reader, start=2):
            if row_no - 1 > MAX_ROWS:
                raise HistoryError(f"more than {MAX_ROWS:,} rows; keep every n-th point (the fit needs far fewer)")
            skipped += _read_row(row_no, row, ie, im, epochs, values)
    except csv.Error as exc:
        raise HistoryError(f"row {reader.line_num}: not valid CSV ({exc})") from None
    return History(np.array(epochs, dtype=float), np.array(values, dtype=float), skipped)


def _read_row(row_no: int, row: list[str], ie: int, im: int, epochs: list[float], values: list[float]) -> int:
    """Append one row's epoch and metric; 1 if it was skipped (no metric), else 0."""
    if not row or all(not c.strip() for c in row):
        return 0
    cells = {"epoch": row[ie].strip() if ie < len(row) else "", "metric": row[im].strip() if im < len(row) else ""}
    if cells["metric"] == "" or cells["metric"].lower() == "nan":
        return 1
    parsed: dict[str, float] = {}
    for col, cell in cells.items():
        try:
            parsed[col] = float(cell)
        except ValueError:
            raise HistoryError(f"row {row_no}, column '{col}': not a number ({_clip(cell)!r})") from None
        if not math.isfinite(parsed[col]):
            raise HistoryError(f"row {row_no}, column '{col}': must be finite (got {_clip(cell)})")
    if not 0 <= parsed["epoch"] <= MAX_EPOCH:
        raise HistoryError(f"row {row_no}, column 'epoch': must be 0 to {MAX_EPOCH:g} (got {_clip(cells['epoch'])})")
    epochs.append(parsed["epoch"])
    values.append(parsed["metric"])
    return 0


def _clip(cell: str, n: int = 40) -> str:
    return cell if len(cell) <= n else cell[:n] + f"... ({len(cell):,} characters)"


def predict(
    history: History,
    target: float,
    direction: Direction,
    horizon: float | None,
    *,
    schedule: LRSchedule | None = None,
    max_epochs: float | None = None,
) -> dict[str, Any]:
    """The prediction as a JSON-ready dict (the ``--format json`` output).

    ``schedule`` (with its planned epochs in ``max_epochs``) switches to the schedule-aware curve;
    ``max_epochs`` alone sets the default horizon and says whether the target comes within the run."""
    fit = fit_learning_curve(history.epochs, history.values, direction, schedule=schedule)
    last = float(history.epochs.max()) if history.epochs.size else 0.0
    out: dict[str, Any] = {
        "target": target,
        "direction": direction,
        "points": int(history.epochs.size),
        "skipped_rows": history.skipped,
        "last_epoch": last,
        "schedule": None if schedule is None else schedule.kind,
        "max_epochs": max_epochs,
    }
    if isinstance(fit, CannotPredict):
        out.update(
            family=None,
            cannot_predict=fit.reason,
            epochs_to_target=None,
            interval=[None, None],
            plateau=None,
            convergence_epoch=None,
            convergence_interval=[None, None],
            predicted=[],
        )
        return out
    assert isinstance(fit, CurveFit)
    reached = bool((history.values >= target).any() if direction == "higher" else (history.values <= target).any())
    at = fit.epoch_reaching(target)
    lo, hi = fit.epoch_interval(target)
    if horizon is not None:
        end = horizon
    elif max_epochs is not None:
        end = max(max_epochs, last + 1.0)
    else:
        end = max(2.0 * last, (at or 0.0) * 1.2, 10.0)
    # Converged: improving by less than 0.1 % of the plateau per epoch.
    tolerance = 1e-3 * max(abs(fit.plateau), 1e-9)
    grid = np.arange(1, int(math.floor(end)) + 1, dtype=float) if end <= MAX_GRID else np.linspace(1.0, end, MAX_GRID)
    pred = fit.predict(grid)
    low, high = fit.interval_at(grid)  # 80% two-sided, widening with the horizon
    out.update(
        family=fit.family,
        params=fit.params,
        reached=reached,
        epochs_to_target=(0.0 if reached else at),
        within_max_epochs=None if max_epochs is None else bool(reached or (at is not None and at <= max_epochs)),
        interval=[0.0 if reached else lo, 0.0 if reached else hi],
        plateau=fit.plateau,
        convergence_epoch=fit.convergence_epoch(tolerance),
        convergence_interval=list(fit.convergence_interval(tolerance)),
        drops=list(fit.drops),
        residual_std=fit.residual_std,
        holdout_error=fit.holdout_error,
        predicted=[
            {"epoch": float(e), "metric": float(v), "low": float(lo), "high": float(hi)}
            for e, v, lo, hi in zip(grid, pred, low, high, strict=True)
        ],
    )
    return out


def render(result: dict[str, Any], source: str) -> str:
    lines = [f"FlowPlan prediction for {source}: {result['points']} point(s) up to epoch {result['last_epoch']:g}"]
    if result["skipped_rows"]:
        lines[-1] += f" ({result['skipped_rows']} row(s) without a metric skipped)"
    if result["family"] is None:
        lines.append(f"cannot predict yet: {result['cannot_predict']}")
        return "\n".join(lines) + "\n"
    model = f"model: {result['family']} curve, plateau {result['plateau']:.4g}, residual sd {result['residual_std']:.3g}"
    if result.get("schedule"):
        model += f"; {result['schedule']} learning-rate schedule"
        if result.get("drops"):
            model += ", drops at epoch " + ", ".join(f"{d:g}" for d in result["drops"][:6])
    if result.get("max_epochs") is not None:
        model += f"; {result['max_epochs']:g} planned epochs"
    lines.append(model)
    goal = f"{'>=' if result['direction'] == 'higher' else '<='} {result['target']:g}"
    if result["reached"]:
        lines.append(f"target {goal}: already reached")
    elif result["epochs_to_target"] is None:
        lines.append(f"target {goal}: not reachable — the curve levels off at {result['plateau']:.4g}")
    else:
        lo, hi = result["interval"]
        span = f"{lo:.1f} – " + (f"{hi:.1f}" if hi is not None else "never")
        lines.append(f"target {goal}: at epoch {result['epochs_to_target']:.1f} (80% band {span})")
        if result.get("within_max_epochs") is False:
            lines[-1] += f" — after the planned {result['max_epochs']:g} epochs"
    conv = f"improves by less than 0.1% per epoch from epoch {result['convergence_epoch']:.0f}"
    clo, chi = result["convergence_interval"]
    if clo is not None and chi is not None:
        conv += f" (refits: {clo:.0f} – {chi:.0f})"
    lines.append(conv)
    pred = result["predicted"]
    if pred:
        step = max(1, len(pred) // 10)
        lines.append("")
        lines.append("  epoch  predicted  (80% band)")
        for row in pred[step - 1 :: step]:
            lines.append(f"  {row['epoch']:5.0f}  {row['metric']:9.4g}  ({row['low']:.4g} – {row['high']:.4g})")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], history: History, out: str) -> list[str]:
    """Draw the points, the fit and its band, the target, the plateau and the predicted epoch with
    its band to ``out``; returns the legend's labels (what the plot marks)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise HistoryError('--plot needs matplotlib: pip install -e ".[plot]"') from None
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(history.epochs, history.values, "o", ms=3, label="observed")
    pred = result["predicted"]
    if pred:
        e = [r["epoch"] for r in pred]
        ax.plot(e, [r["metric"] for r in pred], "-", label=f"{result['family']} fit")
        ax.fill_between(e, [r["low"] for r in pred], [r["high"] for r in pred], alpha=0.2, label="80% band of the curve")
    ax.axhline(result["target"], ls="--", lw=1, color="gray", label=f"target {result['target']:g}")
    if result.get("plateau") is not None:
        ax.axhline(result["plateau"], ls=":", lw=1, color="C2", label=f"plateau {result['plateau']:.4g}")
    at = result.get("epochs_to_target")
    if at is not None and not result.get("reached"):
        lo, hi = result["interval"]
        ax.axvline(at, color="C3", lw=1, label=f"reaches target at epoch {at:.1f}")
        if lo is not None:
            # An open band (the pessimistic refit never reaches the target) runs off the right edge.
            right = hi if hi is not None else max([at, lo, *(r["epoch"] for r in pred)]) * 1.05
            span = f"{lo:.1f} – " + (f"{hi:.1f}" if hi is not None else "never")
            ax.axvspan(lo, right, color="C3", alpha=0.12, label=f"80% band of that epoch: {span}")
            if hi is None:
                ax.set_xlim(right=right)
    goal = f"{'>=' if result['direction'] == 'higher' else '<='} {result['target']:g}"
    verdict = "already reached" if result.get("reached") else ("not reachable" if at is None else f"epoch {at:.1f}")
    ax.set_title(f"{result.get('family') or 'no'} fit of {result['points']} points; target {goal}: {verdict}", fontsize=9)
    ax.set_xlabel("epoch")
    ax.set_ylabel("metric")
    legend = ax.legend(fontsize=8)
    labels = [t.get_text() for t in legend.get_texts()]
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return labels
