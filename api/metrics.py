"""Prometheus metrics of one service instance (its own registry, so several apps can live in one process)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Solve-time buckets (seconds): planning takes from milliseconds (small snapshots) to the time limit.
SOLVE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class ServiceMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.plans = Counter("flowplan_plans", "Plans made, by solver and solver status.", ["solver", "status"], registry=r)
        self.solve_seconds = Histogram(
            "flowplan_plan_seconds", "Wall time of a planning call (models, solve, check).", buckets=SOLVE_BUCKETS, registry=r
        )
        self.fits = Counter(
            "flowplan_plan_fits",
            "Jobs planned, by whether their model fits came from the worker's cache (hit) or were fitted (miss).",
            ["result"],
            registry=r,
        )
        self.points = Counter("flowplan_points_ingested", "Metric points stored.", registry=r)
        self.duplicates = Counter("flowplan_points_duplicate", "Metric points ignored as already stored.", registry=r)
        self.errors = Counter("flowplan_errors", "Error responses, by HTTP status.", ["status"], registry=r)
        self.workers = Gauge("flowplan_workers", "Worker processes that plan and predict.", registry=r)
        self.in_flight = Gauge(
            "flowplan_work_in_flight",
            "Plan and prediction requests admitted: being parsed, waiting for a worker or running in one.",
            registry=r,
        )
        self.waiting = Gauge(
            "flowplan_work_waiting",
            "Admitted plan and prediction requests waiting for a free worker (the queue's depth).",
            registry=r,
        )
        self.rejected = Counter(
            "flowplan_rejected",
            "Requests refused before any work: queue_full (429), shutting_down or worker_lost (503).",
            ["reason"],
            registry=r,
        )

    def count_error(self, status: int) -> None:
        self.errors.labels(status=str(status)).inc()
