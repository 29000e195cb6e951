"""Prometheus metrics of a running daemon (``flowplan daemon --metrics-port``), served over HTTP by
prometheus_client on their own registry. ``deploy/grafana/flowplan.json`` charts them together
with the service's (``api/metrics.py``).

Per interval, from what the daemon saw and planned:

- ``flowplan_daemon_jobs{state}``: jobs by state this interval (running, starting, waiting, paused,
  migrating, resizing), from the plan's actions; and the finished ones the cluster still shows,
  succeeded or failed (``Job.failure``: alert on a rise of ``state="failed"``);
- ``flowplan_daemon_deadlines_at_risk``: jobs whose tier-1 deadline the plan predicts missed;
- ``flowplan_daemon_nodes{state}``: nodes schedulable or not (down, cordoned);
- ``flowplan_daemon_cpu_millis{kind}``: capacity and guaranteed CPU over the schedulable nodes;
- ``flowplan_daemon_plan_seconds``: planning time per interval (a histogram);
- ``flowplan_daemon_actions_total{kind,result}``: changes applied (ok / failed; dry runs: would);
- ``flowplan_daemon_intervals_total``, ``flowplan_daemon_interval_failures_total``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

PLAN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
STATES = {
    "keep": "running",
    "deliver": "running",
    "resize": "resizing",
    "migrate": "migrating",
    "start": "starting",
    "wait": "waiting",
    "pause": "paused",
}

#: The states of finished jobs the cluster still shows (exited containers, ended pods).
ENDED = ("succeeded", "failed")


class DaemonMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.jobs = Gauge("flowplan_daemon_jobs", "Jobs by state this interval.", ["state"], registry=r)
        self.at_risk = Gauge(
            "flowplan_daemon_deadlines_at_risk", "Jobs whose tier-1 deadline the plan predicts missed.", registry=r
        )
        self.nodes = Gauge("flowplan_daemon_nodes", "Nodes by state (schedulable, unschedulable).", ["state"], registry=r)
        self.cpu = Gauge("flowplan_daemon_cpu_millis", "Schedulable CPU: capacity and guaranteed.", ["kind"], registry=r)
        self.plan_seconds = Histogram(
            "flowplan_daemon_plan_seconds", "Planning time per interval.", buckets=PLAN_BUCKETS, registry=r
        )
        self.actions = Counter("flowplan_daemon_actions", "Changes applied, by kind and result.", ["kind", "result"], registry=r)
        self.intervals = Counter("flowplan_daemon_intervals", "Intervals run.", registry=r)
        self.failures = Counter("flowplan_daemon_interval_failures", "Intervals that raised (nothing applied).", registry=r)
        for state in sorted({*STATES.values(), *ENDED}):
            self.jobs.labels(state=state).set(0)

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        start_http_server(port, addr=host, registry=self.registry)

    def tick(self, tick: Any, dry_run: bool) -> None:
        self.intervals.inc()
        self.plan_seconds.observe(tick.plan_seconds)
        counts = dict.fromkeys({*STATES.values(), *ENDED}, 0)
        for a in tick.plan.assignments:
            counts[STATES.get(a.action, "running")] += 1
        for job in tick.snapshot.jobs:
            if job.status == "finished":
                counts["failed" if job.failure is not None else "succeeded"] += 1
        for state, n in counts.items():
            self.jobs.labels(state=state).set(n)
        self.at_risk.set(sum(1 for a in tick.plan.assignments if a.predictions.tier1_satisfied is False))
        nodes = tick.snapshot.nodes
        self.nodes.labels(state="schedulable").set(sum(1 for n in nodes if n.schedulable))
        self.nodes.labels(state="unschedulable").set(sum(1 for n in nodes if not n.schedulable))
        up = {n.name for n in nodes if n.schedulable}
        self.cpu.labels(kind="capacity").set(sum(n.cpu_millis for n in nodes if n.schedulable))
        self.cpu.labels(kind="guaranteed").set(sum(a.cpu_millis * a.replicas for a in tick.plan.assignments if a.node in up))
        for i, change in enumerate(tick.changes):
            if dry_run:
                result = "would"
            elif i < len(tick.outcomes):
                result = "ok" if tick.outcomes[i].ok else "failed"
            else:
                result = "not_applied"
            self.actions.labels(kind=change.kind, result=result).inc()

    def failure(self) -> None:
        self.intervals.inc()
        self.failures.inc()
