"""Shared fixtures: the real data folder and a seeded generator of random snapshots built on it.

The random snapshots use *measured* learning curves from ``../shared/data`` (AdaptDL OSDI'21
artifact) for job histories; only the cluster shape and the job mix are random. Tests fail, not
skip, when the data folder is missing: CI always has it beside the checkout.
"""

from __future__ import annotations

import csv
import functools
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.snapshot import Snapshot

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("FLOWPLAN_DATA", REPO.parent / "shared" / "data"))
TRACES = DATA / "adaptdl-osdi21" / "traces"

#: (model, batch size, metric name, direction) of the curves the generator draws from.
CURVES = [
    ("cifar10", 128, "accuracy", "higher"),
    ("cifar10", 1024, "accuracy", "higher"),
    ("imagenet", 1600, "accuracy", "higher"),
    ("deepspeech2", 40, "wer", "lower"),
    ("yolov3", 64, "loss", "lower"),
    ("ncf", 1024, "hit_rate", "higher"),
]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not TRACES.is_dir():
        pytest.fail(f"real data not found at {DATA} (expected ../shared/data beside the checkout)")
    return DATA


@functools.cache
def benchmark_module(filename: str) -> Any:
    """A script of ``benchmarks/`` loaded as a module (the folder is not a package, and nothing is
    added to ``sys.path``), once per test session."""
    import importlib.util
    import sys

    path = REPO / "benchmarks" / filename
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@functools.cache
def real_curve(model: str, bsz: int) -> np.ndarray:
    """Measured validation metric per epoch (epoch 1 first)."""
    path = TRACES / model / f"validation-{bsz}.csv"
    with path.open() as fh:
        return np.array([float(r["metric"]) for r in csv.DictReader(fh)])


def random_snapshot(seed: int, n_nodes: int | None = None, n_jobs: int | None = None, **overrides: Any) -> Snapshot:
    """A random but valid snapshot: running jobs respect capacity, histories are real curve prefixes."""
    rng = np.random.default_rng(seed)
    n_nodes = n_nodes if n_nodes is not None else int(rng.integers(1, 5))
    n_jobs = n_jobs if n_jobs is not None else int(rng.integers(0, 12))
    now = 100_000.0
    nodes = []
    for i in range(n_nodes):
        gpus = int(rng.choice([0, 0, 2, 4, 8]))
        nodes.append(
            {
                "name": f"n{i}",
                "cpu_millis": int(rng.choice([2000, 4000, 8000, 16000])),
                "gpus": gpus,
                "memory_mib": int(rng.choice([8192, 16384, 65536])),
                "gpu_type": "V100" if gpus else None,
                "labels": {"zone": "a" if i % 2 == 0 else "b"},
                "schedulable": bool(rng.random() > 0.15),
            }
        )
    free = {n["name"]: [n["cpu_millis"], n["gpus"], n["memory_mib"]] for n in nodes}
    jobs = []
    for j in range(n_jobs):
        model, bsz, metric, direction = CURVES[int(rng.integers(len(CURVES)))]
        curve = real_curve(model, bsz)
        lo = int(rng.choice([500, 1000, 2000]))
        hi = lo * int(rng.choice([1, 2, 4, 8]))
        wants_gpu = bool(rng.random() < 0.3)
        min_g = int(rng.integers(1, 3)) if wants_gpu else 0
        max_g = min_g * int(rng.choice([1, 2, 4])) if wants_gpu else 0
        mem = int(rng.choice([0, 1024, 4096]))
        replicas = int(rng.choice([1, 1, 1, 2]))
        status = str(rng.choice(["pending", "running", "running", "finished"]))
        spe = float(rng.uniform(20, 600))
        epochs = int(rng.integers(0, max(2, len(curve) // 2)))
        hist = []
        for e in range(1, epochs + 1):
            v = round(float(curve[e - 1]), 4)
            point: dict[str, Any] = {"time": now - (epochs - e + 1) * spe, "epoch": e}
            point["loss" if metric == "loss" else "metric"] = v
            hist.append(point)
        job: dict[str, Any] = {
            "id": f"job-{j}",
            "status": status,
            "replicas": replicas,
            "min_cpu_millis": lo,
            "max_cpu_millis": hi,
            "min_gpus": min_g,
            "max_gpus": max_g,
            "memory_mib": mem,
            "resizable": bool(rng.random() > 0.2),
            "migratable": bool(rng.random() > 0.2),
            "checkpoint_seconds": float(rng.uniform(0, 120)),
            "restart_seconds": float(rng.uniform(0, 120)),
            "priority": float(rng.choice([0.5, 1.0, 2.0])),
            "history": hist,
        }
        if wants_gpu:
            job["gpu_type"] = "V100"
        if rng.random() < 0.2:
            job["node_selector"] = {"zone": "a"}
        if rng.random() < 0.6:
            final = float(curve[-1])
            start = float(curve[0])
            t1 = start + 0.9 * (final - start)
            job["target"] = {
                "metric": metric,
                "direction": direction,
                "tier1": {"value": round(t1, 4), "deadline": now + float(rng.uniform(-600, 20_000))},
                "tier2": {"value": round(final, 4)} if rng.random() < 0.5 else None,
                "max_epochs": float(len(curve)),
            }
        if status == "running":
            # Find a node with room at its minimum (respecting capacity); else leave it pending.
            placed = False
            for n in rng.permutation(n_nodes):
                name = nodes[int(n)]["name"]
                need = [lo * replicas, min_g * replicas, mem * replicas]
                if all(need[k] <= free[name][k] for k in range(3)) and (not wants_gpu or nodes[int(n)]["gpus"] > 0):
                    for k in range(3):
                        free[name][k] -= need[k]
                    job["node"] = name
                    job["allocation"] = {"cpu_millis": lo, "gpus": min_g}
                    if rng.random() < 0.5:
                        job["speed"] = [{"cpu_millis": lo, "gpus": min_g, "seconds_per_epoch": spe}]
                    placed = True
                    break
            if not placed:
                job["status"] = "pending"
        jobs.append(job)
    data: dict[str, Any] = {
        "apiVersion": "flowplan/v1",
        "time": now,
        "nodes": nodes,
        "jobs": jobs,
        "settings": {"migration_budget": int(rng.integers(0, 4)), "interval_seconds": 60.0},
    }
    data.update(overrides)
    return Snapshot.model_validate(data)


@pytest.fixture(scope="session")
def docker_engines() -> Any:
    """Three private Docker engines (tests/docker_env.py); fails in CI without an engine."""
    from docker_env import start_engines

    engines = start_engines(3)
    yield engines
    engines.close()


@pytest.fixture(scope="session")
def postgres_cluster() -> Any:
    """A throwaway PostgreSQL server from Debian's binaries (tests/pg_env.py), once per session; its
    ``new_database()`` gives a test an empty database. Fails in CI when PostgreSQL is missing, skips elsewhere."""
    from pg_env import start_cluster

    cluster = start_cluster()
    yield cluster
    cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a fresh state store lives, once per backend: a SQLite file, then an empty PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    return str(request.getfixturevalue("postgres_cluster").new_database())


@pytest.fixture(scope="session")
def k8s_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A real etcd + kube-apiserver + kwok with 3 fake nodes (tests/k8s_env.py), once per session;
    fails in CI when the binaries are missing, skips elsewhere."""
    from k8s_env import start_sandbox

    sandbox, info = start_sandbox(tmp_path_factory.mktemp("k8s-sandbox"))
    yield info
    sandbox.down()


@pytest.fixture
def k8s_no_pods(k8s_sandbox: Any) -> Any:
    """The session's sandbox with no pods before and after the test (the Kubernetes modules use it
    for every test through their ``pytestmark``)."""
    from k8s_env import core, delete_all_pods

    api = core(k8s_sandbox)
    delete_all_pods(api)
    yield k8s_sandbox
    delete_all_pods(api)
