"""``flowplan serve``: run the HTTP service (FastAPI on uvicorn) over the SQLite state store.

Tokens come from the environment (``FLOWPLAN_TOKEN`` read-write, ``FLOWPLAN_READ_TOKEN`` read-only;
see :mod:`api.settings`). With no token the service is open to anyone who can connect, so it then
refuses to listen on anything but a loopback address, and says so at start-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import socket
import sys
from pathlib import Path

from flowplan.argtypes import whole

#: The state file the service and the daemon share unless told otherwise.
DEFAULT_STATE = "flowplan-state.db"


class ServeError(Exception):
    """A bad option or setting: one line, exit code 2."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the HTTP service (plans, metric ingestion, targets, predictions)",
        description="Run the FlowPlan HTTP service over the SQLite state store shared with the daemon. "
        "Tokens: FLOWPLAN_TOKEN (read-write), FLOWPLAN_READ_TOKEN (read-only); with neither set the "
        "service binds to loopback only. Plans and predictions run in FLOWPLAN_PLAN_WORKERS worker processes "
        "(default: one per CPU); beyond FLOWPLAN_PLAN_QUEUE waiting requests (default: as many as workers) the "
        "service answers 429 with Retry-After. OpenAPI document at /openapi.json, docs at /docs.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=whole(0, 65535), default=8080, help="port (default: 8080; 0 picks a free one)")
    p.add_argument("--state", default=DEFAULT_STATE, metavar="PATH", help=f"state store file (default: {DEFAULT_STATE})")
    p.add_argument(
        "--synchronous",
        choices=["full", "normal"],
        default="full",
        help="SQLite durability: full (default) fsyncs every commit, so not even a power cut loses an acknowledged "
        "point; normal keeps them across a crash of the process but may lose the last ones on a power cut (faster)",
    )
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
    from store import StateStore, StoreError

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
    state = Path(args.state)
    if args.state != ":memory:" and not state.parent.is_dir():
        raise ServeError(f"--state {args.state}: directory {state.parent} does not exist")
    try:
        store = StateStore(args.state, synchronous="FULL" if args.synchronous == "full" else "NORMAL")
    except (StoreError, OSError) as exc:
        raise ServeError(f"--state {args.state}: {exc}") from None
    except Exception as exc:  # sqlite3.DatabaseError: not a database file, locked past the timeout
        raise ServeError(f"--state {args.state}: cannot open the state store: {exc}") from None
    if notice:
        print(f"flowplan serve: {notice}", file=sys.stderr)
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((args.host, args.port))
        except OSError as exc:
            sock.close()
            raise ServeError(f"--host {args.host} --port {args.port}: cannot listen: {exc.strerror or exc}") from None
        sock.listen(2048)  # listening before we say so: a client reading the line below may connect at once
        host, port = sock.getsockname()[:2]
        print(
            f"flowplan serve: state {args.state} (synchronous={args.synchronous}); {settings.workers} plan worker(s), "
            f"queue {settings.queue}; listening on http://{host}:{port}",
            file=sys.stderr,
            flush=True,
        )
        config = uvicorn.Config(create_app(store, settings), log_level=args.log_level, access_log=False)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        store.close()
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return _serve(args)
    except ServeError as exc:
        print(f"flowplan: error: {exc}", file=sys.stderr)
        return 2
