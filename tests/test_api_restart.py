"""A restart of the service loses no acknowledged metric point.

``flowplan serve`` runs as a child process on a state file; four clients post measured curves in small
batches; the process is killed with SIGKILL (no shutdown code runs) while requests are in flight. On
restart every point that had been acknowledged (a 200 answer) is stored; points in flight may or may
not be (they were never acknowledged). Re-sending everything then completes each history exactly once:
retries never double-count.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
from conftest import real_curve
from test_api_support import ServeProcess

from store import StateStore

CURVES = [("cifar10", 128), ("imagenet", 1600), ("deepspeech2", 40), ("yolov3", 64)]
BATCH = 4


def batches() -> dict[str, list[list[dict]]]:
    out: dict[str, list[list[dict]]] = {}
    for model, bsz in CURVES:
        values = real_curve(model, bsz)
        pts = [{"time": 1_767_000_000.0 + 30.0 * i, "epoch": i + 1, "metric": float(v)} for i, v in enumerate(values)]
        out[f"{model}-bs{bsz}"] = [pts[i : i + BATCH] for i in range(0, len(pts), BATCH)]
    return out


def test_sigkill_and_restart_lose_no_acknowledged_point(tmp_path: Path, data_dir: Path) -> None:
    state = tmp_path / "state.db"
    work = batches()
    total = sum(len(b) for bs in work.values() for b in bs)
    acked: set[tuple[str, float]] = set()
    lock = threading.Lock()
    enough = threading.Event()
    failures: list[str] = []

    server = ServeProcess(state).start()

    def client(job: str) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for batch in work[job]:
                try:
                    resp = http.post(f"/v1/jobs/{job}/metrics", json={"points": batch})
                except httpx.HTTPError as exc:
                    if not enough.is_set():
                        failures.append(f"{job}: {exc!r}")
                    return  # the server is gone: this batch was never acknowledged
                if resp.status_code != 200:
                    failures.append(f"{job}: {resp.status_code} {resp.text}")
                    return
                with lock:
                    acked.update((job, float(p["epoch"])) for p in batch)
                    if len(acked) >= total // 2:
                        enough.set()

    threads = [threading.Thread(target=client, args=(job,)) for job in work]
    for t in threads:
        t.start()
    try:
        assert enough.wait(60), f"the clients made no progress: {failures} {server.log}"
    finally:
        server.kill()
    for t in threads:
        t.join(60)
    with lock:
        acknowledged = set(acked)
    assert failures == []
    assert total // 2 <= len(acknowledged) < total  # killed mid-way

    server = ServeProcess(state).start()
    try:
        with StateStore(state) as store:
            stored = {(job, p.epoch) for job in work for p in store.history(job)}
        assert acknowledged <= stored, f"lost {len(acknowledged - stored)} acknowledged point(s)"

        inserted = duplicates = 0
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for job, bs in work.items():
                for batch in bs:
                    got = http.post(f"/v1/jobs/{job}/metrics", json={"points": batch}).json()
                    inserted += got["inserted"]
                    duplicates += got["duplicates"]
            listed = {j["id"]: j["points"] for j in http.get("/v1/jobs").json()["jobs"]}
        assert duplicates == len(stored) and inserted == total - len(stored)
        assert listed == {job: sum(len(b) for b in bs) for job, bs in work.items()}
    finally:
        server.stop()
