"""Planning in worker processes behind a bounded queue, over real HTTP: a uvicorn server on a loopback
port (:class:`test_api_support.ThreadServer`, with its lifespan), real ``spawn`` worker processes.

Cases:

- **same plan through the pool**: each example snapshot, posted twice by concurrent clients to two
  workers, comes back as ``planner.plan`` makes it in this process (all but the measured seconds),
  checked, and stored as returned — from a cold worker and from a warm one;
- **a full queue** (1 worker, a queue of 1): a held task takes the worker and a real plan request waits
  for it; meanwhile ``/healthz`` and ``/metrics`` answer, and one more plan request, or a prediction,
  gets 429 with ``Retry-After`` in the error body's shape, counted in ``flowplan_rejected_total``;
  released, the waiting plan is the planner's;
- **the lifespan**: stopping the server ends its worker processes; a pool that is closing answers 503;
- **routing by the jobs a worker planned**: two workers; cluster A is planned while the other worker
  is held, then cluster B (no job id in common) with both idle goes to the worker freed last (the one
  that was held), then A again, with both idle, goes back to the worker that planned it: it fits no
  model (the rule before, the worker freed last, refitted all of A there); and a cluster planned by
  both workers counts as warm in both: a freed worker takes it before a longer-waiting cluster it
  never planned;
- **warm fits across clusters**: one worker plans cluster A, then B, then A again: the third plan fits
  no model (``FlowPlan-Fitted-Jobs: 0``) and is byte for byte the plan this process makes cold (all
  but the measured seconds); a new point refits that one job only, a changed CPU measurement none;
  with ``fit_cache_jobs=0`` the worker keeps its last plan's fits only, and A after B is cold;
- **priority**: a worker runs ``nice`` steps below the service process (read in the worker);
- **settings**: a bad ``FLOWPLAN_*`` value is a one-line error naming the variable and the value.

What is not the product: the route ``POST /test/hold`` that :func:`held_app` adds to the real app. It
runs :func:`test_api_support.hold_worker` through the pool exactly as a plan runs (admitted, then a
worker); that task waits on a named pipe the test writes to, so the test, not a timer, decides when
the worker is free. Waiting for the service to reach a state polls ``/metrics`` (no sleep decides
an outcome, and nothing asserts on time).
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from test_api_support import ServeProcess, ThreadServer, hold_worker

from api import ApiSettings, create_app
from api.errors import ApiError
from api.metrics import ServiceMetrics
from api.pool import WorkerPool
from planner import PlannerConfig, check_plan, parse_snapshot, plan
from planner.plan import Plan
from store import StateStore

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples" / "snapshots").glob("*.json"))
JSON = {"content-type": "application/json"}
NO_FILL = {"fill_from_store": "false"}
STRIP = {"solver": {"seconds"}}


def metric(client: httpx.Client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def wait_for(client: httpx.Client, name: str, value: float) -> None:
    """Poll ``/metrics`` until ``name`` reads ``value`` (a generous bound only against a hang)."""
    deadline = time.monotonic() + 120
    while metric(client, name) != value:
        assert time.monotonic() < deadline, f"{name} never reached {value}"
        time.sleep(0.02)


def held_app(store: StateStore, settings: ApiSettings) -> FastAPI:
    """The real app plus ``POST /test/hold``: a task that holds a worker until the test releases it."""
    app = create_app(store, settings)
    pool: WorkerPool = app.state.pool

    @app.post("/test/hold")
    async def hold(body: dict[str, str]) -> dict[str, int]:
        with pool.admit():
            return {"pid": await pool.run(hold_worker, body["fifo"])}

    return app


@pytest.fixture()
def store() -> Iterator[StateStore]:
    s = StateStore(":memory:")
    yield s
    s.close()


def test_the_pool_plans_what_the_planner_plans(store: StateStore) -> None:
    expected = {}
    for path in EXAMPLES:
        snapshot = parse_snapshot(path.read_bytes())
        expected[path.name] = plan(snapshot, PlannerConfig()).plan
    bodies = [(path.name, path.read_bytes()) for path in EXAMPLES] * 2  # each twice: a cold and a warm worker
    with ThreadServer(create_app(store, ApiSettings(plan_workers=2, plan_queue=len(bodies)))) as srv:

        def post(item: tuple[str, bytes]) -> tuple[str, httpx.Response]:
            with httpx.Client(base_url=srv.url, timeout=300, headers=JSON) as http:
                return item[0], http.post("/v1/plan", content=item[1], params=NO_FILL)

        with ThreadPoolExecutor(len(bodies)) as clients:
            answers = list(clients.map(post, bodies))
        with httpx.Client(base_url=srv.url, timeout=300, headers=JSON) as http:
            again = [(name, http.post("/v1/plan", content=body, params=NO_FILL)) for name, body in bodies]
    for name, resp in [*answers, *again]:
        assert resp.status_code == 200, resp.text
        got = Plan.model_validate_json(resp.content)
        assert got.model_dump(exclude=STRIP) == expected[name].model_dump(exclude=STRIP), name
        assert check_plan(parse_snapshot((REPO / "examples" / "snapshots" / name).read_bytes()), got) == []
        stored = store.get_plan(int(resp.headers["FlowPlan-Plan-Id"]))
        assert stored == got


def release(fifo: Path) -> None:
    """Let the held task end: write into its pipe (the open waits for the worker to open its end)."""
    with open(fifo, "w") as fh:
        fh.write("go")


def test_a_full_queue_answers_429_while_health_and_metrics_answer(store: StateStore, tmp_path: Path) -> None:
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    body = EXAMPLES[0].read_bytes()
    expected = plan(parse_snapshot(body), PlannerConfig()).plan
    app = held_app(store, ApiSettings(plan_workers=1, plan_queue=1))
    with ThreadServer(app) as srv, httpx.Client(base_url=srv.url, timeout=300, headers=JSON) as http:
        with ThreadPoolExecutor(2) as background:
            held = background.submit(http.post, "/test/hold", json={"fifo": str(fifo)})
            released = False
            try:
                wait_for(http, "flowplan_work_in_flight", 1)  # the held task has the only worker
                waiting = background.submit(http.post, "/v1/plan", content=body, params=NO_FILL)
                wait_for(http, "flowplan_work_in_flight", 2)  # a real plan request waits for it

                assert http.get("/healthz").json()["status"] == "ok"
                assert metric(http, "flowplan_workers") == 1
                refused = http.post("/v1/plan", content=body, params=NO_FILL)
                assert refused.status_code == 429, refused.text
                assert int(refused.headers["Retry-After"]) >= 1
                assert refused.headers["content-type"] == "application/json"
                error = refused.json()["error"]
                assert error["field"] == "" and "busy" in error["message"]
                predicted = http.get("/v1/jobs/anything")  # predictions fit curves: the same queue
                assert predicted.status_code == 429 and "Retry-After" in predicted.headers
                assert metric(http, 'flowplan_rejected_total{reason="queue_full"}') == 2
                assert metric(http, 'flowplan_errors_total{status="429"}') == 2
                assert not waiting.done()

                release(fifo)
                released = True
                assert held.result().status_code == 200
                answer = waiting.result()
            finally:
                if not released:  # a failed check above must not leave the worker (and this test) waiting
                    release(fifo)
        assert answer.status_code == 200, answer.text
        assert Plan.model_validate_json(answer.content).model_dump(exclude=STRIP) == expected.model_dump(exclude=STRIP)
        wait_for(http, "flowplan_work_in_flight", 0)
        assert http.post("/v1/plan", content=body, params=NO_FILL).status_code == 200  # room again


def test_stopping_the_server_ends_its_workers(store: StateStore, tmp_path: Path) -> None:
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    with ThreadServer(held_app(store, ApiSettings(plan_workers=1))) as srv, httpx.Client(base_url=srv.url, timeout=300) as http:
        with ThreadPoolExecutor(1) as background:
            held = background.submit(http.post, "/test/hold", json={"fifo": str(fifo)})
            release(fifo)
            pid = held.result().json()["pid"]
        os.kill(pid, 0)  # the worker is alive while the server runs
        assert pid != os.getpid()
    with pytest.raises(ProcessLookupError):  # joined by the lifespan's shutdown, not left behind
        os.kill(pid, 0)


def test_a_closing_pool_answers_503_with_retry_after() -> None:
    metrics = ServiceMetrics()
    pool = WorkerPool(2, 0, metrics)

    async def closed_then_admit() -> ApiError:
        await pool.close()
        with pytest.raises(ApiError) as refused, pool.admit():
            pass
        return refused.value

    error = asyncio.run(closed_then_admit())
    assert error.status == 503 and error.headers is not None and int(error.headers["Retry-After"]) >= 1
    assert metrics.rejected.labels(reason="shutting_down")._value.get() == 1


def test_workers_run_below_the_service_process() -> None:
    """The worker's own niceness, read in the worker (``os.nice(0)`` there), is the service's plus ``nice``."""
    pool = WorkerPool(1, 0, ServiceMetrics(), nice=7)

    async def worker_niceness() -> int:
        try:
            with pool.admit():
                return await pool.run(os.nice, 0)
        finally:
            await pool.close()

    assert asyncio.run(worker_niceness()) == min(os.nice(0) + 7, 19)


def test_settings_name_the_variable_and_value() -> None:
    for env, words in (
        ({"FLOWPLAN_PLAN_WORKERS": "0"}, "FLOWPLAN_PLAN_WORKERS: must be between 1 and 256 (got 0)"),
        ({"FLOWPLAN_PLAN_WORKERS": "two"}, "FLOWPLAN_PLAN_WORKERS: not an integer ('two')"),
        ({"FLOWPLAN_PLAN_QUEUE": "-1"}, "FLOWPLAN_PLAN_QUEUE: must be between 0 and 100000 (got -1)"),
        ({"FLOWPLAN_FIT_CACHE_JOBS": "-5"}, "FLOWPLAN_FIT_CACHE_JOBS: must be between 0 and 10000000 (got -5)"),
        ({"FLOWPLAN_FIT_CACHE_JOBS": "1e3"}, "FLOWPLAN_FIT_CACHE_JOBS: not an integer ('1e3')"),
        ({"FLOWPLAN_PLAN_NICE": "20"}, "FLOWPLAN_PLAN_NICE: must be between 0 and 19 (got 20)"),
    ):
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            ApiSettings.from_env(env)
    settings = ApiSettings.from_env({"FLOWPLAN_PLAN_WORKERS": "3"})
    assert (settings.workers, settings.queue) == (3, 3)
    assert ApiSettings.from_env({"FLOWPLAN_PLAN_WORKERS": "3", "FLOWPLAN_PLAN_QUEUE": "0"}).queue == 0
    assert settings.fit_cache_jobs == 10_000 and ApiSettings.from_env({"FLOWPLAN_FIT_CACHE_JOBS": "0"}).fit_cache_jobs == 0
    assert settings.plan_nice == 10 and ApiSettings.from_env({"FLOWPLAN_PLAN_NICE": "0"}).plan_nice == 0


def _children(pid: int, marker: str) -> list[int]:
    """Processes whose parent is ``pid`` and whose command line contains ``marker`` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == pid and marker in cmdline:
            out.append(int(entry.name))
    return out


def _gone(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")  # exited (a zombie waits for whoever reaps orphans here)


def test_workers_of_a_killed_service_exit(tmp_path: Path) -> None:
    """SIGKILL leaves the service no chance to stop its workers: they notice their parent is gone."""
    server = ServeProcess(tmp_path / "state.db", {"FLOWPLAN_PLAN_WORKERS": "2"}).start()
    try:
        with httpx.Client(base_url=server.url, timeout=300, headers=JSON) as http:
            assert http.post("/v1/plan", content=EXAMPLES[0].read_bytes()).status_code == 200
        assert server.proc is not None
        workers = _children(server.proc.pid, "multiprocessing.spawn")
        assert len(workers) == 2, workers
    finally:
        server.kill()
    deadline = time.monotonic() + 60
    while not all(_gone(pid) for pid in workers):
        assert time.monotonic() < deadline, [pid for pid in workers if not _gone(pid)]
        time.sleep(0.05)


def _active(snapshot: dict[str, Any]) -> int:
    return sum(1 for job in snapshot["jobs"] if job.get("status") != "finished")


@pytest.mark.parametrize("fit_cache_jobs", [None, 0])
def test_a_worker_keeps_the_fits_of_every_cluster_it_planned(store: StateStore, fit_cache_jobs: int | None) -> None:
    """With ``FLOWPLAN_FIT_CACHE_JOBS=0`` a worker keeps only its last plan's fits: A after B is cold."""
    a = json.loads((REPO / "examples" / "snapshots" / "qoe-deadlines.json").read_bytes())
    b = json.loads((REPO / "examples" / "snapshots" / "specon-4nodes.json").read_bytes())
    a_new_point = copy.deepcopy(a)  # one job reported one more epoch
    last = a_new_point["jobs"][0]["history"][-1]
    a_new_point["jobs"][0]["history"].append({"time": last["time"] + 30.0, "epoch": last["epoch"] + 1, "metric": last["metric"]})
    a_cpu_used = copy.deepcopy(a_new_point)  # and then only its measured CPU use changed
    a_cpu_used["jobs"][0]["cpu_used_millis"] = 7_000
    # (snapshot, jobs whose models the plan must fit): A and B cold, A warm after B, one new point, no new point.
    again = 0 if fit_cache_jobs is None else _active(a)
    posts = [(a, _active(a)), (b, _active(b)), (a, again), (a_new_point, 1), (a_cpu_used, 0)]
    settings = ApiSettings(plan_workers=1, plan_queue=0)
    if fit_cache_jobs is not None:
        settings = replace(settings, fit_cache_jobs=fit_cache_jobs)
    with ThreadServer(create_app(store, settings)) as srv:
        with httpx.Client(base_url=srv.url, timeout=300, headers=JSON) as http:
            for snapshot, fitted in posts:
                body = json.dumps(snapshot).encode()
                resp = http.post("/v1/plan", content=body, params=NO_FILL)
                assert resp.status_code == 200, resp.text
                assert resp.headers["FlowPlan-Fitted-Jobs"] == str(fitted)
                cold = plan(parse_snapshot(body), PlannerConfig()).plan
                got = Plan.model_validate_json(resp.content)
                assert got.model_dump_json(exclude=STRIP) == cold.model_dump_json(exclude=STRIP)
                assert check_plan(parse_snapshot(body), got) == []
            hits = sum(_active(s) - fitted for s, fitted in posts)
            assert metric(http, 'flowplan_plan_fits_total{result="hit"}') == hits
            assert metric(http, 'flowplan_plan_fits_total{result="miss"}') == sum(fitted for _, fitted in posts)


def _two_clusters() -> tuple[bytes, bytes, dict[str, Any]]:
    """Cluster A (the qoe-deadlines example) and cluster B (specon-4nodes, its job ids prefixed so
    that none is A's), as request bodies, and B as a document."""
    a = (REPO / "examples" / "snapshots" / "qoe-deadlines.json").read_bytes()
    b_doc = json.loads((REPO / "examples" / "snapshots" / "specon-4nodes.json").read_bytes())
    for job in b_doc["jobs"]:
        job["id"] = "b-" + job["id"]  # no job id in common with A
    return a, json.dumps(b_doc).encode(), b_doc


def test_a_plan_goes_back_to_the_worker_that_planned_its_jobs(store: StateStore, tmp_path: Path) -> None:
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    a, b, b_doc = _two_clusters()
    app = held_app(store, ApiSettings(plan_workers=2, plan_queue=0))
    with ThreadServer(app) as srv, httpx.Client(base_url=srv.url, timeout=300, headers=JSON) as http:

        def fitted(body: bytes) -> int:
            resp = http.post("/v1/plan", content=body, params=NO_FILL)
            assert resp.status_code == 200, resp.text
            return int(resp.headers["FlowPlan-Fitted-Jobs"])

        with ThreadPoolExecutor(1) as background:
            held = background.submit(http.post, "/test/hold", json={"fifo": str(fifo)})
            released = False
            try:
                wait_for(http, "flowplan_work_in_flight", 1)  # one worker held: A goes to the other
                assert fitted(a) == _active(json.loads(a))
                release(fifo)
                released = True
                assert held.result().status_code == 200
            finally:
                if not released:
                    release(fifo)
        wait_for(http, "flowplan_work_in_flight", 0)
        assert fitted(b) == _active(b_doc)  # neither worker planned B: the one freed last (the held one)
        assert fitted(a) == 0  # both idle: A goes back to the worker that planned it, not the one freed last


def test_a_freed_worker_takes_the_waiting_cluster_it_also_planned(store: StateStore, tmp_path: Path) -> None:
    """A cluster planned by both workers is warm in both. Worker Q plans A; P then plans A too (Q
    held) and B. With both held, B waits first and A second; Q, freed, takes A (it planned A) rather
    than B, the longest waiting (it never planned B): A fits no model and is planned (its plan id
    given) before B. The rule before, the one worker that planned a job last, counted A as P's only,
    so Q took B first and fitted all of it while A waited."""
    fifos = []
    for name in ("p", "q", "p2"):
        fifos.append(tmp_path / name)
        os.mkfifo(fifos[-1])
    hold_p, hold_q, hold_p2 = fifos
    a, b, b_doc = _two_clusters()
    app = held_app(store, ApiSettings(plan_workers=2, plan_queue=2))
    with ThreadServer(app) as srv, httpx.Client(base_url=srv.url, timeout=300, headers=JSON) as http:

        def fitted(resp: httpx.Response) -> int:
            assert resp.status_code == 200, resp.text
            return int(resp.headers["FlowPlan-Fitted-Jobs"])

        def post(body: bytes) -> httpx.Response:
            return http.post("/v1/plan", content=body, params=NO_FILL)

        with ThreadPoolExecutor(4) as background:
            released: set[Path] = set()

            def let_go(fifo: Path) -> None:
                release(fifo)
                released.add(fifo)

            try:
                on_p = background.submit(http.post, "/test/hold", json={"fifo": str(hold_p)})
                wait_for(http, "flowplan_work_in_flight", 1)
                assert fitted(post(a)) == _active(json.loads(a))  # Q plans A
                on_q = background.submit(http.post, "/test/hold", json={"fifo": str(hold_q)})  # the only idle one
                wait_for(http, "flowplan_work_in_flight", 2)
                let_go(hold_p)
                assert on_p.result().status_code == 200
                wait_for(http, "flowplan_work_in_flight", 1)
                assert fitted(post(a)) == _active(json.loads(a))  # P plans A as well (Q is held)
                assert fitted(post(b)) == _active(b_doc)  # and B
                on_p2 = background.submit(http.post, "/test/hold", json={"fifo": str(hold_p2)})  # P again
                wait_for(http, "flowplan_work_in_flight", 2)
                b_plan = background.submit(post, b)
                wait_for(http, "flowplan_work_waiting", 1)  # parsed and waiting for a worker, not only admitted
                a_plan = background.submit(post, a)
                wait_for(http, "flowplan_work_waiting", 2)
                let_go(hold_q)  # Q is freed first: it takes A, which it planned
                a_resp = a_plan.result()
                assert fitted(a_resp) == 0
                let_go(hold_p2)
                b_resp = b_plan.result()
                assert int(a_resp.headers["FlowPlan-Plan-Id"]) < int(b_resp.headers["FlowPlan-Plan-Id"])
                assert on_q.result().status_code == 200 and on_p2.result().status_code == 200
            finally:
                for fifo in fifos:
                    if fifo not in released:
                        release(fifo)
