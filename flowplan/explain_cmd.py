"""``flowplan explain JOB``: one job's story over the last plans in a state store.

What the newest plan gave it and why, its predictions and their basis, **what it was offered** (the
options the planner weighed for it, each with its time to tier 1 and finish and what it would need
beyond what the plan left free on its node), **what meeting its tier-1 deadline would take** (the
smallest option that meets it, and who holds what that needs), what the earlier plans gave it,
and the actions applied.

The options are not stored in the plan (that made every plan 2.3x bigger and slower to make, for
the few jobs anyone asks about): they are worked out here from the snapshot the plan answered, by
the planner's own steps (:func:`planner.alternatives.job_options`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from typing import Any

from flowplan.argtypes import whole
from flowplan.state_arg import add_state_argument, shown


def register(sub: Any) -> None:
    ex = sub.add_parser(
        "explain",
        help="one job's story over the last plans: what it got, what it was offered, what its deadline would take",
        description="What the last plans gave one job and why, with its predictions and their basis; the options the "
        "planner weighed for it in the newest plan (worked out again from that plan's snapshot) and the smallest one "
        "that meets its tier-1 deadline, with who holds what that needs; and its actions.",
    )
    ex.add_argument("job", help="job id")
    add_state_argument(ex, "the state store the daemon writes")
    ex.add_argument("--plans", type=whole(1, 1000), default=5, metavar="N", help="how many recent plans (default 5)")
    ex.add_argument("--plan", type=whole(1), metavar="ID", help="tell it as of this plan instead of the latest")
    ex.add_argument(
        "--options",
        type=whole(0, 1000),
        default=6,
        metavar="N",
        help="show the N options finishing soonest that nothing else on their node beats (default 6; 0: none)",
    )
    ex.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format (default: text)")
    ex.set_defaults(func=run_explain)


def _dur(seconds: float | None) -> str:
    from planner.decode import duration

    return duration(None if seconds is None else max(seconds, 0.0))


def _gets(cpu_millis: int, gpus: int) -> str:
    return f"{cpu_millis / 1000:g} CPU" + (f" + {gpus} GPU" if gpus else "")


def _short(o: Any) -> str:
    parts = []
    if o.short_cpu_millis > 0:
        parts.append(f"{o.short_cpu_millis / 1000:g} CPU")
    if o.short_gpus > 0:
        parts.append(f"{o.short_gpus} GPU")
    if o.short_memory_mib > 0:
        parts.append(f"{o.short_memory_mib} MiB")
    return " + ".join(parts)


def _holder(h: Any) -> str:
    own = "no deadline open"
    if h.tier1_spare_s is not None:
        own = "misses its own deadline" if h.tier1_spare_s < 0 else f"meets its own deadline, {_dur(h.tier1_spare_s)} to spare"
    return f"{h.job} ({_gets(h.cpu_millis, h.gpus)}; {own})"


def _option_row(o: Any, given: Any, mark: str, counted: bool = False) -> list[str]:
    where = o.node or "-"
    gets = "-" if o.node is None else f"{o.cpu_millis / 1000:g}" + (f"+{o.gpus}g" if o.gpus else "")
    if o.node is not None and counted:
        gets += f" x{o.replicas}"  # a gang's options differ in count
    if o.node is not None and o.nodes > 1:
        gets += f" on {o.nodes} nodes"  # and in node count: a spread's speed depends on it
    spe = "-" if o.seconds_per_epoch is None else f"{o.seconds_per_epoch:.3g} s"
    t1 = "-" if o.tier1_s is None else f"in {_dur(o.tier1_s)}"
    fin = "-" if o.finish_s is None else f"in {_dur(o.finish_s)}"
    met = {True: "met", False: "MISS", None: "-"}[o.tier1_met]
    if mark:
        needs = mark
    elif o.node is None:
        needs = "gives up its place" if o.way == "pause" else "waits"
    elif not o.fits:
        needs = "takes " + _short(o) + " from others"
    else:
        needs = "fits beside the others"
    lost = "-" if not o.lost_seconds else _dur(o.lost_seconds)
    return [where, gets, o.way, lost, spe, t1, fin, met, needs]


def why_not(found: Any) -> str:
    """One line on the options that would have finished sooner than what the plan gave: how many take
    resources the plan gives other jobs, how many fit beside them."""
    g = found.given
    sooner = [o for o in found.options if o.finish_s is not None and (g.finish_s is None or o.finish_s < g.finish_s)]
    if not sooner:
        return "nothing it was offered finishes sooner than what the plan gave it"
    taking = [o for o in sooner if not o.fits]
    text = f"of the {len(sooner)} option(s) finishing sooner, {len(taking)} take CPU, GPUs or memory the plan gives other jobs"
    if len(taking) < len(sooner):
        text += (
            f"; {len(sooner) - len(taking)} fit beside them and lost in the solve to what else they cost "
            "(restart time, a place in the migration budget, the makespan or the others' completion)"
        )
    return text


def options_lines(found: Any, limit: int, *, terminal: bool = False) -> list[str]:
    """The offered options and what the deadline would take, as text lines (indented two spaces);
    ``terminal``: the table drawn by rich (flowplan.tables), else plain columns."""
    import shutil

    from flowplan.tables import plain, rich_lines
    from planner.alternatives import pareto

    out: list[str] = []
    given = found.given
    same = (given.node, given.way, given.cpu_millis, given.gpus, given.replicas, given.nodes)
    shown = [o for o in pareto(found.options) if (o.node, o.way, o.cpu_millis, o.gpus, o.replicas, o.nodes) != same]
    placed = [o for o in shown if o.node is not None]
    rest = [o for o in shown if o.node is None]
    picked = placed[:limit] + (rest if limit else [])
    if picked:
        header = ["NODE", "GETS", "WAY", "LOST", "S/EPOCH", "TIER 1", "FINISH", "DEADLINE", "NEEDS"]
        counted = len({o.replicas for o in found.options if o.node is not None} | {found.given.replicas}) > 1
        rows = [_option_row(found.given, found.given, "(what the plan gave it)", counted)]
        rows += [_option_row(o, found.given, "", counted) for o in picked]
        more = len(found.options) - len(picked)
        out.append(
            f"  offered: {len(found.options)} option(s) weighed; the {len(picked)} finishing soonest that nothing else on "
            f"their node beats{f' ({more} more)' if more > 0 else ''}, with the allocation held until done:"
        )
        drawn = (
            rich_lines(rows, header, width=max(shutil.get_terminal_size().columns - 4, 40)) if terminal else plain(rows, header)
        )
        out += ["    " + line for line in drawn]
        out.append("  " + why_not(found))
    deadline = found.tier1_deadline_s
    if deadline is None:
        return out
    out.append("")
    if found.epochs_to_tier1 is None:
        out.append(
            "  tier 1 is out of reach at any allocation: its curve levels off short of the target (or too few points "
            "to say), so no option meets its deadline"
        )
        return out
    given_meets = bool(found.given.tier1_met)
    m = found.to_meet
    if m is None:
        fastest = min(
            (o for o in found.options if o.tier1_s is not None), key=lambda o: o.tier1_s, default=None
        )  # no option meets it: how close the best comes
        if fastest is None:
            out.append("  no option the planner may give it reaches tier 1")
        else:
            late = fastest.tier1_s - deadline
            out.append(
                f"  no option meets it: the fastest, {_gets(fastest.cpu_millis, fastest.gpus)} on {fastest.node}, "
                f"reaches tier 1 in {_dur(fastest.tier1_s)}, {_dur(late)} after the deadline"
            )
        return out
    what = f"{_gets(m.cpu_millis, m.gpus)} on {m.node} ({m.way}"
    what += f", {_dur(m.lost_seconds)} lost" if m.lost_seconds else ""
    what += f"): tier 1 in {_dur(m.tier1_s)}, {_dur(deadline - (m.tier1_s or 0.0))} to spare"
    lead = "the smallest allocation that meets it" if given_meets else "to meet it"
    out.append(f"  {lead}: {what}")
    if m.fits:
        out.append("    it fits beside what the plan gave the other jobs there")
    else:
        held = "; ".join(_holder(h) for h in m.holders) or "nobody (the node is too small)"
        out.append(f"    it needs {_short(m)} more than the plan leaves there, held by: {held}")
    return out


def _options_json(found: Any, limit: int) -> dict[str, Any]:
    def one(o: Any) -> dict[str, Any]:
        d = asdict(o)
        d["fits"] = o.fits
        d["holders"] = [asdict(h) for h in o.holders]
        for k in ("tier1_s", "finish_s", "seconds_per_epoch"):
            if d[k] is not None and not math.isfinite(d[k]):
                d[k] = None
        for h in d["holders"]:
            if h["tier1_spare_s"] is not None and not math.isfinite(h["tier1_spare_s"]):
                h["tier1_spare_s"] = None
        return d

    return {
        "given": one(found.given),
        "options": [one(o) for o in found.options],
        "tier1_deadline_s": found.tier1_deadline_s,
        "epochs_to_tier1": found.epochs_to_tier1,
        "to_meet": None if found.to_meet is None else one(found.to_meet),
    }


def run_explain(args: argparse.Namespace) -> int:
    from flowplan.cli import UsageError
    from flowplan.status_cmd import _clock, _open

    store = _open(args.state)
    try:
        newest = store.plan_ids(1)
        if not newest:
            raise UsageError(f"{shown(args.state)}: no plans yet (the daemon or flowplan simulate --state writes them)")
        if args.plan is not None and store.get_plan(args.plan) is None:
            raise UsageError(f"--plan {args.plan}: no such plan in {shown(args.state)} (the newest is plan {newest[0]})")
        ids = store.plan_ids(args.plans) if args.plan is None else list(range(args.plan, max(args.plan - args.plans, 0), -1))
        plans = [(i, store.get_plan(i)) for i in ids]
        actions = store.actions(job=args.job, limit=20)
        mine: list[tuple[int, Any, Any]] = []
        for i, plan in plans:
            found = next((a for a in plan.assignments if a.job == args.job), None) if plan is not None else None
            if found is not None:
                mine.append((i, plan, found))
        if not mine:
            upto = "" if args.plan is None else f" up to plan {args.plan}"
            raise UsageError(f"{args.job}: not in the last {len(plans)} plan(s){upto} of {shown(args.state)}")
        snapshot = store.plan_snapshot(mine[0][0])
    finally:
        store.close()
    latest_id, latest, a = mine[0]
    offered = None
    why_none = ""
    if snapshot is None:
        why_none = (
            f"plan {latest_id} has no snapshot in the store (saved without one, or older than the plans whose snapshots "
            "the daemon and the service keep: --keep-snapshots), so its options cannot be worked out"
        )
    elif args.options or args.output == "json":
        from planner.alternatives import job_options

        try:
            offered = job_options(snapshot, latest, args.job)
        except KeyError:
            why_none = f"{args.job} is not in plan {latest_id}'s snapshot"
    if args.output == "json":
        doc = {
            "job": args.job,
            "plan_id": latest_id,
            "time": latest.time,
            "assignment": a.model_dump(mode="json"),
            "plans": [{"plan_id": i, "assignment": x.model_dump(mode="json")} for i, _, x in mine],
            "offered": None if offered is None else _options_json(offered, args.options),
            "actions": [r.__dict__ for r in actions],
        }
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return 0
    p = a.predictions
    out = [f"{args.job}, as of plan {latest_id}:", f"  {a.explanation}"]
    out.append(f"  predictions: {p.basis}")
    facts = [f"epoch {p.epoch:.4g}"]
    if p.seconds_per_epoch is not None:
        facts.append(f"{p.seconds_per_epoch:.3g} s/epoch at {_gets(a.cpu_millis, a.gpus)}")
    for name, eta in (("tier 1", p.eta_tier1), ("tier 2", p.eta_tier2), ("finish", p.eta_finish)):
        if eta is not None:
            facts.append(f"{name} in {_dur(eta - latest.time)}")
    out.append("  " + ", ".join(facts) + ("  (the node's share rollout: shares pass on as jobs finish)" if p.eta_finish else ""))
    if p.tier1_deadline is not None:
        left = p.tier1_deadline - latest.time
        verdict = {True: "will be met", False: "will be MISSED", None: "-"}[p.tier1_satisfied]
        out.append(f"  tier-1 deadline {'in ' + _dur(left) if left >= 0 else 'passed'}: {verdict}")
        if p.tier1_satisfied is False and p.epochs_to_tier1 and left > 0:
            need = left / p.epochs_to_tier1
            out.append(f"  that needs {p.epochs_to_tier1:.3g} more epochs in {_dur(left)}: {need:.3g} s/epoch or faster")
    if offered is not None and args.options:
        out.append("")
        out += options_lines(offered, args.options, terminal=sys.stdout.isatty())
    elif why_none:
        out.append(f"  ({why_none})")
    out.append("")
    out.append(f"  last {len(mine)} plan(s), newest first:")
    for i, _, x in mine:
        where = x.node or "no node"
        out.append(f"    plan {i}: {x.action} on {where}, {_gets(x.cpu_millis, x.gpus)}")
    if actions:
        out.append("")
        out.append("  actions:")
        for r in actions[-10:]:
            stamp = _clock(r.plan_time)
            out.append(f"    {stamp} {r.kind} -> {r.status}" + (f": {r.message}" if r.message else ""))
    sys.stdout.write("\n".join(out) + "\n")
    return 0
