"""``flowplan snapshot``: write what the Docker hosts or a Kubernetes cluster look like now, as a snapshot for ``flowplan plan``.

    flowplan snapshot --adapter docker --hosts a=unix:///var/run/docker.sock --out now.json
    flowplan snapshot --adapter kubernetes [--kubeconfig PATH] [--namespace NS ...] --out now.json
    flowplan plan now.json

Histories come from the state store when ``--state`` names one the daemon keeps (the full history);
otherwise from the containers' logs as they are now. Unmanaged containers and unreachable hosts are
named in the nodes' labels (``flowplan.io/unmanaged.*``, ``flowplan.io/down``) and on stderr; when
no host answers at all, that is an error (exit 2) and nothing is written.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "snapshot",
        help="write the current snapshot of Docker hosts or a Kubernetes cluster (input for 'flowplan plan')",
        description="Observe Docker hosts or a Kubernetes cluster once and write the snapshot (JSON, apiVersion flowplan/v1).",
    )
    from flowplan.daemon import add_adapter_arguments

    add_adapter_arguments(p)
    p.set_defaults(state=None)
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of standard output")
    p.set_defaults(func=run_snapshot)


def run_snapshot(args: argparse.Namespace) -> int:
    from adapters.docker import MemoryStore
    from flowplan.cli import UsageError, _write
    from flowplan.daemon import build_adapter
    from flowplan.state_arg import open_store

    logging.basicConfig(level=logging.ERROR)  # warnings are printed below, once each
    store: Any
    if args.state is not None:
        store = open_store(args.state, must_exist=True)
    else:
        store = MemoryStore()
    adapter = build_adapter(args, store, read_stats=False)
    try:
        snapshot = adapter.observe()
    except Exception as exc:
        from adapters.kubernetes.errors import KubernetesAdapterError

        if not isinstance(exc, KubernetesAdapterError):
            raise
        raise UsageError(f"kubernetes: cannot observe the cluster: {exc.kind}: {exc.message}") from None
    finally:
        adapter.close()
        if args.state is not None:
            store.close()
    if args.adapter == "docker":
        down = adapter.last.down
        if down and len(down) == len(snapshot.nodes):
            # Nothing answered: a snapshot of unschedulable 0-CPU nodes would plan every job as unserved.
            first = next(iter(down.items()))
            more = f" (and {len(down) - 1} more)" if len(down) > 1 else ""
            raise UsageError(f"no Docker host answered: {first[0]}: {first[1]}{more}; nothing written")
        for host, why in down.items():
            print(f"flowplan: warning: host {host} is unavailable: {why}", file=sys.stderr)
    for name, why in adapter.last.unmanaged.items():
        print(f"flowplan: warning: {name} is unmanaged: {why}", file=sys.stderr)
    _write(snapshot.model_dump_json(indent=2) + "\n", args.out)
    if args.out:
        runs = sum(len(c.runs) for c in snapshot.curve_priors)
        curves = f", the curves of {runs} finished run(s) of {len(snapshot.curve_priors)} task(s)" if runs else ""
        print(
            f"wrote snapshot of {len(snapshot.nodes)} node(s), {len(snapshot.jobs)} job(s){curves} to {args.out}", file=sys.stderr
        )
    return 0
