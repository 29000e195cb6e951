"""``flowplan status``, ``flowplan events`` and ``flowplan explain``: the operator's view of a state
store that a daemon (or ``flowplan simulate --state``) writes.

- ``status``: one line per job of the latest plan, like ``kubectl get``: state, node, CPU/GPU
  guaranteed, CPU in use (as the adapter measured it over the interval before the plan), progress,
  ETA to tier 1 with its 80% band, deadline met or not, and the one-line reason. ``-o wide`` adds
  tier 2, the finish and where the numbers come from; ``-o json`` prints the rows; ``--watch S``
  reprints every S seconds; ``--live`` observes the cluster (Docker hosts or Kubernetes) and plans
  it once instead of reading the store, applying nothing.
- ``events``: what the daemon set out to do, when, and how it ended (the actions table).
- ``explain JOB`` (:mod:`flowplan.explain_cmd`): one job's story over the last plans, what it was
  offered and what its deadline would take.

Times are shown relative to the plan's own clock (the snapshot's ``time``), so a simulated run
reads the same as a live one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from flowplan.argtypes import positive, whole
from flowplan.state_arg import add_state_argument, exists, open_store, shown

_STATE_USE = "the state store the daemon writes"


def register(sub: Any) -> None:
    st = sub.add_parser(
        "status",
        help="one line per job from the latest plan in a state store (like kubectl get)",
        description="One line per job of the latest plan the daemon (or flowplan simulate --state) recorded: state, "
        "node, guaranteed CPU/GPU, progress, ETA to tier 1, deadline met, and why.",
    )
    from flowplan.daemon import add_adapter_arguments

    add_adapter_arguments(st)  # --state, and the cluster to read with --live
    st.add_argument(
        "--live",
        action="store_true",
        help="observe the cluster (--adapter, --hosts or --kubeconfig) and plan it now, instead of reading the state store",
    )
    st.add_argument("-o", "--output", choices=["table", "wide", "json"], default="table", help="output format (default: table)")
    st.add_argument("--watch", type=positive, metavar="S", help="reprint every S seconds until interrupted")
    st.add_argument("--plan", type=whole(1), metavar="ID", help="show this plan instead of the latest")
    st.add_argument(
        "-a",
        "--all",
        action="store_true",
        help="also the finished jobs the cluster still shows (like docker ps -a): Succeeded, or Failed and how",
    )
    st.set_defaults(func=run_status)

    ev = sub.add_parser(
        "events",
        help="what the daemon did, when, and how it ended",
        description="The actions the daemon set out to apply (newest last): when, which job, what, and how it ended.",
    )
    add_state_argument(ev, _STATE_USE)
    ev.add_argument("--job", metavar="JOB", help="only this job's")
    ev.add_argument("--limit", type=whole(1, 100_000), default=50, metavar="N", help="the newest N (default 50)")
    ev.add_argument("-o", "--output", choices=["table", "json"], default="table")
    ev.set_defaults(func=run_events)

    from flowplan import explain_cmd

    explain_cmd.register(sub)  # its own module: it works out what the job was offered


def _open(location: str) -> Any:
    return open_store(location, must_exist=True)


def _dur(seconds: float) -> str:
    from planner.decode import duration

    return duration(max(seconds, 0.0))


def _clock(t: float) -> str:
    """A plan's time: wall-clock time of day for Unix times, else (a simulation) time since 0."""
    return time.strftime("%H:%M:%S", time.localtime(t)) if t > 1e9 else "t+" + _dur(t)


def _state(job: Any, action: str) -> str:
    if job is None:
        return "Unknown"
    if action == "start":
        return "Starting"
    if action == "wait":
        return "Waiting"
    if action == "pause":
        return "Pausing"
    if action == "migrate":
        return "Migrating"
    if action == "resize":
        return "Resizing"
    return "Running"


def _bands(job: Any, settings: Any, tiers: list[tuple[str, float, float | None]]) -> dict[str, list[float | None]]:
    """80% bands of the seconds to each open tier: ``tiers`` are (name, seconds the plan predicts to
    it, its epochs left). The job's curve, fitted again from the snapshot, gives the band's epochs
    (:meth:`models.curves.CurveFit.seen_interval`, as the planner reads it) relative to its median; they are
    turned into seconds at the plan's own rate to the tier (its seconds over its epochs left), so the
    band brackets the plan's own time, which comes from the share rollout.
    An upper end of ``None``: the pessimistic curve never gets there."""
    from planner import PlannerConfig
    from planner.outlook import build_outlook

    out: dict[str, list[float | None]] = {}
    if job is None or job.target is None or not tiers:
        return out
    outlook = build_outlook(job, settings, PlannerConfig())
    curve = outlook.curve
    if curve is None:
        return out
    cadence = outlook.report_cadence
    values = {"tier1": job.target.tier1.value, "tier2": job.target.tier2.value if job.target.tier2 else None}
    epoch = curve.last_epoch
    for name, seconds, left in tiers:
        value = values.get(name)
        mid = curve.epoch_seen(value, cadence=cadence) if value is not None else None
        if value is None or mid is None or mid <= epoch or not left:
            continue
        lo, hi = curve.seen_interval(value, cadence=cadence)
        # The plan's seconds per epoch on the way there, over the epochs it plans (the plan counts the
        # epoch under way, which the reports do not show: ``planner.outlook.with_progress``).
        per = seconds / left
        out[name] = [
            max(seconds - (mid - lo) * per, 0.0) if lo is not None else None,
            max(seconds + (hi - mid) * per, 0.0) if hi is not None else None,
        ]
    return out


def _ended_row(job: Any) -> dict[str, Any]:
    """The row of a finished job of the snapshot (``--all``): ``Succeeded``, or ``Failed`` and how."""
    epoch = max((p.epoch for p in job.history), default=0.0)
    return {
        "job": job.id,
        "state": "Failed" if job.failure is not None else "Succeeded",
        "action": None,
        "node": None,
        "replicas": job.replicas,
        "placement": None,
        "servers": None,
        "cpu_millis": None,
        "cpu_limit_millis": None,
        "cpu_used_millis": None,
        "gpus": None,
        "epoch": epoch,
        "epochs_total": None,
        "eta_tier1_s": None,
        "tier1_reached": None,
        "tier1_deadline_s": None,
        "tier1_met": None,
        "eta_tier2_s": None,
        "eta_finish_s": None,
        "reason": f"failed: {job.failure}" if job.failure is not None else "finished",
        "basis": None,
        "failure": job.failure,
        "eta_tier1_band_s": None,
        "eta_tier2_band_s": None,
    }


def status_rows(plan: Any, snapshot: Any, *, bands: bool = True, ended: bool = False) -> list[dict[str, Any]]:
    """One dict per job of ``plan`` (the JSON output's rows); ``bands``: with the 80% band of the
    time to each open tier (curves fitted again from the snapshot); ``ended``: then a row for each
    finished job of the snapshot (``--all``)."""
    jobs = {j.id: j for j in snapshot.jobs} if snapshot is not None else {}
    unserved = {u.job: u.reason for u in plan.unserved}
    rows = []
    for a in plan.assignments:
        p = a.predictions
        job = jobs.get(a.job)
        total = p.epoch + p.epochs_to_finish if p.epochs_to_finish is not None else None
        rows.append(
            {
                "job": a.job,
                "state": _state(job, a.action),
                "action": a.action,
                "node": a.node,
                "replicas": a.replicas,
                "placement": [{"node": x.node, "replicas": x.replicas} for x in a.placement] if a.placement else None,
                "servers": a.servers,
                "cpu_millis": a.cpu_millis if a.node else None,
                "cpu_limit_millis": a.cpu_limit_millis,
                "cpu_used_millis": job.cpu_used_millis if job is not None else None,
                "gpus": a.gpus if a.node else None,
                "epoch": p.epoch,
                "epochs_total": total,
                "eta_tier1_s": None if p.eta_tier1 is None else p.eta_tier1 - plan.time,
                "tier1_reached": p.tier1_reached,
                "tier1_deadline_s": None if p.tier1_deadline is None else p.tier1_deadline - plan.time,
                "tier1_met": p.tier1_satisfied,
                "eta_tier2_s": None if p.eta_tier2 is None else p.eta_tier2 - plan.time,
                "eta_finish_s": None if p.eta_finish is None else p.eta_finish - plan.time,
                "reason": unserved.get(a.job) or _reason(a.explanation),
                "basis": p.basis,
                "failure": None,
            }
        )
        row = rows[-1]
        open_tiers = [
            (name, row[f"eta_{name}_s"], left)
            for name, left in (("tier1", p.epochs_to_tier1), ("tier2", p.epochs_to_tier2))
            if row[f"eta_{name}_s"] is not None and not (name == "tier1" and p.tier1_reached)
        ]
        found = _bands(job, snapshot.settings, open_tiers) if bands and snapshot is not None else {}
        row["eta_tier1_band_s"] = found.get("tier1")
        row["eta_tier2_band_s"] = found.get("tier2")
    if ended:
        planned = {a.job for a in plan.assignments}
        rows += [_ended_row(j) for j in jobs.values() if j.status == "finished" and j.id not in planned]
    return rows


def _eta(seconds: float | None, band: list[float | None] | None) -> str:
    if seconds is None:
        return "-"
    text = f"in {_dur(seconds)}"
    if band is not None and band[0] is not None:
        lo = "now" if band[0] < 1.0 else _dur(band[0])
        text += f" ({lo}-{'never' if band[1] is None else _dur(band[1])})"
    return text


def _reason(explanation: str) -> str:
    """The explanation's first sentence, without the job's name in front."""
    first = explanation.split("; ")[0]
    return first.split(": ", 1)[1] if ": " in first else first


def _where(r: dict[str, Any]) -> str:
    """The NODE column: ``n0``; a gang's replicas ``n0x2``, spread ``n0x4+n1x4``, and a parameter-server
    job's servers on each of its nodes after: ``n0x4+n1x4 +2ps`` (as ``flowplan plan`` shows them)."""
    from flowplan.render import where_text
    from planner.snapshot import Share

    placement = [Share(node=x["node"], replicas=x["replicas"]) for x in r["placement"]] if r.get("placement") else None
    replicas = int(r.get("replicas") or 1)
    return where_text(r["node"], placement, replicas, replicas > 1, r.get("servers"))


def _fmt_row(r: dict[str, Any], wide: bool) -> list[str]:
    if r["action"] is None:  # a finished job (--all)
        return [
            r["job"],
            r["state"],
            "-",
            "-",
            "-",
            f"{r['epoch']:.4g}",
            "-",
            "-",
            *(["-", "-"] if wide else []),
            r["reason"],
            *(["-"] if wide else []),
        ]
    cpu = "-" if r["cpu_millis"] is None else f"{r['cpu_millis'] / 1000:g}" + (f"+{r['gpus']}g" if r["gpus"] else "")
    progress = f"{r['epoch']:.4g}" + (f"/{r['epochs_total']:.4g}" if r["epochs_total"] is not None else "")
    if r["tier1_reached"]:
        t1 = "reached"
    else:
        t1 = _eta(r["eta_tier1_s"], r.get("eta_tier1_band_s"))
    met = {True: "met", False: "MISS", None: "-"}[r["tier1_met"]]
    if r["tier1_deadline_s"] is not None:
        met += f" ({_dur(r['tier1_deadline_s'])} left)" if r["tier1_deadline_s"] >= 0 else " (passed)"
    used = "-" if r.get("cpu_used_millis") is None else f"{r['cpu_used_millis'] / 1000:.3g}"
    row = [r["job"], r["state"], _where(r), cpu, used, progress, t1, met]
    if wide:
        t2 = _eta(r["eta_tier2_s"], r.get("eta_tier2_band_s"))
        fin = "-" if r["eta_finish_s"] is None else f"in {_dur(r['eta_finish_s'])}"
        row += [t2, fin, r["reason"], r["basis"]]
    else:
        row.append(r["reason"] if len(r["reason"]) <= 70 else r["reason"][:67] + "...")
    return row


def render_status(
    plan_id: int, plan: Any, snapshot: Any, output: str, stream: Any = None, *, live: bool = False, ended: bool = False
) -> None:
    """Write the status to ``stream`` (standard output): JSON, or the table (rich on a terminal);
    ``ended``: the finished jobs too (``--all``)."""
    from flowplan.tables import emit

    out = stream if stream is not None else sys.stdout
    rows = status_rows(plan, snapshot, ended=ended)
    if output == "json":
        out.write(json.dumps({"plan_id": plan_id, "time": plan.time, "jobs": rows}, indent=1) + "\n")
        return
    wide = output == "wide"
    header = ["JOB", "STATE", "NODE", "CPU(+GPU)", "USED", "EPOCH", "TIER 1", "DEADLINE"]
    header += ["TIER 2", "FINISH", "WHY", "BASIS"] if wide else ["WHY"]
    s = plan.summary
    head = "live plan (nothing applied)" if live else f"plan {plan_id}"
    head += f": {s.active_jobs} job(s), {s.placed} placed, {s.unserved} waiting; solver {plan.solver.name} "
    head += f"{plan.solver.status} in {plan.solver.seconds:.2f} s"
    out.write(head + "\n\n")
    if rows:
        emit([_fmt_row(r, wide) for r in rows], header, out)
    else:
        out.write("no active jobs\n")
    for w in plan.warnings:
        out.write(f"warning: {w}\n")


def _live(args: argparse.Namespace) -> int:
    """Observe once, plan once (as the daemon would, 1 s of search), and show it; changes nothing."""
    from adapters.docker import MemoryStore
    from flowplan.daemon import build_adapter
    from planner import PlannerConfig, plan

    store: Any = open_store(args.state) if exists(args.state) else MemoryStore()
    adapter = build_adapter(args, store, read_stats=False) if args.adapter == "docker" else build_adapter(args, store)
    try:
        while True:
            snapshot = adapter.observe()
            result = plan(snapshot, PlannerConfig(time_limit=1.0))
            if args.watch is not None and sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J")
            render_status(0, result.plan, snapshot, args.output, live=True, ended=args.all)
            sys.stdout.flush()
            if args.watch is None:
                return 0
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0
    finally:
        adapter.close()
        if not isinstance(store, MemoryStore):
            store.close()


def run_status(args: argparse.Namespace) -> int:
    if args.live:
        return _live(args)
    store = _open(args.state)
    try:
        while True:
            if args.plan is not None:
                got = store.get_plan(args.plan)
                latest = None if got is None else (args.plan, got)
            else:
                latest = store.latest_plan()
            if args.watch is not None and sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J")
            if latest is None:
                missing = (
                    f"no plan {args.plan} (never made, or older than the plans the daemon and the service keep: --keep-plans)"
                    if args.plan is not None
                    else "no plan recorded yet"
                )
                sys.stdout.write(f"{shown(args.state)}: {missing}\n")
            else:
                plan_id, plan = latest
                render_status(plan_id, plan, store.plan_snapshot(plan_id), args.output, ended=args.all)
            sys.stdout.flush()
            if args.watch is None:
                return 0 if latest is not None else 1
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0
    finally:
        store.close()


def run_events(args: argparse.Namespace) -> int:
    from flowplan.tables import emit

    store = _open(args.state)
    try:
        records = store.actions(job=args.job, limit=args.limit)
    finally:
        store.close()
    if args.output == "json":
        sys.stdout.write(json.dumps([r.__dict__ for r in records], indent=1) + "\n")
        return 0
    if not records:
        sys.stdout.write("no actions recorded" + (f" for job {args.job}" if args.job else "") + "\n")
        return 0
    rows = []
    for r in records:
        p = r.payload
        moved = p.get("from_node") and p.get("from_node") != p.get("node")
        where = (p.get("node") or "-") + (f" (from {p['from_node']})" if moved else "")
        what = ""
        if p.get("node"):
            what = f"{p.get('cpu_millis', 0) / 1000:g} CPU" + (f" + {p['gpus']} GPU" if p.get("gpus") else "")
        took = "-" if r.finished is None else f"{r.finished - r.created:.1f} s"
        stamp = _clock(r.plan_time)
        rows.append([stamp, r.job, r.kind, where, what, r.status, took, r.message[:80]])
    emit(rows, ["TIME", "JOB", "ACTION", "NODE", "GETS", "RESULT", "TOOK", "MESSAGE"])
    return 0
