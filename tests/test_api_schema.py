"""Schemathesis against the service's own OpenAPI document, over real HTTP, with a fixed budget.

Every operation gets up to ``MAX_EXAMPLES`` generated requests (derandomized: the same ones on every
run), valid and invalid, with the write token: over 1,000 requests a run. Checks: no 5xx, every
status code documented, every response body matching its declared schema, content types as
declared; and afterwards, that nothing non-finite was stored.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from test_api_support import ThreadServer

from api import ApiSettings, create_app
from store import StateStore

MAX_EXAMPLES = 110
SENT = [0]  # requests generated so far (checked by the last test)
TOKEN = "schemathesis-write-token"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]

# The document comes from the app factory itself (no server needed to collect the tests).
schema = schemathesis.openapi.from_dict(create_app(StateStore(":memory:"), ApiSettings()).openapi())


@pytest.fixture(scope="module")
def live(data_dir: Path) -> Iterator[tuple[str, StateStore]]:
    store = StateStore(":memory:")
    # Planning with the greedy backend and a short limit keeps the budget within seconds.
    app = create_app(store, ApiSettings(write_token=TOKEN, read_token="schemathesis-read-token", solver="greedy", time_limit=0.2))
    with ThreadServer(app) as srv:
        yield srv.url, store
    store.close()


@pytest.fixture(scope="module")
def live_url(live: tuple[str, StateStore]) -> str:
    return live[0]


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_openapi_conformance(case: schemathesis.Case, live_url: str) -> None:
    SENT[0] += 1
    case.call_and_validate(base_url=live_url, headers={"Authorization": f"Bearer {TOKEN}"}, checks=CHECKS, timeout=60)


def test_nothing_non_finite_was_stored(live: tuple[str, StateStore]) -> None:
    """Runs after the generated requests (file order): every stored point, target and plan is finite."""
    store = live[1]
    print(f"{SENT[0]} generated requests")
    assert SENT[0] == 0 or SENT[0] >= 1000, SENT  # the budget the fuzz suite promises (0: run alone with -k)
    ids = store.job_ids()
    assert ids, "the generated requests stored nothing: the check above would prove nothing"
    for job in ids:
        for p in store.history(job):
            assert all(v is None or math.isfinite(v) for v in (p.time, p.epoch, p.loss, p.metric)), (job, p)
        target = store.target(job)
        if target is not None:
            assert "Infinity" not in target.model_dump_json() and "NaN" not in target.model_dump_json()
    latest = store.latest_plan()
    if latest is not None:
        assert "Infinity" not in latest[1].model_dump_json() and "NaN" not in latest[1].model_dump_json()
