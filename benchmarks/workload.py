"""Deterministic generator of large, realistic FlowPlan snapshots for benchmarks.

Everything is sampled from measured public data (see ``/work/shared/data/README.md``):

- node shapes: Alibaba GPU cluster trace v2023 (openb), ``openb_node_list_all_node.csv`` — from
  "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent"
  (USENIX ATC 2023);
- job resource requests: the same trace, ``openb_pod_list_default.csv``;
- learning curves and step times: the Pollux / AdaptDL OSDI 2021 artifact,
  ``traces/<model>/validation-<bsz>.csv`` and ``traces/<model>/scalability.csv``.

What is *synthetic* (documented here so nobody mistakes it for measurement): which pod gets which
curve, the progress point, the timeline, deadlines, priorities, the CPU-share factor of the speed
(the traces have no CPU dimension) and the scaling of epoch times into the minutes-to-an-hour range.

``make_snapshot(n_jobs, n_nodes, seed)`` is a pure function of its arguments (and the data files).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from planner.snapshot import Snapshot

#: The snapshot's clock (Unix time, 2024-01-01T00:00:00Z); all history lies before it.
SNAPSHOT_TIME = 1_704_067_200.0

MODELS = ("cifar10", "imagenet", "deepspeech2", "yolov3", "ncf")
#: model -> (target metric name, direction, MetricPoint field the value goes into)
METRICS: dict[str, tuple[str, str, str]] = {
    "cifar10": ("accuracy", "higher", "metric"),
    "imagenet": ("accuracy", "higher", "metric"),
    "ncf": ("hit_rate", "higher", "metric"),
    "deepspeech2": ("wer", "lower", "metric"),
    "yolov3": ("loss", "lower", "loss"),
}
PRIORITIES = (0.5, 1.0, 1.0, 1.0, 2.0)
RUNNING_FRACTION = 0.70
TARGET_FRACTION = 0.40
NOT_MIGRATABLE_FRACTION = 0.10
NOT_RESIZABLE_FRACTION = 0.10
#: Epoch times are scaled (per job, keeping the ratios between allocations) into this range.
MIN_EPOCH_SECONDS = 150.0
MAX_EPOCH_SECONDS = 2400.0
MAX_CPU_MILLIS = 64_000
#: ``Node.memory_mib`` is a ``Count`` (at most 10**6), but 1 TiB nodes (1,048,576 MiB) exist in the
#: trace; they are clipped to this value (reported upstream as a contract limit).
MAX_MEMORY_MIB = 10**6


def default_data_dir() -> Path:
    env = os.environ.get("FLOWPLAN_DATA_DIR")
    if env:
        return Path(env)
    root = Path(__file__).resolve().parents[1]
    for cand in (root / "shared" / "data", root.parent / "shared" / "data", Path("/work/shared/data")):
        if (cand / "alibaba-gpu-v2023").is_dir():
            return cand
    return Path("/work/shared/data")


# --------------------------------------------------------------------------------------------
# Data loading (each file read once per process)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeTable:
    sn: list[str]
    cpu: np.ndarray  # int64 millicores
    mem: np.ndarray  # int64 MiB
    gpu: np.ndarray  # int64
    model: list[str | None]


@dataclass(frozen=True)
class PodTable:
    name: list[str]
    cpu: np.ndarray
    mem: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    gpu_spec: list[str | None]


@dataclass(frozen=True)
class Curve:
    model: str
    batch_size: int
    values: np.ndarray  # metric per epoch (epoch 1..L)
    steps_per_epoch: float  # median of the iteration differences


@dataclass(frozen=True)
class StepTable:
    """Step time vs local batch size at the smallest measured replica count."""

    local_bsz: np.ndarray
    step_time: np.ndarray


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@cache
def _nodes(data_dir: Path) -> NodeTable:
    rows = _read_csv(data_dir / "alibaba-gpu-v2023" / "openb_node_list_all_node.csv")
    return NodeTable(
        sn=[r["sn"] for r in rows],
        cpu=np.array([int(r["cpu_milli"]) for r in rows], dtype=np.int64),
        mem=np.array([int(r["memory_mib"]) for r in rows], dtype=np.int64),
        gpu=np.array([int(r["gpu"]) for r in rows], dtype=np.int64),
        model=[(r["model"].strip() or None) for r in rows],
    )


@cache
def _pods(data_dir: Path) -> PodTable:
    rows = _read_csv(data_dir / "alibaba-gpu-v2023" / "openb_pod_list_default.csv")
    return PodTable(
        name=[r["name"] for r in rows],
        cpu=np.array([int(r["cpu_milli"]) for r in rows], dtype=np.int64),
        mem=np.array([int(r["memory_mib"]) for r in rows], dtype=np.int64),
        num_gpu=np.array([int(r["num_gpu"]) for r in rows], dtype=np.int64),
        gpu_milli=np.array([int(r["gpu_milli"] or 0) for r in rows], dtype=np.int64),
        gpu_spec=[(r["gpu_spec"].strip() or None) for r in rows],
    )


@cache
def _curves(data_dir: Path, model: str) -> tuple[Curve, ...]:
    folder = data_dir / "adaptdl-osdi21" / "traces" / model
    out = []
    for path in folder.glob("validation-*.csv"):
        rows = _read_csv(path)
        it = np.array([float(r["iteration"]) for r in rows])
        steps = np.diff(np.concatenate([[0.0], it]))
        out.append(
            Curve(
                model=model,
                batch_size=int(path.stem.split("-")[1]),
                values=np.array([float(r["metric"]) for r in rows]),
                steps_per_epoch=float(np.median(steps)),
            )
        )
    out.sort(key=lambda c: c.batch_size)
    return tuple(out)


@cache
def _steps(data_dir: Path, model: str) -> StepTable:
    rows = _read_csv(data_dir / "adaptdl-osdi21" / "traces" / model / "scalability.csv")
    reps = np.array([int(r["num_replicas"]) for r in rows])
    bsz = np.array([int(r["local_bsz"]) for r in rows])
    st = np.array([float(r["step_time"]) for r in rows])
    keep = reps == reps.min()
    b, s = bsz[keep], st[keep]
    ub = np.unique(b)
    return StepTable(local_bsz=ub.astype(float), step_time=np.array([np.median(s[b == x]) for x in ub]))


def _step_time(table: StepTable, local_bsz: float) -> float:
    """Measured step time at ``local_bsz`` (interpolated; beyond the largest measured batch the
    job accumulates gradients, so time grows linearly; below the smallest it does not shrink)."""
    lo, hi = table.local_bsz[0], table.local_bsz[-1]
    if local_bsz >= hi:
        return float(table.step_time[-1] * local_bsz / hi)
    return float(np.interp(max(local_bsz, lo), table.local_bsz, table.step_time))


# --------------------------------------------------------------------------------------------
# Speeds
# --------------------------------------------------------------------------------------------


def _raw_epoch_seconds(table: StepTable, curve: Curve, gpus: int) -> float:
    """Measured step time x steps per epoch for data-parallel training on ``gpus`` GPUs (the global
    batch fixed at the curve's batch size, split over the GPUs)."""
    g = max(gpus, 1)
    return _step_time(table, curve.batch_size / g) * curve.steps_per_epoch


def _cpu_factor(cpu: int, request: int, uses_gpu: bool) -> float:
    """Synthetic CPU-share effect (the traces have none): 1 at the pod's request. GPU jobs are mostly
    GPU-bound (15% of the epoch scales with CPU: input pipeline); CPU jobs follow Amdahl with 10% serial."""
    r = request / max(cpu, 1)
    return 0.85 + 0.15 * r if uses_gpu else 0.10 + 0.90 * r


# --------------------------------------------------------------------------------------------
# Snapshot
# --------------------------------------------------------------------------------------------


def _sample_nodes(rng: np.random.Generator, table: NodeTable, n_nodes: int) -> np.ndarray:
    """Indices of ``n_nodes`` node shapes, stratified so the CPU-only / GPU mix matches the trace."""
    cpu_only = np.flatnonzero(table.gpu == 0)
    gpu = np.flatnonzero(table.gpu > 0)
    n_cpu = round(n_nodes * len(cpu_only) / len(table.sn))
    n_gpu = n_nodes - n_cpu

    def draw(pool: np.ndarray, k: int) -> np.ndarray:
        if k <= len(pool):
            return rng.choice(pool, size=k, replace=False)
        return np.concatenate([rng.permutation(pool), rng.choice(pool, size=k - len(pool), replace=True)])

    idx = np.concatenate([draw(cpu_only, n_cpu), draw(gpu, n_gpu)])
    return idx


def make_snapshot(n_jobs: int, n_nodes: int, seed: int = 0, data_dir: Path | None = None) -> Snapshot:
    """A snapshot with ``n_jobs`` active jobs on ``n_nodes`` nodes, deterministic for ``seed``."""
    if n_nodes < 1 or n_jobs < 0:
        raise ValueError("need n_nodes >= 1 and n_jobs >= 0")
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    rng = np.random.default_rng(seed)
    now = SNAPSHOT_TIME

    # ---- nodes ----
    ntab = _nodes(data_dir)
    nidx = _sample_nodes(rng, ntab, n_nodes)
    seen: dict[str, int] = {}
    node_names: list[str] = []
    for i in nidx:
        sn = ntab.sn[i]
        k = seen.get(sn, 0)
        seen[sn] = k + 1
        node_names.append(sn if k == 0 else f"{sn}-r{k}")
    n_cpu = ntab.cpu[nidx].copy()
    n_mem = np.minimum(ntab.mem[nidx], MAX_MEMORY_MIB)
    n_gpu = ntab.gpu[nidx].copy()
    n_type = [ntab.model[i] for i in nidx]
    type_codes = {t: k for k, t in enumerate(sorted({t for t in n_type if t}))}
    n_type_code = np.array([type_codes.get(t, -1) if t else -1 for t in n_type])
    nodes = [
        {
            "name": node_names[k],
            "cpu_millis": int(n_cpu[k]),
            "memory_mib": int(n_mem[k]),
            "gpus": int(n_gpu[k]),
            "gpu_type": n_type[k],
        }
        for k in range(n_nodes)
    ]

    # ---- pods -> job resource shapes ----
    ptab = _pods(data_dir)
    req = ptab.cpu
    min_cpu = np.maximum(100, np.round(req / 2 / 100).astype(np.int64) * 100)
    max_cpu = np.minimum(req * 2, MAX_CPU_MILLIS)
    max_cpu = np.maximum(max_cpu, min_cpu)
    min_gpu = np.where(ptab.num_gpu >= 1, 1, 0)
    # Fractional GPU pods (gpu_milli < 1000) are treated as one whole GPU.
    min_gpu = np.where((ptab.num_gpu == 0) & (ptab.gpu_milli > 0), 1, min_gpu)
    max_gpu = np.maximum(ptab.num_gpu, min_gpu)
    # Job GPU type: only a single-type spec can be expressed (``Job.gpu_type``); multi-type -> None.
    pod_type = [s if (s and "|" not in s) else None for s in ptab.gpu_spec]
    pod_type_code = np.array([type_codes.get(t, -2) if t else -1 for t in pod_type])
    # A pod fits a node when its minimum share does.
    fits = (
        (min_cpu[:, None] <= n_cpu[None, :])
        & (min_gpu[:, None] <= n_gpu[None, :])
        & (ptab.mem[:, None] <= n_mem[None, :])
        & ((pod_type_code[:, None] == -1) | (pod_type_code[:, None] == n_type_code[None, :]))
    )
    pool = np.flatnonzero(fits.any(axis=1))
    if len(pool) == 0:
        raise ValueError("no pod of the trace fits any sampled node")
    pidx = rng.choice(pool, size=n_jobs, replace=True)

    # ---- per-job random draws (vectorised, fixed order => deterministic) ----
    model_idx = rng.integers(0, len(MODELS), size=n_jobs)
    curve_u = rng.random(n_jobs)
    want_running = rng.random(n_jobs) < RUNNING_FRACTION
    progress_u = rng.random(n_jobs)
    pending_points = rng.integers(0, 3, size=n_jobs)
    has_target = rng.random(n_jobs) < TARGET_FRACTION
    deadline1 = now + rng.uniform(600.0, 12 * 3600.0, size=n_jobs)
    deadline2_extra = rng.uniform(3600.0, 24 * 3600.0, size=n_jobs)
    not_migratable = rng.random(n_jobs) < NOT_MIGRATABLE_FRACTION
    not_resizable = rng.random(n_jobs) < NOT_RESIZABLE_FRACTION
    priority = np.array(PRIORITIES)[rng.integers(0, len(PRIORITIES), size=n_jobs)]
    speed_jitter = np.exp(rng.normal(0.0, 0.15, size=n_jobs))
    alloc_u = rng.random(n_jobs)
    last_epoch_u = rng.random(n_jobs)  # fraction of the current epoch already done
    pause_gap = rng.uniform(600.0, 4 * 3600.0, size=n_jobs)
    queue_wait = rng.uniform(60.0, 6 * 3600.0, size=n_jobs)
    n_speeds = rng.integers(1, 3, size=n_jobs)
    speed2_u = rng.random(n_jobs)
    ckpt = np.round(rng.uniform(15.0, 90.0, size=n_jobs), 1)
    restart = np.round(rng.uniform(20.0, 120.0, size=n_jobs), 1)
    epoch_noise = np.exp(rng.normal(0.0, 0.03, size=(n_jobs, 64)))  # per-epoch duration jitter
    place_order = rng.permutation(n_jobs)
    place_u = rng.random(n_jobs)

    # ---- placement of the would-be running jobs (first fit at a random eligible node) ----
    free_cpu = n_cpu.astype(np.int64).copy()
    free_gpu = n_gpu.astype(np.int64).copy()
    free_mem = n_mem.astype(np.int64).copy()
    j_min_cpu = min_cpu[pidx]
    j_req = np.minimum(req, max_cpu)[pidx]  # allocations lie in min..request (request capped at max)
    j_min_gpu = min_gpu[pidx]
    j_mem = ptab.mem[pidx]
    j_type = pod_type_code[pidx]
    steps_in = (j_req - j_min_cpu) // 100
    alloc_cpu = j_min_cpu + np.minimum((alloc_u * (steps_in + 1)).astype(np.int64), steps_in) * 100
    node_of = np.full(n_jobs, -1, dtype=np.int64)
    for j in place_order:
        if not want_running[j]:
            continue
        ok_static = (free_gpu >= j_min_gpu[j]) & (free_mem >= j_mem[j])
        if j_type[j] != -1:
            ok_static &= n_type_code == j_type[j]
        for cpu in (alloc_cpu[j], j_min_cpu[j]):
            ok = np.flatnonzero(ok_static & (free_cpu >= cpu))
            if len(ok):
                k = ok[min(int(place_u[j] * len(ok)), len(ok) - 1)]
                node_of[j] = k
                alloc_cpu[j] = cpu
                free_cpu[k] -= cpu
                free_gpu[k] -= j_min_gpu[j]
                free_mem[k] -= j_mem[j]
                break

    # ---- jobs ----
    jobs: list[dict[str, Any]] = []
    for j in range(n_jobs):
        p = int(pidx[j])
        model = MODELS[int(model_idx[j])]
        curves = _curves(data_dir, model)
        curve = curves[min(int(curve_u[j] * len(curves)), len(curves) - 1)]
        table = _steps(data_dir, model)
        metric_name, direction, field = METRICS[model]
        L = len(curve.values)
        running = node_of[j] >= 0
        uses_gpu = int(max_gpu[p]) > 0
        request = int(min(req[p], max_cpu[p]))

        if running:
            lo = max(1, math.ceil(0.03 * L))
            hi = max(lo, int(0.60 * L))
            E = lo + min(int(progress_u[j] * (hi - lo + 1)), hi - lo)
        else:
            E = min(int(pending_points[j]), L)

        # Epoch time at the pod's request and min GPUs, scaled into the realistic range.
        g_ref = max(int(min_gpu[p]), 1)
        raw_ref = _raw_epoch_seconds(table, curve, g_ref)
        scale = min(max(raw_ref, MIN_EPOCH_SECONDS), MAX_EPOCH_SECONDS) / raw_ref * float(speed_jitter[j])

        def epoch_seconds(
            cpu: int, gpus: int, *, table=table, curve=curve, uses_gpu=uses_gpu, raw_ref=raw_ref, scale=scale, request=request
        ) -> float:
            base = _raw_epoch_seconds(table, curve, gpus) if uses_gpu else raw_ref
            return base * scale * _cpu_factor(cpu, request, uses_gpu)

        job: dict[str, Any] = {
            "id": f"j{j:05d}-{model}-{curve.batch_size}",
            "status": "running" if running else "pending",
            "min_cpu_millis": int(min_cpu[p]),
            "max_cpu_millis": int(max_cpu[p]),
            "min_gpus": int(min_gpu[p]),
            "max_gpus": int(max_gpu[p]),
            "memory_mib": int(ptab.mem[p]),
            "gpu_type": pod_type[p],
            "resizable": not bool(not_resizable[j]),
            "migratable": not bool(not_migratable[j]),
            "checkpoint_seconds": float(ckpt[j]),
            "restart_seconds": float(restart[j]),
            "priority": float(priority[j]),
        }
        if running:
            cur_cpu, cur_gpu = int(alloc_cpu[j]), int(min_gpu[p])
            job["node"] = node_names[int(node_of[j])]
            job["allocation"] = {"cpu_millis": cur_cpu, "gpus": cur_gpu}
            spe = epoch_seconds(cur_cpu, cur_gpu)
            end = now - float(last_epoch_u[j]) * spe  # the current epoch is partly done
        else:
            spe = epoch_seconds(request, int(min_gpu[p]))
            end = now - float(pause_gap[j])
        durations = spe * epoch_noise[j, :E] if E <= epoch_noise.shape[1] else spe * np.ones(E)
        times = end - np.concatenate([[0.0], np.cumsum(durations[::-1])])[::-1][1:] if E else np.zeros(0)
        # times[k] = end of epoch k+1; the last one equals ``end``.
        start = end - float(durations.sum()) if E else now
        job["submitted"] = float(start - queue_wait[j])
        job["history"] = [{"time": float(times[k]), "epoch": float(k + 1), field: float(curve.values[k])} for k in range(E)]

        if running:
            speeds = [{"cpu_millis": cur_cpu, "gpus": cur_gpu, "seconds_per_epoch": float(spe)}]
            if n_speeds[j] == 2:
                # An earlier allocation: another CPU share (and, for multi-GPU jobs, GPU count).
                lo_c, hi_c = int(min_cpu[p]), int(max_cpu[p])
                cpu2 = lo_c + int(speed2_u[j] * ((hi_c - lo_c) // 100 + 1)) * 100
                cpu2 = min(cpu2, hi_c)
                gpu2 = cur_gpu
                if int(max_gpu[p]) > cur_gpu:
                    gpu2 = min(int(max_gpu[p]), cur_gpu * 2)
                if (cpu2, gpu2) == (cur_cpu, cur_gpu):
                    cpu2 = hi_c if cur_cpu != hi_c else lo_c
                if (cpu2, gpu2) != (cur_cpu, cur_gpu):
                    noise = float(np.exp(0.05 * (speed2_u[j] - 0.5)))
                    speeds.insert(
                        0, {"cpu_millis": cpu2, "gpus": gpu2, "seconds_per_epoch": float(epoch_seconds(cpu2, gpu2) * noise)}
                    )
            job["speed"] = speeds

        if has_target[j]:
            first, final = float(curve.values[0]), float(curve.values[-1])
            t1 = first + 0.90 * (final - first)
            t2 = first + 0.99 * (final - first)
            job["target"] = {
                "metric": metric_name,
                "direction": direction,
                "tier1": {"value": t1, "deadline": float(deadline1[j])},
                "tier2": {"value": t2, "deadline": float(deadline1[j] + deadline2_extra[j])},
                "max_epochs": float(L),
            }
        jobs.append(job)

    return Snapshot.model_validate(
        {
            "time": now,
            "nodes": nodes,
            "jobs": jobs,
            "settings": {"migration_budget": max(4, n_jobs // 50)},
        }
    )


def with_gangs(snapshot: Snapshot, share: float) -> Snapshot:
    """``snapshot`` with every ``round(1 / share)``-th whole-GPU job turned into a gang (issue 17):
    a pending one asks for 4 times its replicas over up to 4 nodes and accepts a quarter of them
    (``min_replicas``); a running one may spread over 2 nodes and, if it has more than one replica,
    run with one (``elastic``). Its per-replica figures and speeds are kept (speeds observed at its
    own count). Deterministic; ``share`` 0 gives the snapshot back."""
    if share <= 0:
        return snapshot
    every = max(1, round(1 / share))
    data = snapshot.model_dump(mode="json", exclude_none=True)
    k = 0
    for job in data["jobs"]:
        if job.get("max_gpus", 0) == 0 or job.get("gpu_milli") is not None or job["status"] == "finished":
            continue
        k += 1
        if k % every:
            continue
        reps = int(job.get("replicas", 1))
        if job["status"] == "pending":
            job["speed"] = [{**p, "replicas": reps} for p in job.get("speed", [])]
            job.update(replicas=reps * 4, min_replicas=reps, max_nodes=4)
        else:
            job.update(max_nodes=2, elastic=True, min_replicas=1 if reps > 1 else None)
    return Snapshot.model_validate(data)


def describe(snapshot: Snapshot) -> dict[str, Any]:
    """Counts that characterise a generated snapshot (for benchmark output)."""
    jobs = snapshot.jobs
    return {
        "nodes": len(snapshot.nodes),
        "gpu_nodes": sum(1 for n in snapshot.nodes if n.gpus > 0),
        "jobs": len(jobs),
        "running": sum(1 for j in jobs if j.status == "running"),
        "pending": sum(1 for j in jobs if j.status == "pending"),
        "gpu_jobs": sum(1 for j in jobs if j.max_gpus > 0),
        "with_target": sum(1 for j in jobs if j.target is not None),
        "gangs": sum(1 for j in jobs if j.max_nodes > 1 or j.fewest_replicas < j.replicas),
        "history_points": sum(len(j.history) for j in jobs),
    }


if __name__ == "__main__":  # quick look: python benchmarks/workload.py 1000 100
    import sys
    import time

    nj = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    nn = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    t0 = time.perf_counter()
    snap = make_snapshot(nj, nn)
    print(f"built in {time.perf_counter() - t0:.2f}s", describe(snap))
