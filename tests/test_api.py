"""The HTTP service over real HTTP: a uvicorn server on a loopback port, an httpx client.

Flows (real measured curves from ``../shared/data``, real example snapshots):

- a training job posts its measured history in batches (one retried), a user sets a target, the job's
  live predictions name a curve family, the tier's epoch inside its band, an ETA and the plateau;
- ``POST /v1/plan`` answers what ``planner.plan`` answers for the same snapshot, the plan passes the
  checker, is stored and read back by id and as the latest; jobs posted without history get the stored one;
- health, readiness and Prometheus metrics move with the traffic.

Refusals (table-driven below): malformed JSON, NaN and Infinity, unknown fields, bad ids, bad query
values, cross-field errors, unknown routes and methods, oversize bodies (declared and chunked) — each a
4xx in the one error shape naming the field; auth failures for every combination of token and access.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REPO, real_curve
from test_api_support import ThreadServer

from api import ApiSettings, create_app
from planner import PlannerConfig, check_plan, load_snapshot, parse_snapshot, plan
from planner.plan import Plan
from store import StateStore

EXAMPLES = REPO / "examples" / "snapshots"
WRITE, READ = "w-token-for-tests", "r-token-for-tests"


def curve_points(model: str, bsz: int, start: int = 0, stop: int | None = None, t0: float = 1_767_000_000.0) -> list[dict]:
    """Measured validation metric per epoch as API points, 40 s apart."""
    values = real_curve(model, bsz)
    stop = len(values) if stop is None else stop
    return [{"time": t0 + 40.0 * i, "epoch": i + 1, "metric": float(values[i])} for i in range(start, stop)]


@pytest.fixture(scope="module")
def server(data_dir: Path) -> Iterator[tuple[str, StateStore]]:
    store = StateStore(":memory:")
    with ThreadServer(create_app(store, ApiSettings(max_body_bytes=256 * 1024))) as srv:
        yield srv.url, store
    store.close()


@pytest.fixture()
def client(server: tuple[str, StateStore]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server[0], timeout=60) as c:
        yield c


def test_ingest_is_idempotent_and_predictions_follow_the_measured_curve(client: httpx.Client) -> None:
    pts = curve_points("cifar10", 128, stop=30)
    first = client.post("/v1/jobs/cifar10-bs128/metrics", json={"points": pts[:20]})
    assert first.status_code == 200, first.text
    assert first.json() == {"job": "cifar10-bs128", "inserted": 20, "duplicates": 0, "points": 20}
    retry = client.post("/v1/jobs/cifar10-bs128/metrics", json={"points": pts[:20]})
    assert retry.json() == {"job": "cifar10-bs128", "inserted": 0, "duplicates": 20, "points": 20}
    overlap = client.post("/v1/jobs/cifar10-bs128/metrics", json={"points": pts[15:]})
    assert overlap.json()["inserted"] == 10 and overlap.json()["duplicates"] == 5

    target = {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.93, "deadline": pts[-1]["time"] + 3600}}
    put = client.put("/v1/jobs/cifar10-bs128/target", json=target)
    assert put.status_code == 200 and put.json()["tier1"]["value"] == 0.93

    job = client.get("/v1/jobs/cifar10-bs128").json()
    assert job["history"]["points"] == 30 and job["history"]["last_epoch"] == 30.0
    assert job["history"]["last_metric"] == pytest.approx(real_curve("cifar10", 128)[29])
    pred = job["predictions"]
    assert pred["family"] is not None and pred["metric"] == "accuracy"
    assert pred["seconds_per_epoch"] == pytest.approx(40.0)
    assert max(p["metric"] for p in pts) < pred["plateau"] <= 1.0
    tier = pred["tier1"]
    values = real_curve("cifar10", 128)
    if tier["reached"]:
        assert values[:30].max() >= 0.93
    else:
        lo, hi = tier["epoch_interval"]
        assert tier["epoch"] is not None and tier["epoch"] > 30
        assert lo is not None and lo <= tier["epoch"] and (hi is None or tier["epoch"] <= hi)
        assert tier["eta"] == pytest.approx(pts[-1]["time"] + (tier["epoch"] - 30) * 40.0)
        assert tier["on_track"] == (tier["eta"] <= target["tier1"]["deadline"])

    listed = {j["id"]: j for j in client.get("/v1/jobs").json()["jobs"]}
    assert listed["cifar10-bs128"]["points"] == 30 and listed["cifar10-bs128"]["has_target"] is True


def test_steps_become_epochs(client: httpx.Client) -> None:
    values = real_curve("deepspeech2", 40)[:6]
    batch = {
        "steps_per_epoch": 250,
        "points": [{"time": 100.0 * i, "step": 250 * (i + 1), "metric": float(v)} for i, v in enumerate(values)],
    }
    assert client.post("/v1/jobs/ds2-steps/metrics", json=batch).json()["inserted"] == 6
    again = {"points": [{"time": 0.0, "epoch": 1.0, "metric": 9.9}]}  # epoch 1 = step 250: already there
    assert client.post("/v1/jobs/ds2-steps/metrics", json=again).json()["duplicates"] == 1
    job = client.get("/v1/jobs/ds2-steps").json()
    assert job["history"]["last_epoch"] == 6.0 and job["history"]["last_metric"] == pytest.approx(values[-1])


@pytest.mark.parametrize("name", ["qoe-deadlines.json", "flowcon-1node.json"])
def test_plan_matches_the_planner_and_passes_the_checker(client: httpx.Client, name: str) -> None:
    raw = (EXAMPLES / name).read_bytes()
    resp = client.post("/v1/plan", content=raw, params={"fill_from_store": "false"}, headers={"content-type": "application/json"})
    assert resp.status_code == 200, resp.text
    got = Plan.model_validate_json(resp.content)
    snapshot = parse_snapshot(raw)
    assert check_plan(snapshot, got) == []
    expected = plan(snapshot, PlannerConfig()).plan
    strip = {"solver": {"seconds"}}
    assert got.model_dump(exclude=strip) == expected.model_dump(exclude=strip)

    plan_id = int(resp.headers["FlowPlan-Plan-Id"])
    assert resp.headers["Location"] == f"/v1/plans/{plan_id}"
    assert Plan.model_validate_json(client.get(f"/v1/plans/{plan_id}").content) == got
    latest = client.get("/v1/plans/latest")
    assert latest.headers["FlowPlan-Plan-Id"] == str(plan_id) and Plan.model_validate_json(latest.content) == got


def test_plan_fills_history_and_target_from_the_store(client: httpx.Client, server: tuple[str, StateStore]) -> None:
    snapshot = load_snapshot(EXAMPLES / "qoe-deadlines.json")
    job = next(j for j in snapshot.jobs if j.status == "running" and j.history and j.target)
    bare = snapshot.model_copy(
        update={"jobs": [j.model_copy(update={"history": [], "target": None}) if j.id == job.id else j for j in snapshot.jobs]}
    )
    posted = [p.model_dump(exclude_none=True) for p in job.history]
    assert client.post(f"/v1/jobs/{job.id}/metrics", json={"points": posted}).status_code == 200
    assert client.put(f"/v1/jobs/{job.id}/target", json=job.target.model_dump(exclude_none=True)).status_code == 200  # type: ignore[union-attr]

    filled = Plan.model_validate_json(client.post("/v1/plan", content=bare.model_dump_json(), headers=JSON).content)
    as_posted = Plan.model_validate_json(
        client.post("/v1/plan", content=bare.model_dump_json(), params={"fill_from_store": False}, headers=JSON).content
    )
    original = plan(snapshot, PlannerConfig()).plan

    def preds(p: Plan) -> Any:
        return next(a.predictions for a in p.assignments if a.job == job.id)

    assert preds(filled) == preds(original)  # the stored history and target stand in for the posted ones
    assert preds(as_posted) != preds(original)
    assert filled.snapshot_digest == original.snapshot_digest
    stored_snapshot = server[1].plan_snapshot(int(client.get("/v1/plans/latest").headers["FlowPlan-Plan-Id"]) - 1)
    assert stored_snapshot is not None and len(stored_snapshot.jobs) == len(snapshot.jobs)


def test_health_ready_and_metrics(client: httpx.Client) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    assert client.get("/readyz").json()["status"] == "ready"
    before = client.get("/metrics").text
    client.post("/v1/jobs/metrics-probe/metrics", json={"points": curve_points("ncf", 1024, stop=3)})
    client.post("/v1/plan", content=b"{not json", headers=JSON)
    after = client.get("/metrics").text

    def value(text: str, name: str) -> float:
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    assert value(after, "flowplan_points_ingested_total") == value(before, "flowplan_points_ingested_total") + 3
    assert value(after, 'flowplan_errors_total{status="422"}') == value(before, 'flowplan_errors_total{status="422"}') + 1
    assert "flowplan_plan_seconds_bucket" in after and "flowplan_plans_total" in after


def test_openapi_document_has_examples(client: httpx.Client) -> None:
    doc = client.get("/openapi.json").json()
    body = doc["paths"]["/v1/plan"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/Snapshot"}
    example = next(iter(body["examples"].values()))["value"]
    parse_snapshot(json.dumps(example))  # the documented example is a valid snapshot
    assert doc["components"]["schemas"]["MetricBatch"]["examples"]
    assert "HTTPBearer" in doc["components"]["securitySchemes"]


BAD_POINT = {"time": 1.0, "epoch": 1.0, "loss": 1.0}
JSON = {"content-type": "application/json"}

#: (case, method, path, body: JSON-able, or bytes sent as-is, expected status, expected field)
REFUSALS: list[tuple[str, str, str, Any, int, str]] = [
    ("plan: not JSON", "POST", "/v1/plan", b"{nope", 422, ""),
    ("plan: empty body", "POST", "/v1/plan", b"", 422, ""),
    ("plan: NaN time", "POST", "/v1/plan", b'{"time": NaN}', 422, "time"),
    (
        "plan: Infinity capacity",
        "POST",
        "/v1/plan",
        b'{"time": 1, "nodes": [{"name": "n", "cpu_millis": Infinity}]}',
        422,
        "nodes[0].cpu_millis",
    ),
    ("plan: an array", "POST", "/v1/plan", [1, 2], 422, ""),
    ("plan: wrong version", "POST", "/v1/plan", {"apiVersion": "flowplan/v9", "time": 1}, 422, "apiVersion"),
    (
        "plan: unknown node",
        "POST",
        "/v1/plan",
        {"time": 1, "jobs": [{"id": "j", "status": "pending", "node": "x"}]},
        422,
        "jobs[0].node",
    ),
    ("plan: unknown field", "POST", "/v1/plan", {"time": 1, "colour": "red"}, 422, "colour"),
    ("plan: bad solver", "POST", "/v1/plan?solver=magic", {"time": 1}, 422, "solver"),
    ("plan: time limit 0", "POST", "/v1/plan?time_limit=0", {"time": 1}, 422, "time_limit"),
    ("plan: time limit NaN", "POST", "/v1/plan?time_limit=nan", {"time": 1}, 422, "time_limit"),
    ("metrics: not JSON", "POST", "/v1/jobs/j/metrics", b'{"points": [', 422, ""),
    ("metrics: not UTF-8", "POST", "/v1/jobs/j/metrics", b"\xb7P\xa51\xe9r", 422, ""),
    ("plan: not UTF-8", "POST", "/v1/plan", b"\xb7P\xa51\xe9r", 422, ""),
    ("plan: a 5000-digit integer (was a 500)", "POST", "/v1/plan", b'{"time": 1' + b"0" * 5000 + b"}", 422, ""),
    (
        "metrics: NaN loss",
        "POST",
        "/v1/jobs/j/metrics",
        b'{"points": [{"time": 1, "epoch": 1, "loss": NaN}]}',
        422,
        "points[0].loss",
    ),
    (
        "metrics: -Infinity time",
        "POST",
        "/v1/jobs/j/metrics",
        b'{"points": [{"time": -Infinity, "epoch": 1, "loss": 1}]}',
        422,
        "points[0].time",
    ),
    ("metrics: negative epoch", "POST", "/v1/jobs/j/metrics", {"points": [{**BAD_POINT, "epoch": -1}]}, 422, "points[0].epoch"),
    ("metrics: neither epoch nor step", "POST", "/v1/jobs/j/metrics", {"points": [{"time": 1, "loss": 1}]}, 422, "points[0]"),
    ("metrics: no value", "POST", "/v1/jobs/j/metrics", {"points": [BAD_POINT, {"time": 1, "epoch": 2}]}, 422, "points[1]"),
    (
        "metrics: step without rate",
        "POST",
        "/v1/jobs/j/metrics",
        {"points": [{"time": 1, "step": 10, "loss": 1}]},
        422,
        "points[0].step",
    ),
    (
        "metrics: tiny steps_per_epoch (step / rate overflows to inf)",
        "POST",
        "/v1/jobs/j/metrics",
        {"steps_per_epoch": 5e-324, "points": [{"time": 1, "step": 10**15, "loss": 1}]},
        422,
        "points[0].step",
    ),
    (
        "plan: 1e308 seconds per epoch",
        "POST",
        "/v1/plan",
        {"time": 1, "jobs": [{"id": "j", "status": "pending", "speed": [{"cpu_millis": 1000, "seconds_per_epoch": 1e308}]}]},
        422,
        "jobs[0].speed[0].seconds_per_epoch",
    ),
    ("metrics: unknown field", "POST", "/v1/jobs/j/metrics", {"points": [{**BAD_POINT, "acc": 1}]}, 422, "points[0].acc"),
    ("metrics: points not a list", "POST", "/v1/jobs/j/metrics", {"points": 3}, 422, "points"),
    ("metrics: string epoch", "POST", "/v1/jobs/j/metrics", {"points": [{**BAD_POINT, "epoch": "one"}]}, 422, "points[0].epoch"),
    ("metrics: bad job id", "POST", "/v1/jobs/-bad-/metrics", {"points": [BAD_POINT]}, 422, "job_id"),
    (
        "target: tiers out of order",
        "PUT",
        "/v1/jobs/j/target",
        {"direction": "higher", "tier1": {"value": 0.9}, "tier2": {"value": 0.8}},
        422,
        "tier2.value",  # was "": the message named it, the field did not
    ),
    ("target: NaN deadline", "PUT", "/v1/jobs/j/target", b'{"tier1": {"value": 1, "deadline": NaN}}', 422, "tier1.deadline"),
    ("target: bad direction", "PUT", "/v1/jobs/j/target", {"direction": "up", "tier1": {"value": 1}}, 422, "direction"),
    ("target: a long metric name", "PUT", "/v1/jobs/j/target", {"metric": "m" * 300, "tier1": {"value": 1}}, 422, "metric"),
    ("jobs: limit 0", "GET", "/v1/jobs?limit=0", None, 422, "limit"),
    ("job: unknown", "GET", "/v1/jobs/nobody-here", None, 404, "job_id"),
    ("target: read with GET (write-only)", "GET", "/v1/jobs/j/target", None, 405, ""),
    ("metrics: read with GET (write-only)", "GET", "/v1/jobs/j/metrics", None, 405, ""),
    ("plan: id 0", "GET", "/v1/plans/0", None, 422, "plan_id"),
    ("plan: id not a number", "GET", "/v1/plans/abc", None, 422, "plan_id"),
    ("plan: unknown id", "GET", "/v1/plans/987654", None, 404, "plan_id"),
    ("route: unknown", "GET", "/v2/everything", None, 404, ""),
    ("route: wrong method", "DELETE", "/v1/plan", None, 405, ""),
]


@pytest.mark.parametrize(("case", "method", "path", "body", "status", "field"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_user_mistakes_are_4xx_naming_the_field(
    client: httpx.Client, case: str, method: str, path: str, body: Any, status: int, field: str
) -> None:
    kwargs: dict[str, Any] = {}
    if isinstance(body, bytes):
        kwargs = {"content": body, "headers": {"content-type": "application/json"}}
    elif body is not None:
        kwargs = {"json": body}
    resp = client.request(method, path, **kwargs)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["field"] == field, err
    assert err["message"] and "\n" not in err["message"] and "Traceback" not in err["message"]
    if "NaN" in case:  # not "should be less than or equal to 30": NaN is no number to compare
        assert "finite" in err["message"], err


UNREADABLE: list[tuple[str, bytes, str]] = [
    ("nested too deeply", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("a 5000-digit integer", b'{"time": 1' + b"0" * 5000 + b"}", "digits"),
    ("not UTF-8", b"\xb7P\xa51\xe9r", "can't decode byte 0xb7"),
]


@pytest.mark.parametrize(("case", "body", "words"), UNREADABLE, ids=[u[0] for u in UNREADABLE])
def test_a_body_json_cannot_read_is_refused_saying_why_on_every_endpoint(
    client: httpx.Client, server: tuple[str, StateStore], case: str, body: bytes, words: str
) -> None:
    """Each endpoint says what /v1/plan says; metrics and targets said "the body could not be decoded"
    of any of these, though two of them decode."""
    for method, path in (("POST", "/v1/plan"), ("POST", "/v1/jobs/unread/metrics"), ("PUT", "/v1/jobs/unread/target")):
        resp = client.request(method, path, content=body, headers=JSON)
        assert resp.status_code == 422, (path, resp.text)
        err = resp.json()["error"]
        assert err["message"].startswith("not valid JSON: ") and words in err["message"], (path, err)
    assert server[1].job_record("unread") is None and server[1].target("unread") is None


def test_oversize_bodies_are_413(server: tuple[str, StateStore], client: httpx.Client) -> None:
    limit = 256 * 1024
    big = {"points": [{"time": float(i), "epoch": float(i), "loss": 1.0} for i in range(limit // 30)]}
    declared = client.post("/v1/jobs/big/metrics", json=big)
    assert declared.status_code == 413 and "limit" in declared.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"points": ['
        for i in range(limit // 30):
            yield json.dumps({"time": float(i), "epoch": float(i), "loss": 1.0}).encode() + b","
        yield b'{"time": 0, "epoch": 0, "loss": 1}]}'

    chunked = client.post("/v1/jobs/big/metrics", content=chunks(), headers={"content-type": "application/json"})
    assert chunked.status_code == 413
    assert server[1].point_count("big") == 0
    # Just under the limit is fine.
    fits = {"points": big["points"][: limit // 60]}
    assert client.post("/v1/jobs/big/metrics", json=fits).status_code == 200


def test_a_large_batch_and_an_empty_one(client: httpx.Client) -> None:
    values = real_curve("imagenet", 1600)
    pts = [{"time": float(i), "epoch": i + 1, "metric": float(values[i % len(values)])} for i in range(3000)]
    assert client.post("/v1/jobs/long/metrics", json={"points": pts}).json()["inserted"] == 3000
    assert client.post("/v1/jobs/long/metrics", json={"points": []}).json() == {
        "job": "long",
        "inserted": 0,
        "duplicates": 0,
        "points": 3000,
    }
    job = client.get("/v1/jobs/long")
    assert job.status_code == 200 and job.json()["history"]["points"] == 3000


def test_a_flat_history_does_not_break_predictions(client: httpx.Client) -> None:
    flat = [{"time": float(i), "epoch": i + 1, "loss": 0.5} for i in range(12)]
    client.post("/v1/jobs/flat/metrics", json={"points": flat})
    client.put("/v1/jobs/flat/target", json={"tier1": {"value": 0.1, "deadline": 50.0}, "tier2": {"value": 0.05}})
    resp = client.get("/v1/jobs/flat")
    assert resp.status_code == 200
    t1 = resp.json()["predictions"]["tier1"]
    assert t1["reached"] is False and t1["on_track"] in (None, False)


# -- authentication --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(data_dir: Path) -> Iterator[str]:
    store = StateStore(":memory:")
    with ThreadServer(create_app(store, ApiSettings(write_token=WRITE, read_token=READ))) as srv:
        yield srv.url
    store.close()


WRITE_REQ = ("POST", "/v1/jobs/a/metrics", {"points": [BAD_POINT]})
READ_REQ = ("GET", "/v1/jobs", None)
#: (case, request, Authorization header or None, expected status)
AUTH: list[tuple[str, tuple[str, str, Any], str | None, int]] = [
    ("write without a token", WRITE_REQ, None, 401),
    ("write with an unknown token", WRITE_REQ, "Bearer nope", 401),
    ("write with a basic header", WRITE_REQ, "Basic dXNlcjpwYXNz", 401),
    ("write with a bearer and no token", WRITE_REQ, "Bearer", 401),
    ("write with the read token", WRITE_REQ, f"Bearer {READ}", 403),
    ("write with the write token", WRITE_REQ, f"Bearer {WRITE}", 200),
    ("plan with the read token", ("POST", "/v1/plan", {"time": 1}), f"Bearer {READ}", 403),
    ("target with the read token", ("PUT", "/v1/jobs/a/target", {"tier1": {"value": 1}}), f"Bearer {READ}", 403),
    ("read without a token", READ_REQ, None, 401),
    ("read with an unknown token", READ_REQ, "Bearer nope", 401),
    ("read with the read token", READ_REQ, f"Bearer {READ}", 200),
    ("read with the write token", READ_REQ, f"Bearer {WRITE}", 200),
    ("metrics without a token", ("GET", "/metrics", None), None, 401),
    ("health without a token", ("GET", "/healthz", None), None, 200),
    ("readiness without a token", ("GET", "/readyz", None), None, 200),
]


@pytest.mark.parametrize(("case", "req", "header", "status"), AUTH, ids=[a[0] for a in AUTH])
def test_tokens(secured: str, case: str, req: tuple[str, str, Any], header: str | None, status: int) -> None:
    method, path, body = req
    headers = {"Authorization": header} if header is not None else {}
    resp = httpx.request(method, secured + path, json=body, headers=headers, timeout=60)
    assert resp.status_code == status, resp.text
    if status == 401:
        assert resp.headers["WWW-Authenticate"] == "Bearer" and resp.json()["error"]["message"]
    if status == 403:
        assert "read-only" in resp.json()["error"]["message"]


# -- flowplan serve refusals (exit code 2, one line) -------------------------------------------------

SERVE_REFUSALS = [
    ("open access on every interface", ["--host", "0.0.0.0"], {}, "no token configured"),
    ("open access on a public address", ["--host", "192.0.2.1"], {}, "loopback address"),
    ("read token equal to the write token", [], {"FLOWPLAN_TOKEN": "same", "FLOWPLAN_READ_TOKEN": "same"}, "must differ"),
    ("a body limit that is not a number", [], {"FLOWPLAN_MAX_BODY_BYTES": "lots"}, "FLOWPLAN_MAX_BODY_BYTES"),
    ("a state file in a missing directory", ["--state", "/nonexistent-dir/x.db"], {}, "does not exist"),
    ("a PostgreSQL server that does not answer", ["--state", "postgresql://fp:s3cret@127.0.0.1:1/fp"], {}, "cannot connect"),
    ("a PostgreSQL URL with a bad port", ["--state", "postgresql://fp:s3cret@db:five/fp"], {}, "port: not a number"),
]


@pytest.mark.parametrize(("case", "argv", "env", "words"), SERVE_REFUSALS, ids=[c[0] for c in SERVE_REFUSALS])
def test_serve_refuses_with_one_line(
    case: str,
    argv: list[str],
    env: dict[str, str],
    words: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from flowplan.cli import main

    for name in ("FLOWPLAN_TOKEN", "FLOWPLAN_READ_TOKEN", "FLOWPLAN_MAX_BODY_BYTES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", "--port", "0", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flowplan: error: ") and words in err[0]
    assert "s3cret" not in err[0]  # a URL is shown without its password


# -- open mode against browsers ----------------------------------------------------------------


@pytest.fixture(scope="module")
def open_loopback(data_dir: Path) -> Iterator[str]:
    """The service as ``flowplan serve`` runs it with no token: the loopback names and its address."""
    store = StateStore(":memory:")
    with ThreadServer(create_app(store, ApiSettings(allowed_hosts=("127.0.0.1", "localhost", "::1")))) as srv:
        yield srv.url
    store.close()


GUARD: list[tuple[str, str, dict[str, str] | list[tuple[str, str]], int, str]] = [
    ("cross-site form post (text/plain, no preflight)", "POST", {"content-type": "text/plain"}, 415, "content-type"),
    # Passed the guard, which FastAPI then did not parse as JSON (a 422 showing the body's bytes).
    ("+json that is not application/", "POST", {"content-type": "text/x+json"}, 415, "content-type"),
    # The guard read the last header, the app the first (a plan was made of a text/plain body).
    (
        "two content types, text/plain first",
        "POST",
        [("content-type", "text/plain"), ("content-type", "application/json")],
        415,
        "content-type",
    ),
    ("form encoding", "POST", {"content-type": "application/x-www-form-urlencoded"}, 415, "content-type"),
    ("no content type", "POST", {}, 415, "content-type"),
    ("DNS rebinding: another name for this socket", "GET", {"host": "evil.example:8080"}, 400, "host"),
    ("rebinding on a write", "POST", {"host": "evil.example", "content-type": "application/json"}, 400, "host"),
]


@pytest.mark.parametrize(("case", "method", "headers", "status", "field"), GUARD, ids=[g[0] for g in GUARD])
def test_open_mode_refuses_what_a_browser_page_could_send(
    open_loopback: str, case: str, method: str, headers: dict[str, str] | list[tuple[str, str]], status: int, field: str
) -> None:
    body = json.dumps({"points": [BAD_POINT]}).encode()
    path = "/v1/jobs/guarded/metrics" if method == "POST" else "/v1/jobs"
    with httpx.Client(base_url=open_loopback, timeout=30) as c:
        resp = c.request(method, path, content=body if method == "POST" else None, headers=headers)
        assert resp.status_code == status, resp.text
        assert resp.json()["error"]["field"] == field
        assert c.get("/v1/jobs/guarded").status_code == 404  # nothing was stored


def test_open_mode_serves_its_own_names(open_loopback: str) -> None:
    port = open_loopback.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
        with httpx.Client(base_url=open_loopback, timeout=30, headers={"host": host}) as c:
            assert c.post("/v1/jobs/named/metrics", json={"points": [BAD_POINT]}).status_code == 200, host
            assert c.get("/v1/jobs/named").status_code == 200


def test_state_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = StateStore(path)
    store.close()
    assert path.stat().st_mode & 0o777 == 0o600
    for extra in tmp_path.glob("state.db-*"):  # WAL and shared-memory files follow the database's mode
        assert extra.stat().st_mode & 0o077 == 0, extra


def test_plan_fills_the_curves_of_a_tasks_finished_runs_from_the_store(
    client: httpx.Client, server: tuple[str, StateStore]
) -> None:
    """A daemon sharing the store recorded six finished yolov3 runs (the measured curves of the other
    batch sizes); a snapshot posted with a yolov3 job of 5 points and no curves is planned with them
    (the basis names them), as if it had carried them; with ``fill_from_store=false`` it is not."""
    from planner.snapshot import MetricPoint

    store = server[1]
    others = [8, 32, 64, 128, 256, 512]
    for b in others:
        values = real_curve("yolov3", b)
        store.add_points(
            f"yolov3-done-{b}", [MetricPoint(time=float(i), epoch=float(i + 1), loss=float(v)) for i, v in enumerate(values)]
        )
        store.record_speeds(f"yolov3-done-{b}", [], task="yolov3-api", image=None, epochs=float(len(values)), finished=True)
    values = real_curve("yolov3", 16)
    job = {
        "id": "yolov3-new",
        "status": "pending",
        "task": "yolov3-api",
        "min_cpu_millis": 500,
        "max_cpu_millis": 1000,
        "history": [{"time": float(i), "epoch": float(i + 1), "loss": float(v)} for i, v in enumerate(values[:5])],
        "target": {"metric": "loss", "tier1": {"value": float(values[-1])}},
    }
    body = json.dumps({"time": 1000.0, "nodes": [{"name": "n", "cpu_millis": 4000}], "jobs": [job]})
    filled = Plan.model_validate_json(client.post("/v1/plan", content=body, headers=JSON).content)
    bare = Plan.model_validate_json(
        client.post("/v1/plan", content=body, params={"fill_from_store": False}, headers=JSON).content
    )
    assert "(6 earlier runs of yolov3-api)" in filled.assignments[0].predictions.basis
    assert "earlier runs" not in bare.assignments[0].predictions.basis
    carried = parse_snapshot(body).model_copy(update={"curve_priors": [store.task_curves("yolov3-api")]})
    assert filled.assignments[0].predictions == plan(carried, PlannerConfig()).plan.assignments[0].predictions


def test_a_finished_job_posted_with_a_task_lends_its_curve_to_the_next_plans(
    client: httpx.Client, server: tuple[str, StateStore]
) -> None:
    """No daemon: a snapshot posted with a finished cifar10 job (its measured curve, 40 epochs) keeps
    it as a run of its task, once; the next snapshot's pending job of the task is planned with its
    curve (the stored snapshot carries it). With ``fill_from_store=false`` nothing is kept."""
    store = server[1]
    values = real_curve("cifar10", 256)
    done = {
        "id": "cifar-done",
        "status": "finished",
        "task": "cifar10-api",
        "min_cpu_millis": 500,
        "max_cpu_millis": 1000,
        "history": [{"time": float(i), "epoch": float(i + 1), "metric": float(v)} for i, v in enumerate(values[:40])],
    }
    node = [{"name": "n", "cpu_millis": 4000}]
    skipped = json.dumps({"time": 900.0, "nodes": node, "jobs": [{**done, "id": "cifar-not-kept"}]})
    assert client.post("/v1/plan", content=skipped, params={"fill_from_store": False}, headers=JSON).status_code == 200
    assert store.speed_record("cifar-not-kept") is None
    first = json.dumps({"time": 1000.0, "nodes": node, "jobs": [done]})
    for _ in range(2):  # kept once: the second post finds it kept
        assert client.post("/v1/plan", content=first, headers=JSON).status_code == 200
    assert store.record_finished_runs(parse_snapshot(first).jobs) == []
    new = {**done, "id": "cifar-new", "status": "pending", "history": done["history"][:3]}
    new["target"] = {"metric": "accuracy", "direction": "higher", "tier1": {"value": float(values[60])}}
    resp = client.post("/v1/plan", content=json.dumps({"time": 1100.0, "nodes": node, "jobs": [new]}), headers=JSON)
    assert resp.status_code == 200
    stored = store.plan_snapshot(int(resp.headers["FlowPlan-Plan-Id"]))
    assert stored is not None and [(c.task, [r.job for r in c.runs]) for c in stored.curve_priors] == [
        ("cifar10-api", ["cifar-done"])
    ]
    assert [p.metric for p in stored.curve_priors[0].runs[0].points] == pytest.approx(list(values[:40]))
