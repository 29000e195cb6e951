"""``plan(snapshot, config, previous=...)``: the planner as a pure function.

Named steps: outlooks (fit models) → build (candidates, options, warm start) → solve (backend, or
parts of a decomposed problem) → decode → check. The same snapshot and config always give the same
plan (except ``solver.seconds``, the measured wall time). ``previous`` only lends cached model fits
for jobs whose inputs did not change; it never changes the answer.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field

import numpy as np

from planner.backends import CpSatBackend, PulpBackend, SolveResult
from planner.build import build_problem
from planner.check import check_plan
from planner.config import PlannerConfig
from planner.decode import decode
from planner.decompose import parts_needed, split
from planner.errors import PlanCheckError
from planner.outlook import JobOutlook, build_outlook
from planner.plan import Plan, PlanSummary, SolverReport
from planner.problem import Problem
from planner.snapshot import Snapshot


@dataclass(frozen=True)
class PlanResult:
    """A plan plus what a later call may reuse (``outlooks``: model fits keyed by job input digest)."""

    plan: Plan
    outlooks: dict[str, tuple[str, JobOutlook]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def snapshot_digest(snapshot: Snapshot) -> str:
    return hashlib.sha256(snapshot.model_dump_json().encode()).hexdigest()


def _job_digest(snapshot: Snapshot, job_json: str) -> str:
    return hashlib.sha256((job_json + snapshot.settings.model_dump_json()).encode()).hexdigest()


def _outlooks(snapshot: Snapshot, config: PlannerConfig, previous: PlanResult | None) -> dict[str, tuple[str, JobOutlook]]:
    cache = previous.outlooks if previous is not None else {}
    out: dict[str, tuple[str, JobOutlook]] = {}
    for job in snapshot.jobs:
        if job.status == "finished":
            continue
        digest = _job_digest(snapshot, job.model_dump_json())
        hit = cache.get(job.id)
        if hit is not None and hit[0] == digest:
            out[job.id] = hit
        else:
            out[job.id] = (digest, build_outlook(job, snapshot.settings, config))
    return out


def _solve(problem: Problem, config: PlannerConfig) -> tuple[SolveResult, int]:
    wall = config.wall_clock_factor * config.time_limit + 1.0
    backend = CpSatBackend(workers=config.cpsat_workers) if config.solver == "cpsat" else PulpBackend()
    k = parts_needed(problem, config.max_jobs_per_subproblem)
    if k == 1:
        return backend.solve(problem, time_limit=config.time_limit, wall_limit=wall), 1
    t0 = time.perf_counter()
    choice = problem.hint.copy()
    statuses: list[str] = []
    gaps: list[float] = []
    for sub, keep in split(problem, k):
        share = sub.n_jobs / max(problem.n_jobs, 1)
        got = backend.solve(sub, time_limit=config.time_limit * share, wall_limit=wall * share)
        statuses.append(got.status)
        if got.choice is not None and not sub.violations(got.choice):
            if got.objective is not None and got.objective <= sub.objective(sub.hint):
                jobs_idx = problem.opt_job[keep[got.choice]]
                choice[jobs_idx] = keep[got.choice]
            if got.bound is not None and got.objective:
                gaps.append(max(got.objective - got.bound, 0.0) / abs(got.objective))
    status = "optimal" if all(s == "optimal" for s in statuses) else "feasible"
    return (
        SolveResult(
            backend=backend.name,
            status=status,  # type: ignore[arg-type]
            choice=choice,
            objective=float(problem.objective(choice)),
            bound=None,
            seconds=time.perf_counter() - t0,
            message=f"{k} node-disjoint parts; gap is the largest part's" + ("" if gaps else " (no part reported a bound)"),
            variables=problem.n_options + k,
        ),
        k,
    )


def plan(snapshot: Snapshot, config: PlannerConfig | None = None, *, previous: PlanResult | None = None) -> PlanResult:
    """Plan one control interval for ``snapshot``; see the module docstring."""
    config = config or PlannerConfig()
    t0 = time.perf_counter()
    timings: dict[str, float] = {}

    outlooks = _outlooks(snapshot, config, previous)
    timings["models"] = time.perf_counter() - t0

    t = time.perf_counter()
    ordered = [outlooks[j.id][1] for j in snapshot.jobs if j.status != "finished"]
    problem, pricing = build_problem(snapshot, ordered, config)
    timings["build"] = time.perf_counter() - t

    t = time.perf_counter()
    hint_obj = problem.objective(problem.hint)
    parts = 1
    gap: float | None = None
    bound: float | None = None
    message = ""
    if problem.n_jobs == 0:
        choice, status, name = problem.hint, "trivial", config.solver
    elif config.solver == "greedy":
        choice, status, name = problem.hint, "feasible", "greedy"
        message = "greedy allocation (no integer program solved)"
    else:
        result, parts = _solve(problem, config)
        name, message = result.backend, result.message
        usable = result.choice is not None and not problem.violations(result.choice)
        if usable and result.objective is not None and problem.objective(result.choice) <= hint_obj:  # type: ignore[arg-type]
            choice, status = result.choice, result.status
            bound = result.bound
            obj = problem.objective(choice)  # type: ignore[arg-type]
            if bound is not None and obj:
                gap = max(obj - bound, 0.0) / abs(obj)
            elif status == "optimal":
                gap = 0.0
        else:
            choice, status = problem.hint, "fallback"
            message = f"{result.backend} returned {result.status} ({result.message}); using the greedy plan"
    timings["solve"] = time.perf_counter() - t
    assert choice is not None

    t = time.perf_counter()
    plan_obj = _decode(snapshot, problem, pricing, choice, config, name, status, gap, bound, message, parts, t0)
    violations = check_plan(snapshot, plan_obj)
    if violations and status != "fallback":
        choice = problem.hint
        plan_obj = _decode(
            snapshot, problem, pricing, choice, config, name, "fallback", None, None,
            "solver plan failed the checker: " + violations[0], parts, t0,
        )
        violations = check_plan(snapshot, plan_obj)
    if violations:
        raise PlanCheckError(violations)
    timings["decode_check"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    plan_obj = plan_obj.model_copy(update={"solver": plan_obj.solver.model_copy(update={"seconds": timings["total"]})})
    return PlanResult(plan=plan_obj, outlooks=outlooks, timings=timings)


def _decode(
    snapshot: Snapshot,
    problem: Problem,
    pricing: object,
    choice: np.ndarray,
    config: PlannerConfig,
    name: str,
    status: str,
    gap: float | None,
    bound: float | None,
    message: str,
    parts: int,
    t0: float,
) -> Plan:
    eligible_any = _eligible_any(snapshot, problem)
    assignments, unserved, terms = decode(problem, choice, pricing, snapshot.time, list(snapshot.nodes), eligible_any)  # type: ignore[arg-type]
    finished = sum(1 for j in snapshot.jobs if j.status == "finished")
    return Plan(
        time=snapshot.time,
        snapshot_digest=snapshot_digest(snapshot),
        assignments=assignments,
        unserved=unserved,
        objective=terms,
        solver=SolverReport(
            name=name,
            status=status,  # type: ignore[arg-type]
            seconds=time.perf_counter() - t0,
            gap=gap,
            bound=bound,
            objective=float(problem.objective(choice)),
            time_limit=config.time_limit,
            subproblems=parts,
            variables=problem.n_options + 1,
            message=message,
        ),
        summary=PlanSummary(
            active_jobs=problem.n_jobs,
            placed=len(assignments) - len(unserved),
            unserved=len(unserved),
            finished_jobs=finished,
        ),
        warnings=list(problem.warnings),
    )


def _eligible_any(snapshot: Snapshot, problem: Problem) -> list[bool]:
    """Per job: does any option put it on a node (else it is unservable, not just crowded out)?"""
    has = np.zeros(problem.n_jobs, dtype=bool)
    placed = problem.opt_node >= 0
    has[problem.opt_job[placed]] = True
    return has.tolist()
