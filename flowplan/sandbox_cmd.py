"""``flowplan sandbox up|down``: a local Kubernetes control plane to try FlowPlan on, and to test against.

    flowplan sandbox up [--nodes N] [--gpus-per-node G] [--dir DIR] [--port P]
    export KUBECONFIG=...          # the line 'up' prints
    flowplan sandbox down [--dir DIR]

A real etcd and kube-apiserver on loopback, and kwok's fake kubelets for N nodes
(:mod:`adapters.kubernetes.sandbox`). The processes keep running after ``up`` returns; ``down``
stops exactly those (by the process ids ``up`` recorded) and removes the directory. The binaries
must have been built first (``bash deploy/sandbox/build.sh``); a missing one, a port in use or a
process that fails to start is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flowplan.argtypes import whole


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sandbox",
        help="start or stop a local Kubernetes control plane (real etcd + kube-apiserver, kwok fake nodes)",
        description="A local Kubernetes control plane for trying FlowPlan and for tests. "
        "'up' prints 'export KUBECONFIG=<path>'; 'down' stops it and removes its files.",
    )
    ss = p.add_subparsers(dest="sandbox_command", metavar="up|down")
    ss.required = True
    up = ss.add_parser("up", help="start etcd, kube-apiserver and kwok with N fake nodes")
    up.add_argument("--nodes", type=whole(1, 5000), default=3, metavar="N", help="fake nodes (default 3)")
    up.add_argument("--gpus-per-node", type=whole(0, 64), default=0, metavar="G", help="nvidia.com/gpu per node (default 0)")
    up.add_argument("--port", type=whole(1024, 65535), default=16443, metavar="P", help="kube-apiserver port (default 16443)")
    up.add_argument(
        "--etcd-port", type=whole(1024, 65534), default=12379, metavar="P", help="etcd client port; P+1 is its peer port"
    )
    up.add_argument("--dir", metavar="DIR", help="where its files live (default ~/.cache/flowplan/sandbox)")
    up.set_defaults(func=run_up)
    down = ss.add_parser("down", help="stop the sandbox and remove its files")
    down.add_argument("--dir", metavar="DIR", help="the sandbox's directory (default ~/.cache/flowplan/sandbox)")
    down.set_defaults(func=run_down)


def run_up(args: argparse.Namespace) -> int:
    from adapters.kubernetes.sandbox import Sandbox, SandboxError
    from flowplan.cli import UsageError

    ports = {"apiserver": args.port, "etcd": args.etcd_port, "etcd_peer": args.etcd_port + 1}
    sandbox = Sandbox(Path(args.dir) if args.dir else None, ports=ports)
    print(f"starting etcd, kube-apiserver and kwok in {sandbox.directory} ...", file=sys.stderr)
    try:
        info = sandbox.up(args.nodes, args.gpus_per_node)
    except SandboxError as exc:
        raise UsageError(f"sandbox: {exc}") from None
    except Exception as exc:  # an API error while creating the nodes: stopped already
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"sandbox: could not start: {type(exc).__name__}: {first}") from None
    gpus = f", {args.gpus_per_node} GPU(s) each" if args.gpus_per_node else ""
    print(f"sandbox up: {len(info.nodes)} fake node(s){gpus}, API server {info.server}", file=sys.stderr)
    print(f"export KUBECONFIG={info.kubeconfig}")
    return 0


def run_down(args: argparse.Namespace) -> int:
    from adapters.kubernetes.sandbox import Sandbox

    for line in Sandbox(Path(args.dir) if args.dir else None).down():
        print(line, file=sys.stderr)
    return 0
