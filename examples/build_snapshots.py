"""Build the example snapshots in ``examples/snapshots/`` from the real measured data.

Reads the Pollux/AdaptDL artifact (learning curves, measured step times) and the Alibaba GPU trace
v2023 (node shapes, pod sizes) from ``--data`` (default ``<repo>/../shared/data``) and writes three
``flowplan/v1`` snapshots plus nothing else:

- ``flowcon-1node.json``  one CPU-only host, ~10 resizable CPU jobs (the FlowCon setting);
- ``specon-4nodes.json``  four 8-GPU nodes, three crowded and one nearly empty (the SpeCon setting);
- ``qoe-deadlines.json``  three 4-GPU T4 nodes, twelve jobs with two-tier targets (TRADL / DQoES).

Every number comes from the data through the derivations documented in ``snapshots/README.md``;
the only free choices are the scenario tables below (which job is where, at which epoch, with which
deadline factor). No randomness: re-running rewrites byte-identical files.

Usage::

    python examples/build_snapshots.py [--data DIR] [--out DIR] [--check]

Needs FlowPlan installed (``pip install -e .``): the metric table comes from ``adapters.sim.truth``;
``--check`` also validates each file with ``planner.load_snapshot``.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import itertools
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from adapters.sim.truth import METRICS as TRACE_METRICS

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT_TIME = 1_767_000_000  # the fixed "now" of every snapshot (Unix seconds, 2025-12-29)

#: Metric of each model's validation trace (name, direction, MetricPoint field): the simulator's table.
METRICS = TRACE_METRICS

#: FlowCon stand-in: a CPU job with c cores runs an epoch in CPU_EPOCH_SCALE x the measured epoch time
#: of the same model with c data-parallel replicas on one node (replicas treated as cores).
CPU_EPOCH_SCALE = 1.0


# ----------------------------------------------------------------------------------------------
# Data access
# ----------------------------------------------------------------------------------------------


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@dataclass
class Curve:
    """One measured learning curve: ``values[i]`` after epoch ``i + 1``."""

    model: str
    bsz: int
    file: str
    iterations: list[int]
    values: list[float]

    @property
    def epochs(self) -> int:
        return len(self.values)

    @property
    def steps_per_epoch(self) -> float:
        """Median optimizer steps per epoch at this global batch size (from the ``iteration`` column)."""
        its = [0, *self.iterations]
        return float(statistics.median(b - a for a, b in itertools.pairwise(its)))

    @property
    def final(self) -> float:
        return self.values[-1]

    def first_epoch_reaching(self, value: float, direction: str) -> int | None:
        for i, v in enumerate(self.values):
            if (v >= value) if direction == "higher" else (v <= value):
                return i + 1
        return None


class Data:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.traces = root / "adaptdl-osdi21" / "traces"
        self.alibaba = root / "alibaba-gpu-v2023"
        self._curves: dict[tuple[str, int], Curve] = {}
        self._placements: dict[str, dict[int, list[tuple[float, float]]]] = {}
        self.used: set[str] = set()  # data files read for the snapshot being built (reset per snapshot)

    # -- learning curves -----------------------------------------------------------------------
    def curve(self, model: str, bsz: int) -> Curve:
        key = (model, bsz)
        if key not in self._curves:
            rel = f"adaptdl-osdi21/traces/{model}/validation-{bsz}.csv"
            its: list[int] = []
            vals: list[float] = []
            for r in _rows(self.root / rel):
                it = int(r["iteration"])
                if its and it == its[-1]:
                    continue  # the bert traces repeat their last row; one row per epoch
                its.append(it)
                vals.append(float(r["metric"]))
            self._curves[key] = Curve(model, bsz, rel, its, vals)
        self.used.add(self._curves[key].file)
        return self._curves[key]

    # -- speeds ----------------------------------------------------------------------------------
    def _single_node(self, model: str) -> dict[int, list[tuple[float, float]]]:
        """placements.csv rows with one node: replicas -> sorted (local_bsz, step_time)."""
        if model not in self._placements:
            out: dict[int, list[tuple[float, float]]] = {}
            for r in _rows(self.traces / model / "placements.csv"):
                p = r["placement"]
                if len(p) != 1:
                    continue
                out.setdefault(int(p), []).append((float(r["local_bsz"]), float(r["step_time"])))
            for v in out.values():
                v.sort()
            self._placements[model] = out
        self.used.add(f"adaptdl-osdi21/traces/{model}/placements.csv")
        return self._placements[model]

    def step_time(self, model: str, replicas: int, local_bsz: float) -> float:
        """Measured step time with ``replicas`` GPUs on one node at ``local_bsz`` (log-log interpolation).

        Below the smallest measured local batch the smallest one's time is used; above the largest,
        the batch is split into ``k`` gradient-accumulation micro-steps of a measured size (``k``
        times the micro-step's time).
        """
        pts = self._single_node(model)[replicas]
        lo, hi = pts[0][0], pts[-1][0]
        k = 1
        if local_bsz > hi:
            k = math.ceil(local_bsz / hi)
            local_bsz = local_bsz / k
        b = max(local_bsz, lo)
        xs = [p[0] for p in pts]
        i = bisect.bisect_left(xs, b)
        if i < len(xs) and xs[i] == b:
            t = pts[i][1]
        else:
            (x0, y0), (x1, y1) = pts[i - 1], pts[i]
            w = (math.log(b) - math.log(x0)) / (math.log(x1) - math.log(x0))
            t = math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))
        return k * t

    def epoch_seconds(self, model: str, bsz: int, replicas: int) -> float:
        """Seconds per epoch at global batch ``bsz`` split over ``replicas`` GPUs of one node."""
        return self.curve(model, bsz).steps_per_epoch * self.step_time(model, replicas, bsz / replicas)

    # -- Alibaba ---------------------------------------------------------------------------------
    def nodes(self, cpu: int, mem: int, gpus: int, model: str, count: int) -> list[dict]:
        """The first ``count`` nodes (by serial name) of one real shape from the Alibaba node list."""
        got = []
        self.used.add("alibaba-gpu-v2023/openb_node_list_gpu_node.csv")
        for r in _rows(self.alibaba / "openb_node_list_gpu_node.csv"):
            if (int(r["cpu_milli"]), int(r["memory_mib"]), int(r["gpu"]), r["model"]) == (cpu, mem, gpus, model):
                got.append({"name": r["sn"], "cpu_millis": cpu, "gpus": gpus, "memory_mib": mem, "gpu_type": model})
        got.sort(key=lambda n: str(n["name"]))
        if len(got) < count:
            raise SystemExit(f"only {len(got)} nodes of shape {cpu}/{mem}/{gpus}/{model} in the node list")
        return got[:count]

    def gpu_pod_sizes(self) -> list[tuple[int, int]]:
        """(cpu_milli, memory_mib) of the default trace's whole-one-GPU pods, in trace order.

        Only pods asking for 4-16 cores and at most 64 GiB are kept (the typical training pod; the
        trace also holds 1-core notebooks and 24-core outliers).
        """
        out = []
        self.used.add("alibaba-gpu-v2023/openb_pod_list_default.csv")
        for r in _rows(self.alibaba / "openb_pod_list_default.csv"):
            if r["num_gpu"] == "1" and r["gpu_milli"] == "1000":
                cpu, mem = int(r["cpu_milli"]), int(r["memory_mib"])
                if 4000 <= cpu <= 16000 and mem <= 65536:
                    out.append((cpu, mem))
        return out


# ----------------------------------------------------------------------------------------------
# Building jobs
# ----------------------------------------------------------------------------------------------


def r1(x: float) -> float:
    return round(float(x), 1)


def r4(x: float) -> float:
    return round(float(x), 4)


@dataclass
class Segment:
    """A stretch of a job's past: ``epochs`` epochs at (cpu_millis, gpus) taking ``seconds_per_epoch`` each."""

    epochs: int
    cpu_millis: int
    gpus: int
    seconds_per_epoch: float


@dataclass
class JobSpec:
    id: str
    model: str
    bsz: int
    status: str  # running | pending
    node: str | None = None
    segments: list[Segment] = field(default_factory=list)  # the past, oldest first (pending: may be empty)
    min_cpu: int = 1000
    max_cpu: int = 1000
    min_gpus: int = 0
    max_gpus: int = 0
    memory_mib: int = 0
    checkpoint_s: float = 30.0
    restart_s: float = 30.0
    priority: float = 1.0
    tier1: float | None = None
    tier1_deadline: float | None = None
    tier2: float | None = None
    tier2_deadline: float | None = None
    queued_s: float = 60.0  # between submission and the first epoch's start
    into_epoch: float = 0.3  # share of the next epoch already done at the snapshot time
    gpu_type: str | None = None


def build_job(data: Data, s: JobSpec) -> dict:
    curve = data.curve(s.model, s.bsz)
    metric, direction, field_name = METRICS[s.model]
    epoch_now = sum(seg.epochs for seg in s.segments)
    if epoch_now > curve.epochs:
        raise SystemExit(f"{s.id}: epoch {epoch_now} beyond the {curve.epochs}-epoch trace")

    # Lay the past out backwards from the snapshot time: a running job's last epoch ended
    # `into_epoch` of an epoch before now; a paused (pending) one stopped ten minutes before now.
    # Between segments the job checkpointed and restarted (checkpoint_s + restart_s of no progress).
    history: list[dict] = []
    if s.segments:
        durations = [seg.epochs * seg.seconds_per_epoch for seg in s.segments]
        gap = s.checkpoint_s + s.restart_s
        tail = s.into_epoch * s.segments[-1].seconds_per_epoch if s.status == "running" else s.checkpoint_s + 600.0
        start = SNAPSHOT_TIME - tail - sum(durations) - gap * (len(s.segments) - 1)
        t = start
        e = 0
        for seg in s.segments:
            for _ in range(seg.epochs):
                t += seg.seconds_per_epoch
                e += 1
                history.append({"time": r1(t), "epoch": e, field_name: r4(curve.values[e - 1])})
            t += gap
        submitted = start - s.queued_s
    else:
        submitted = SNAPSHOT_TIME - s.queued_s

    # One observed speed per distinct allocation the job ran with (the measured epoch time there).
    speed = []
    seen = set()
    for seg in s.segments:
        key = (seg.cpu_millis, seg.gpus)
        if key not in seen:
            seen.add(key)
            speed.append({"cpu_millis": seg.cpu_millis, "gpus": seg.gpus, "seconds_per_epoch": r1(seg.seconds_per_epoch)})

    # Every job names its metric (without a target the planner reads `loss`). Tier 1 defaults to the
    # trace's final value without a deadline ("train to where the measured run ended").
    tier1 = r4(s.tier1 if s.tier1 is not None else curve.final)
    target: dict = {"metric": metric, "direction": direction, "tier1": {"value": tier1}}
    if s.tier1_deadline is not None:
        target["tier1"]["deadline"] = r1(s.tier1_deadline)
    if s.tier2 is not None:
        target["tier2"] = {"value": r4(s.tier2)}
        if s.tier2_deadline is not None:
            target["tier2"]["deadline"] = r1(s.tier2_deadline)
    target["max_epochs"] = curve.epochs
    # A tier 1 passed before the latest epoch was handed over in an earlier interval.
    reached = curve.first_epoch_reaching(tier1, direction)
    delivered = reached is not None and reached < epoch_now

    job: dict = {"id": s.id, "status": s.status}
    if s.status == "running":
        job["node"] = s.node
        job["allocation"] = {"cpu_millis": s.segments[-1].cpu_millis, "gpus": s.segments[-1].gpus}
    job.update(
        {
            "min_cpu_millis": s.min_cpu,
            "max_cpu_millis": s.max_cpu,
            "min_gpus": s.min_gpus,
            "max_gpus": s.max_gpus,
            "memory_mib": s.memory_mib,
            "resizable": True,
            "migratable": True,
            "checkpoint_seconds": s.checkpoint_s,
            "restart_seconds": s.restart_s,
            "priority": s.priority,
            "submitted": r1(submitted),
            "history": history,
            "speed": speed,
            "target": target,
        }
    )
    if delivered:
        job["delivered"] = True
    return job


def tier_value(curve: Curve, direction: str, share: float) -> float:
    """A tier level as a share of the final measured value: ``share x final`` when higher is better,
    ``final / share`` when lower is better (e.g. 0.9 -> accuracy 90 % of final, WER 11 % above final)."""
    return curve.final * share if direction == "higher" else curve.final / share


def deadline(data: Data, spec: JobSpec, value: float, factor: float, gpus: int = 0, cores: int = 0) -> float:
    """``now + factor x`` the measured time from the job's current epoch to the first epoch where the
    trace reaches ``value``, at ``gpus`` GPUs (GPU jobs) or ``cores`` cores (CPU jobs)."""
    _, direction, _ = METRICS[spec.model]
    curve = data.curve(spec.model, spec.bsz)
    e_reach = curve.first_epoch_reaching(value, direction)
    assert e_reach is not None, (spec.id, value)
    e_now = sum(seg.epochs for seg in spec.segments)
    assert e_reach > e_now, f"{spec.id}: tier {value} already reached at epoch {e_reach} <= {e_now}"
    sec = data.epoch_seconds(spec.model, spec.bsz, gpus) if gpus else cpu_epoch(data, spec.model, spec.bsz, cores)
    return SNAPSHOT_TIME + factor * (e_reach - e_now) * sec


def snapshot(nodes: list[dict], jobs: list[dict], interval: float, budget: int) -> dict:
    return {
        "apiVersion": "flowplan/v1",
        "kind": "Snapshot",
        "time": SNAPSHOT_TIME,
        "nodes": nodes,
        "jobs": jobs,
        "settings": {"interval_seconds": interval, "migration_budget": budget, "convergence_tolerance": 0.001},
    }


# ----------------------------------------------------------------------------------------------
# Scenario 1: FlowCon, one CPU-only host
# ----------------------------------------------------------------------------------------------


def cpu_epoch(data: Data, model: str, bsz: int, cores: int) -> float:
    return CPU_EPOCH_SCALE * data.epoch_seconds(model, bsz, cores)


def flowcon(data: Data) -> dict:
    host = "flowcon-host"
    node = {"name": host, "cpu_millis": 16000, "gpus": 0, "memory_mib": 65536, "labels": {"role": "cpu-training"}}

    def job(
        jid: str,
        past: list[tuple[int, int]],
        *,
        status: str = "running",
        min_cpu: int = 1000,
        mem: int = 4096,
        ckpt: float = 10.0,
        restart: float = 15.0,
        **kw,
    ) -> JobSpec:
        model, bsz = jid.split("-")[0], int(jid.split("-")[1][2:])
        segs = [Segment(e, c * 1000, 0, cpu_epoch(data, model, bsz, c)) for e, c in past]
        return JobSpec(
            jid,
            model,
            bsz,
            status,
            host if status == "running" else None,
            segs,
            min_cpu=min_cpu,
            max_cpu=16000,
            memory_mib=mem,
            checkpoint_s=ckpt,
            restart_s=restart,
            **kw,
        )

    # past = [(epochs, cores), ...] oldest first; the last entry is the current allocation.
    # Batch sizes are ones whose measured replica scaling is sane (small batches barely scale); ncf is
    # kept although it does not scale at all: its history shows 2 cores no faster than 1.
    # Current allocations: 2 + 1 + 2 + 3 + 2 + 2 + 1 + 3 = 16 cores of 16.
    specs = [
        # early in the curve, fast-growing
        job("cifar10-bs512-a", [(4, 2)], mem=3072),
        job("ncf-bs1024-a", [(2, 1)], min_cpu=500, mem=6144),
        job("yolov3-bs32-a", [(3, 1), (3, 2)], mem=8192, ckpt=20.0, restart=20.0),
        # mid-curve
        job("deepspeech2-bs80-a", [(6, 2), (6, 3)], mem=8192, ckpt=20.0, restart=20.0, priority=1.5),
        job("cifar10-bs256-b", [(20, 1), (15, 2)], mem=3072, priority=2.0),
        # late, flattened out
        job("cifar10-bs1024-c", [(40, 4), (45, 1), (3, 2)], min_cpu=500, mem=3072),
        job("ncf-bs512-b", [(4, 2), (4, 1)], min_cpu=500, mem=6144, priority=0.5),
        job("deepspeech2-bs160-b", [(30, 2), (30, 3)], mem=8192, ckpt=20.0, restart=20.0),
        # pending: a fresh submission (nothing observed yet) and one paused earlier (history kept)
        job("cifar10-bs2048-d", [], status="pending", mem=3072, queued_s=45.0),
        job("yolov3-bs64-b", [(12, 2)], status="pending", mem=8192, ckpt=20.0, restart=20.0),
    ]
    by_id = {s.id: s for s in specs}
    # Tier-1 targets with deadlines: (job, share of the final value, deadline factor, cores the
    # deadline is computed at). factor x measured time to the tier from now at that many cores.
    for jid, share, factor, cores in [
        ("yolov3-bs32-a", 0.85, 1.3, 2),  # comfortable at the 2 cores it holds
        ("deepspeech2-bs80-a", 0.90, 1.0, 4),  # tight: needs about 4 cores (it holds 3)
        ("cifar10-bs256-b", 0.97, 1.2, 2),  # comfortable-ish at its 2 cores
    ]:
        spec = by_id[jid]
        spec.tier1 = tier_value(data.curve(spec.model, spec.bsz), METRICS[spec.model][1], share)
        spec.tier1_deadline = deadline(data, spec, spec.tier1, factor, cores=cores)
    return snapshot([node], [build_job(data, s) for s in specs], interval=30.0, budget=4)


# ----------------------------------------------------------------------------------------------
# Scenario 2: SpeCon, four 8-GPU nodes, three crowded, one nearly empty
# ----------------------------------------------------------------------------------------------


def gpu_job(
    data: Data, pods, jid: str, node: str | None, past: list[tuple[int, int]], max_gpus: int, ckpt: float, restart: float, **kw
) -> JobSpec:
    """A one-replica GPU job; CPU and memory from the next real Alibaba pod; past = [(epochs, gpus)]."""
    model, bsz = jid.split("-")[0], int(jid.split("-")[1][2:])
    cpu, mem = next(pods)
    segs = [Segment(e, cpu, g, data.epoch_seconds(model, bsz, g)) for e, g in past]
    return JobSpec(
        jid,
        model,
        bsz,
        "running" if node else "pending",
        node,
        segs,
        min_cpu=cpu,
        max_cpu=cpu,
        min_gpus=1,
        max_gpus=max_gpus,
        memory_mib=mem,
        checkpoint_s=ckpt,
        restart_s=restart,
        **kw,
    )


def specon(data: Data) -> dict:
    nodes = data.nodes(96000, 393216, 8, "G2", 4)
    a, b, c, d = (n["name"] for n in nodes)
    pods = iter(data.gpu_pod_sizes())
    # (id, node, past [(epochs, gpus)], max_gpus, checkpoint_s, restart_s); most crowded jobs once
    # ran on 2 GPUs and were squeezed to 1 as their node filled up.
    table = [
        # node A: 8 of 8 GPUs, 7 jobs
        ("imagenet-bs200-a", a, [(3, 2), (3, 1)], 8, 120.0, 90.0),
        ("cifar10-bs512-a", a, [(60, 2), (25, 1)], 4, 30.0, 30.0),  # late, flat
        ("deepspeech2-bs40-a", a, [(12, 1), (8, 2)], 4, 60.0, 60.0),
        ("yolov3-bs32-a", a, [(5, 2), (5, 1)], 4, 60.0, 45.0),
        ("ncf-bs1024-a", a, [(6, 1)], 2, 30.0, 30.0),
        ("bert-bs48-a", a, [(1, 1)], 4, 90.0, 60.0),
        ("cifar10-bs256-b", a, [(20, 2), (10, 1)], 4, 30.0, 30.0),
        # node B: 8 of 8 GPUs, 6 jobs
        ("imagenet-bs400-b", b, [(20, 1), (20, 2)], 8, 120.0, 90.0),
        ("deepspeech2-bs80-b", b, [(50, 2), (15, 1)], 4, 60.0, 60.0),  # late, flat
        ("yolov3-bs64-b", b, [(30, 2), (10, 1)], 4, 60.0, 45.0),  # late, flat
        ("cifar10-bs1024-c", b, [(4, 1), (4, 2)], 8, 30.0, 30.0),
        ("imagenet-bs800-c", b, [(3, 2), (2, 1)], 8, 120.0, 90.0),
        ("ncf-bs2048-b", b, [(3, 1)], 2, 30.0, 30.0),
        # node C: 7 of 8 GPUs, 5 jobs
        ("imagenet-bs400-d", c, [(60, 1), (15, 2)], 8, 120.0, 90.0),  # late, flat
        ("yolov3-bs16-c", c, [(4, 1), (16, 2)], 4, 60.0, 45.0),
        ("cifar10-bs128-d", c, [(10, 2), (5, 1)], 4, 30.0, 30.0),
        ("deepspeech2-bs20-c", c, [(3, 1)], 4, 60.0, 60.0),
        ("bert-bs96-b", c, [(1, 1)], 4, 90.0, 60.0),
        # node D: nearly empty, 2 of 8 GPUs
        ("cifar10-bs512-e", d, [(50, 2)], 2, 30.0, 30.0),
    ]
    specs = [gpu_job(data, pods, jid, node, past, mg, ck, rs) for jid, node, past, mg, ck, rs in table]
    specs.append(gpu_job(data, pods, "yolov3-bs128-d", None, [], 4, 60.0, 45.0, queued_s=300.0))
    return snapshot(nodes, [build_job(data, s) for s in specs], interval=60.0, budget=4)


# ----------------------------------------------------------------------------------------------
# Scenario 3: two-tier QoE targets and deadlines on three 4-GPU T4 nodes
# ----------------------------------------------------------------------------------------------


def qoe(data: Data) -> dict:
    nodes = data.nodes(96000, 393216, 4, "T4", 3)
    n1, n2, n3 = (n["name"] for n in nodes)
    pods = iter(data.gpu_pod_sizes()[40:])  # a different slice of pods than specon's
    # (id, node, past [(epochs, gpus)], max_gpus, priority, tier-1 share, tier-2 share,
    #  tier-1 deadline factor, tier-2 deadline factor or None)
    # Deadline = now + factor x the measured time from the current epoch to the tier at the job's
    # current GPU count (pending: 1 GPU). factor >= 1.5: comfortable; < 1: tight (needs more GPUs
    # than it holds); <= 0.25: impossible even at max_gpus.
    table = [
        ("cifar10-bs256-a", n1, [(10, 1)], 4, 1.0, 0.95, 0.98, 3.0, None),  # comfortable
        ("cifar10-bs512-b", n1, [(10, 2), (10, 1)], 4, 2.0, 0.97, 0.99, 0.7, 2.0),  # tight
        ("deepspeech2-bs40-a", n1, [(10, 1)], 4, 1.0, 0.90, 0.98, 0.15, None),  # impossible
        ("yolov3-bs32-a", n1, [(8, 1)], 4, 0.5, 0.90, 0.98, 2.0, None),  # comfortable, low priority
        ("imagenet-bs200-a", n2, [(40, 1), (22, 2)], 4, 3.0, 0.99, 0.995, 1.5, 1.2),  # comfortable, top priority
        ("deepspeech2-bs20-b", n2, [(15, 1), (15, 2)], 4, 2.5, 0.95, 0.99, 0.8, 1.5),  # tight
        ("ncf-bs1024-a", n3, [(2, 1)], 2, 1.5, 0.99, 1.0, 1.2, 2.0),
        ("imagenet-bs400-b", n3, [(40, 1)], 4, 1.0, 0.95, 0.99, 0.25, None),  # impossible
        ("yolov3-bs64-b", n3, [(6, 2), (6, 1)], 4, 2.0, 0.90, 0.97, 0.6, 1.5),  # tight
        ("bert-bs24-a", n3, [(1, 1)], 2, 1.0, 0.99, 1.0, 1.5, None),
        ("cifar10-bs128-c", None, [], 4, 1.0, 0.90, 0.98, 1.5, 3.0),  # pending, fresh
        ("yolov3-bs16-c", None, [(4, 1)], 4, 0.5, 0.90, 0.98, 0.5, None),  # pending (preempted), impossible
    ]
    specs = []
    for jid, node, past, max_g, prio, s1, s2, f1, f2 in table:
        spec = gpu_job(data, pods, jid, node, past, max_g, 60.0, 60.0, priority=prio, queued_s=120.0 if node else 600.0)
        curve = data.curve(spec.model, spec.bsz)
        direction = METRICS[spec.model][1]
        g_now = past[-1][1] if past else 1
        spec.tier1 = tier_value(curve, direction, s1)
        spec.tier2 = tier_value(curve, direction, s2)
        spec.tier1_deadline = deadline(data, spec, spec.tier1, f1, gpus=g_now)
        spec.tier2_deadline = deadline(data, spec, spec.tier2, f2, gpus=g_now) if f2 is not None else None
        specs.append(spec)
    return snapshot(nodes, [build_job(data, s) for s in specs], interval=60.0, budget=2)


# ----------------------------------------------------------------------------------------------


def write(snap: dict, path: Path) -> None:
    path.write_text(json.dumps(snap, indent=1, ensure_ascii=False, allow_nan=False) + "\n")


BUILDERS = {"flowcon-1node.json": flowcon, "specon-4nodes.json": specon, "qoe-deadlines.json": qoe}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data", help="the shared data folder")
    ap.add_argument("--out", type=Path, default=REPO / "examples" / "snapshots", help="where to write the snapshots")
    ap.add_argument("--check", action="store_true", help="validate each file with planner.load_snapshot")
    args = ap.parse_args(argv)
    data = Data(args.data.resolve())
    args.out.mkdir(parents=True, exist_ok=True)
    for name, build in BUILDERS.items():
        data.used = set()
        snap = build(data)
        path = args.out / name
        write(snap, path)
        print(f"{name}: {path.stat().st_size / 1024:.1f} KB, {len(snap['nodes'])} node(s), {len(snap['jobs'])} jobs")
        for f in sorted(data.used):
            print(f"    from {f}")
        if args.check:
            from planner import load_snapshot

            load_snapshot(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
