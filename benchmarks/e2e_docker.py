"""End to end on the real Docker engine: real training containers under Docker's default and under the daemon.

    python benchmarks/e2e_docker.py e2e [--jobs 5] [--gap 10] [--epochs 40] [--work 120] [--interval 3] [--no-deadline]
                                        [--side-by-side DEFAULT_CPUS DAEMON_CPUS] [--repeat N]
    python benchmarks/e2e_docker.py overhead [--containers 100]

``e2e``: ``--jobs`` containers of ``examples/jobs/train_digits.py`` arrive ``--gap`` seconds apart on
this machine's engine (one node, its cores). The third to arrive has a tight tier-1 target
(validation accuracy 0.93 within ``--tight`` seconds of its arrival, priority 4); the others have
tier 1 = 0.90 without a deadline. ``--no-deadline``: every job is like the others (a batch with no
deadline, where the mean completion time is what counts). Run twice:

- ``default``: ``docker run`` without limits (Docker's default: CFS shares equal for all);
- ``daemon``: the jobs are created (pending) and ``flowplan daemon`` places and sizes them
  (guarantees as ``CpuShares``, each job capped at its declared max of 1000m, re-planned at once when
  a job arrives or ends, and every ``--interval`` seconds).

``--side-by-side 0 1`` runs the two at the same time instead, each pinned to its cpuset (a node of
that many cores): Docker's default on the main engine, the daemon (itself pinned there too, with
``taskset``) on a private engine (``tests/docker_env.py``). On a shared machine, whatever else runs
then weighs on both alike; run one after the other, the two modes see different background load.

Printed per run: each job's time to tier 1 and to finish (from its arrival), the prioritised job's
time to target, the makespan (first arrival to last finish), the mean completion time (JCT), the
daemon's actions, and under the daemon how long each job waited from its container's creation to
its first start (from the engine's own ``create`` and ``start`` event times) and the CPU the daemon
itself used (from /proc, start-up included: side by side it is taken from its jobs' core).
``--repeat N`` adds a summary of the N runs (``summarize``); where Docker's default met the deadline in
half the runs or more, it says the deadline was not tight on this machine and what ``--tight`` would be.

``overhead``: ``--containers`` light containers that print a JSON progress line each second; the
adapter's observe and apply (a CPU change for every container) are timed: wall time, this process's
CPU time, and dockerd's CPU time (from /proc), over a few intervals; and one FlowPlan plan of that
snapshot. Figures only, no asserts; recorded in docs/docker.md.
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
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import docker_env as de  # noqa: E402  (the same image and mounts as the tests)

SOCKET = "/var/run/docker.sock"
URL = f"unix://{SOCKET}"


class StartTimes:
    """The engine's ``create`` and ``start`` events of job containers, in a background thread (engine times)."""

    def __init__(self, url: str) -> None:
        self.created: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self._stream = de.api(url).events(
            decode=True, filters={"type": "container", "label": ["flowplan.job"], "event": ["create", "start"]}
        )
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        for ev in self._stream:
            job = (ev.get("Actor") or {}).get("Attributes", {}).get("flowplan.job")
            t = int(ev.get("timeNano") or 0) / 1e9
            table = self.created if ev.get("Action") == "create" else self.started
            if job and t and job not in table:
                table[job] = t

    def close(self) -> None:
        self._stream.close()

    def latency(self, job: str) -> float | None:
        if job in self.created and job in self.started:
            return self.started[job] - self.created[job]
        return None


def _labels(i: int, tight: float, epochs: int, prioritised: bool) -> dict[str, str]:
    labels = {
        "flowplan.min_cpu_millis": "250",
        "flowplan.max_cpu_millis": "1000",
        "flowplan.checkpoint_seconds": "3",
        "flowplan.restart_seconds": "3",
        "flowplan.target.metric": "accuracy",
        "flowplan.target.direction": "higher",
        "flowplan.target.max_epochs": str(epochs),
    }
    if prioritised:
        labels.update({"flowplan.target.tier1": "0.93", "flowplan.target.tier1.within": str(tight), "flowplan.priority": "4"})
    else:
        labels["flowplan.target.tier1"] = "0.90"
    return labels


def _events(container: str, url: str = URL) -> list[dict[str, Any]]:
    out = []
    for line in de.api(url).logs(container).decode().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def run_e2e(
    mode: str, args: argparse.Namespace, url: str = URL, cpuset: str | None = None, start_at: float | None = None
) -> dict[str, Any]:
    """One run of the batch in ``mode`` on the engine at ``url``; jobs pinned to ``cpuset`` when given."""
    de.remove_jobs(url)
    de.ensure_image(url)
    ckpt = Path(tempfile.mkdtemp(prefix="fp-e2e-"))
    client = de.api(url)
    daemon = None
    db = ckpt / "state.db"
    starts = StartTimes(url)
    cpu = args.cpu if cpuset is None else 1000 * len(_cpus(cpuset))
    if mode == "daemon":
        cmd = [sys.executable, "-m", "flowplan", "daemon", "--hosts", f"local={url},cpu={cpu}", "--state", str(db)]
        cmd += ["--interval", str(args.interval), "--time-limit", str(args.time_limit), "--checkpoint-timeout", "30"]
        if cpuset is not None:  # the daemon's own CPU counts against its side
            cmd = ["taskset", "-c", cpuset, *cmd]
        print("$ " + " ".join(cmd), flush=True)
        log = open(ckpt / "daemon.log", "w")  # noqa: SIM115
        daemon = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        time.sleep(2)
    prioritised = -1 if args.no_deadline else min(2, args.jobs - 1)
    ids = {}
    arrivals: dict[str, float] = {}
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.time()))
    t0 = time.time()
    for i in range(args.jobs):
        time.sleep(max(0.0, t0 + i * args.gap - time.time()))
        arrivals[f"job{i}"] = time.time()
        job_args = ["--epochs", str(args.epochs), "--work", str(args.work), "--seed", str(i)]
        ids[f"job{i}"] = de.create_job(
            url,
            f"fp-e2e-{i}",
            f"job{i}",
            ckpt,
            labels=_labels(i, args.tight, args.epochs, i == prioritised),
            args=job_args,
            cpuset=cpuset,
            start=(mode == "default"),
        )
    deadline = time.time() + args.timeout
    while time.time() < deadline:
        states = []
        for job in ids:
            cs = client.containers(all=True, filters={"label": f"flowplan.job={job}"})
            states.append(bool(cs) and all(c["Status"].startswith("Exited (0)") for c in cs))
        if all(states):
            break
        time.sleep(1)
    daemon_cpu = None
    if daemon is not None:
        daemon_cpu = _proc_cpu(daemon.pid)  # before it stops: its own CPU over the batch, start-up included
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    starts.close()
    result: dict[str, Any] = {"mode": mode, "jobs": {}, "load_average": os.getloadavg()[0], "cpuset": cpuset, "cpu": cpu}
    if daemon_cpu is not None:
        result["daemon_cpu_s"] = daemon_cpu
    for job in ids:
        (c,) = client.containers(all=True, filters={"label": f"flowplan.job={job}"})
        arrival = arrivals[job]  # a re-created container is younger than its job: count from the submission
        evs = _events(c["Id"], url)
        pts = [e for e in evs if "epoch" in e and "metric" in e and "event" not in e]
        target = 0.93 if int(job[3:]) == prioritised else 0.90
        t1 = next((e["time"] for e in pts if e["metric"] >= target), None)
        fin = next((e["time"] for e in evs if e.get("event") == "finished"), None)
        result["jobs"][job] = {
            "arrival": arrival - t0,
            "tier1_s": None if t1 is None else t1 - arrival,
            "finish_s": None if fin is None else fin - arrival,
            "finished_at": None if fin is None else fin - t0,
            "prioritised": int(job[3:]) == prioritised,
            "start_latency_s": starts.latency(job),
        }
    fins = [j["finished_at"] for j in result["jobs"].values()]
    result["makespan_s"] = None if None in fins else max(fins)
    jcts = [j["finish_s"] for j in result["jobs"].values()]
    result["mean_jct_s"] = None if None in jcts else statistics.mean(jcts)
    if daemon is not None:
        result["daemon_log"] = str(ckpt / "daemon.log")
    if db.exists():
        import sqlite3

        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT kind, status, COUNT(*) FROM actions GROUP BY kind, status").fetchall()
        result["actions"] = {f"{k}/{s}": n for k, s, n in rows}
    de.remove_jobs(url)
    return result


def _cpus(cpuset: str) -> list[int]:
    out: list[int] = []
    for part in cpuset.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def run_side_by_side(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Both modes at once: Docker's default on the main engine pinned to one cpuset, the daemon on a
    private engine pinned to the other, same arrivals. Whatever else runs on the machine then weighs
    on both alike, instead of on whichever ran second.

    The private engine puts its containers under a cgroup of their own (``/fp-side``), a sibling of
    the main engine's ``/docker`` with the same weight. Under one parent, the daemon's shares (1024
    per core of its node) would weigh less on their CPU than Docker's default 1024 per container on
    the other, and the kernel's load balancer would move the machine's other work onto the daemon's
    CPU (seen in a first try: both of another session's busy processes sat on CPU 1)."""
    engines = de.start_engines(1, extra_args=["--cgroup-parent=/fp-side"])
    try:
        start_at = time.time() + 6
        out: dict[str, dict[str, Any]] = {}

        def run(mode: str, url: str, cpuset: str) -> None:
            out[mode] = run_e2e(mode, args, url=url, cpuset=cpuset, start_at=start_at)

        threads = [
            threading.Thread(target=run, args=("default", URL, args.side_by_side[0])),
            threading.Thread(target=run, args=("daemon", engines.engines[0].url, args.side_by_side[1])),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [out["default"], out["daemon"]]
    finally:
        engines.close()


def _print_e2e(res: dict[str, Any], tight: float) -> None:
    print(f"\n== {res['mode']}" + (f" (pinned to CPUs {res['cpuset']}, node {res['cpu']}m)" if res.get("cpuset") else ""))
    print(f"  {'job':<6} {'arrive':>7} {'tier1 after':>12} {'finish after':>13}")  # after: from the job's arrival
    for job, j in res["jobs"].items():
        t1 = "never" if j["tier1_s"] is None else f"{j['tier1_s']:.1f} s"
        fin = "-" if j["finish_s"] is None else f"{j['finish_s']:.1f} s"
        mark = f"  <- prioritised (0.93 within {tight:g} s)" if j["prioritised"] else ""
        print(f"  {job:<6} {j['arrival']:>6.0f}s {t1:>12} {fin:>13}{mark}")
    ms = res["makespan_s"]
    print(f"  makespan {'-' if ms is None else f'{ms:.1f} s'}")
    if res.get("actions"):
        print(f"  daemon actions: {res['actions']}")
    mean = res.get("mean_jct_s")
    print(f"  mean JCT {'-' if mean is None else f'{mean:.1f} s'}   (load average at the end: {res['load_average']:.2f})")
    if res["mode"] == "daemon":
        lat = [j["start_latency_s"] for j in res["jobs"].values()]
        shown = ", ".join("-" if x is None else f"{x:.2f} s" for x in lat)
        print(f"  created -> first started, per job: {shown}")
        if res.get("daemon_cpu_s") is not None:
            print(f"  the daemon's own CPU: {res['daemon_cpu_s']:.2f} s (start-up included)")
        print(f"  daemon log: {res.get('daemon_log')}")


def cmd_e2e(args: argparse.Namespace) -> None:
    runs = []
    for k in range(args.repeat):
        if args.repeat > 1:
            print(f"\n### run {k + 1} of {args.repeat}", flush=True)
        results = run_side_by_side(args) if args.side_by_side else [run_e2e(m, args) for m in args.modes]
        print("\n$ python benchmarks/e2e_docker.py " + " ".join(sys.argv[1:]))
        for r in results:
            _print_e2e(r, args.tight)
        by = {r["mode"]: r for r in results}
        if {"default", "daemon"} <= set(by) and by["default"]["makespan_s"] and by["daemon"]["makespan_s"]:
            d, f = by["default"], by["daemon"]
            print(
                f"\ndaemon vs default: makespan {f['makespan_s']:.1f} s vs {d['makespan_s']:.1f} s "
                f"({100 * (f['makespan_s'] / d['makespan_s'] - 1):+.1f}%), "
                f"mean JCT {f['mean_jct_s']:.1f} s vs {d['mean_jct_s']:.1f} s "
                f"({100 * (f['mean_jct_s'] / d['mean_jct_s'] - 1):+.1f}%)"
            )
        print("\nJSON:", json.dumps(results), flush=True)
        runs.append(by)
    if args.repeat > 1:
        print()
        for line in summarize(runs, args.tight):
            print(line)


def summarize(runs: list[dict[str, dict[str, Any]]], tight: float) -> list[str]:
    """One line per run (the two modes side by side) and what the runs add up to.

    ``runs``: each run's results by mode, as ``run_e2e`` returns them. The figures are the daemon's
    against Docker's default in the same run; the issue's conditions with a deadline are "the
    prioritised job meets it and the makespan is no longer than the default's", without one "the
    mean JCT no worse than the default's". A run in which a mode did not finish every job is shown
    and left out of the means.
    """
    both = [r for r in runs if {"default", "daemon"} <= set(r)]
    if not both:
        return ["no run had both modes"]
    deadline = any(j["prioritised"] for j in both[0]["default"]["jobs"].values())
    lines = [f"{len(both)} run(s), the daemon against Docker's default in each:"]
    head = f"  {'run':>3}  {'makespan':>22}  {'mean JCT':>22}"
    head += f"  {'to 0.93 default / daemon':>24}" if deadline else ""
    lines.append(head + f"  {'pauses':>6}")
    spans, jcts, met, kept, paused, cpus = [], [], {"default": 0, "daemon": 0}, 0, 0, []
    defaults: list[float] = []  # the default's time to the prioritised job's target, per run
    for k, r in enumerate(both, 1):
        d, f = r["default"], r["daemon"]
        pauses = int((f.get("actions") or {}).get("pause/done", 0))
        paused += pauses
        if f.get("daemon_cpu_s") is not None and f["makespan_s"]:
            cpus.append((f["daemon_cpu_s"], 100 * f["daemon_cpu_s"] * 1000 / (f["cpu"] * f["makespan_s"])))
        done = all(x["makespan_s"] and x["mean_jct_s"] for x in (d, f))
        span = 100 * (f["makespan_s"] / d["makespan_s"] - 1) if done else None
        jct = 100 * (f["mean_jct_s"] / d["mean_jct_s"] - 1) if done else None
        row = f"  {k:>3}  " + (
            f"{d['makespan_s']:>6.1f} -> {f['makespan_s']:>6.1f} s {span:+6.1f}%  "
            f"{d['mean_jct_s']:>6.1f} -> {f['mean_jct_s']:>6.1f} s {jct:+6.1f}%"
            if span is not None and jct is not None
            else f"{'not every job finished':>48}"
        )
        if span is not None and jct is not None:
            spans.append(span)
            jcts.append(jct)
        if deadline:
            t1 = {
                m: next((j["tier1_s"] for j in x["jobs"].values() if j["prioritised"]), None)
                for m, x in (("default", d), ("daemon", f))
            }
            ok = {m: t is not None and t <= tight for m, t in t1.items()}
            if t1["default"] is not None:
                defaults.append(t1["default"])
            for m in ok:
                met[m] += ok[m]
            shown = " / ".join("never" if t is None else f"{t:.1f} s" + ("" if ok[m] else "!") for m, t in t1.items())
            row += f"  {shown:>24}"
            kept += bool(ok["daemon"] and span is not None and span <= 0)
        else:
            kept += bool(jct is not None and jct <= 0)
        lines.append(row + f"  {pauses:>6}")
    if spans:
        lines.append(
            f"mean over {len(spans)} run(s): makespan {statistics.mean(spans):+.1f}% "
            f"({min(spans):+.1f} to {max(spans):+.1f}), mean JCT {statistics.mean(jcts):+.1f}% "
            f"({min(jcts):+.1f} to {max(jcts):+.1f}); pauses {paused / len(both):.1f} a run"
        )
    if cpus:
        lines.append(
            f"the daemon's own CPU: {statistics.mean(c for c, _ in cpus):.2f} s a run "
            f"({min(c for c, _ in cpus):.2f} to {max(c for c, _ in cpus):.2f}), "
            f"{statistics.mean(p for _, p in cpus):.1f}% of its node's CPU over the makespan"
        )
    if deadline:
        lines.append(
            f"deadline ({tight:g} s) met: default {met['default']} of {len(both)}, "
            f"daemon {met['daemon']} of {len(both)} (! = missed)"
        )
        lines.append(f"deadline met and makespan no longer than the default's: {kept} of {len(both)}")
        if defaults and met["default"] * 2 >= len(both):
            # The default met it in half the runs or more: on this machine the deadline asks nothing
            # of the daemon (a faster machine than the one --tight was set on), so say what would.
            lines.append(
                f"the deadline was not tight here: the default met it in {met['default']} of {len(both)}; "
                f"its time to 0.93 was {statistics.median(defaults):.1f} s (median), so --tight "
                f"{0.7 * statistics.median(defaults):.0f} (0.7 of that) makes it bind"
            )
    else:
        lines.append(f"mean JCT no worse than the default's: {kept} of {len(both)}")
    return lines


def _proc_cpu(pid: int) -> float | None:
    """The CPU seconds process ``pid`` used so far (user + system, every thread), from /proc; ``None``
    if it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _dockerd_cpu() -> float:
    """dockerd's CPU seconds so far (user + system), from /proc; 0 if it cannot be read."""
    try:
        pid = int(Path("/var/run/docker.pid").read_text())
    except (OSError, ValueError):
        return 0.0
    return _proc_cpu(pid) or 0.0


def cmd_overhead(args: argparse.Namespace) -> None:
    from adapters.base import Change
    from adapters.docker import DockerAdapter, HostSpec
    from planner.policies import make_policy

    de.remove_jobs(URL)
    de.ensure_image(URL)
    client = de.api(URL)
    script = 'i=0; while true; do i=$((i+1)); echo "{\\"epoch\\": $i, \\"loss\\": 1.0}"; sleep 1; done'
    t = time.time()
    for i in range(args.containers):
        res = client.create_container(
            de.IMAGE,
            command=["/bin/sh", "-c", script],
            name=f"fp-ovh-{i}",
            labels={"flowplan.job": f"ovh{i}", "flowplan.min_cpu_millis": "10", "flowplan.max_cpu_millis": "100"},
            host_config=client.create_host_config(binds=["/usr:/usr:ro"], network_mode="none", nano_cpus=50_000_000),
        )
        client.start(res["Id"])
    print(f"started {args.containers} containers in {time.time() - t:.1f} s")
    time.sleep(3)
    ad = DockerAdapter([HostSpec("local", URL, cpu_millis=args.containers * 100)])
    rows = []
    for k in range(args.rounds):
        w0, c0, d0 = time.perf_counter(), time.process_time(), _dockerd_cpu()
        snap = ad.observe()
        w1, c1, d1 = time.perf_counter(), time.process_time(), _dockerd_cpu()
        cpu = 50 if k % 2 else 60
        changes = [Change(j.id, "resize", "local", cpu, 0, from_node="local") for j in snap.jobs]
        outs = ad.apply(changes)
        w2, c2, d2 = time.perf_counter(), time.process_time(), _dockerd_cpu()
        ok = sum(o.ok for o in outs)
        rows.append((w1 - w0, c1 - c0, d1 - d0, w2 - w1, c2 - c1, d2 - d1, len(snap.jobs), ok))
        time.sleep(1)
    head = ("round", "jobs", "observe wall", "cpu", "dockerd", "apply wall", "cpu", "dockerd", "ok")
    widths = (5, 5, 13, 7, 8, 11, 7, 8, 4)
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
    for i, r in enumerate(rows):
        print(f"{i:>5} {r[6]:>5} {r[0]:>12.2f}s {r[1]:>6.2f}s {r[2]:>7.2f}s {r[3]:>10.2f}s {r[4]:>6.2f}s {r[5]:>7.2f}s {r[7]:>4}")
    steady = rows[1:] or rows
    print(
        f"median over rounds 1-{len(rows) - 1}: observe {statistics.median(r[0] for r in steady):.2f} s wall, "
        f"{statistics.median(r[1] for r in steady):.2f} s CPU (+ dockerd {statistics.median(r[2] for r in steady):.2f} s); "
        f"apply {len(changes)} resizes {statistics.median(r[3] for r in steady):.2f} s wall, "
        f"{statistics.median(r[4] for r in steady):.2f} s CPU (+ dockerd {statistics.median(r[5] for r in steady):.2f} s)"
    )
    snap = ad.observe()
    policy = make_policy("flowplan", time_limit=1.0)
    w, c = time.perf_counter(), time.process_time()
    policy(snap)
    print(f"FlowPlan plan for {len(snap.jobs)} jobs: {time.perf_counter() - w:.2f} s wall, {time.process_time() - c:.2f} s CPU")
    de.remove_jobs(URL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    e = sub.add_parser("e2e")
    e.add_argument("--jobs", type=int, default=5)
    e.add_argument("--gap", type=float, default=10.0, help="seconds between arrivals")
    e.add_argument("--epochs", type=int, default=40)
    e.add_argument("--work", type=int, default=120)
    e.add_argument("--tight", type=float, default=25.0, help="the prioritised job's tier-1 deadline after its arrival")
    e.add_argument("--interval", type=float, default=3.0)
    e.add_argument("--time-limit", type=float, default=0.5)
    e.add_argument("--cpu", type=int, default=(os.cpu_count() or 2) * 1000, help="the node's CPU in millicores")
    e.add_argument("--timeout", type=float, default=900.0)
    e.add_argument("--modes", nargs="+", default=["default", "daemon"], choices=["default", "daemon"])
    e.add_argument("--no-deadline", action="store_true", help="no prioritised job: a batch with no deadline (mean JCT counts)")
    e.add_argument("--repeat", type=int, default=1, help="run it this many times, then a line per run and their means")
    e.add_argument(
        "--side-by-side",
        nargs=2,
        metavar=("DEFAULT_CPUS", "DAEMON_CPUS"),
        help="run both modes at once, each pinned to its cpuset (e.g. 0 1); the daemon on a private engine",
    )
    o = sub.add_parser("overhead")
    o.add_argument("--containers", type=int, default=100)
    o.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    if args.what == "e2e":
        cmd_e2e(args)
    else:
        cmd_overhead(args)


if __name__ == "__main__":
    main()
