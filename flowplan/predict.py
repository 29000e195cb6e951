"""``flowplan predict``: fit a learning curve to a history file and say when it reaches a target.

The history is either

- a CSV with a header naming ``epoch`` and the value column: ``metric``, or ``loss`` when there is no
  ``metric`` column, or the one ``column`` names (``time`` and other columns ignored); or
- the JSON ``flowplan logs --format json`` prints (``{"points": [{"epoch", "loss", "metric",
  "time"}, ...], "events": [...]}``), so that a training log goes straight in:
  ``flowplan logs train.log --format json | flowplan predict - --target 0.3 --direction lower``.
  The value is the points' ``metric`` or ``loss``, whichever more points have (the metric on a
  tie), or the field ``column`` names.

Rows (points) whose value is empty, null or NaN are skipped (and counted); anything else that is not
a number is an error naming the row (point) and column (field).

Work is bounded whatever the input: at most :data:`MAX_ROWS` rows, epochs up to :data:`MAX_EPOCH`
and values within ±1e12 (the contracts' bounds: beyond them the fit's band overflows), cells up to
:data:`MAX_CELL` characters, and the predicted curve is drawn on at most :data:`MAX_GRID` epochs
however far the horizon.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from models import CannotPredict, CurveFit, CurvePrior, Direction, LRSchedule, fit_learning_curve
from models.curves import report_cadence
from planner.snapshot import MAX_VALUE, MIN_REFERENCE_POINTS

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


#: Value columns (fields) read when none is named: the first one present.
DEFAULT_COLUMNS = ("metric", "loss")


@dataclass(frozen=True)
class History:
    epochs: np.ndarray
    values: np.ndarray
    skipped: int
    column: str = "metric"  # what ``values`` are: the CSV column or the points' field read
    unit: str = "row"  # what was read: CSV rows, or the points of flowplan logs JSON


def read_history(path: str, column: str | None = None) -> History:
    """Read a history CSV, or ``flowplan logs --format json`` output (``-``: standard input); the
    values from ``column`` (None: see :func:`parse_history`)."""
    try:
        if path == "-":
            import sys

            # As a file is read: UTF-8, a byte-order mark dropped (a spreadsheet's export piped in),
            # any line ending.
            text = sys.stdin.buffer.read().decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
        else:
            text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise HistoryError("no such file") from None
    except IsADirectoryError:
        raise HistoryError("is a directory, not a CSV file") from None
    except (PermissionError, UnicodeDecodeError) as exc:
        raise HistoryError(f"cannot read: {exc}") from None
    return parse_history(text, column)


def parse_history(text: str, column: str | None = None) -> History:
    """A history from a CSV's text, or from ``flowplan logs --format json`` output (text starting
    with ``{``); see the module docstring."""
    if text.lstrip().startswith("{"):
        return _parse_points(text, column)
    csv.field_size_limit(MAX_CELL)
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise HistoryError(f"row 1: not valid CSV ({exc})") from None
    if header is None:
        raise HistoryError("empty file (expected a header with 'epoch' and 'metric' or 'loss')")
    names = [h.strip().lower() for h in header]
    found = ", ".join(names) or "nothing"
    if "epoch" not in names:
        raise HistoryError(f"header has no 'epoch' column (found: {found})")
    if column is not None and column.lower() not in names:
        raise HistoryError(f"header has no '{column}' column (--column; found: {found})")
    value = column.lower() if column is not None else next((c for c in DEFAULT_COLUMNS if c in names), None)
    if value is None:
        raise HistoryError(f"header has no 'metric' or 'loss' column (found: {found}); name the one to read with --column")
    ie, im = names.index("epoch"), names.index(value)
    epochs: list[float] = []
    values: list[float] = []
    skipped = 0
    try:
        for row_no, row in enumerate(reader, start=2):
            if row_no - 1 > MAX_ROWS:
                raise HistoryError(f"more than {MAX_ROWS:,} rows; keep every n-th point (the fit needs far fewer)")
            cells = [row[i].strip() if i < len(row) else "" for i in (ie, im)] if row and any(c.strip() for c in row) else None
            skipped += _add_point(f"row {row_no}, column", cells, value, epochs, values)
    except csv.Error as exc:
        raise HistoryError(f"row {reader.line_num}: not valid CSV ({exc})") from None
    return History(np.array(epochs, dtype=float), np.array(values, dtype=float), skipped, value)


def _parse_points(text: str, column: str | None) -> History:
    """The points of ``flowplan logs --format json`` output: their ``metric`` or ``loss``, whichever
    more points have (the metric on a tie), or the field ``column`` names."""
    import json

    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise HistoryError(f"not valid JSON ({exc})") from None
    except ValueError:  # an integer longer than Python converts (sys.get_int_max_str_digits)
        import sys

        raise HistoryError(f"not valid JSON (an integer of more than {sys.get_int_max_str_digits()} digits)") from None
    points = doc.get("points") if isinstance(doc, dict) else None
    if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
        raise HistoryError("JSON without a 'points' list of objects (expected flowplan logs --format json output)")
    if len(points) > MAX_ROWS:
        raise HistoryError(f"more than {MAX_ROWS:,} points; keep every n-th point (the fit needs far fewer)")
    if column is not None:
        if points and not any(column in p for p in points):
            fields = sorted({k for p in points for k in p})
            raise HistoryError(f"no point has a '{column}' field (--column; fields: {', '.join(fields)})")
        value = column
    else:
        # The field with the most values (a log prints its loss every few steps and a validation
        # metric once an epoch: the loss), the metric on a tie.
        counts = [sum(p.get(c) is not None for p in points) for c in DEFAULT_COLUMNS]
        value = DEFAULT_COLUMNS[counts.index(max(counts))]
    epochs: list[float] = []
    values: list[float] = []
    skipped = 0
    for i, p in enumerate(points):
        cells = [_cell(p.get("epoch")), _cell(p.get(value))]
        skipped += _add_point(f"point {i}, field", cells, value, epochs, values)
    return History(np.array(epochs, dtype=float), np.array(values, dtype=float), skipped, value, "point")


def _cell(v: Any) -> str:
    """A JSON value as the CSV reader would see its cell (null: empty)."""
    return "" if v is None else str(v)


def _add_point(where: str, cells: list[str] | None, value: str, epochs: list[float], values: list[float]) -> int:
    """Append one row's (point's) epoch and value; 1 if it was skipped (no value), else 0. ``where``
    names it in an error ("row 3, column", "point 2, field")."""
    if cells is None:  # a blank row
        return 0
    if cells[1] == "" or cells[1].lower() == "nan":
        return 1
    parsed: list[float] = []
    for name, cell in zip(("epoch", value), cells, strict=True):
        try:
            x = float(cell)
        except ValueError:
            raise HistoryError(f"{where} '{name}': not a number ({_clip(cell)!r})") from None
        if not math.isfinite(x):
            raise HistoryError(f"{where} '{name}': must be finite (got {_clip(cell)})")
        parsed.append(x)
    if not 0 <= parsed[0] <= MAX_EPOCH:
        raise HistoryError(f"{where} 'epoch': must be 0 to {MAX_EPOCH:g} (got {_clip(cells[0])})")
    if not -MAX_VALUE <= parsed[1] <= MAX_VALUE:
        raise HistoryError(f"{where} '{value}': must be within ±{MAX_VALUE:g} (got {_clip(cells[1])})")
    epochs.append(parsed[0])
    values.append(parsed[1])
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
    like: Sequence[History] = (),
) -> dict[str, Any]:
    """The prediction as a JSON-ready dict (the ``--format json`` output).

    ``schedule`` (with its planned epochs in ``max_epochs``) switches to the schedule-aware curve;
    ``max_epochs`` alone sets the default horizon and says whether the target comes within the run.
    ``like``: earlier finished runs of the same task, the curve's prior, as the planner reads the
    state store's runs of a job's task (``planner.outlook``): with a schedule too, the prior's fit,
    and the schedule's curve for a target that fit does not reach (by ``max_epochs``, if given)."""
    runs = [(h.epochs, h.values) for h in like if h.epochs.size >= MIN_REFERENCE_POINTS]
    prior = CurvePrior.of(runs, same_task=True) if runs else None
    fit = fit_learning_curve(history.epochs, history.values, direction, schedule=None if prior else schedule, prior=prior)
    fallback = None
    if prior is not None and schedule is not None:
        declared = fit_learning_curve(history.epochs, history.values, direction, schedule=schedule)
        fallback = declared if isinstance(declared, CurveFit) else None
    last = float(history.epochs.max()) if history.epochs.size else 0.0
    out: dict[str, Any] = {
        "target": target,
        "direction": direction,
        "points": int(history.epochs.size),
        "column": history.column,
        "skipped_rows": history.skipped,
        "skipped_unit": history.unit,
        "last_epoch": last,
        "schedule": None if schedule is None else schedule.kind,
        "max_epochs": max_epochs,
        "prior_runs": len(runs),
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
    # As the planner reads it (CurveFit.epoch_seen): the interval's ends at the reports that show them.
    cadence = report_cadence(history.epochs)
    at = fit.epoch_seen(target, cadence=cadence)
    lo, hi = fit.seen_interval(target, cadence=cadence)
    if fallback is not None and (at is None or (max_epochs is not None and at > max_epochs)):
        # The earlier runs do not reach the target (by the planned end): the schedule's curve does?
        instead = fallback.epoch_seen(target, cadence=cadence)
        if instead is not None:
            at, (lo, hi) = instead, fallback.seen_interval(target, cadence=cadence)
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
    column = result.get("column", "metric")
    lines = [f"FlowPlan prediction for {source}: {result['points']} point(s) of {column} up to epoch {result['last_epoch']:g}"]
    if result["skipped_rows"]:
        lines[-1] += f" ({result['skipped_rows']} {result.get('skipped_unit', 'row')}(s) without a {column} skipped)"
    if result["family"] is None:
        lines.append(f"cannot predict yet: {result['cannot_predict']}")
        return "\n".join(lines) + "\n"
    model = f"model: {result['family']} curve, plateau {result['plateau']:.4g}, residual sd {result['residual_std']:.3g}"
    if result.get("prior_runs"):
        model += f"; prior: {result['prior_runs']} earlier run(s)"
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
    ax.set_ylabel(history.column)
    legend = ax.legend(fontsize=8)
    labels = [t.get_text() for t in legend.get_texts()]
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return labels
