"""``flowplan logs``: what FlowPlan reads from a training log (the first thing to run when it sees no progress).

    flowplan logs train.log
    docker logs my-job 2>&1 | flowplan logs - --format json
    flowplan logs --mlflow http://mlflow:5000 --job my-job
    flowplan logs --tensorboard lightning_logs/


The log is read in pieces as it comes (a pipe may be endless: stop it with Ctrl-C, or give a file),
by the same parsers the Docker adapter uses (:mod:`adapters.logs`). Exit codes: 0 points found;
2 a missing file, an unreadable one, or a log with no progress FlowPlan understands (one line on
stderr naming the formats it knows), or an MLflow server that cannot be read.

With ``--mlflow URI --job ID`` the points come from the runs tagged ``flowplan.job=ID`` on an MLflow
tracking server instead (:mod:`adapters.logs.mlflow`), read as the service would read them; with
``--tensorboard PATH`` from the TensorBoard event files at PATH (a file, or a directory searched
recursively: :mod:`adapters.logs.tensorboard`), read as the Docker daemon reads a container's.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any, BinaryIO

from flowplan.argtypes import positive

CHUNK = 64 * 1024


def register(sub: Any) -> None:
    from adapters.logs import FORMAT_NAMES, describe_formats

    p = sub.add_parser(
        "logs",
        help="show the progress points FlowPlan extracts from a training log",
        description="Read a training log (a file, or '-' for standard input) as FlowPlan's adapters do and print the "
        "points (epochs completed, loss, metric, time) and events it finds.",
        epilog="Formats understood (auto-detected, line by line):\n" + describe_formats(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("log", metavar="FILE", nargs="?", help="the log ('-' for standard input)")
    p.add_argument("--format", choices=["table", "json"], default="table", help="output format (default: table)")
    p.add_argument(
        "--steps-per-epoch", type=positive, metavar="N", help="steps in one epoch, for logs that count steps and not epochs"
    )
    p.add_argument("--log-format", choices=FORMAT_NAMES, metavar="NAME", help="read only this format: " + ", ".join(FORMAT_NAMES))
    ml = p.add_argument_group("MLflow (instead of FILE): the runs tagged flowplan.job=ID on a tracking server")
    ml.add_argument("--mlflow", metavar="URI", help="tracking server, http(s)://host:port")
    ml.add_argument("--job", metavar="ID", help="the FlowPlan job id the runs are tagged with")
    ml.add_argument(
        "--loss-key", action="append", metavar="KEY", help="MLflow metric of the loss, repeatable (default: loss, train_loss)"
    )
    ml.add_argument(
        "--metric-key",
        action="append",
        metavar="KEY",
        help="metric of the quality, repeatable (default: val_accuracy, accuracy)",
    )
    ml.add_argument(
        "--epoch-key",
        metavar="KEY",
        help="metric holding the epoch (default: epoch; with --tensorboard: epoch, then train/epoch)",
    )
    tb = p.add_argument_group(
        "TensorBoard (instead of FILE): event files; --loss-key, --metric-key and --epoch-key name their scalar tags"
    )
    tb.add_argument(
        "--tensorboard", metavar="PATH", help="an event file, or a directory searched for them (e.g. lightning_logs/)"
    )
    p.set_defaults(func=run_logs)


def run_logs(args: argparse.Namespace) -> int:
    from adapters.logs import FORMAT_NAMES, LogEvent, LogPoint, LogReader, merge_points
    from flowplan.cli import UsageError

    if args.tensorboard is not None:
        return run_tensorboard(args)
    if args.mlflow is not None or args.job is not None:
        return run_mlflow(args)
    if args.log is None:
        raise UsageError("logs: give a log FILE ('-' for standard input), --mlflow URI --job ID, or --tensorboard PATH")
    name = "<stdin>" if args.log == "-" else args.log
    reader = LogReader(steps_per_epoch=args.steps_per_epoch, only=args.log_format)
    items = []
    try:
        if args.log == "-":
            items = _read_all(sys.stdin.buffer, reader)
        else:
            with open(args.log, "rb") as fh:
                items = _read_all(fh, reader)
    except OSError as exc:
        raise UsageError(f"{name}: {exc.strerror or exc}") from None
    points, refused = _contract(name, merge_points([i for i in items if isinstance(i, LogPoint)]))
    events = [i for i in items if isinstance(i, LogEvent)]
    if not points and not events and reader.unplaced:
        raise UsageError(
            f"{name}: {reader.unplaced} line(s) show a loss at a step but no epoch: give --steps-per-epoch N to place them"
        )
    if reader.unplaced:
        print(
            f"flowplan: warning: {name}: {reader.unplaced} line(s) show a loss at a step but no epoch: "
            "give --steps-per-epoch N to place them",
            file=sys.stderr,
        )
    if reader.overlong:
        print(f"flowplan: warning: {name}: {reader.overlong} line(s) longer than 64 KiB skipped", file=sys.stderr)
    if not points and not events and refused:
        raise UsageError(f"{name}: every point read is one the snapshot contract refuses: {refused[0]['reason']}")
    if not points and not events:
        what = "empty" if reader.frames == 0 else f"no training progress found in {reader.frames} line(s)"
        only = f" as {args.log_format}" if args.log_format else ""
        raise UsageError(f"{name}: {what}{only}; formats understood: {', '.join(FORMAT_NAMES)} (examples: flowplan logs --help)")
    if args.format == "json":
        doc = {
            "points": [p.as_dict() for p in points],
            "events": [e.as_dict() for e in events],
            "formats": dict(reader.recognised),
            **({"refused": refused} if refused else {}),
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render(name, points, events, dict(reader.recognised)))
    return 0


def run_mlflow(args: argparse.Namespace) -> int:
    from adapters.logs.mlflow import MetricKeys, MlflowClient, MlflowCursor, MlflowError, read_job
    from flowplan.cli import UsageError

    if args.log is not None or args.mlflow is None or args.job is None:
        raise UsageError("logs: --mlflow URI and --job ID go together, without a log FILE")
    default = MetricKeys()
    keys = MetricKeys(
        epoch=args.epoch_key or default.epoch,
        loss=tuple(args.loss_key or default.loss),
        metric=tuple(args.metric_key or default.metric),
    )
    try:
        read, _ = read_job(MlflowClient(args.mlflow), args.job, MlflowCursor(), keys=keys, steps_per_epoch=args.steps_per_epoch)
    except (MlflowError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    name = f"{args.mlflow} job {args.job}"
    if not read.runs:
        raise UsageError(f"{name}: no run tagged flowplan.job={args.job}")
    if read.unplaced:
        print(
            f"flowplan: warning: {name}: {read.unplaced} step(s) have no {keys.epoch!r} metric: "
            "give --steps-per-epoch N to place them",
            file=sys.stderr,
        )
    if not read.points:
        raise UsageError(f"{name}: {len(read.runs)} run(s) but no {', '.join(keys.loss + keys.metric)} values")
    _write_read(args, name, read.points, "mlflow", "values", {"runs": read.runs})
    return 0


def run_tensorboard(args: argparse.Namespace) -> int:
    from pathlib import Path

    from flowplan.cli import UsageError

    if args.log is not None or args.mlflow is not None or args.job is not None:
        raise UsageError("logs: --tensorboard PATH goes alone, without a log FILE or --mlflow")
    try:
        from adapters.logs.tensorboard import TensorBoardCursor, TensorBoardError, TensorBoardKeys, files_under, read_files
    except ImportError as exc:  # the tensorboard package decodes the events
        why = f"--tensorboard needs the tensorboard package ({exc.name} missing): pip install 'flowplan[tensorboard]'"
        raise UsageError(why) from None
    default = TensorBoardKeys()
    keys = TensorBoardKeys(
        epoch=(args.epoch_key,) if args.epoch_key else default.epoch,
        loss=tuple(args.loss_key or default.loss),
        metric=tuple(args.metric_key or default.metric),
    )
    name = args.tensorboard
    try:
        files = files_under(Path(name))
    except (TensorBoardError, OSError) as exc:
        raise UsageError(str(exc)) from None
    read, _ = read_files(files, TensorBoardCursor(), keys=keys, steps_per_epoch=args.steps_per_epoch)
    for problem in read.problems:
        print(f"flowplan: warning: {problem}", file=sys.stderr)
    if not read.files:
        raise UsageError(f"{name}: no TensorBoard event file (events.out.tfevents.*) there")
    if read.unplaced:
        print(
            f"flowplan: warning: {name}: {read.unplaced} step(s) have no {' or '.join(keys.epoch)} scalar: "
            "give --steps-per-epoch N to place them",
            file=sys.stderr,
        )
    if not read.points:
        tags = ", ".join(keys.loss + keys.metric)
        raise UsageError(f"{name}: {len(read.files)} event file(s) but no step placed with a scalar of {tags}")
    _write_read(args, name, read.points, "tensorboard", "steps", {"files": read.files})
    return 0


def _contract(name: str, points: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """The points the snapshot contract takes, and those it refuses (which every adapter drops), each
    with its epoch and the reason; a warning on stderr names the first of those and counts them."""
    from planner.io import point_refusal

    kept, refused = [], []
    for p in points:
        why = point_refusal(p.time, p.epoch, p.loss, p.metric)
        if why is None:
            kept.append(p)
        else:
            refused.append({"epoch": p.epoch, "reason": why})
    if refused and kept:
        first = refused[0]
        print(
            f"flowplan: warning: {name}: {len(refused)} point(s) left out, as FlowPlan's adapters leave them out "
            f"(the snapshot contract refuses them): epoch {first['epoch']:g}: {first['reason']}",
            file=sys.stderr,
        )
    return kept, refused


def _write_read(args: argparse.Namespace, name: str, points: list[Any], source: str, unit: str, extra: dict[str, Any]) -> None:
    """The points read from a source other than a log (MLflow, event files): JSON with ``extra``, or the
    table counting them in ``unit`` (nothing of such a read is thinned)."""
    from flowplan.cli import UsageError

    points, refused = _contract(name, points)
    if not points:
        raise UsageError(f"{name}: every point read is one the snapshot contract refuses: {refused[0]['reason']}")
    if refused:
        extra = {**extra, "refused": refused}
    if args.format == "json":
        doc = {"points": [p.as_dict() for p in points], "events": [], **extra}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        table = render(name, points, [], {source: len(points)}, thinned=False)
        sys.stdout.write(table.replace(" lines)", f" {unit})"))


def _read_all(fh: BinaryIO, reader: Any) -> list[Any]:
    items: list[Any] = []
    while True:
        chunk = fh.read(CHUNK)
        if not chunk:
            break
        items += reader.feed(chunk)
    return items + reader.close()


def _num(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}g}" if abs(v) >= 1e4 or (v != 0 and abs(v) < 1e-3) else f"{v:.{digits}f}"


def _time(t: float | None) -> str:
    if t is None:
        return "-"
    try:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return f"{t:g}"


def render(name: str, points: list[Any], events: list[Any], formats: dict[str, int], *, thinned: bool = True) -> str:
    """The table of ``flowplan logs``; ``thinned``: points inside an epoch were thinned (a log's redraws)."""
    inside = sum(1 for p in points if p.partial)
    read_as = ", ".join(f"{k} ({v} lines)" for k, v in sorted(formats.items(), key=lambda kv: -kv[1])) or "-"
    lines = [
        f"{name}: {len(points)} point(s) ({inside} inside an epoch: loss only{', thinned' if thinned else ''}); "
        f"{len(events)} event(s); read as {read_as}",
        "",
        f"{'EPOCH':>9}  {'LOSS':>10}  {'METRIC':>8}  {'TIME':<24}  {'WHERE':<6}  FORMAT",
    ]
    for p in points:
        where = "inside" if p.partial else ""
        lines.append(f"{p.epoch:>9.3f}  {_num(p.loss):>10}  {_num(p.metric):>8}  {_time(p.time):<24}  {where:<6}  {p.format}")
    if events:
        lines += ["", "EVENTS"]
        for e in events:
            extra = {k: v for k, v in e.detail.items()}
            at = "-" if e.epoch is None else f"{e.epoch:g}"
            lines.append(f"  {e.kind:<18} epoch {at:<8} {_time(e.time):<24} {json.dumps(extra) if extra else ''}".rstrip())
    return "\n".join(lines) + "\n"
