"""``flowplan sandbox up|down``: a local Kubernetes control plane to try FlowPlan on, and to test against.

    flowplan sandbox up [--nodes N] [--gpus-per-node G] [--dir DIR] [--port P] [--kubelet-port P]
    export KUBECONFIG=...          # the line 'up' prints
    flowplan sandbox train --state PATH [--speedup X] [--for S]   # the pods' progress, made up
    flowplan sandbox down [--dir DIR]

A real etcd and kube-apiserver on loopback, and kwok's fake kubelets for N nodes
(:mod:`adapters.kubernetes.sandbox`). The processes keep running after ``up`` returns; ``down``
stops exactly those (by the process ids ``up`` recorded) and removes the directory. The binaries
must have been built first (``bash deploy/sandbox/build.sh``); a missing one, a port in use or a
process that fails to start is one line on stderr and exit code 2. The fake kubelets run no
container: ``train`` plays each FlowPlan pod's training from measured curves into the state store
the daemon reads (:mod:`adapters.kubernetes.sandbox_train`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flowplan.argtypes import positive, positive_seconds, whole
from flowplan.state_arg import add_state_argument, open_store, shown


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sandbox",
        help="start or stop a local Kubernetes control plane (real etcd + kube-apiserver, kwok fake nodes)",
        description="A local Kubernetes control plane for trying FlowPlan and for tests. "
        "'up' prints 'export KUBECONFIG=<path>'; 'down' stops it and removes its files.",
    )
    ss = p.add_subparsers(dest="sandbox_command", metavar="up|train|down")
    ss.required = True
    up = ss.add_parser("up", help="start etcd, kube-apiserver and kwok with N fake nodes")
    up.add_argument("--nodes", type=whole(1, 5000), default=3, metavar="N", help="fake nodes (default 3)")
    up.add_argument("--gpus-per-node", type=whole(0, 64), default=0, metavar="G", help="nvidia.com/gpu per node (default 0)")
    up.add_argument("--port", type=whole(1024, 65535), default=16443, metavar="P", help="kube-apiserver port (default 16443)")
    up.add_argument(
        "--etcd-port", type=whole(1024, 65534), default=12379, metavar="P", help="etcd client port; P+1 is its peer port"
    )
    up.add_argument(
        "--kubelet-port",
        type=whole(1024, 65535),
        default=16250,
        metavar="P",
        help="port of kwok's kubelet API (pods/log), on 127.0.0.1 (default 16250)",
    )
    up.add_argument("--dir", metavar="DIR", help="where its files live (default ~/.cache/flowplan/sandbox)")
    up.set_defaults(func=run_up)
    train = ss.add_parser(
        "train",
        help="make up the FlowPlan pods' training from measured curves, into the daemon's state store",
        description="kwok's fake nodes run no container. This plays each bound FlowPlan pod's training from "
        "the measured curves (AdaptDL traces) at the CPU it is guaranteed, SPEEDUP times faster than real "
        "time, writes each whole epoch to the state store (give the daemon the same --state), and marks a "
        "pod Succeeded at its last epoch. Runs until every pod it played is done, --for elapses, or Ctrl-C.",
    )
    add_state_argument(train, "the state store the daemon uses (its --state)", required=True)
    train.add_argument("--namespace", default="default", help="the pods' namespace (default: default)")
    train.add_argument("--kubeconfig", metavar="PATH", help="default: $KUBECONFIG, else the sandbox's")
    train.add_argument("--speedup", type=positive, default=30.0, metavar="X", help="times real time (default 30)")
    train.add_argument("--every", type=positive_seconds, default=2.0, metavar="S", help="seconds between steps (default 2)")
    train.add_argument("--for", dest="duration", type=positive_seconds, metavar="S", help="stop after S seconds")
    train.set_defaults(func=run_train)
    down = ss.add_parser("down", help="stop the sandbox and remove its files")
    down.add_argument("--dir", metavar="DIR", help="the sandbox's directory (default ~/.cache/flowplan/sandbox)")
    down.set_defaults(func=run_down)


def run_up(args: argparse.Namespace) -> int:
    from adapters.kubernetes.sandbox import Sandbox, SandboxError
    from flowplan.cli import UsageError

    ports = {"apiserver": args.port, "etcd": args.etcd_port, "etcd_peer": args.etcd_port + 1, "kubelet": args.kubelet_port}
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


def run_train(args: argparse.Namespace) -> int:
    import os
    import time

    from adapters.kubernetes.sandbox import default_dir
    from adapters.kubernetes.sandbox_train import SandboxTrainer
    from flowplan.cli import UsageError

    kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG") or str(default_dir() / "kubeconfig")
    try:
        from kubernetes import client, config

        api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    except Exception as exc:  # no file, a bad one
        raise UsageError(f"--kubeconfig: {kubeconfig}: {exc} (run 'flowplan sandbox up' first)") from None
    store = open_store(args.state)
    trainer = SandboxTrainer(api, store, args.namespace, args.speedup)
    started = time.monotonic()
    where = shown(args.state)
    print(f"sandbox train: namespace {args.namespace}, {args.speedup:g}x real time, points to {where}", file=sys.stderr)
    try:
        while True:
            try:
                lines = trainer.step()
            except Exception as exc:  # the server went away: say so once a step, keep going
                lines = [f"API server: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"]
            for line in lines:
                print(line, flush=True)
            if trainer.finished and not trainer.playing:
                print(f"sandbox train: all {len(trainer.finished)} pod(s) done", file=sys.stderr)
                return 0
            if args.duration is not None and time.monotonic() - started >= args.duration:
                return 0
            time.sleep(args.every)
    except KeyboardInterrupt:
        return 130
    finally:
        store.close()


def run_down(args: argparse.Namespace) -> int:
    from adapters.kubernetes.sandbox import Sandbox

    for line in Sandbox(Path(args.dir) if args.dir else None).down():
        print(line, file=sys.stderr)
    return 0
