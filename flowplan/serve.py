"""``flowplan serve``: run the HTTP service (FastAPI on uvicorn) over the state store: a SQLite file, or a
PostgreSQL database that several replicas of the service (and the daemons) share.

Tokens come from the environment (``FLOWPLAN_TOKEN`` read-write, ``FLOWPLAN_READ_TOKEN`` read-only;
see :mod:`api.settings`). With no token the service is open to anyone who can connect, so it then
refuses to listen on anything but a loopback address, and says so at start-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import ipaddress
import socket
import sys

from flowplan.argtypes import whole
from flowplan.state_arg import add_retention_arguments, add_state_argument, is_url, open_store, shown


class ServeError(Exception):
    """A bad option or setting: one line, exit code 2."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the HTTP service (plans, metric ingestion, targets, predictions)",
        description="Run the FlowPlan HTTP service over the state store shared with the daemon: a SQLite file, or a "
        "PostgreSQL URL that several replicas of the service share. "
        "Tokens: FLOWPLAN_TOKEN (read-write), FLOWPLAN_READ_TOKEN (read-only); with neither set the "
        "service binds to loopback only. Plans and predictions run in FLOWPLAN_PLAN_WORKERS worker processes "
        "(default: one per CPU); beyond FLOWPLAN_PLAN_QUEUE waiting requests (default: as many as workers) the "
        "service answers 429 with Retry-After. The workers run FLOWPLAN_PLAN_NICE steps below the service (default "
        "10) and keep the model fits of FLOWPLAN_FIT_CACHE_JOBS jobs each (default 10000). "
        "OpenAPI document at /openapi.json, docs at /docs.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=whole(0, 65535), default=8080, help="port (default: 8080; 0 picks a free one)")
    add_state_argument(p, "the state store the service and the daemon share")
    p.add_argument(
        "--synchronous",
        choices=["full", "normal"],
        default="full",
        help="SQLite durability: full (default) fsyncs every commit, so not even a power cut loses an acknowledged "
        "point; normal keeps them across a crash of the process but may lose the last ones on a power cut (faster). "
        "A PostgreSQL store's durability is the server's (synchronous_commit); this option is ignored there",
    )
    add_retention_arguments(p)
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default="info")
    p.set_defaults(func=run)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from api import ApiSettings, SettingsError, create_app
    except ImportError as exc:
        raise ServeError(f"the service needs its extra: pip install 'flowplan[api]' ({exc.name} is missing)") from None

    try:
        settings = ApiSettings.from_env()
    except SettingsError as exc:
        raise ServeError(str(exc)) from None
    if settings.open_access:
        if not is_loopback(args.host):
            raise ServeError(
                f"--host {args.host}: no token configured (FLOWPLAN_TOKEN / FLOWPLAN_READ_TOKEN), so the service "
                "may only listen on a loopback address such as 127.0.0.1"
            )
        notice = "no token configured: open access, listening on loopback only"
        settings = dataclasses.replace(settings, allowed_hosts=("127.0.0.1", "localhost", "::1", args.host))
    elif settings.write_token is None:
        notice = "only a read-only token is configured: every write will be refused"
    else:
        notice = ""
    from flowplan.cli import UsageError

    # The address first: a port in use is refused before a state file is created for nothing.
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        sock.close()
        raise ServeError(f"--host {args.host} --port {args.port}: cannot listen: {exc.strerror or exc}") from None
    try:
        store = open_store(
            args.state,
            synchronous="FULL" if args.synchronous == "full" else "NORMAL",
            keep_plans=args.keep_plans,
            keep_snapshots=args.keep_snapshots,
        )
    except UsageError as exc:
        sock.close()
        raise ServeError(str(exc)) from None
    if notice:
        print(f"flowplan serve: {notice}", file=sys.stderr)
    try:
        sock.listen(2048)  # listening before we say so: a client reading the line below may connect at once
        host, port = sock.getsockname()[:2]
        print(
            f"flowplan serve: state {shown(args.state)} "
            + ("(PostgreSQL)" if is_url(args.state) else f"(synchronous={args.synchronous})")
            + f"; {settings.workers} plan worker(s), queue {settings.queue}; listening on http://{host}:{port}",
            file=sys.stderr,
            flush=True,
        )
        config = uvicorn.Config(create_app(store, settings), log_level=args.log_level, access_log=False)
        # What is loaded by now (FastAPI, pydantic, the planner's NumPy, SciPy and OR-Tools) lives as long as
        # the process: out of the collector's reach, so that its full collections, about one a second under
        # planning load, stop walking it (each stalled the event loop 40-75 ms: docs/benchmarks.md).
        gc.collect()
        gc.freeze()
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        store.close()
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return _serve(args)
    except ServeError as exc:
        print(f"flowplan: error: {exc}", file=sys.stderr)
        return 2
