"""Schemathesis against the service's own OpenAPI document, over real HTTP, with a fixed budget.

Every operation gets up to ``MAX_EXAMPLES`` generated requests (derandomized: the same ones on every
run), valid and invalid, with the write token. Checks: no 5xx, every status code documented, every
response body matching its declared schema, content types as declared.
"""

from __future__ import annotations

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

MAX_EXAMPLES = 25
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
def live_url(data_dir: Path) -> Iterator[str]:
    store = StateStore(":memory:")
    # Planning with the greedy backend and a short limit keeps the budget within seconds.
    app = create_app(store, ApiSettings(write_token=TOKEN, read_token="schemathesis-read-token", solver="greedy", time_limit=0.2))
    with ThreadServer(app) as srv:
        yield srv.url
    store.close()


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_openapi_conformance(case: schemathesis.Case, live_url: str) -> None:
    case.call_and_validate(base_url=live_url, headers={"Authorization": f"Bearer {TOKEN}"}, checks=CHECKS, timeout=60)
