"""``plan(snapshot, config, previous=...)``: the planner as a pure function.

Named steps: outlooks (fit models) → build (candidates, options, warm start) → solve (backend, or
parts of a decomposed problem) → devices (number the GPUs fractional jobs share) → decode → check.
The same snapshot and config always give the same plan (except ``solver.seconds``, the measured
wall time). ``previous`` and ``fits`` only lend cached model fits for jobs whose inputs did not
change (same digest); they never change the answer.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from models.curves import MIN_POINTS, MIN_POINTS_FOR_HOLDOUT
from planner.backends import Backend, CpSatBackend, PulpBackend, SolveResult
from planner.build import build_problem, widen
from planner.check import check_plan
from planner.config import PlannerConfig
from planner.decode import decode
from planner.decompose import parts_needed, split
from planner.devices import pack_devices
from planner.errors import PlanCheckError
from planner.fanout import fan_out, usable_cpus
from planner.outlook import JobOutlook, JobTruth, build_outlook, outlook_from_truth, task_curves, with_progress, with_truth
from planner.plan import Plan, PlanSummary, SolverReport
from planner.problem import Problem
from planner.progress import silent_seconds
from planner.relax import refill, residual, solve_relaxation
from planner.snapshot import Job, Node, Snapshot
from planner.split import apply_split, moves_checked, moves_to_room


@dataclass(frozen=True)
class PlanResult:
    """A plan plus what a later call may reuse (``outlooks``: job id -> (job input digest, model fit))."""

    plan: Plan
    outlooks: dict[str, tuple[str, JobOutlook]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def snapshot_digest(snapshot: Snapshot) -> str:
    return hashlib.sha256(snapshot.model_dump_json().encode()).hexdigest()


def _job_digest(settings_json: str, job: Job, config: PlannerConfig, curves_json: str = "", silent: float | None = None) -> str:
    """Everything a job's outlook depends on: the job, the settings, the snapshot's finished runs of
    its task (``curves_json``) and the parts of the config that enter the fit (the prior for the job's
    task, the stand-in for unknown remaining epochs) and, for a job that has reported nothing yet,
    how long it has run so (``silent``: :func:`planner.progress.silent_seconds`)."""
    prior = config.curve_priors.get(job.task) if job.task is not None else None
    # Measured CPU use is informational and changes every interval: it must not invalidate a fit.
    parts = (
        job.model_dump_json(exclude={"cpu_used_millis"}),
        settings_json,
        curves_json,
        repr(prior),
        repr(config.unknown_remaining_epochs),
        repr(silent),
    )
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


#: Below this many jobs to fit (with enough points for a curve), the fits stay in this process:
#: starting a second one (a few milliseconds) and sending the fits back would cost more than it saves.
PARALLEL_MIN_FITS = 64


def _fit_cost(job: Job) -> float:
    """Rough relative cost of a job's fit, to balance the processes: a cross-validated fit (enough
    points) costs several single fits; a job with too few points for a curve costs almost nothing."""
    n = len(job.history)
    return 0.1 + (1.0 if n >= MIN_POINTS else 0.0) + (3.0 if n >= MIN_POINTS_FOR_HOLDOUT else 0.0)


def _fitted_outlooks(jobs: list[Job], snapshot: Snapshot, config: PlannerConfig) -> list[JobOutlook]:
    """``build_outlook`` for every job, spread over ``config.fit_processes`` processes when there are
    enough fits to pay for it (:mod:`planner.fanout`; the outlooks do not depend on where they ran)."""
    curves = task_curves(snapshot)
    processes = config.fit_processes or usable_cpus()
    if processes <= 1 or sum(1 for j in jobs if len(j.history) >= MIN_POINTS) < PARALLEL_MIN_FITS:
        return [build_outlook(job, snapshot.settings, config, curves.get(job.task or ""), snapshot.time) for job in jobs]
    names = [f.name for f in fields(JobOutlook) if f.name != "job"]

    def fit(job: Job) -> tuple[Any, ...]:
        # The job is the caller's already: only the rest travels back from a child process.
        got = build_outlook(job, snapshot.settings, config, curves.get(job.task or ""), snapshot.time)
        return tuple(getattr(got, name) for name in names)

    rows = fan_out(fit, jobs, [_fit_cost(j) for j in jobs], processes)
    return [JobOutlook(job=job, **dict(zip(names, row, strict=True))) for job, row in zip(jobs, rows, strict=True)]


def _outlooks(
    snapshot: Snapshot,
    config: PlannerConfig,
    previous: PlanResult | None,
    truth: Mapping[str, JobTruth] | None,
    fits: Mapping[str, JobOutlook] | None = None,
) -> dict[str, tuple[str, JobOutlook]]:
    prior_fits = {digest: got for digest, got in previous.outlooks.values()} if previous is not None else {}
    settings_json = snapshot.settings.model_dump_json()
    curves_json = {task: c.model_dump_json() for task, c in task_curves(snapshot).items()}
    # In the snapshot's order: (job id, digest, the outlook, or None for a job to fit below).
    entries: list[tuple[str, str, JobOutlook | None]] = []
    misses: list[Job] = []
    for job in snapshot.jobs:
        if job.status == "finished":
            continue
        known = truth.get(job.id) if truth is not None else None
        if known is not None and known.knows == "all":
            entries.append((job.id, "truth", outlook_from_truth(job, known)))  # never reused: the truth changes
            continue
        digest = _job_digest(settings_json, job, config, curves_json.get(job.task or "", ""), silent_seconds(job, snapshot.time))
        hit = prior_fits.get(digest) or (fits.get(digest) if fits is not None else None)
        if hit is not None:
            # The digest leaves out what no fit reads (the measured CPU use): the outlook carries this
            # snapshot's job, so a reused fit plans exactly as a fresh one.
            entries.append((job.id, digest, replace(hit, job=job)))
        else:
            entries.append((job.id, digest, None))
            misses.append(job)
    fitted = iter(_fitted_outlooks(misses, snapshot, config))
    out = {job_id: (digest, got if got is not None else next(fitted)) for job_id, digest, got in entries}
    if truth is not None:
        # Part of the truth (the oracle's variants): the fitted outlook with the known part replaced,
        # kept under no digest (never reused as a fit).
        for job_id, (_, got) in out.items():
            known = truth.get(job_id)
            if known is not None and known.knows != "all":
                out[job_id] = ("truth", with_truth(got, known))
    return out


def planned_outlooks(
    snapshot: Snapshot, outlooks: Mapping[str, tuple[str, JobOutlook]], truth: Mapping[str, JobTruth] | None = None
) -> list[JobOutlook]:
    """What a plan of ``snapshot`` is built from, in the snapshot's order (its unfinished jobs): the
    fits (``outlooks``, as in :attr:`PlanResult.outlooks`, kept as fitted so that they can be reused
    while a job's reports stay the same) with what each job has trained since its newest report
    taken off at the snapshot's time (:func:`planner.outlook.with_progress`), except where the
    oracle knows the epochs left. Rebuilding a plan's integer program takes these, not the fits."""
    known = truth or {}
    settled = functools.cache(lambda: _settled_nodes(snapshot))  # read only where a job has ended
    fitted = (
        outlooks[j.id][1] if j.id in known and known[j.id].knows != "speed" else with_progress(outlooks[j.id][1], snapshot.time)
        for j in snapshot.jobs
        if j.status != "finished"
    )
    return [_ended_stays(o, settled) for o in fitted]


def _ended_stays(outlook: JobOutlook, settled: Callable[[], set[str]]) -> JobOutlook:
    """A running job that has reported its last epoch (``max_epochs``) is planned as one that cannot
    checkpoint: it keeps its node and at least its minimum until its process exits by itself. Past
    its last epoch a training script evaluates, saves and uploads its model; a pause (a checkpoint
    request, then the engine's stop) would cut that short and leave a job with nothing to resume.
    Its share can still shrink to its minimum (`planner.share`); a job that waits for the room waits
    the moment it takes to exit, and the daemon re-plans when it does (`docs/planner.md`).

    Only where it can stay as it is: one replica, its allocation within its bounds, on a node of the
    snapshot that its running jobs do not overfill (``settled()``). Otherwise something must give, and
    it may be paused as before (nothing is left to train)."""
    job = outlook.job
    if job.status != "running" or not job.migratable or job.target is None or job.target.max_epochs is None:
        return outlook
    if outlook.epoch < job.target.max_epochs or job.replicas != 1 or job.allocation is None or job.node not in settled():
        return outlook
    a = job.allocation
    if not (job.min_cpu_millis <= a.cpu_millis <= job.max_cpu_millis and job.min_gpus <= a.gpus <= job.max_gpus):
        return outlook
    return replace(outlook, job=job.model_copy(update={"migratable": False}))


def _settled_nodes(snapshot: Snapshot) -> set[str]:
    """The snapshot's nodes whose running jobs (their allocations, memory and parameter servers as
    they run now) fit their capacity. A fractional GPU job counts a whole GPU, so fractions sharing
    a device make a node look fuller than it is: a job past its last epoch there may still be paused."""
    use: dict[str, list[int]] = {n.name: [0, 0, 0] for n in snapshot.nodes}
    for j in snapshot.jobs:
        if j.status != "running" or j.allocation is None:
            continue
        for name, count in j.shares():
            if name not in use:
                continue
            u = use[name]
            u[0] += j.allocation.cpu_millis * count + (j.running_servers * j.servers.cpu_millis if j.servers else 0)
            u[1] += j.allocation.gpus * count
            u[2] += j.memory_mib * count + (j.running_servers * j.servers.memory_mib if j.servers else 0)
    return {
        n.name
        for n in snapshot.nodes
        if use[n.name][0] <= n.cpu_millis and use[n.name][1] <= n.gpus and use[n.name][2] <= n.memory_mib
    }


#: Problems up to this many options are solved whole by the integer backend; larger ones go
#: through relax-and-fix (:mod:`planner.relax`) first.
FULL_SOLVE_MAX_OPTIONS = 1000
#: Share of the time limit the residual of relax-and-fix may search (the LP takes about the rest).
RESIDUAL_SHARE = 0.75


def _solve_one(problem: Problem, backend: Backend, time_limit: float, wall: float) -> SolveResult:
    """Solve one (part of a) problem; the result's choice is never worse than ``problem.hint``."""
    t0 = time.perf_counter()
    hint_obj = problem.objective(problem.hint)
    if problem.n_options <= FULL_SOLVE_MAX_OPTIONS:
        got = backend.solve(problem, time_limit=time_limit, wall_limit=wall)
        if got.choice is not None and not problem.violations(got.choice) and problem.objective(got.choice) <= hint_obj:
            return got
        return replace(got, choice=None)
    relaxation = solve_relaxation(problem)
    if relaxation is None:
        got = backend.solve(problem, time_limit=time_limit, wall_limit=wall)
        ok = got.choice is not None and not problem.violations(got.choice) and problem.objective(got.choice) <= hint_obj
        return got if ok else replace(got, choice=None)
    choice: np.ndarray | None = None
    detail = "LP relaxation"
    status = "feasible"
    # The residual's search limit is a fixed share of the (deterministic) limit, never what the LP's
    # wall time left of it: the same snapshot gives the same plan however loaded the machine is. Only
    # the wall-clock guard counts the LP's measured time (and keeps at least a quarter of it).
    left = RESIDUAL_SHARE * time_limit
    left_wall = max(wall - relaxation.seconds, 0.25 * wall)
    for wide in (False, True):
        rest = residual(problem, relaxation, wide=wide)
        if rest is None:
            continue
        if rest.jobs.size == 0:
            choice, status = rest.fixed.copy(), "optimal"
            detail += "; every job decided by the LP"
            break
        got = backend.solve(rest.problem, time_limit=left / 2 if not wide else left, wall_limit=left_wall)
        what = "wider residual of " if wide else ""
        detail += f"; {what}{rest.jobs.size} undecided job(s) solved by {backend.name}: {got.message}"
        if got.choice is not None and not rest.problem.violations(got.choice):
            choice = rest.fixed.copy()
            choice[rest.jobs] = rest.keep[got.choice]
            status = "optimal" if got.status == "optimal" else "feasible"
            break
    if choice is not None and (problem.violations(choice) or problem.objective(choice) > hint_obj):
        choice = None
    obj = float(problem.objective(choice)) if choice is not None else None
    # "optimal" only when the LP bound proves it, not because the residual was solved exactly.
    if obj is not None and obj - relaxation.bound > 1e-9 * max(abs(obj), 1.0):
        status = "feasible"
    return SolveResult(
        backend=backend.name,
        status=status,  # type: ignore[arg-type]
        choice=choice,
        objective=obj,
        bound=relaxation.bound,
        seconds=time.perf_counter() - t0,
        message="relax-and-fix: " + detail,
        variables=problem.n_options + 1,
    )


#: Share of the solve's time limit the refill step may use (:func:`_refilled`), each round.
REFILL_SHARE = 0.25
#: Refills at most, each offering the room the one before left idle, while each lowers the objective.
#: The options of a refill are packed into the room before it (one placement per gang count): where
#: two jobs' placements meet on one node and one takes it, the room that job left elsewhere is no
#: other job's option until the next round (Pollux's workload 4 with spanning gangs, t = 21,487 s:
#: four GPUs stayed idle beside two waiting gangs, and the second round placed one, objective
#: 909,140 -> 908,796).
REFILL_ROUNDS = 3


def _refilled(nodes: Sequence[Node], problem: Problem, outcome: _Outcome, config: PlannerConfig) -> tuple[Problem, _Outcome]:
    """``outcome`` with the room its choice leaves idle offered to the jobs that could use it, on nodes
    outside their candidates too (:func:`planner.build.widen`, :func:`planner.relax.refill`); the new
    choice is kept only where it lowers the objective, else ``problem`` and ``outcome`` come back as they were."""
    wider, choice = widen(nodes, problem, outcome.choice, config.candidate_nodes)
    rest = refill(wider, choice)
    if rest is None:
        return problem, outcome
    backend, wall = _backend(config)
    sub = backend.solve(rest.problem, time_limit=REFILL_SHARE * config.time_limit, wall_limit=REFILL_SHARE * wall)
    if sub.choice is None or rest.problem.violations(sub.choice):
        return problem, outcome
    better = rest.fixed.copy()
    better[rest.jobs] = rest.keep[sub.choice]
    before, after = problem.objective(outcome.choice), wider.objective(better)
    if after >= before or wider.violations(better):
        return problem, outcome
    bound = outcome.bound
    optimal = outcome.status == "optimal" and bound is not None and after - bound <= 1e-9 * max(abs(after), 1.0)
    message = f"{outcome.message}; refill of {rest.jobs.size} job(s) the idle room fits: objective {before} -> {after}"
    return wider, replace(
        outcome,
        choice=better,
        status="optimal" if optimal else "feasible",
        gap=_gap(float(after), bound) if bound is not None else outcome.gap,
        message=message,
    )


#: Share of the solve's time limit the second solve of a widened problem may use (:func:`_solved_again`).
RESOLVE_SHARE = 0.5


def _solved_again(problem: Problem, outcome: _Outcome, config: PlannerConfig) -> tuple[Problem, _Outcome]:
    """``outcome`` after a refill that lowered the objective: the refill offered the jobs it freed nodes
    outside their candidates (``problem`` is that wider problem) but kept every other job where it was,
    so the wider problem is solved once more, whole, from the refilled choice (with
    ``RESOLVE_SHARE`` of the time limit); its answer is kept only where it is valid and lowers the
    objective again. Measured: ``docs/planner.md`` and ``docs/benchmarks.md``, "Issue 14 on a quiet machine"."""
    again = _choose(replace(problem, hint=outcome.choice), replace(config, time_limit=RESOLVE_SHARE * config.time_limit))
    before, after = problem.objective(outcome.choice), problem.objective(again.choice)
    if again.status not in ("optimal", "feasible") or after >= before or problem.violations(again.choice):
        return problem, outcome
    message = f"{outcome.message}; the wider problem solved again: objective {before} -> {after} ({again.message})"
    return problem, replace(again, message=message)


def _backend(config: PlannerConfig) -> tuple[Backend, float]:
    """The configured integer backend and the wall-clock guard for one solve of ``config.time_limit``."""
    backend: Backend = CpSatBackend(workers=config.cpsat_workers) if config.solver == "cpsat" else PulpBackend()
    return backend, config.wall_clock_factor * config.time_limit + 1.0


def _solve(problem: Problem, config: PlannerConfig) -> tuple[SolveResult, int]:
    backend, wall = _backend(config)
    k = parts_needed(problem, config.max_jobs_per_subproblem)
    if k == 1:
        return _solve_one(problem, backend, config.time_limit, wall), 1
    t0 = time.perf_counter()
    choice = problem.hint.copy()
    statuses: list[str] = []
    gaps: list[float] = []
    notes: set[str] = set()
    for sub, keep in split(problem, k):
        share = sub.n_jobs / max(problem.n_jobs, 1)
        got = _solve_one(sub, backend, config.time_limit * share, wall * share)
        statuses.append(got.status)
        if "wall-clock" in got.message:
            notes.add("a part was stopped by the wall-clock guard, so this answer may differ between runs")
        best = sub.objective(sub.hint)
        if got.choice is not None:
            choice[problem.opt_job[keep[got.choice]]] = keep[got.choice]
            best = sub.objective(got.choice)
        if got.bound is not None and best:
            gaps.append(max(best - got.bound, 0.0) / abs(best))
    status = "optimal" if all(s == "optimal" for s in statuses) else "feasible"
    gap = max(gaps) if len(gaps) == k else None
    message = f"{k} node-disjoint parts; gap is the largest part's" + (
        "" if gap is not None else " (not every part reported a bound)"
    )
    return (
        SolveResult(
            backend=backend.name,
            status=status,  # type: ignore[arg-type]
            choice=choice,
            objective=float(problem.objective(choice)),
            bound=None,
            seconds=time.perf_counter() - t0,
            message="; ".join([message, *sorted(notes)]),
            variables=problem.n_options + k,
            gap=gap,
        ),
        k,
    )


@dataclass(frozen=True)
class _Outcome:
    """Which choice the solve step settled on, and what the plan's ``solver`` report says about it."""

    choice: np.ndarray
    name: str
    status: str
    gap: float | None = None
    bound: float | None = None
    message: str = ""
    parts: int = 1


def _gap(objective: float, bound: float | None) -> float | None:
    return max(objective - bound, 0.0) / abs(objective) if bound is not None and objective else None


def _choose(problem: Problem, config: PlannerConfig) -> _Outcome:
    """Run the configured solver; keep its plan only if it is valid and no worse than the greedy's."""
    hint_obj = problem.objective(problem.hint)
    if problem.n_jobs == 0:
        return _Outcome(problem.hint, config.solver, "trivial")
    if config.solver == "greedy":
        return _Outcome(problem.hint, "greedy", "feasible", message="greedy allocation (no integer program solved)")
    result, parts = _solve(problem, config)
    got = result.choice
    if got is not None and not problem.violations(got) and problem.objective(got) <= hint_obj:
        gap = result.gap if result.gap is not None else _gap(problem.objective(got), result.bound)
        if gap is None and result.status == "optimal":
            gap = 0.0
        return _Outcome(got, result.backend, result.status, gap, result.bound, result.message, parts)
    message = f"{result.backend} found nothing better than the greedy warm start ({result.message}); using it"
    gap = result.gap if result.gap is not None else _gap(hint_obj, result.bound)
    return _Outcome(problem.hint, result.backend, "fallback", gap, result.bound, message, parts)


def _solve_step(nodes: Sequence[Node], problem: Problem, config: PlannerConfig) -> tuple[Problem, _Outcome]:
    """The solve step of :func:`plan`: the configured solver, then (not after the greedy plan, asked for
    or fallen back to) the refill of the room it leaves idle and, where that lowered the objective, the
    wider problem solved again. Returns the problem the choice indexes (the wider one after a refill)."""
    outcome = _choose(problem, config)
    if config.solver == "greedy" or outcome.status not in ("optimal", "feasible"):
        return problem, outcome
    wider, refilled = problem, outcome
    for _ in range(REFILL_ROUNDS):
        again, better = _refilled(nodes, wider, refilled, config)
        if better is refilled:
            break
        wider, refilled = again, better
    if wider is problem:
        return wider, refilled
    wider, solved = _solved_again(wider, refilled, config)
    if solved is refilled:
        return wider, solved
    # The second solve moves jobs among the refill's candidates and may leave room idle in turn
    # (Pollux workload 5, seed 1, t = 20,645 s: one GPU beside 14 waiting jobs): one more refill.
    return _refilled(nodes, wider, solved, config)


def plan(
    snapshot: Snapshot,
    config: PlannerConfig | None = None,
    *,
    previous: PlanResult | None = None,
    truth: Mapping[str, JobTruth] | None = None,
    fits: Mapping[str, JobOutlook] | None = None,
) -> PlanResult:
    """Plan one control interval for ``snapshot``; see the module docstring.

    ``fits`` (job input digest -> outlook, as in :attr:`PlanResult.outlooks`) lends model fits like
    ``previous`` does, from any number of earlier plans (a service's cache of many clusters' jobs); it
    is only read. Neither changes the plan.

    ``truth`` (job id -> :class:`~planner.outlook.JobTruth`) replaces the fitted models of those jobs
    by what really remains: only the oracle policy passes it.
    """
    config = config or PlannerConfig()
    t0 = time.perf_counter()
    timings: dict[str, float] = {}

    outlooks = _outlooks(snapshot, config, previous, truth, fits)
    timings["models"] = time.perf_counter() - t0

    t = time.perf_counter()
    ordered = planned_outlooks(snapshot, outlooks, truth)
    problem, _ = build_problem(snapshot, ordered, config)
    timings["build"] = time.perf_counter() - t

    t = time.perf_counter()
    problem, outcome = _solve_step(snapshot.nodes, problem, config)
    timings["solve"] = time.perf_counter() - t

    t = time.perf_counter()
    plan_obj = _decode(snapshot, problem, config, outcome)
    violations = check_plan(snapshot, plan_obj)
    if violations and outcome.status != "fallback":
        message = "solver plan failed the checker: " + violations[0]
        plan_obj = _decode(snapshot, problem, config, _Outcome(problem.hint, outcome.name, "fallback", message=message))
        violations = check_plan(snapshot, plan_obj)
    if violations:
        raise PlanCheckError(violations)
    timings["decode_check"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    plan_obj = plan_obj.model_copy(update={"solver": plan_obj.solver.model_copy(update={"seconds": timings["total"]})})
    return PlanResult(plan=plan_obj, outlooks=outlooks, timings=timings)


def _decode(snapshot: Snapshot, problem: Problem, config: PlannerConfig, outcome: _Outcome) -> Plan:
    packing = pack_devices(problem, outcome.choice, snapshot.nodes)
    if packing.why:
        # Jobs packed out of the node the solver chose: offer them the other nodes with room.
        wider, again = widen(
            snapshot.nodes, problem, packing.choice, config.candidate_nodes, devices=packing.devices, first=set(packing.why)
        )
        if wider is not problem:
            problem, packing = wider, pack_devices(wider, again, snapshot.nodes, retry=packing.why)
    node_cpu = [n.cpu_millis for n in snapshot.nodes]
    profile = snapshot.settings.objective
    choice, notes = moves_checked(problem, packing.choice, profile, config, node_cpu, snapshot.settings.makespan_slack)
    choice, notes = moves_to_room(problem, choice, profile, config, node_cpu, snapshot.settings.makespan_slack, notes)
    assignments, unserved, terms = decode(
        problem, choice, snapshot.time, list(snapshot.nodes), _eligible_any(problem), packing.device, packing.why
    )
    assignments, terms = apply_split(
        problem,
        choice,
        assignments,
        terms,
        snapshot.time,
        profile,
        config,
        node_cpu,
        snapshot.settings.makespan_slack,
        notes,
        snapshot.settings.interval_seconds,
    )
    return Plan(
        time=snapshot.time,
        snapshot_digest=snapshot_digest(snapshot),
        assignments=assignments,
        unserved=unserved,
        objective=terms,
        solver=SolverReport(
            name=outcome.name,
            status=outcome.status,
            seconds=0.0,  # set by plan() to the measured total
            gap=outcome.gap,
            bound=outcome.bound,
            objective=float(problem.objective(choice)),
            time_limit=config.time_limit,
            subproblems=outcome.parts,
            variables=problem.n_options + 1,
            message=outcome.message,
        ),
        summary=PlanSummary(
            active_jobs=problem.n_jobs,
            placed=len(assignments) - len(unserved),
            unserved=len(unserved),
            finished_jobs=sum(1 for j in snapshot.jobs if j.status == "finished"),
        ),
        warnings=list(problem.warnings),
    )


def _eligible_any(problem: Problem) -> list[bool]:
    """Per job: does any option put it on a node (else it is unservable, not just crowded out)?"""
    has = np.zeros(problem.n_jobs, dtype=bool)
    has[problem.opt_job[problem.opt_node >= 0]] = True
    return has.tolist()
