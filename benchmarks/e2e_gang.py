"""End to end on real Docker engines: a gang job started at 2 replicas by ``flowplan daemon``, rescaled to 3.

    python benchmarks/e2e_gang.py [--epochs 300] [--work 6000] [--blocker-epochs 6] [--interval 5]
                                  [--tier1-only] [--torch-site DIR] [--timeout 420]

Three private engines on this machine (``tests/docker_env.py``, ``start_engines``) are three hosts
``h0``, ``h1``, ``h2`` of 1000m each (``--hosts hN=unix://...,cpu=1000``). Every replica asks for
1000m (``flowplan.min_cpu_millis`` = ``max_cpu_millis`` = 1000), so a host holds one replica:

1. a **blocker** (``examples/jobs/train_digits.py``, a 1000m FlowPlan job) is started by hand on
   ``h2`` and runs for ``--blocker-epochs`` epochs;
2. the **gang** (``examples/jobs/train_gang.py``) is created on ``h0`` as its rank 0, pending, with
   ``flowplan.replicas=3``, ``flowplan.min_replicas=2``, ``flowplan.max_nodes=3`` and a target of
   ``--epochs`` epochs;
3. ``flowplan daemon`` (the real CLI, ``--state`` a SQLite file) plans every ``--interval`` seconds
   and on the engines' events. With ``h2`` full it can start the gang at 2 replicas (``h0`` + ``h1``);
   when the blocker ends, the planner may grow it to 3 by a ``migrate``: rank 0 checkpoints, the new
   set starts with ``WORLD_SIZE=3`` and resumes from the checkpoint.

The gang's target is the loss, tier 1 0.2 (reached early) and tier 2 0.01 (not reached in its
epochs), ``max_epochs`` its ``--epochs``: so the planner predicts that it trains until
``max_epochs``. ``--tier1-only`` gives it an unreachable tier 1 and no tier 2 instead: the planner
then predicts its end at its curve's convergence (``planner/outlook.py``), which is how the first
runs found the rescale late (``docs/docker.md``, "A gang rescaled by the daemon").

Printed: the daemon's actions (when, what, how they ended), when the blocker ended and when the
rescale began and returned, the first epoch of the 3 after it, the epochs at 2 and at 3 replicas
and the median epoch time of each, whether the history (from the state store) is epochs 1..n with
none missing or twice, and the final loss against the same job run unscaled: one process, no
container, the same epochs and seed (``--work`` only repeats a forward pass whose result is the
same, so the reference runs with ``--work 1``). If the daemon did not rescale, the planner's own
account of the gang in its first plan after the blocker ended (``flowplan explain gang --plan ID``
on the daemon's state store: the options it weighed, their predicted finish and what a restart
loses) is printed instead of a forced change. Figures only, no asserts; recorded in
``docs/docker.md``. About 6-8 minutes on this shared 2-core machine.

``--torch-site DIR``: run ``examples/jobs/train_ddp.py`` (PyTorch DDP, gloo on CPU) instead, with
``DIR`` (a site-packages holding torch) bind-mounted into every replica. torch is no dependency of
the project: the variant runs only when that directory's torch imports.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import docker_env as de  # noqa: E402  (the same image, mounts and private engines as the tests)
from e2e_docker import _events as log_events  # noqa: E402  (a container's JSON lines)

HOSTS = ("h0", "h1", "h2")
PER_REPLICA = {"flowplan.min_cpu_millis": "1000", "flowplan.max_cpu_millis": "1000"}


def _engine_time(stamp: str) -> float:
    """An engine's ``2026-11-24T13:01:02.123456789Z`` as Unix time (nanoseconds cut to microseconds)."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac or '0')[:6]:0<6}+00:00").timestamp()


def _gang_containers(urls: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (host, c) for host, url in urls.items() for c in de.api(url).containers(all=True, filters={"label": "flowplan.job=gang"})
    ]


def _finished(urls: dict[str, str]) -> bool:
    return any(
        c["Labels"].get("flowplan.rank") == "0" and c["Status"].startswith("Exited (0)") for _, c in _gang_containers(urls)
    )


def _gang_command(args: argparse.Namespace, interpreter: str) -> tuple[list[str], list[str], list[str]]:
    """The gang's command, extra binds and environment: the numpy job, or the DDP one with torch mounted."""
    common = ["--epochs", str(args.epochs), "--seed", str(args.seed)]
    if args.torch_site is None:
        return [interpreter, "/jobs/train_gang.py", *common, "--work", str(args.work)], [], []
    site = str(Path(args.torch_site).resolve())
    # torch's site-packages first (its numpy with it), then what the tests' containers have.
    path = ":".join([site, "/sdk", *de.python_mounts()[2]])
    # gloo picks its interface from the host name; every engine here is on this machine: loopback.
    env = ["GLOO_SOCKET_IFNAME=lo"]
    command = ["/usr/bin/env", f"PYTHONPATH={path}", interpreter, "/jobs/train_ddp.py", *common, "--work", str(args.work)]
    return command, [f"{site}:{site}:ro"], env


def torch_imports(site: str) -> str | None:
    """None when torch imports from ``site`` with this interpreter, else the last line of the error."""
    out = subprocess.run(
        [sys.executable, "-c", "import torch.distributed as d; assert d.is_available()"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": site, "PATH": "/usr/bin:/bin"},
    )
    return None if out.returncode == 0 else (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]


def reference_loss(args: argparse.Namespace, tmp: Path) -> float:
    """The same job's last loss run unscaled: one process, no container, ``--work 1``."""
    script = "train_gang.py" if args.torch_site is None else "train_ddp.py"
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), *([args.torch_site] if args.torch_site else [])]), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, str(de.JOBS / script), "--job", "ref", "--checkpoint-dir", str(tmp)]
        + ["--epochs", str(args.epochs), "--seed", str(args.seed), "--work", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
        env=env,
    )
    points = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"epoch"')]
    return float(points[-1]["loss"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    engines = de.start_engines(len(HOSTS))
    urls = {h: e.url for h, e in zip(HOSTS, engines.engines, strict=True)}
    daemon = None
    work = Path(tempfile.mkdtemp(prefix="fp-gang-"))
    db = work / "state.db"
    try:
        interpreter = de.python_mounts()[0]
        blocker = de.create_job(
            urls["h2"],
            "fp-blocker",
            "blocker",
            engines.ckpt,
            labels=PER_REPLICA,
            args=["--epochs", str(args.blocker_epochs)],
        )
        command, binds, env = _gang_command(args, interpreter)
        labels = {
            **PER_REPLICA,
            "flowplan.replicas": "3",
            "flowplan.min_replicas": "2",
            "flowplan.max_nodes": "3",
            "flowplan.checkpoint_seconds": "2",
            "flowplan.restart_seconds": "8",
            "flowplan.target.metric": "loss",
            "flowplan.target.direction": "lower",
            "flowplan.target.tier1": "0.2",
            "flowplan.target.tier2": "0.01",  # not reached: the job trains until max_epochs
            "flowplan.target.max_epochs": str(args.epochs),
        }
        if args.tier1_only:  # the planner then predicts the job's end at its curve's convergence
            labels.pop("flowplan.target.tier2")
            labels["flowplan.target.tier1"] = "0.0001"
        de.create_job(
            urls["h0"],
            "fp-gang",
            "gang",
            engines.ckpt,
            labels=labels,
            command=command,
            start=False,
            extra_binds=binds,
            extra_env=env,
        )
        hosts = [f"{h}={u},cpu=1000" for h, u in urls.items()]
        cmd = [sys.executable, "-m", "flowplan", "daemon", "--hosts", *hosts, "--state", str(db)]
        cmd += ["--interval", str(args.interval), "--time-limit", str(args.time_limit), "--checkpoint-timeout", "30"]
        print("$ " + " ".join(cmd), flush=True)
        log = open(work / "daemon.log", "w")  # noqa: SIM115 (kept open for the process)
        t0 = time.time()
        daemon = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = t0 + args.timeout
        while time.time() < deadline and not _finished(urls):
            if daemon.poll() is not None:
                raise SystemExit(f"the daemon exited with {daemon.returncode}: see {work / 'daemon.log'}")
            time.sleep(1)
        finished = _finished(urls)
        if finished:  # let the daemon read rank 0's last lines into the store
            _wait_for_history(db, args.epochs, time.time() + 3 * args.interval + 5)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        daemon = None
        res = collect(urls, db, blocker, t0)
        res.update(finished=finished, daemon_log=(work / "daemon.log").read_text(), load_average=os.getloadavg())
        res["reference_loss"] = reference_loss(args, work / "ref")
        if not any(a["kind"] == "migrate" for a in res["actions"] if a["job"] == "gang"):
            plan = _first_plan_after(db, t0 + (res["blocker_end"] or 0.0))
            res["explain"] = subprocess.run(
                [sys.executable, "-m", "flowplan", "explain", "gang", "--state", str(db), "--plans", "1", "--options", "10"]
                + ([] if plan is None else ["--plan", str(plan)]),
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=120,
            ).stdout
        res["state"] = str(db)
        return res
    finally:
        if daemon is not None:
            daemon.kill()
            daemon.wait()
        engines.close()


def _wait_for_history(db: Path, epochs: int, deadline: float) -> None:
    from store.state import StateStore

    while time.time() < deadline:
        with StateStore(str(db)) as store:
            if max((p.epoch for p in store.history("gang")), default=0.0) >= epochs:
                return
        time.sleep(0.5)


def _first_plan_after(db: Path, when: float) -> int | None:
    """The first plan the daemon made from a snapshot taken at ``when`` or later (the newest when none)."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT MIN(id) FROM plans WHERE time >= ?", (when,)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def collect(urls: dict[str, str], db: Path, blocker: str, t0: float) -> dict[str, Any]:
    """What happened, from the state store (actions, history) and the engines (the blocker's end, rank 0's log)."""
    from store.state import StateStore

    with StateStore(str(db)) as store:
        actions = [
            {
                "job": a.job,
                "kind": a.kind,
                "status": a.status,
                "message": a.message,
                "at": a.created - t0,
                "took": None if a.finished is None else a.finished - a.created,
            }
            for a in store.actions(limit=1000)
        ]
        history = [(p.epoch, p.time - t0, p.loss) for p in store.history("gang")]
    state = de.api(urls["h2"]).inspect_container(blocker)["State"]
    blocker_end = _engine_time(state["FinishedAt"]) - t0 if state["Status"] == "exited" else None
    rank0 = [(h, c) for h, c in _gang_containers(urls) if c["Labels"].get("flowplan.rank") == "0" and c["State"] != "created"]
    rendezvous = []
    for host, c in rank0:
        for e in log_events(c["Id"], urls[host]):
            if e.get("event") in ("rendezvous", "resumed"):
                rendezvous.append({"host": host, **e, "time": e["time"] - t0})
    return {"actions": actions, "history": history, "blocker_end": blocker_end, "rank0_events": rendezvous}


def report(args: argparse.Namespace, res: dict[str, Any]) -> None:
    print("\n$ python benchmarks/e2e_gang.py " + " ".join(sys.argv[1:]))
    script = "train_ddp.py (torch DDP, gloo)" if args.torch_site else "train_gang.py"
    print(f"job: {script}, {args.epochs} epochs, work {args.work}")
    print("daemon actions (seconds from the daemon's start):")
    for a in res["actions"]:
        took = "" if a["took"] is None else f" in {a['took']:.2f} s"
        print(f"  +{a['at']:6.1f} s  {a['kind']:<8} {a['job']:<8} {a['status']}{took}: {a['message']}")
    end = res["blocker_end"]
    print(f"blocker ended at {'-' if end is None else f'+{end:.1f} s'}")
    hist = res["history"]
    epochs = [e for e, _, _ in hist]
    contiguous = epochs == [float(i) for i in range(1, len(epochs) + 1)]
    state = "none missing or twice" if contiguous else f"NOT contiguous: {epochs}"
    print(f"history (the state store's): epochs 1..{len(epochs)} of {args.epochs}, {state}")
    migrates = [a for a in res["actions"] if a["job"] == "gang" and a["kind"] == "migrate"]
    times = {e: t for e, t, _ in hist}
    gaps = {e: times[e] - times[e - 1] for e in times if e - 1 in times}
    if migrates:
        m = migrates[0]
        resumed = [e["epoch"] for e in res["rank0_events"] if e["event"] == "resumed"]
        held = float(resumed[0]) if resumed else max((e for e, t, _ in hist if t <= m["at"]), default=0.0)
        after = times.get(held + 1)
        two = [v for e, v in gaps.items() if e <= held]
        three = [v for e, v in gaps.items() if e > held + 1]
        late = "" if end is None else f", {m['at'] - end:.1f} s after the blocker ended"
        print(f"rescale 2 -> 3 began at +{m['at']:.1f} s{late}; the migrate returned after {m['took'] or 0:.2f} s")
        if after is not None:
            first = after - m["at"]
            print(
                f"  epochs at 2 replicas: 1..{held:g}, at 3: {held + 1:g}..{epochs[-1]:g}; the first of the 3 {first:.1f} s later"
            )
        if two and three:
            print(f"  median epoch: {statistics.median(two):.3f} s at 2 replicas, {statistics.median(three):.3f} s at 3")
        for e in res["rank0_events"]:
            what = f"world_size {e.get('world_size')}" if e["event"] == "rendezvous" else f"from epoch {e.get('epoch')}"
            print(f"  rank 0 on {e['host']} at +{e['time']:.1f} s: {e['event']} {what}")
        for later in migrates[1:]:
            print(f"  another migrate at +{later['at']:.1f} s: {later['message']}")
    else:
        print("NO RESCALE: the daemon never migrated the gang. The planner's account of its first plan after the")
        print("blocker ended (flowplan explain gang --plan ID --options 10):")
        print(res.get("explain", ""))
    if hist:
        last = hist[-1][2]
        ref = res["reference_loss"]
        rel = abs(last - ref) / abs(ref) if last is not None and ref else float("nan")
        print(f"final loss: daemon's run {last!r}, unscaled reference {ref!r} (relative difference {rel:.1e})")
    print(f"gang finished: {res['finished']}; load average at the end {', '.join(f'{x:.2f}' for x in res['load_average'])}")
    print(f"state store: {res['state']}")
    print("daemon log:\n  " + "\n  ".join(res["daemon_log"].splitlines()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--epochs", type=int, default=300, help="the gang's epochs")
    ap.add_argument("--work", type=int, default=6000, help="forward passes per shard and epoch (the job's --work)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blocker-epochs", type=int, default=6, help="epochs of the job that holds the third host")
    ap.add_argument("--interval", type=float, default=5.0, help="the daemon's --interval")
    ap.add_argument("--time-limit", type=float, default=1.0, help="the daemon's --time-limit")
    ap.add_argument("--timeout", type=float, default=420.0, help="give up waiting for the gang after this many seconds")
    ap.add_argument(
        "--tier1-only",
        action="store_true",
        help="the gang's target has an unreachable tier 1 and no tier 2 (the planner predicts its end from its curve)",
    )
    ap.add_argument("--torch-site", help="a site-packages with torch: run the DDP variant (examples/jobs/train_ddp.py)")
    args = ap.parse_args()
    for name in ("epochs", "work", "blocker_epochs"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: must be at least 1 ({getattr(args, name)})")
    if not 0 < args.interval < 3600 or not 0 < args.timeout < 86400:
        ap.error(f"--interval / --timeout out of range ({args.interval}, {args.timeout})")
    if args.torch_site is not None and (why := torch_imports(args.torch_site)) is not None:
        ap.error(f"--torch-site: torch does not import from {args.torch_site!r} ({why})")
    report(args, run(args))


if __name__ == "__main__":
    main()
