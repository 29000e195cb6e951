"""``flowplan daemon``: observe → plan → diff → apply against Docker hosts or Kubernetes, every interval, until stopped.

    flowplan daemon --adapter docker --hosts a=unix:///var/run/docker.sock b=tcp://10.0.0.2:2375 \\
        [--interval 30] [--dry-run] [--state flowplan-state.db]
    flowplan daemon --adapter kubernetes [--kubeconfig PATH] [--namespace NS ...] [--interval 30] [--api-threads 16]

Metric histories, plans and actions go to the state store at ``--state`` (a SQLite file, or a
``postgresql://`` URL shared with other daemons and service replicas); a restarted daemon
settles the actions its predecessor left pending (see :mod:`adapters.daemon`) and carries on.
SIGTERM or Ctrl-C stop it after the interval in progress (a sleeping daemon stops at once, without
planning again).

The interval is a heartbeat: the daemon also re-plans at once (after ``--debounce`` seconds) when a
job container is created, started, dies or is removed, from the engines' event streams
(:mod:`adapters.docker.events`), or, on Kubernetes, when a FlowPlan pod arrives pending, ends or is
deleted, from watches of its pods (:mod:`adapters.kubernetes.watch`); ``--no-events`` turns that
off. If a stream or watch fails, the log says so once and the interval alone drives the daemon
until it is back.

Only one daemon acts on the same jobs at once. On Docker, daemons sharing a ``--state`` take a lease
in the store per ``--scope`` (:class:`LeaseGuard`); the second one stops. On Kubernetes every daemon
is a candidate for a ``coordination.k8s.io/v1`` Lease (``--lease-name`` in ``--lease-namespace``,
:mod:`adapters.kubernetes.leader`): the holder observes and applies, the others wait as standbys and
take over when the holder stops renewing for ``--lease-duration``; a daemon that loses the Lease
applies nothing more and becomes a standby.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from flowplan.argtypes import seconds, whole
from flowplan.state_arg import add_retention_arguments, add_state_argument, is_url, open_store, shown

DEFAULT_HOST = "local=unix:///var/run/docker.sock"


def _scope(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE[,KEY=VALUE], got {text!r}")
        out[key.strip()] = value.strip()
    return out


def lease_name(adapter: str, scope: dict[str, str] | None) -> str:
    """The lease a daemon holds: one per adapter kind and scope (``*``: every job)."""
    return f"{adapter}/" + (",".join(f"{k}={v}" for k, v in sorted(scope.items())) if scope else "*")


def _died_here(holder: str) -> bool:
    """Whether ``holder`` (``host:pid N:since ...``) was a process on this machine that no longer runs."""
    import os
    import socket

    host, _, rest = holder.partition(":pid ")
    pid_text = rest.split(":", 1)[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, someone else's
    return False


class LeaseGuard:
    """A guard for :class:`adapters.daemon.Daemon`: takes the scope's lease in the state store,
    renews it at every interval, and raises ``LeaseLost`` naming the holder when another daemon has
    it, or has the whole adapter (``*``), or — for ``*`` — any scope of it."""

    def __init__(self, store: Any, adapter: str, scope: dict[str, str] | None, ttl: float) -> None:
        import os
        import socket

        self.store = store
        self.ttl = ttl
        self.name = lease_name(adapter, scope)
        self.holder = f"{socket.gethostname()}:pid {os.getpid()}:since {datetime.now().strftime('%Y-%m-%dT%H:%M:%S')}"
        self.conflicts = [] if scope is None else [lease_name(adapter, None)]
        self.prefix = f"{adapter}/" if scope is None else None

    def __call__(self) -> None:
        from adapters.daemon import LeaseLost

        got = self.store.acquire_lease(self.name, self.holder, self.ttl, conflicts=self.conflicts, conflict_prefix=self.prefix)
        if not got.held and _died_here(got.holder):
            # A daemon on this machine that was killed (kill -9, a crash) cannot give its lease back:
            # its restart takes over at once instead of waiting out the lease.
            got = self.store.acquire_lease(
                self.name, self.holder, self.ttl, conflicts=self.conflicts, conflict_prefix=self.prefix, dead=[got.holder]
            )
        if not got.held:
            until = datetime.fromtimestamp(got.expires).strftime("%H:%M:%S")
            raise LeaseLost(
                f"lease {got.name!r} is held by {got.holder} (until {until} unless renewed): another daemon manages "
                "these jobs; stop it, or give this one another --scope"
            )

    def release(self) -> None:
        self.store.release_lease(self.name, self.holder)


def add_adapter_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by ``daemon`` and ``snapshot``."""
    p.add_argument("--adapter", choices=["docker", "kubernetes"], default="docker", help="cluster kind (default: docker)")
    p.add_argument(
        "--hosts",
        nargs="+",
        default=[DEFAULT_HOST],
        metavar="NAME=URL[,cpu=MILLIS][,gpus=N][,mechanism=nano|quota|shares][,addr=ADDRESS]",
        help=f"Docker hosts, one per node; addr: where a gang's other replicas reach this host (default: {DEFAULT_HOST})",
    )
    p.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubernetes: the kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster credentials)",
    )
    p.add_argument(
        "--namespace",
        dest="namespaces",
        nargs="+",
        metavar="NS",
        help="kubernetes: only these namespaces' pods (default: every namespace)",
    )
    p.add_argument(
        "--mlflow",
        metavar="URI",
        help="also read jobs' progress from this MLflow tracking server (runs tagged flowplan.job=<job id>)",
    )
    p.add_argument("--interval", type=seconds(0.1, 86400), default=30.0, metavar="S", help="control interval (default 30 s)")
    add_state_argument(p, "where histories, plans, actions and leases are kept")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "daemon",
        help="apply plans to Docker hosts or a Kubernetes cluster every interval (observe, plan, diff, apply)",
        description="Run the control loop against Docker hosts (containers labelled flowplan.job) or a Kubernetes "
        "cluster (pods with schedulerName flowplan or the flowplan.io/job label): observe, plan, and apply only what "
        "changed. Histories, plans and actions are kept in the state store (--state: a SQLite file, or a PostgreSQL "
        "URL shared by several daemons and service replicas). On Kubernetes the daemons are "
        "candidates for a Lease: only its holder acts, the others wait as standbys.",
    )
    add_adapter_arguments(p)
    add_retention_arguments(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan and the actions it would take; change nothing")
    p.add_argument("--policy", default="flowplan", help="scheduling policy (default: flowplan; see planner.policies)")
    p.add_argument("--solver", choices=["cpsat", "pulp", "greedy"], default="cpsat", help="FlowPlan's backend (default: cpsat)")
    p.add_argument("--time-limit", type=seconds(0.01, 3600), default=1.0, metavar="S", help="solver time limit (default 1 s)")
    p.add_argument("--max-ticks", type=whole(1), metavar="N", help="stop after N intervals (default: run until stopped)")
    p.add_argument(
        "--checkpoint-timeout", type=seconds(1, 3600), default=60.0, metavar="S", help="wait this long for a job to checkpoint"
    )
    p.add_argument(
        "--down-grace",
        type=seconds(0, 86400),
        default=60.0,
        metavar="S",
        help="after a host has been unreachable this long, its migratable jobs are planned elsewhere (default 60 s)",
    )
    p.add_argument("--migration-budget", type=int, default=4, metavar="N", help="checkpoint-restarts per interval (default 4)")
    p.add_argument(
        "--api-threads",
        type=whole(1, 256),
        metavar="N",
        help="kubernetes: changes applied and pod logs read at once, each with its own API calls, 1 to 256 (default 16)",
    )
    p.add_argument(
        "--no-events",
        dest="events",
        action="store_false",
        help="re-plan only every --interval (default: also at once when a job container is created, starts, dies or is "
        "removed; on Kubernetes, when a FlowPlan pod arrives pending, ends or is deleted)",
    )
    p.add_argument(
        "--debounce",
        type=seconds(0, 60),
        default=0.4,
        metavar="S",
        help="after an engine event or pod watch event, wait this long for more before re-planning (default 0.4 s)",
    )
    p.add_argument(
        "--scope",
        type=_scope,
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="manage only the flowplan.job containers carrying these labels (default: every one); daemons "
        "sharing a --state never act on the same scope at once",
    )
    p.add_argument(
        "--metrics-port",
        type=whole(0, 65535),
        metavar="PORT",
        help="serve Prometheus metrics on 127.0.0.1:PORT (0: any free port, printed in the banner); "
        "deploy/grafana/flowplan.json charts them",
    )
    lease = p.add_argument_group("kubernetes leader election (coordination.k8s.io/v1 Lease)")
    lease.add_argument("--lease-name", default="flowplan-daemon", metavar="NAME", help="the Lease (default: flowplan-daemon)")
    lease.add_argument(
        "--lease-namespace",
        metavar="NS",
        help="its namespace (default: the daemon's own namespace in a pod, else the first --namespace, else default)",
    )
    lease.add_argument(
        "--lease-duration",
        type=seconds(1, 86400),
        metavar="S",
        help="a standby takes over when the holder has not renewed for this long (default: 3 x --interval, "
        "at least 1 s); the holder renews every --interval and stops acting after 2/3 of it without a renewal",
    )
    lease.add_argument(
        "--identity",
        metavar="ID",
        help="this daemon's holder identity in the Lease and on the pods it binds (default: HOSTNAME:PID)",
    )
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also a line per interval (jobs, planning time, what woke it), every engine call's outcome, and in a dry "
        "run the full plan (default: the banner, then one line per change and per new warning)",
    )
    p.set_defaults(func=run_daemon)


def build_adapter(args: argparse.Namespace, store: Any, **options: Any) -> Any:
    """The adapter named by ``--adapter`` / ``--hosts``; a bad host is a usage error."""
    from adapters.docker import DockerAdapter, HostSpec
    from flowplan.cli import UsageError
    from planner.snapshot import Settings

    try:
        budget = getattr(args, "migration_budget", 4)
        settings = Settings(interval_seconds=args.interval, migration_budget=budget)
    except ValueError as exc:
        raise UsageError(f"--migration-budget {getattr(args, 'migration_budget', '')}: {str(exc).splitlines()[-1]}") from None
    if args.adapter == "kubernetes":
        if getattr(args, "scope", None):
            raise UsageError("--scope: Docker only for now; with --adapter kubernetes, --namespace limits what a daemon manages")
        extra: dict[str, Any] = {k: options[k] for k in ("clock", "checkpoint_timeout") if k in options}
        if getattr(args, "mlflow", None):
            extra["mlflow"] = _mlflow_uri(args.mlflow)
        if getattr(args, "api_threads", None) is not None:
            extra["workers"] = args.api_threads
        return build_kubernetes_adapter(args, store, settings, **extra)
    try:
        specs = [HostSpec.parse(h) for h in args.hosts]
    except ValueError as exc:
        raise UsageError(f"--hosts: {exc}") from None
    mlflow = _mlflow_uri(args.mlflow) if getattr(args, "mlflow", None) else None
    try:
        return DockerAdapter(specs, store=store, settings=settings, scope=getattr(args, "scope", None), mlflow=mlflow, **options)
    except ValueError as exc:
        raise UsageError(f"--hosts: {exc}") from None


def _mlflow_uri(uri: str) -> str:
    """``--mlflow``'s tracking URI, checked (an address that is not http(s)://host:port is a usage error)."""
    from adapters.logs.mlflow import MlflowClient
    from flowplan.cli import UsageError

    try:
        MlflowClient(uri)
    except ValueError as exc:
        raise UsageError(f"--mlflow {uri!r}: {str(exc).removeprefix('mlflow: ')}") from None
    return uri


def build_kubernetes_adapter(args: argparse.Namespace, store: Any, settings: Any, clock: Any = None, **options: Any) -> Any:
    """The Kubernetes adapter from ``--kubeconfig`` / ``$KUBECONFIG``; a missing or bad kubeconfig is a usage error."""
    import os

    from flowplan.cli import UsageError

    try:
        from adapters.kubernetes import KubernetesAdapter
    except ImportError as exc:
        raise UsageError(f"--adapter kubernetes: the kubernetes client is missing ({exc}); pip install kubernetes") from None
    from kubernetes.config import ConfigException

    def missing(p: str) -> str:
        return "is a directory, not a kubeconfig file" if Path(p).is_dir() else "no such file"

    path = args.kubeconfig
    if path is not None and not Path(path).is_file():
        raise UsageError(f"--kubeconfig {path}: {missing(path)}")
    env = os.environ.get("KUBECONFIG")
    bad = [p for p in (env or "").split(os.pathsep) if p and not Path(p).is_file()]
    if path is None and bad:
        raise UsageError(f"KUBECONFIG={env}: {missing(bad[0])} ('flowplan sandbox up' prints a working one)")
    try:
        return KubernetesAdapter.from_kubeconfig(
            path, namespaces=args.namespaces, store=store, settings=settings, clock=clock, **options
        )
    except (ConfigException, ValueError, OSError) as exc:
        where = f"--kubeconfig {path}" if path else "kubeconfig"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{where}: {first} (set --kubeconfig or KUBECONFIG; 'flowplan sandbox up' prints one)") from None


def kubernetes_guard(args: argparse.Namespace, adapter: Any, stopped: Any) -> Any:
    """The Kubernetes daemon's guard: a candidate for the Lease (:mod:`adapters.kubernetes.leader`),
    fencing the adapter's writes. Not started: :meth:`LeaseElector.start` runs the first round."""
    from adapters.kubernetes.leader import LeaderGuard, LeaseElector, default_namespace
    from flowplan.cli import UsageError

    def report(role: str, line: str) -> None:
        print(f"{datetime.now().strftime('%H:%M:%S')} {line}", flush=True)

    duration = args.lease_duration if args.lease_duration is not None else max(1.0, 3 * args.interval)
    if duration <= args.interval:
        raise UsageError(
            f"--lease-duration {duration:g}: must be longer than --interval ({args.interval:g} s), how often it is renewed"
        )
    for flag, value in (
        ("--lease-name", args.lease_name),
        ("--lease-namespace", args.lease_namespace),
        ("--identity", args.identity),
    ):
        if value is not None and not value.strip():
            raise UsageError(f"{flag}: must not be empty")
    try:
        elector = LeaseElector(
            adapter.api.api_client,
            name=args.lease_name,
            namespace=args.lease_namespace or default_namespace(args.namespaces),
            identity=args.identity,
            duration=duration,
            renew_every=args.interval,
            report=report,
        )
    except ValueError as exc:
        raise UsageError(f"--lease-duration {duration:g}: {exc}") from None  # what is left: the duration's checks
    guard = LeaderGuard(elector, stopped)
    adapter.identity = elector.identity
    adapter.fence = guard.fence
    return guard


def _start_metrics(args: argparse.Namespace) -> Any:
    """The daemon's metrics, served; ``args.metrics_port`` becomes the port bound (for port 0)."""
    import socket

    from flowplan.cli import UsageError

    try:
        from flowplan.daemon_metrics import DaemonMetrics
    except ImportError:
        raise UsageError("--metrics-port: needs prometheus_client: pip install 'flowplan[docker]'") from None
    port = args.metrics_port
    if port == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    metrics = DaemonMetrics()
    try:
        metrics.serve(port)
    except OSError as exc:
        raise UsageError(f"--metrics-port {args.metrics_port}: cannot listen: {exc.strerror or exc}") from None
    args.metrics_port = port
    return metrics


def _banner(args: argparse.Namespace, guard: Any = None) -> str:
    """The start-up line: version, adapter and what it manages, scope, interval, wake-ups, policy, store, lease."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("flowplan")
    except PackageNotFoundError:  # pragma: no cover - a source tree without install
        ver = "?"
    if args.adapter == "docker":
        where = "hosts " + ", ".join(h.split(",")[0] for h in args.hosts)
    else:
        where = "namespaces " + (", ".join(args.namespaces) if getattr(args, "namespaces", None) else "all")
    scope = ",".join(f"{k}={v}" for k, v in sorted(args.scope.items())) if getattr(args, "scope", None) else "every job"
    wake = ("engine events" if args.adapter == "docker" else "pod watches") if args.events else "the interval only"
    policy = args.policy + (f" ({args.solver}, {args.time_limit:g} s)" if args.policy == "flowplan" else "")
    lease = f"; lease {guard.elector.where} as {guard.elector.identity}" if hasattr(guard, "elector") else ""
    return (
        f"flowplan daemon {ver}: {args.adapter} ({where}); scope {scope}; interval {args.interval:g} s, re-plans on {wake}; "
        f"policy {policy}; state {shown(args.state)}{lease}" + ("; DRY RUN: changes nothing" if args.dry_run else "")
    )


def _describe(tick: Any, dry_run: bool, woken: str = "") -> tuple[str, list[str]]:
    """The interval in words: a head line (jobs, planning time, nodes down, what woke it; printed
    with --verbose) and one line per change (``would ...`` in a dry run, else how it ended), or the
    checker's refusal."""
    stamp = datetime.fromtimestamp(tick.time).strftime("%H:%M:%S")
    s = tick.snapshot
    running = sum(1 for j in s.jobs if j.status == "running")
    pending = sum(1 for j in s.jobs if j.status == "pending")
    down = [n.name for n in s.nodes if not n.schedulable]
    head = (
        f"{stamp} jobs {len(s.jobs)} (running {running}, pending {pending}) plan {tick.plan_seconds:.2f} s"
        + (f" down: {','.join(down)}" if down else "")
        + ("; no change" if not tick.changes and not tick.violations else "")
        + (f" [woken: {woken}]" if woken else "")
    )
    if tick.violations:
        return head, [f"{stamp} plan REJECTED by the checker, nothing applied: {tick.violations[0]}"]
    lines = []
    # A change already in effect ("already asked to deliver 3 s ago ...": ok, nothing done) gets no
    # line of its own: a plan asks again at every interval until the job's log says it delivered,
    # and a line each time buried what was done (26 in a minute on the real-engine demo). The head
    # line counts them; the state store keeps every outcome (``flowplan explain``).
    repeated = 0
    for i, c in enumerate(tick.changes):
        what = f"{c.kind} {c.job}" + (f" on {c.node} {c.cpu_millis}m" if c.node else "") + (f" {c.gpus}g" if c.gpus else "")
        if c.node and (c.replicas > 1 or (c.placement is not None and len(c.placement) > 1)):  # a gang: where each replica goes
            what += f" x{c.replicas}" + (" (" + " + ".join(f"{k} on {n}" for n, k in c.placement) + ")" if c.placement else "")
        if dry_run:
            lines.append(f"{stamp} would {what}")
        elif i < len(tick.outcomes):
            o = tick.outcomes[i]
            if o.ok and o.message.startswith("already"):
                repeated += 1
                continue
            if o.ok and o.message.startswith("not asked yet"):  # ok, nothing done yet: asked again at a later plan
                lines.append(f"{stamp} {what} deferred ({o.message})")
                continue
            lines.append(f"{stamp} {what}" + (" ok" if o.ok else f" FAILED ({o.error}: {o.message})"))
    if repeated:
        head += f"; {repeated} already in effect"
    return head, lines


def _keep_failed_snapshots(policy: Any, state: str) -> Any:
    """``policy``, writing the snapshot it failed on beside the state store (for a bug report) before re-raising;
    in the working directory when the store is a PostgreSQL database."""
    stem = "flowplan-state" if is_url(state) else state

    def plan(snapshot: Any) -> Any:
        try:
            return policy(snapshot)
        except Exception:
            path = Path(f"{stem}.failed-{int(time.time())}.json")
            try:
                path.write_text(snapshot.model_dump_json(indent=1))
                logging.getLogger("flowplan.daemon").error("the policy failed on the snapshot written to %s", path)
            except OSError:
                pass
            raise

    return plan


def run_daemon(args: argparse.Namespace) -> int:
    from adapters.daemon import Daemon, LeaseLost, WakeClock
    from adapters.kubernetes.leader import LeaderElectionError, LeaderGuard, StoppedWhileStandby
    from flowplan.cli import UsageError
    from flowplan.render import render_table
    from planner.policies import make_policy

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:  # a server that is down is said once, in the daemon's own words, not per retry
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    options: dict[str, Any] = {"solver": args.solver, "time_limit": args.time_limit} if args.policy == "flowplan" else {}
    try:
        policy = make_policy(args.policy, **options)
    except ValueError as exc:
        raise UsageError(f"--policy: {exc}") from None
    policy = _keep_failed_snapshots(policy, args.state)
    store = open_store(args.state, keep_plans=args.keep_plans, keep_snapshots=args.keep_snapshots)
    clock = WakeClock(debounce=args.debounce)
    adapter = build_adapter(args, store, clock=clock, checkpoint_timeout=args.checkpoint_timeout, down_grace=args.down_grace)
    # An event about a container (a pod) the adapter itself just started, stopped, created or removed is no news.
    clock.ignore = lambda w: w.container is not None and adapter.own_event(w.container, w.at)

    warned: set[str] = set()
    metrics = None
    if args.metrics_port is not None:
        metrics = _start_metrics(args)

    def on_tick(tick: Any) -> None:
        if metrics is not None:
            metrics.tick(tick, args.dry_run)
        # One line per change (or the checker's refusal), each warning the first time it appears;
        # with --verbose also a line per interval and, in a dry run, the full plan.
        for w in tick.plan.warnings:
            if w not in warned:
                warned.add(w)
                print(f"{datetime.fromtimestamp(tick.time).strftime('%H:%M:%S')} warning: {w}", flush=True)
        if args.verbose and args.dry_run:
            sys.stdout.write(render_table(tick.plan, f"{args.adapter} (dry run)", rich=sys.stdout.isatty()))
        woken = f"{'; '.join(clock.reasons[:3])}{' ...' if len(clock.reasons) > 3 else ''}" if clock.reasons else ""
        head, lines = _describe(tick, args.dry_run, woken)
        for line in ([head] if args.verbose else []) + lines:
            print(line, flush=True)
        clock.reasons = []

    # A dry run changes nothing, so it needs no lease. The lease outlives an interval and its slowest
    # apply (a checkpoint) with room to spare; a daemon that stops renewing frees it by then.
    # On Kubernetes the cluster's own Lease decides instead (kubernetes_guard).
    ttl = 3 * args.interval + args.checkpoint_timeout + 30
    guard: Any = None
    if args.dry_run:
        pass
    elif args.adapter == "kubernetes":
        guard = kubernetes_guard(args, adapter, clock.stop.is_set)
    else:
        guard = LeaseGuard(store, args.adapter, args.scope, ttl)
    daemon = Daemon(adapter, policy, clock, store, interval=args.interval, dry_run=args.dry_run, on_tick=on_tick, guard=guard)

    def on_error(exc: BaseException) -> None:
        if metrics is not None:
            metrics.failure()
        stamp = datetime.now().strftime("%H:%M:%S")
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"{stamp} interval FAILED, nothing applied: {type(exc).__name__}: {first}", flush=True)

    def stop(signum: int, frame: object) -> None:
        clock.halt()

    print(
        _banner(args, guard) + (f"; metrics on http://127.0.0.1:{args.metrics_port}/metrics" if metrics is not None else ""),
        flush=True,
    )
    events: Any = None  # EngineEvents or PodWatch
    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if args.events and args.adapter == "docker":
            from adapters.docker.events import EngineEvents

            events = EngineEvents(
                [h.spec for h in adapter.hosts.values()],
                lambda ev: clock.wake(ev.describe(), ev.container or None),
                heartbeat=args.interval,
            ).start()
            events.wait_connected(2.0)  # open before the first observe, so no arrival falls in between
        elif args.events and args.adapter == "kubernetes":
            from adapters.kubernetes.watch import PodWatch

            events = PodWatch(
                adapter.api.api_client,
                adapter.namespaces,
                lambda ev: clock.wake(ev.describe(), ev.pod if ev.name else None),
                heartbeat=args.interval,
            ).start()
            events.wait_connected(2.0)
        if isinstance(guard, LeaderGuard):
            guard.elector.start()  # the first round now: leader or standby is known before the first interval
        try:
            try:
                for line in daemon.recover():
                    print(f"recovered: {line}", flush=True)
            except (LeaseLost, LeaderElectionError, StoppedWhileStandby):
                raise
            except Exception as exc:  # the cluster cannot be observed yet (an API server down): the intervals retry
                on_error(exc)
            daemon.run(max_ticks=args.max_ticks, stopped=clock.stop.is_set, on_error=on_error)
        except LeaseLost as exc:
            print(f"flowplan daemon: {exc}", file=sys.stderr, flush=True)
            return 3
        except LeaderElectionError as exc:
            print(f"flowplan daemon: {exc}", file=sys.stderr, flush=True)
            return 2
        except StoppedWhileStandby:
            pass
        if guard is not None:
            guard.release()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if events is not None:
            events.close()
        if isinstance(guard, LeaderGuard):
            guard.elector.stop(release=False)  # released above on a clean stop; it shares the adapter's client
        adapter.close()
        store.close()
    return 0
