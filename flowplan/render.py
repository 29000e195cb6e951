"""Human-readable rendering of a plan: who moves where, who gets what, who meets the deadline, and why."""

from __future__ import annotations

from flowplan.tables import plain
from planner.decode import duration
from planner.plan import Plan
from planner.snapshot import Share

_MARK = {True: "yes", False: "NO", None: "-"}


def _eta(at: float | None, now: float) -> str:
    return "-" if at is None else f"in {duration(at - now)}"


def _deadline(d: float | None, now: float) -> str:
    if d is None:
        return "-"
    return f"in {duration(d - now)}" if d >= now else f"{duration(now - d)} ago"


def _alloc(cpu: int, gpus: int, device: int | None = None) -> str:
    """``2+1g``; a fractional job's share of one device: ``1+1g shared dev0`` (its fraction is in the snapshot)."""
    return f"{cpu / 1000:g}" + (f"+{gpus}g" if gpus else "") + (f" shared dev{device}" if device is not None else "")


def where_text(node: str | None, placement: list[Share] | None, replicas: int, counted: bool, servers: int | None = None) -> str:
    """``n1``; with ``counted`` its replicas ``n1x8``; a spread gang's per node: ``n1x4+n2x4``; a
    parameter-server job's servers on each of them after: ``n1x4+n2x4 +2ps``."""
    ps = f" +{servers}ps" if servers and node is not None else ""
    if placement is not None:
        return "+".join(f"{s.node}x{s.replicas}" for s in placement) + ps
    return (f"{node}x{replicas}" if counted and node is not None else node or "-") + ps


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    return plain(rows, header)


def render_table(plan: Plan, source: str = "", objective: str | None = None, *, rich: bool = False) -> str:
    """The plan as text; ``objective`` (the snapshot's ``Settings.objective``) is shown under the solver line."""
    now = plan.time
    s = plan.solver
    o = plan.objective
    lines: list[str] = []
    title = f"FlowPlan plan{' for ' + source if source else ''}: {plan.summary.active_jobs} active job(s)"
    title += f", {plan.summary.placed} placed, {plan.summary.unserved} unserved"
    lines.append(title)
    gap = "-" if s.gap is None else f"{100 * s.gap:.2f}%"
    parts = f", {s.subproblems} parts" if s.subproblems > 1 else ""
    lines.append(f"solver: {s.name} {s.status} in {s.seconds:.2f} s (limit {s.time_limit:g} s{parts}), gap {gap}")
    if s.status == "fallback" and s.message:
        lines.append(f"  note: {s.message}")
    if objective is not None:
        lines.append(f"objective: {objective.replace('>', ' > ')}")
    lines.append("")

    rows: list[list[str]] = []
    for a in plan.assignments:
        p = a.predictions
        prev = a.previous
        # A gang's count or placement shows where it changes or spreads (the contract's shares).
        counted = prev is not None and (prev.placement is not None or a.placement is not None or prev.replicas != a.replicas)
        where = where_text(a.node, a.placement, a.replicas, counted, a.servers)
        was = where_text(prev.node, prev.placement, prev.replicas, counted, prev.servers) if prev is not None else where
        if prev is not None and (a.action == "migrate" or (counted and a.node is not None and was != where)):
            where = f"{was} -> {where}"
        was = _alloc(prev.cpu_millis, prev.gpus, prev.gpu_device) if prev is not None else "-"
        now_alloc = _alloc(a.cpu_millis, a.gpus, a.gpu_device) if a.node else "-"
        cpu = now_alloc if was in ("-", now_alloc) else f"{was} -> {now_alloc}"
        action = a.action + ("+deliver" if a.deliver and a.action != "deliver" else "")
        rows.append(
            [
                a.job,
                action,
                where,
                cpu,
                _eta(p.eta_tier1, now) if not p.tier1_reached else "reached",
                _deadline(p.tier1_deadline, now),
                _MARK[p.tier1_satisfied],
                _eta(p.eta_finish, now),
            ]
        )
    header = ["JOB", "ACTION", "NODE", "CPU(+GPU)", "TIER 1", "DEADLINE", "MET", "FINISH"]
    if rich:
        from flowplan.tables import rich_lines

        lines += rich_lines(rows, header)
    else:
        lines += _table(rows, header)

    if plan.unserved:
        lines += ["", "Not served this interval:"]
        lines += [f"  {u.job}: {u.reason}" for u in plan.unserved]
    if plan.warnings:
        lines += ["", "Warnings:"]
        lines += [f"  {w}" for w in plan.warnings]

    lines += ["", "Objective:"]
    t1 = o.tier1_met + o.tier1_missed
    t2 = o.tier2_met + o.tier2_missed
    lines.append(
        f"  tier-1 deadlines met {o.tier1_met}/{t1}, tier-2 met {o.tier2_met}/{t2}; "
        f"makespan {duration(o.makespan_seconds)}; {o.migrations} migration(s), {o.resizes} resize(s), "
        f"{duration(o.lost_seconds)} lost to restarts"
    )
    lines.append(
        "  the solver's score (its own units, lower is better, comparable only between plans of one snapshot): "
        f"{o.total:.0f} = unserved {o.unserved_cost:.0f} + QoE {o.qoe_cost:.0f} + makespan {o.makespan_cost:.0f}"
        f" + completion {o.completion_cost:.0f} + churn {o.churn_cost:.0f}"
    )
    lines += ["", "Why:"]
    lines += [f"  {a.job}: {a.explanation}" for a in plan.assignments]
    return "\n".join(lines) + "\n"
