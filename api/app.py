"""The FlowPlan HTTP service: ``create_app(store, settings)`` builds the FastAPI application.

Endpoints (all JSON; errors are ``{"error": {"field", "message"}}``, see :mod:`api.errors`):

- ``POST /v1/plan``                  a Snapshot in, a checked Plan out (the CLI's contract and checker);
  the plan is stored and its id returned in ``Location`` / ``FlowPlan-Plan-Id``;
- ``POST /v1/jobs/{id}/metrics``     a batch of progress points, idempotent by (job, epoch);
- ``PUT  /v1/jobs/{id}/target``      the job's QoE target (tier 1 with deadline, tier 2);
- ``GET  /v1/jobs``, ``GET /v1/jobs/{id}``   history summaries, live predictions;
- ``GET  /v1/plans/latest``, ``GET /v1/plans/{id}``;
- ``GET  /healthz`` (alive), ``GET /readyz`` (the store answers), ``GET /metrics`` (Prometheus).

Writes need the write token, reads either token (see :mod:`api.auth`); health probes need none.

Planning and live predictions run in worker processes behind a bounded queue (:mod:`api.pool`): a
request beyond it gets 429 (503 while shutting down) with ``Retry-After``. The event loop only reads
bodies and answers; parsing and the state store run in its thread pool. The pool starts and stops
with the app's lifespan.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the route signatures at run time, and
# some of their annotations refer to this call's ``settings``.
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Path, Query, Request, Response, Security
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from api import examples
from api.auth import check_access
from api.errors import ApiError, ErrorBody, NotFound, install_handlers
from api.limits import BodySizeLimit, RequestGuard
from api.metrics import ServiceMetrics
from api.pool import WorkerPool
from api.schemas import HistorySummary, IngestResult, JobDetail, JobList, JobSummary, MetricBatch, Status
from api.settings import ApiSettings
from api.work import plan_snapshot, predict_job
from planner import PlannerConfig, SnapshotError, parse_snapshot
from planner.plan import Plan
from planner.snapshot import MetricPoint, QoETarget, Snapshot
from store import JobRecord, StateStore

#: The Snapshot contract's pattern for names, used for job ids in paths.
JOB_ID = r"^[A-Za-z0-9]([A-Za-z0-9._:/-]*[A-Za-z0-9])?$"
JobId = Annotated[str, Path(min_length=1, max_length=253, pattern=JOB_ID, description="Job id (the Snapshot's job id).")]

#: Declares the bearer scheme in the OpenAPI document; the check itself is :func:`api.auth.check_access`.
_bearer = HTTPBearer(auto_error=False, description="FLOWPLAN_TOKEN (read-write) or FLOWPLAN_READ_TOKEN (read-only).")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Open mode: the Host header names another address (DNS rebinding)."},
    401: {"model": ErrorBody, "description": "No bearer token, or an unknown one."},
    422: {"model": ErrorBody, "description": "The request is malformed: the error names the field."},
    413: {"model": ErrorBody, "description": "The request body is larger than the limit."},
}
_WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    403: {"model": ErrorBody, "description": "The read-only token cannot write."},
    415: {"model": ErrorBody, "description": "A write without Content-Type: application/json."},
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody, "description": "No such job or plan."}}
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer", "minimum": 1}}}
_BUSY: dict[int | str, dict[str, Any]] = {
    429: {"model": ErrorBody, "description": "Every worker is busy and the queue is full.", "headers": _RETRY_AFTER},
    503: {
        "model": ErrorBody,
        "description": "Shutting down, or a worker stopped under the request.",
        "headers": _RETRY_AFTER,
    },
}
_NOT_READABLE: dict[int | str, dict[str, Any]] = {
    405: {"model": ErrorBody, "description": "A write-only sub-resource (.../target, .../metrics) read with GET."}
}


def _version() -> str:
    try:
        return version("flowplan")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        return "0"


def _plan_response(plan_id: int, plan_obj: Plan | str, status: int = 200) -> Response:
    # The Plan was validated when built (or read back): serialise it once (or answer the JSON the
    # worker dumped), without FastAPI re-validating.
    return Response(
        plan_obj if isinstance(plan_obj, str) else plan_obj.model_dump_json(),
        status_code=status,
        media_type="application/json",
        headers={"Location": f"/v1/plans/{plan_id}", "FlowPlan-Plan-Id": str(plan_id)},
    )


def _fill_from_store(store: StateStore, snapshot: Snapshot) -> Snapshot:
    """Jobs posted without history or target get the stored ones (what training jobs and users sent),
    and a task of a job not finished that the snapshot has no curves for gets the curves of its
    finished runs in the store (``Snapshot.curve_priors``: what a daemon sharing the store recorded)."""
    histories = store.histories([j.id for j in snapshot.jobs if not j.history])
    targets = store.targets([j.id for j in snapshot.jobs if j.target is None])
    carried = {c.task for c in snapshot.curve_priors}
    tasks = sorted({j.task for j in snapshot.jobs if j.task is not None and j.status != "finished"} - carried)
    found = [c for task in tasks if (c := store.task_curves(task)) is not None]
    if found:
        snapshot = snapshot.model_copy(update={"curve_priors": [*snapshot.curve_priors, *found]})
    if not histories and not targets:
        return snapshot
    jobs = []
    for job in snapshot.jobs:
        update: dict[str, Any] = {}
        if not job.history and job.id in histories:
            update["history"] = histories[job.id]
        if job.target is None and job.id in targets:
            update["target"] = targets[job.id]
        jobs.append(job.model_copy(update=update) if update else job)
    return snapshot.model_copy(update={"jobs": jobs})


def create_app(store: StateStore, settings: ApiSettings | None = None) -> FastAPI:
    settings = settings or ApiSettings()
    metrics = ServiceMetrics()
    pool = WorkerPool(settings.workers, settings.queue, metrics, fit_cache_jobs=settings.fit_cache_jobs, nice=settings.plan_nice)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        pool.start()
        try:
            yield
        finally:
            await pool.close()

    app = FastAPI(
        lifespan=lifespan,
        title="FlowPlan",
        version=_version(),
        summary="Plans CPU/GPU shares and placements for deep-learning training jobs.",
        description=(
            "Post a cluster snapshot, get an explained, checked plan. Training jobs post their progress; "
            "users set targets and ask when their model will be ready. Errors are "
            '`{"error": {"field": ..., "message": ...}}`.'
        ),
        separate_input_output_schemas=False,
    )
    app.state.store = store
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.pool = pool
    install_handlers(app, metrics.count_error)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, on_reject=lambda: metrics.count_error(413))
    app.add_middleware(RequestGuard, allowed_hosts=settings.allowed_hosts, on_reject=metrics.count_error)

    # async: a check this cheap runs on the event loop, not through a thread hop on every request.
    async def may_read(request: Request, _: Credentials) -> None:
        check_access(settings, request, write=False)

    async def may_write(request: Request, _: Credentials) -> None:
        check_access(settings, request, write=True)

    read = [Depends(may_read)]
    write = [Depends(may_write)]

    # On the event loop itself (async, no thread): it answers even when every thread and worker is busy.
    @app.get("/healthz", response_model=Status, tags=["health"], summary="The process is alive")
    async def healthz() -> Status:
        return Status(status="ok")

    @app.get(
        "/readyz",
        response_model=Status,
        tags=["health"],
        summary="The state store answers",
        responses={503: {"model": Status, "description": "The state store does not answer."}},
    )
    def readyz() -> Any:
        try:
            store.ping()
        except Exception as exc:  # any store failure means "not ready", never a 500
            return JSONResponse({"status": "unavailable", "detail": str(exc)}, status_code=503)
        return Status(status="ready")

    @app.get(
        "/metrics",
        tags=["health"],
        summary="Prometheus metrics",
        dependencies=read,
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}}, **_ERRORS},
    )
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post(
        "/v1/plan",
        response_model=Plan,
        tags=["plans"],
        summary="Plan one control interval for a snapshot",
        dependencies=write,
        responses={**_WRITE_ERRORS, **_BUSY},
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": "#/components/schemas/Snapshot"},
                        "examples": {
                            "one-node": {"summary": "A T4 node, a running and a pending job", "value": examples.SNAPSHOT}
                        },
                    }
                },
            }
        },
    )
    async def post_plan(
        request: Request,
        solver: Annotated[Literal["cpsat", "pulp", "greedy"] | None, Query(description="Backend (default: cpsat).")] = None,
        time_limit: Annotated[
            float | None,
            Query(gt=0, le=settings.max_time_limit, allow_inf_nan=False, description="Solver time limit in seconds (default 1)."),
        ] = None,
        fill_from_store: Annotated[
            bool,
            Query(
                description="Jobs posted without history or target get the stored ones, and a job's task without "
                "curves in the snapshot the curves of its finished runs in the store; finished jobs posted with a task "
                "and a history are kept as such runs."
            ),
        ] = True,
    ) -> Response:
        """The same contract and checker as `flowplan plan`: a Snapshot (`apiVersion: flowplan/v1`) in,
        the Plan out. The plan is stored; `Location` and `FlowPlan-Plan-Id` name it. A worker process
        plans; with every worker busy and the queue full the answer is 429 with `Retry-After`.
        `FlowPlan-Fitted-Jobs` says how many jobs' models this plan fitted; the others' fits were the
        worker's from an earlier plan of the same job inputs (they never change the plan)."""
        body = await request.body()

        def parse() -> tuple[Snapshot, str]:
            try:
                snapshot = parse_snapshot(body)
            except SnapshotError as exc:
                raise ApiError(exc.message, exc.field, status=422) from None
            if fill_from_store:
                store.record_finished_runs(snapshot.jobs)  # lent to the task's later jobs (and this plan's)
                snapshot = _fill_from_store(store, snapshot)
            # What the worker gets (api.work.plan_snapshot) and the store keeps: dumped once.
            return snapshot, snapshot.model_dump_json()

        config = PlannerConfig(solver=solver or settings.solver, time_limit=time_limit or settings.time_limit)
        with pool.admit():
            snap, snap_json = await run_in_threadpool(parse)
            planned = await pool.run(plan_snapshot, snap_json, config, jobs=[j.id for j in snap.jobs])
            plan_id = await run_in_threadpool(store.save_plan_json, planned.time, planned.digest, planned.plan_json, snap_json)
        metrics.plans.labels(solver=planned.solver.name, status=planned.solver.status).inc()
        metrics.solve_seconds.observe(planned.solver.seconds)
        metrics.fits.labels(result="hit").inc(planned.hits)
        metrics.fits.labels(result="miss").inc(planned.misses)
        response = _plan_response(plan_id, planned.plan_json, status=200)
        response.headers["FlowPlan-Fitted-Jobs"] = str(planned.misses)
        return response

    @app.post(
        "/v1/jobs/{job_id:path}/metrics",
        response_model=IngestResult,
        tags=["jobs"],
        summary="Add a batch of progress points (idempotent by job and epoch)",
        dependencies=write,
        responses=_WRITE_ERRORS,
    )
    def post_metrics(job_id: JobId, batch: MetricBatch) -> IngestResult:
        """Store the points in one transaction. A point whose (job, epoch) is already stored is
        counted in `duplicates` and changes nothing, so a client may retry a batch safely. A point
        is acknowledged (durable) when this returns 200."""
        inserted, duplicates = store.add_points(job_id, batch.metric_points())
        metrics.points.inc(inserted)
        metrics.duplicates.inc(duplicates)
        return IngestResult(job=job_id, inserted=inserted, duplicates=duplicates, points=store.point_count(job_id))

    @app.put(
        "/v1/jobs/{job_id:path}/target",
        response_model=QoETarget,
        tags=["jobs"],
        summary="Set the job's QoE target",
        dependencies=write,
        responses=_WRITE_ERRORS,
        openapi_extra={"requestBody": {"content": {"application/json": {"examples": {"accuracy": {"value": examples.TARGET}}}}}},
    )
    def put_target(job_id: JobId, target: QoETarget) -> QoETarget:
        """Tier 1 (deliver a usable model, by its deadline), tier 2 (keep training to it). Replaces any
        previous target; a later `POST /v1/plan` uses it for jobs posted without one."""
        store.set_target(job_id, target)
        return target

    @app.get(
        "/v1/jobs", response_model=JobList, tags=["jobs"], summary="Jobs the service knows", dependencies=read, responses=_ERRORS
    )
    def list_jobs(
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000, offset: Annotated[int, Query(ge=0, le=10**9)] = 0
    ) -> JobList:
        ids = store.job_ids()
        stats = store.point_stats()
        with_target = {j for j in ids[offset : offset + limit] if store.target(j) is not None}
        page = []
        for j in ids[offset : offset + limit]:
            s = stats.get(j)
            page.append(
                JobSummary(
                    id=j,
                    points=s.points if s else 0,
                    first_epoch=s.first_epoch if s else None,
                    last_epoch=s.last_epoch if s else None,
                    last_time=s.last_time if s else None,
                    has_target=j in with_target,
                )
            )
        return JobList(jobs=page, total=len(ids))

    def _job_state(job_id: str) -> tuple[JobRecord, list[MetricPoint], QoETarget | None]:
        """The stored record, history and target of a job (404, or 405 for a write-only sub-resource)."""
        record = store.job_record(job_id)
        if record is None:
            # ".../target" and ".../metrics" are write-only sub-resources, not job ids.
            for suffix, allow in (("/target", "PUT"), ("/metrics", "POST")):
                if job_id.endswith(suffix):
                    raise ApiError(
                        f"{suffix[1:]} of a job is written with {allow}; read the job with GET /v1/jobs/{{id}}",
                        "",
                        405,
                        {"Allow": allow},
                    )
            raise NotFound(f"no job '{job_id}'", "job_id")
        return record, store.history(job_id), store.target(job_id)

    @app.get(
        "/v1/jobs/{job_id:path}",
        response_model=JobDetail,
        tags=["jobs"],
        summary="A job's history summary and live predictions",
        dependencies=read,
        responses={**_ERRORS, **_NOT_FOUND, **_NOT_READABLE, **_BUSY},
    )
    async def get_job(job_id: JobId) -> JobDetail:
        """Predictions: ETA to each tier with its 80% band, the plateau and the convergence epoch, from
        the same curve models the planner uses, at the job's observed speed (fitted in a worker process,
        like plans: 429 with `Retry-After` when every worker is busy and the queue is full)."""
        with pool.admit():
            record, history, target = await run_in_threadpool(_job_state, job_id)
            predictions = await pool.run(predict_job, job_id, history, target, record.spec, jobs=[job_id])
        times = [p.time for p in history]
        summary = HistorySummary(
            points=len(history),
            first_epoch=history[0].epoch if history else None,
            last_epoch=history[-1].epoch if history else None,
            first_time=min(times) if times else None,
            last_time=max(times) if times else None,
            last_loss=history[-1].loss if history else None,
            last_metric=history[-1].metric if history else None,
        )
        return JobDetail(
            id=job_id,
            history=summary,
            target=target,
            spec=record.spec,
            predictions=predictions,
        )

    @app.get(
        "/v1/plans/latest",
        response_model=Plan,
        tags=["plans"],
        summary="The latest plan",
        dependencies=read,
        responses={**_ERRORS, **_NOT_FOUND},
    )
    def latest_plan() -> Response:
        got = store.latest_plan()
        if got is None:
            raise NotFound("no plan has been made yet")
        return _plan_response(*got)

    @app.get(
        "/v1/plans/{plan_id}",
        response_model=Plan,
        tags=["plans"],
        summary="A plan by id",
        dependencies=read,
        responses={**_ERRORS, **_NOT_FOUND},
    )
    def get_plan(plan_id: Annotated[int, Path(ge=1, le=2**62)]) -> Response:
        got = store.get_plan(plan_id)
        if got is None:
            raise NotFound(f"no plan {plan_id}", "plan_id")
        return _plan_response(plan_id, got)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                description=app.description,
                routes=app.routes,
                separate_input_output_schemas=False,
            )
            snap = Snapshot.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, definition in snap.pop("$defs", {}).items():
                components.setdefault(name, definition)
            components["Snapshot"] = snap
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
