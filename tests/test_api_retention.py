"""The service bounds the plans it keeps: ``flowplan serve --keep-plans 3 --keep-snapshots 1``.

A real ``flowplan serve`` process over a SQLite state file, real HTTP on loopback: five plans of an
example snapshot are posted; the two oldest are gone (404, not in the store), the newest three are
served, and only the newest keeps its snapshot. Nothing is faked."""

from __future__ import annotations

from pathlib import Path

import httpx
from test_api_support import ServeProcess

from store import StateStore

REPO = Path(__file__).resolve().parents[1]


def test_serve_keeps_the_newest_plans_and_snapshots(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    body = (REPO / "examples" / "snapshots" / "qoe-deadlines.json").read_text()
    server = ServeProcess(state, None, "--keep-plans", "3", "--keep-snapshots", "1").start()
    try:
        with httpx.Client(base_url=server.url, timeout=60, headers={"content-type": "application/json"}) as http:
            ids = []
            for _ in range(5):
                got = http.post("/v1/plan", content=body)
                assert got.status_code == 200, got.text
                ids.append(int(got.headers["FlowPlan-Plan-Id"]))
            assert [http.get(f"/v1/plans/{i}").status_code for i in ids] == [404, 404, 200, 200, 200]
            assert http.get("/v1/plans/latest").headers["FlowPlan-Plan-Id"] == str(ids[-1])
    finally:
        server.stop()
    with StateStore(state) as store:
        assert store.plan_ids(10) == list(reversed(ids[2:]))
        assert [store.plan_snapshot(i) is not None for i in ids[2:]] == [False, False, True]
