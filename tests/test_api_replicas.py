"""Two replicas of ``flowplan serve`` share one PostgreSQL database (a real server: tests/pg_env.py).

Both run as child processes on the same ``--state postgresql://…`` URL, as two pods of a Deployment
behind one Service would. Case matrix:

- four clients post measured curves in small batches, each batch to both replicas at once (a retry
  through another replica): every point is stored once, and the inserted counts of all answers add
  up to the number of points;
- a target set through one replica, a history posted through the other: each replica answers with both;
- a plan made by one replica is the other's ``/v1/plans/latest``;
- both are ready (``/readyz``) and neither prints the database password.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
from conftest import REPO, real_curve
from test_api_support import ServeProcess

from store import StateStore

CURVES = [("cifar10", 128), ("imagenet", 1600), ("deepspeech2", 40), ("yolov3", 64)]


def test_two_replicas_share_state(postgres_cluster: Any, data_dir: Path) -> None:
    url = postgres_cluster.new_database()
    replicas = [ServeProcess(url).start(), ServeProcess(url).start()]  # type: ignore[arg-type]
    try:
        for r in replicas:
            assert httpx.get(f"{r.url}/readyz", timeout=30).json()["status"] == "ready"
        work = {
            f"{m}-bs{b}": [
                {"time": 1_767_000_000.0 + 30.0 * i, "epoch": i + 1, "metric": float(v)} for i, v in enumerate(real_curve(m, b))
            ]
            for m, b in CURVES
        }
        inserted: list[int] = []
        failures: list[str] = []

        def client(job: str, replica: ServeProcess) -> None:
            with httpx.Client(base_url=replica.url, timeout=60) as http:
                pts = work[job]
                for i in range(0, len(pts), 5):
                    resp = http.post(f"/v1/jobs/{job}/metrics", json={"points": pts[i : i + 5]})
                    if resp.status_code != 200:
                        failures.append(f"{job} via {replica.url}: {resp.status_code} {resp.text}")
                        return
                    inserted.append(resp.json()["inserted"])

        threads = [threading.Thread(target=client, args=(job, r)) for job in work for r in replicas]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failures == []
        assert sum(inserted) == sum(len(p) for p in work.values())  # each point counted once, across replicas
        with StateStore(url) as store:
            for job, pts in work.items():
                assert [p.epoch for p in store.history(job)] == [float(p["epoch"]) for p in pts]

        a, b = (httpx.Client(base_url=r.url, timeout=60) for r in replicas)
        with a, b:
            target = {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.9, "deadline": 1_767_100_000.0}}
            assert a.put("/v1/jobs/cifar10-bs128/target", json=target).status_code == 200
            for c in (a, b):
                job = c.get("/v1/jobs/cifar10-bs128").json()
                assert job["target"]["tier1"]["value"] == 0.9 and job["history"]["points"] == len(work["cifar10-bs128"])
            raw = (REPO / "examples" / "snapshots" / "qoe-deadlines.json").read_bytes()
            made = b.post(
                "/v1/plan", content=raw, params={"fill_from_store": "false"}, headers={"content-type": "application/json"}
            )
            assert made.status_code == 200, made.text
            latest = a.get("/v1/plans/latest")
            assert latest.headers["FlowPlan-Plan-Id"] == made.headers["FlowPlan-Plan-Id"] and latest.content == made.content
    finally:
        for r in replicas:
            r.stop()
    for r in replicas:
        assert "s3cret" not in "".join(r.log) and "***" in "".join(r.log)
