"""The ``flowplan`` command line.

Exit codes: 0 success; 2 bad input (a bad snapshot, file or option — one line on stderr naming the
file, field and value); 1 an internal failure (a plan that failed the checker, which is a bug); 130
interrupted by Ctrl-C (one line, no traceback; ``flowplan/__main__.py`` covers the imports before ``main``).
Set ``FLOWPLAN_DEBUG=1`` to see tracebacks of internal failures.

Start-up: this module imports only the standard library and the light command modules at the top. The
planner, the models, pydantic, NumPy and the service's FastAPI are imported inside the commands that
use them, so ``flowplan --version``, ``--help`` and the commands that never plan start at once
(``tests/test_cli.py`` checks that importing this module loads none of them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from flowplan import __version__
from flowplan.argtypes import finite, positive_epochs, positive_seconds

if TYPE_CHECKING:
    from planner.profiles import ObjectiveProfile
    from planner.snapshot import Snapshot

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A user mistake: printed as one line, exit code 2."""


class DeferredHelp(str):
    """A ``--help`` text that needs the planner (its objective profiles): ``make()`` builds it when
    :class:`CliParser` prints help, so building the parser imports no part of the planner. The text
    itself comes from :mod:`planner.profiles`, which imports none of the planner's models or solvers."""

    make: Callable[[], str]

    def __new__(cls, make: Callable[[], str]) -> DeferredHelp:
        text = super().__new__(cls, "(see --help)")
        text.make = make
        return text


class CliParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that fills in :class:`DeferredHelp` texts just before printing help."""

    def format_help(self) -> str:
        for action in self._actions:
            if isinstance(action.help, DeferredHelp):
                action.help = action.help.make()
        return super().format_help()


def objective_help(who: str) -> str:
    """``--help`` text of ``--objective``: every profile and what it optimises (deferred: see :class:`DeferredHelp`)."""

    def make() -> str:
        from planner.profiles import OBJECTIVE_ALIASES, OBJECTIVE_MEANINGS

        profiles = "; ".join(f"'{name}': {meaning}" for name, meaning in OBJECTIVE_MEANINGS.items())
        short = ", ".join(f"'{a}'" for a in OBJECTIVE_ALIASES)
        return (
            f"what {who} optimises, in priority order (sets the snapshot's settings.objective). {profiles}. "
            f"Short names: {short} (the term right after the deadlines). Default: the snapshot's own setting"
        )

    return DeferredHelp(make)


def objective_arg(text: str | None) -> ObjectiveProfile | None:
    """The profile named by ``--objective`` (None when not given); a bad value is a :class:`UsageError`."""
    if text is None:
        return None
    from planner.profiles import resolve_objective

    try:
        return resolve_objective(text)
    except ValueError as exc:
        raise UsageError(f"--objective {text!r}: {exc}") from None


def _parser() -> argparse.ArgumentParser:
    p = CliParser(
        prog="flowplan",
        description="Plan CPU/GPU shares and placements for deep-learning training jobs.",
    )
    p.add_argument("--version", action="version", version=f"flowplan {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    pl = sub.add_parser(
        "plan",
        help="plan one control interval for a cluster snapshot (dry run: nothing is applied)",
        description="Read a snapshot (JSON, apiVersion flowplan/v1), solve the plan, print it. Nothing is applied.",
    )
    pl.add_argument("snapshot", help="snapshot JSON file ('-' for standard input)")
    pl.add_argument(
        "--solver", choices=["cpsat", "pulp", "greedy"], default="cpsat", help="integer-program backend (default: cpsat)"
    )
    pl.add_argument(
        "--time-limit", type=positive_seconds, default=1.0, metavar="S", help="solver time limit in seconds (default: 1)"
    )
    pl.add_argument("--objective", metavar="PROFILE", help=objective_help("the plan"))
    pl.add_argument("--format", choices=["table", "json"], default="table", help="output format (default: table)")
    pl.add_argument("--out", metavar="FILE", help="write the output to FILE instead of standard output")

    pr = sub.add_parser(
        "predict",
        help="fit a learning curve to a history CSV and predict when it reaches a target",
        description="Fit a learning curve to HISTORY (a CSV with columns epoch and metric or loss[,time], or the "
        "JSON of 'flowplan logs --format json', e.g. 'flowplan logs train.log --format json | flowplan predict - "
        "--target 0.3 --direction lower') and predict the epoch at which it reaches TARGET, with an 80% band, "
        "the plateau and the curve ahead.",
    )
    pr.add_argument("history", help="history CSV, or flowplan logs JSON ('-' for standard input)")
    pr.add_argument("--target", type=finite, required=True, metavar="T", help="value to reach")
    pr.add_argument("--direction", choices=["higher", "lower"], required=True, help="is a higher value better?")
    pr.add_argument(
        "--column",
        metavar="NAME",
        help="the CSV column (or the logs JSON's point field) to predict (default: metric, else loss)",
    )
    pr.add_argument("--horizon", type=positive_epochs, metavar="EPOCHS", help="predict up to this epoch (default: 2x the last)")
    pr.add_argument(
        "--max-epochs",
        type=positive_epochs,
        metavar="N",
        help="the run's planned epochs, those done included (cosine and warm-up schedules anneal over them)",
    )
    pr.add_argument(
        "--like",
        action="append",
        default=[],
        metavar="RUN",
        help="an earlier finished run of the same task (a CSV or logs JSON like HISTORY, the same column); "
        "repeat for more. Their curves are the prior (as the state store's runs of a task are to the planner); "
        "with --schedule they should be runs under the same schedule",
    )
    pr.add_argument(
        "--schedule",
        metavar="JSON",
        help='the learning-rate schedule, e.g. \'{"kind": "step", "milestones": [30, 60], "gamma": 0.1}\' '
        "(kinds: constant, step, exp, cosine, warmup_cosine, warmup_linear, plateau; see docs/models.md)",
    )
    pr.add_argument("--format", choices=["table", "json"], default="table")
    pr.add_argument("--plot", metavar="OUT.png", help="also draw the points, the fit and the band to a PNG")

    sc = sub.add_parser("schema", help="print the JSON Schema of a contract", description="Print the JSON Schema of a contract.")
    sc.add_argument("which", choices=["snapshot", "plan"])

    ck = sub.add_parser(
        "check",
        help="check a plan file against its snapshot with the independent checker",
        description="Re-check a plan (JSON) against the snapshot it answers; exit 0 if valid, 1 if not.",
    )
    ck.add_argument("snapshot")
    ck.add_argument("plan")

    from flowplan import simulate

    simulate.register(sub)

    from flowplan import serve

    serve.register(sub)

    from flowplan import daemon

    daemon.register(sub)

    from flowplan import snapshot_cmd

    snapshot_cmd.register(sub)

    from flowplan import logs_cmd

    logs_cmd.register(sub)

    from flowplan import status_cmd

    status_cmd.register(sub)

    from flowplan import sandbox_cmd

    sandbox_cmd.register(sub)
    return p


def _read_snapshot(path: str) -> Snapshot:
    from planner import SnapshotError, load_snapshot
    from planner.io import parse_snapshot

    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            return parse_snapshot(sys.stdin.buffer.read())
        return load_snapshot(path)
    except SnapshotError as exc:
        raise UsageError(f"{name}: {exc}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write(text: str, out: str | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    if not out:
        raise UsageError("--out: an empty path (give a file name)")
    # A symbolic link: the file it points to is replaced, the link kept (the rename below would
    # replace the link itself).
    target = Path(out).resolve() if Path(out).is_symlink() else Path(out)
    if target.is_dir():
        raise UsageError(f"--out {out}: is a directory")
    if target.exists() and not target.is_file():
        # A device, a pipe or a terminal (/dev/null, /dev/stdout): written to, never replaced by a
        # regular file (which the rename below would do, as root even to /dev/null).
        try:
            with open(target, "w") as fh:
                fh.write(text)
        except OSError as exc:
            raise UsageError(f"--out {out}: {exc.strerror or exc}") from None
        return
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        what = "is a file, not a directory" if parent.exists() else "does not exist"
        raise UsageError(f"--out {out}: directory {parent} {what}")
    # Write next to the target and rename: a reader never sees half a plan.
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        # mkstemp makes 0600: keep an existing file's mode, give a new one the usual umask default.
        os.chmod(tmp, target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as exc:
        raise UsageError(f"--out {out}: {exc.strerror or exc}") from None


def _cmd_plan(args: argparse.Namespace) -> int:
    from flowplan.render import render_table
    from planner import PlannerConfig, plan
    from planner.policies.flowplan import with_objective

    objective = objective_arg(args.objective)
    snapshot = with_objective(_read_snapshot(args.snapshot), objective)
    # One thread here: the model fits may fork (planner.fanout; plans are the same either way).
    config = PlannerConfig(solver=args.solver, time_limit=args.time_limit, fit_processes=0)
    result = plan(snapshot, config)
    if args.format == "json":
        text = result.plan.model_dump_json(indent=2) + "\n"
    else:
        source = "<stdin>" if args.snapshot == "-" else args.snapshot
        from flowplan.tables import for_stream

        rich = args.out is None and for_stream()  # a file gets plain text
        shown: str = snapshot.settings.objective
        if snapshot.settings.makespan_slack is not None and shown == "deadlines>mean-jct>makespan":
            shown += f" (makespan within {100 * snapshot.settings.makespan_slack:g} % of the reachable)"
        text = render_table(result.plan, source, objective=shown, rich=rich)
    _write(text, args.out)
    if args.out:
        print(f"wrote {args.format} plan to {args.out}", file=sys.stderr)
    return EXIT_OK


def _cmd_predict(args: argparse.Namespace) -> int:
    from flowplan import predict as pred

    name = "<stdin>" if args.history == "-" else args.history
    schedule = None
    if args.schedule is not None:
        from planner.errors import SnapshotError
        from planner.io import parse_schedule

        try:
            schedule = parse_schedule(args.schedule, args.max_epochs)
        except SnapshotError as exc:
            raise UsageError(f"--schedule: {exc}") from None
    if "-" in args.like:
        raise UsageError("--like -: an earlier run must be a file (standard input is HISTORY's)")
    try:
        history = pred.read_history(args.history, args.column)
    except pred.HistoryError as exc:
        raise UsageError(f"{name}: {exc}") from None
    done = float(history.epochs.max()) if history.epochs.size else 0.0
    if args.max_epochs is not None and done > args.max_epochs:
        raise UsageError(
            f"--max-epochs {args.max_epochs:g}: {name} already reaches epoch {done:g} (the planned epochs include the ones done)"
        )
    like = []
    for path in args.like:
        try:
            like.append(pred.read_history(path, history.column))  # the column HISTORY is read on
        except pred.HistoryError as exc:
            raise UsageError(f"--like {path}: {exc}") from None
    try:
        result = pred.predict(
            history, args.target, args.direction, args.horizon, schedule=schedule, max_epochs=args.max_epochs, like=like
        )
        if args.plot:
            pred.plot(result, history, args.plot)
    except pred.HistoryError as exc:
        raise UsageError(f"{name}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--plot {args.plot}: {exc.strerror or exc}") from None
    except ValueError as exc:  # matplotlib's: a file type it cannot write ("Format 'json' is not supported ...")
        if not args.plot:
            raise
        raise UsageError(f"--plot {args.plot}: {exc}") from None
    if args.format == "json":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        sys.stdout.write(pred.render(result, name))
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    from planner.plan import Plan
    from planner.snapshot import Snapshot

    model = Snapshot if args.which == "snapshot" else Plan
    sys.stdout.write(json.dumps(model.model_json_schema(), indent=2) + "\n")
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from planner import check_plan
    from planner.core import snapshot_digest
    from planner.errors import field_path, first_error
    from planner.plan import Plan

    snapshot = _read_snapshot(args.snapshot)
    try:
        plan_obj = Plan.model_validate_json(Path(args.plan).read_bytes(), strict=True)
    except OSError as exc:
        raise UsageError(f"{args.plan}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        err = first_error(exc.errors(include_url=False))
        where = field_path(tuple(err["loc"]))
        what = "empty file" if err["type"] == "json_invalid" and not Path(args.plan).read_bytes().strip() else err["msg"]
        raise UsageError(f"{args.plan}: not a valid plan: " + (f"{where}: {what}" if where else what)) from None
    from planner.policies.flowplan import with_objective
    from planner.profiles import OBJECTIVE_PROFILES

    # A plan made with --objective answers the snapshot with that profile in its settings.
    digest = snapshot_digest(snapshot)
    answered = {snapshot_digest(with_objective(snapshot, p)) for p in OBJECTIVE_PROFILES}  # type: ignore[arg-type]
    if plan_obj.snapshot_digest not in answered:
        raise UsageError(
            f"{args.plan}: this plan answers another snapshot (its snapshot_digest is {plan_obj.snapshot_digest[:12]}..., "
            f"{args.snapshot}'s is {digest[:12]}...); check a plan against the snapshot it was made for"
        )
    violations = check_plan(snapshot, plan_obj)
    for v in violations:
        print(f"violation: {v}")
    print(f"{len(violations)} violation(s)" if violations else "plan is valid")
    return EXIT_INTERNAL if violations else EXIT_OK


def _is_plan_check_error(exc: Exception) -> bool:
    """Is ``exc`` the planner's ``PlanCheckError``? Asked without importing the planner: a command that
    never imported it cannot have raised it."""
    errors = sys.modules.get("planner.errors")
    return errors is not None and isinstance(exc, errors.PlanCheckError)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        # Inside the try: building the parser imports each subcommand's module, which takes a while.
        args = _parser().parse_args(argv)
        # Subcommands in their own modules (flowplan/<name>.py, wired with register(sub)) set ``func``.
        if getattr(args, "func", None) is not None:
            return int(args.func(args))
        if args.command == "plan":
            return _cmd_plan(args)
        if args.command == "schema":
            return _cmd_schema(args)
        if args.command == "predict":
            return _cmd_predict(args)
        return _cmd_check(args)
    except UsageError as exc:
        print(f"flowplan: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        if not _is_plan_check_error(exc) or os.environ.get("FLOWPLAN_DEBUG"):
            raise
        print(f"flowplan: internal error: the plan failed the checker: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C while we exit: end at once, quietly
        print("flowplan: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
