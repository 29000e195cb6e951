"""Simulation scenarios: a cluster, jobs with ground truth from measured runs, and how they arrive.

A scenario is a TOML file (see ``examples/scenarios/`` and ``docs/simulator.md``)::

    name = "flowcon-1node"
    paper = "FlowCon (ICPP 2019)"
    metric = "job_jct"          # what the scenario is judged on (see METRICS)
    baseline = "docker"         # the paper's baseline policy
    headline = 42.06            # the paper's number for that comparison (percent, or a factor)
    interval_seconds = 30

    [[nodes]]
    name = "host"
    cpu_millis = 16000

    [[jobs]]
    id = "cifar10"
    model = "cifar10"
    batch_size = 128
    kind = "cpu"
    arrival = [0, 100]          # seconds: a number, or [low, high] drawn uniformly per seed
    count = 2                   # cifar10-0, cifar10-1

Jobs may also come from a trace (``[trace]``: a Pollux workload CSV or Philly samples). Everything
is checked on load; a mistake raises :class:`ScenarioError` naming the field and the value.
Drawing a concrete job list for one seed is :meth:`Scenario.draw`.
"""

from __future__ import annotations

import csv
import math
import re
import tomllib
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from adapters.sim.truth import METRICS, GroundTruth, TraceError, TraceLibrary
from models.speed import PSSpeedModel, fit_ps_speed_model
from planner.snapshot import MAX_NAME, MAX_SECONDS, NAME_PATTERN, gpu_model_allowed

#: Scenario metrics: name -> (what it measures, lower is better?)
SCENARIO_METRICS: dict[str, tuple[str, bool]] = {
    "makespan": ("time from the first arrival until every job has finished", True),
    "mean_jct": ("mean job completion time (finish - arrival)", True),
    "job_jct": ("largest completion-time reduction of one job without a longer makespan", True),
    "tier1_time": ("mean time from arrival to reaching tier 1", True),
    "qoe_met": ("number of jobs reaching tier 1 by its deadline", False),
}

_POLICY_NAMES = ("flowplan", "oracle", "docker", "kubernetes", "fifo", "flowcon", "specon", "optimus", "tiresias")


class ScenarioError(ValueError):
    """A scenario file that cannot be simulated; the message names the field and the value."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpu_millis: int
    gpus: int = 0
    memory_mib: int = 0
    gpu_type: str | None = None


@dataclass(frozen=True)
class JobSpec:
    """One concrete simulated job (after drawing arrivals)."""

    id: str
    model: str
    batch_size: int
    kind: str
    arrival: float
    epochs: int
    min_cpu_millis: int
    max_cpu_millis: int
    min_gpus: int
    max_gpus: int
    memory_mib: int
    checkpoint_seconds: float
    restart_seconds: float
    priority: float
    resizable: bool
    tier1: float | None
    tier1_deadline: float | None
    tier2: float | None
    tier2_deadline: float | None
    cpu_scale: float
    tag: bool = False  # the job a "job_jct" scenario is about (FlowCon's "specific job")
    gpu_milli: int | None = None  # a share of one GPU (1..999), shared with other fractional jobs
    replicas: int = 1  # a gang: identical replicas (workers), each with the per-replica figures above
    min_replicas: int | None = None  # the fewest it trains with (None: exactly ``replicas``)
    max_nodes: int = 1  # the most nodes its replicas may spread over
    elastic: bool = False  # its count/placement changes live (else by checkpoint-restart)
    duration_seconds: float | None = None  # runs exactly this long at any allocation (a trace pod's lifetime)
    gpu_type: str | tuple[str, ...] | None = None  # only nodes with this GPU model (or, a tuple: any of these) qualify
    #: Parameter servers (``servers_max`` in the scenario): ``(min, max, CPU millis each, form)``; None: none.
    servers: tuple[int, int, int, str] | None = None
    #: The truth's parameter-server model (its form's prior, each parameter times a draw; module docstring).
    ps_theta: tuple[float, float, float, float, float] | None = None

    def takes_gpu_type(self, model: str | None) -> bool:
        """Whether a node with GPU model ``model`` qualifies (as ``planner.snapshot.Job.takes_gpu_type``)."""
        return gpu_model_allowed(self.gpu_type, model)

    def truth(self, library: TraceLibrary) -> GroundTruth:
        """The job's ground truth (its measured curve and speed, or its fixed run time)."""
        epoch_time = None if self.duration_seconds is None else self.duration_seconds / self.epochs
        ps = None
        if self.servers is not None and self.ps_theta is not None:
            ps = PSSpeedModel(self.servers[3], self.ps_theta, 0, "truth")  # type: ignore[arg-type]
        return GroundTruth(library, self.model, self.batch_size, self.kind, self.cpu_scale, epoch_time, ps)

    @property
    def fewest_replicas(self) -> int:
        return self.replicas if self.min_replicas is None else self.min_replicas


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    paper: str
    metric: str
    baseline: str
    headline: float | None
    headline_text: str
    interval_seconds: float
    migration_budget: int
    deadline_confidence: float
    noise: float
    stop_at_target: bool
    max_hours: float
    nodes: tuple[NodeSpec, ...]
    job_table: tuple[dict[str, Any], ...]
    trace: dict[str, Any] | None
    path: str = ""
    policies: tuple[str, ...] = field(default=_POLICY_NAMES)
    checkpoint_every_seconds: float = 600.0
    #: The control loop wakes at every arrival and finish, besides every interval (``SimCluster.sleep``).
    replan_on_events: bool = True
    #: A CPU job checkpointing or starting up uses CPU (its water-fill share, at most one core a
    #: replica), as a process does that saves its state or imports its libraries and loads its
    #: data: the jobs beside it get that much less. Off: such a job uses none.
    startup_cpu: bool = False

    # ------------------------------------------------------------------------------------------
    def draw(self, seed: int, library: TraceLibrary, data: Path | None = None) -> list[JobSpec]:
        """The concrete jobs of one run: arrivals drawn from ``seed``, tiers and deadlines from the truth."""
        rng = np.random.default_rng(seed)
        rows: list[dict[str, Any]] = []
        for i, row in enumerate(self.job_table):
            for k in range(int(row.get("count", 1))):
                r = dict(row)
                r["id"] = f"{row['id']}-{k}" if int(row.get("count", 1)) > 1 else row["id"]
                r["_where"] = f"jobs[{i}]"
                rows.append(r)
        if self.trace is not None:
            rows.extend(_trace_rows(self.trace, rng, data, library, len(self.nodes)))
        jobs = [_job(r, rng, library, self) for r in rows]
        jobs.sort(key=lambda j: (j.arrival, j.id))
        return jobs


def _num(v: Any, where: str, *, lo: float | None = None, hi: float | None = None, integer: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ScenarioError(f"{where}: expected a number, got {v!r}")
    x = float(v)
    if not math.isfinite(x):
        raise ScenarioError(f"{where}: {v!r} is not a finite number")
    if integer and x != int(x):
        raise ScenarioError(f"{where}: expected a whole number, got {v!r}")
    if lo is not None and x < lo:
        raise ScenarioError(f"{where}: {v!r} is below the minimum {lo:g}")
    if hi is not None and x > hi:
        raise ScenarioError(f"{where}: {v!r} is above the maximum {hi:g}")
    return x


def _name(v: Any, where: str, suffix: int = 0) -> str:
    """A job id or node name as the snapshot contract takes it; ``suffix``: the characters a
    ``count`` appends to it (``-12``)."""
    if not isinstance(v, str) or not re.fullmatch(NAME_PATTERN, v) or len(v) + suffix > MAX_NAME:
        raise ScenarioError(
            f"{where}: {v!r} is not a valid name (1-{MAX_NAME - suffix} letters, digits, '.', '_', ':', '/' or '-', "
            "starting and ending with a letter or digit)"[:300]
        )
    return v


def _count_suffix(count: int) -> int:
    """Characters ``count`` copies append to a name (``-0`` ... ``-99``): 0 for one copy."""
    return len(f"-{count - 1}") if count > 1 else 0


def _flag(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise ScenarioError(f"{where}: expected true or false, got {v!r}")
    return v


def _tier_value(truth: GroundTruth, share: float, epochs: int) -> float:
    """A tier as a share of the measured value at the job's last epoch (``epochs``): ``share × final``
    when higher is better, ``final / share`` otherwise."""
    final = truth.curve.values[epochs - 1]
    return final * share if truth.direction == "higher" else final / share


def _job(r: dict[str, Any], rng: np.random.Generator, library: TraceLibrary, sc: Scenario) -> JobSpec:
    where = r.pop("_where")
    model = r["model"]
    try:
        truth = GroundTruth(library, model, int(r["batch_size"]), r["kind"], float(r.get("cpu_scale", 1.0)))
        curve = truth.curve
    except TraceError as e:
        raise ScenarioError(f"{where}.{e}") from None
    arr = r.get("arrival", 0.0)
    if isinstance(arr, list):
        lo, hi = (_num(x, f"{where}.arrival", lo=0) for x in arr)
        arrival = float(rng.uniform(lo, hi)) if hi > lo else lo
    else:
        arrival = _num(arr, f"{where}.arrival", lo=0)
    arrival += float(r.get("_offset", 0.0))
    epochs = int(r.get("epochs", curve.epochs))
    if epochs > curve.epochs:
        raise ScenarioError(
            f"{where}.epochs: {epochs} is beyond the {curve.epochs}-epoch measured curve of {model} at batch {truth.batch}"
        )
    duration = float(r["duration_seconds"]) if r.get("duration_seconds") is not None else None
    if duration is not None:
        truth = replace(truth, epoch_time=duration / epochs)
    gpu = r["kind"] == "gpu"
    min_cpu = int(r.get("min_cpu_millis", 1000 if gpu else 500))
    max_cpu = int(r.get("max_cpu_millis", min_cpu))
    min_g = int(r.get("min_gpus", 1 if gpu else 0))
    max_g = int(r.get("max_gpus", min_g))
    if min_cpu > max_cpu:
        raise ScenarioError(f"{where}.min_cpu_millis: {min_cpu} exceeds max_cpu_millis {max_cpu}")
    if min_g > max_g:
        raise ScenarioError(f"{where}.min_gpus: {min_g} exceeds max_gpus {max_g}")
    if gpu and min_g < 1:
        raise ScenarioError(f"{where}.min_gpus: a gpu job needs at least 1 GPU, got {min_g}")
    if r.get("gpu_milli") is not None and not (gpu and min_g == max_g == 1):
        raise ScenarioError(
            f"{where}.gpu_milli: {r['gpu_milli']}, but a fraction of one GPU needs kind 'gpu' and min_gpus = max_gpus = 1"
        )
    replicas = int(r.get("replicas", 1))
    min_replicas = int(r["min_replicas"]) if r.get("min_replicas") is not None else None
    max_nodes = int(r.get("max_nodes", 1))
    if min_replicas is not None and min_replicas > replicas:
        raise ScenarioError(f"{where}.min_replicas: {min_replicas} exceeds replicas {replicas}")
    if max_nodes > replicas:
        raise ScenarioError(f"{where}.max_nodes: {max_nodes} exceeds replicas {replicas} (a node holds at least one replica)")
    if not gpu and (replicas > 1 or max_nodes > 1):
        raise ScenarioError(f"{where}.replicas: {replicas} on up to {max_nodes} node(s), but a cpu job runs as one replica")
    if r.get("gpu_milli") is not None and replicas > 1:
        raise ScenarioError(f"{where}.replicas: {replicas}, but a fraction of one GPU runs as one replica")
    servers, ps_theta = _servers(r, where, gpu, max_nodes, rng)
    if servers is not None:
        truth = replace(truth, ps=PSSpeedModel(servers[3], ps_theta, 0, "truth"))  # type: ignore[arg-type]
    # Deadlines: factor x the time the job needs alone at its largest allocation, packed on the
    # fewest nodes of the cluster's largest, from its arrival.
    per_node = max(1, max((n.gpus for n in sc.nodes), default=0) // max(max_g, 1))
    packed = tuple(min(per_node, replicas - i) for i in range(0, replicas, per_node)) if replicas > 1 else ()
    best = truth.epoch_seconds(max_cpu, max_g, packed)
    restart = float(r.get("restart_seconds", 10.0))
    tiers: dict[str, float | None] = {}
    for t in ("tier1", "tier2"):
        share = r.get(t, 1.0 if t == "tier1" else None)  # no tier: train to the measured final value
        tiers[t] = tiers[f"{t}_deadline"] = None
        if share is None:
            continue
        value = _tier_value(truth, share, epochs)
        tiers[t] = round(value, 4)
        factor = r.get(f"{t}_deadline")
        if factor is not None:
            reach = truth.first_epoch_reaching(value)
            if reach is None:
                raise ScenarioError(f"{where}.{t}: share {share} is never reached by the measured curve")
            tiers[f"{t}_deadline"] = round(arrival + factor * (restart + reach * best), 1)
    return JobSpec(
        id=r["id"],
        model=model,
        batch_size=truth.batch,
        kind=r["kind"],
        arrival=round(arrival, 3),
        epochs=epochs,
        min_cpu_millis=min_cpu,
        max_cpu_millis=max_cpu,
        min_gpus=min_g,
        max_gpus=max_g,
        memory_mib=int(r.get("memory_mib", 0)),
        checkpoint_seconds=float(r.get("checkpoint_seconds", 10.0)),
        restart_seconds=restart,
        priority=float(r.get("priority", 1.0)),
        resizable=bool(r.get("resizable", not gpu)),
        tier1=tiers["tier1"],
        tier1_deadline=tiers["tier1_deadline"],
        tier2=tiers["tier2"],
        tier2_deadline=tiers["tier2_deadline"],
        cpu_scale=float(r.get("cpu_scale", 1.0)),
        tag=bool(r.get("tag", False)),
        gpu_milli=int(r["gpu_milli"]) if r.get("gpu_milli") is not None else None,
        replicas=replicas,
        min_replicas=min_replicas,
        max_nodes=max_nodes,
        elastic=bool(r.get("elastic", False)),
        duration_seconds=duration,
        gpu_type=tuple(r["gpu_type"]) if isinstance(r.get("gpu_type"), list) else r.get("gpu_type"),
        servers=servers,
        ps_theta=ps_theta,
    )


#: Spread of the truth's parameter-server model around its form's prior: each parameter times
#: ``exp(N(0, PS_TRUTH_SIGMA))``, drawn per job (``../shared/data`` holds no parameter-server timing).
PS_TRUTH_SIGMA = 0.3


def _servers(
    r: dict[str, Any], where: str, gpu: bool, max_nodes: int, rng: np.random.Generator
) -> tuple[tuple[int, int, int, str] | None, tuple[float, float, float, float, float] | None]:
    """A job row's parameter servers (``servers_max``, ``servers_min``, ``server_cpu_millis``,
    ``server_form``) and the truth's model for it, or ``(None, None)``."""
    if "servers_max" not in r:
        for key in ("servers_min", "server_cpu_millis", "server_form"):
            if key in r:
                raise ScenarioError(f"{where}.{key}: set, but servers_max is not (the job has no parameter servers)")
        return None, None
    hi = int(_num(r["servers_max"], f"{where}.servers_max", lo=1, hi=1024, integer=True))
    lo = int(_num(r.get("servers_min", 1), f"{where}.servers_min", lo=1, hi=hi, integer=True))
    cpu = int(_num(r.get("server_cpu_millis", 1000), f"{where}.server_cpu_millis", lo=1, hi=10**7, integer=True))
    form = str(r.get("server_form", "optimus"))
    if form not in ("optimus", "coach"):
        raise ScenarioError(f"{where}.server_form: {form!r} is not 'optimus' or 'coach'")
    if not gpu:
        raise ScenarioError(f"{where}.servers_max: parameter servers serve GPU workers here (kind 'gpu')")
    if max_nodes > hi:
        raise ScenarioError(f"{where}.max_nodes: {max_nodes}, but servers_max is {hi} (each worker node holds a server)")
    prior = fit_ps_speed_model([], form)  # type: ignore[arg-type]
    theta = tuple(float(x * math.exp(rng.normal(0.0, PS_TRUTH_SIGMA))) for x in prior.theta)
    return (lo, hi, cpu, form), theta  # type: ignore[return-value]


_JOB_KEYS = {
    "id", "model", "batch_size", "kind", "arrival", "count", "epochs", "min_cpu_millis", "max_cpu_millis", "min_gpus",
    "max_gpus", "memory_mib", "checkpoint_seconds", "restart_seconds", "priority", "resizable", "tier1",
    "tier1_deadline", "tier2", "tier2_deadline", "cpu_scale", "tag", "gpu_milli", "replicas", "min_replicas",
    "max_nodes", "elastic", "duration_seconds", "gpu_type", "servers_max", "servers_min", "server_cpu_millis",
    "server_form",
}  # fmt: skip


def _check_job_row(row: Any, where: str, *, need_id: bool = True) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise ScenarioError(f"{where}: expected a table, got {row!r}")
    unknown = sorted(set(row) - _JOB_KEYS)
    if unknown:
        raise ScenarioError(f"{where}.{unknown[0]}: unknown field (known: {', '.join(sorted(_JOB_KEYS))})")
    for key in ("id", "model", "batch_size") if need_id else ("model", "batch_size"):
        if key not in row:
            raise ScenarioError(f"{where}.{key}: missing")
    if "count" in row:
        _num(row["count"], f"{where}.count", lo=1, hi=100_000, integer=True)
    if "id" in row:
        _name(row["id"], f"{where}.id", _count_suffix(int(row.get("count", 1))))
    if "model" in row and row["model"] not in METRICS:
        raise ScenarioError(f"{where}.model: unknown model {row['model']!r} (known: {', '.join(sorted(METRICS))})")
    kind = row.setdefault("kind", "gpu")
    if kind not in ("cpu", "gpu"):
        raise ScenarioError(f"{where}.kind: {kind!r} is not 'cpu' or 'gpu'")
    _num(row["batch_size"], f"{where}.batch_size", lo=1, integer=True)
    for key in ("min_cpu_millis", "max_cpu_millis"):
        if key in row:
            _num(row[key], f"{where}.{key}", lo=1, hi=10**7, integer=True)
    # The measured speed-ups stop at 4 GPUs; a job of known run time (a trace's pod) may ask more.
    most_gpus = 64 if "duration_seconds" in row else 4
    for key in ("min_gpus", "max_gpus"):
        if key in row:
            _num(row[key], f"{where}.{key}", lo=0, hi=most_gpus, integer=True)
    if "gpu_type" in row:
        models = row["gpu_type"] if isinstance(row["gpu_type"], list) else [row["gpu_type"]]
        if not (models and all(isinstance(m, str) and m for m in models)):
            raise ScenarioError(f"{where}.gpu_type: expected a GPU model name or a list of them, got {row['gpu_type']!r}")
    if "gpu_type" in row and row["kind"] != "gpu":
        raise ScenarioError(f"{where}.gpu_type: {row['gpu_type']!r}, but only a 'gpu' job asks for a GPU model")
    for key in ("replicas", "min_replicas", "max_nodes"):
        if key in row:
            _num(row[key], f"{where}.{key}", lo=1, hi=1024, integer=True)
    for key in ("elastic", "resizable", "tag"):
        if key in row:
            _flag(row[key], f"{where}.{key}")
    for key in ("count", "epochs"):
        if key in row:
            _num(row[key], f"{where}.{key}", lo=1, hi=100_000, integer=True)
    for key in ("memory_mib",):
        if key in row:
            _num(row[key], f"{where}.{key}", lo=0, hi=10**9, integer=True)
    for key in ("checkpoint_seconds", "restart_seconds"):
        if key in row:
            _num(row[key], f"{where}.{key}", lo=0, hi=86400)
    if "priority" in row:
        _num(row["priority"], f"{where}.priority", lo=0.01, hi=100)
    if "gpu_milli" in row:
        _num(row["gpu_milli"], f"{where}.gpu_milli", lo=1, hi=999, integer=True)
    if "cpu_scale" in row:
        _num(row["cpu_scale"], f"{where}.cpu_scale", lo=0.001, hi=1000)
    if "duration_seconds" in row:
        _num(row["duration_seconds"], f"{where}.duration_seconds", lo=0.001, hi=10**9)
    for key in ("tier1", "tier2"):
        if key in row:
            _num(row[key], f"{where}.{key}", lo=0.01, hi=1.0)
    for key in ("tier1_deadline", "tier2_deadline"):
        if key in row:
            _num(row[key], f"{where}.{key}", lo=0.01, hi=1000)
    if "tier2" in row and "tier1" not in row:
        raise ScenarioError(f"{where}.tier2: given without tier1")
    if "tier1" in row and "tier2" in row and row["tier2"] < row["tier1"]:
        raise ScenarioError(f"{where}.tier2: {row['tier2']} is below tier1 {row['tier1']} (tiers are shares of the final value)")
    arr = row.get("arrival", 0.0)
    if isinstance(arr, list):
        if len(arr) != 2:
            raise ScenarioError(f"{where}.arrival: a range must be [low, high], got {arr!r}")
        lo, hi = (_num(x, f"{where}.arrival", lo=0, hi=MAX_SECONDS) for x in arr)
        if hi < lo:
            raise ScenarioError(f"{where}.arrival: range {arr!r} has high below low")
    else:
        _num(arr, f"{where}.arrival", lo=0, hi=MAX_SECONDS)
    return row


def _timestamp(text: str, path: Path) -> float:
    """Seconds of a Philly timestamp (``2017-10-09 07:01:55``, or plain seconds)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise ScenarioError(f"trace.philly: {path}: bad timestamp {text!r}") from None


def _read_trace(path: Path, key: str, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """The rows of trace CSV ``path`` (``trace.<key>``) with their line numbers, its header checked
    for ``columns``; a file that cannot be read as such is a :class:`ScenarioError` naming it."""
    where = f"trace.{key}: {path}"
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or ())]
            if missing:
                found = ", ".join(reader.fieldnames or ()) or "nothing"
                raise ScenarioError(f"{where}: header has no '{missing[0]}' column (found: {found})"[:300])
            rows = [(reader.line_num, r) for r in reader]
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{where}: not a CSV file (byte {e.start} is not UTF-8 text)") from None
    except csv.Error as e:
        raise ScenarioError(f"{where}: not valid CSV ({e})") from None
    if not rows:
        raise ScenarioError(f"{where}: no rows after the header")
    return rows


def _cell(r: dict[str, str], column: str, kind: type[int] | type[float], where: str) -> Any:
    """Column ``column`` of a trace row as ``kind`` (``where`` names the file and line in an error)."""
    text = r.get(column) or ""
    try:
        return kind(text)
    except ValueError:
        raise ScenarioError(
            f"{where}, column '{column}': not a {'whole number' if kind is int else 'number'} ({text[:40]!r})"
        ) from None


def _trace_rows(
    trace: dict[str, Any], rng: np.random.Generator, data: Path | None, library: TraceLibrary, n_nodes: int
) -> list[dict[str, Any]]:
    """Jobs from a Pollux workload CSV (``workload``) or sampled from Philly (``philly``).

    A Pollux job asks for ``num_replicas`` GPUs. By default it runs them as one replica of up to 4
    GPUs on one node (the ask capped at 4). With ``span = true`` it is a gang of ``num_replicas``
    replicas of 1 GPU each that may run with as few as 1 (``min_replicas``) and spread over as many
    nodes as it has replicas (at most the cluster's nodes; ``job.max_nodes`` caps it), changing its
    count or placement by checkpoint-restart (``elastic = false``, as Pollux's jobs do)."""
    if data is None:
        raise ScenarioError("trace: this scenario reads a trace from the data folder; pass --data ../shared/data")
    span = _flag(trace.get("span", False), "trace.span")
    if span and "workload" not in trace:
        raise ScenarioError("trace.span: true needs a Pollux 'workload' (Philly rows carry no replica count to spread)")
    defaults = dict(trace.get("job", {}))
    limit = int(trace.get("limit", 10**9))
    max_epochs = int(trace.get("max_epochs", 10**9))
    scale = float(trace.get("time_scale", 1.0))
    rows: list[dict[str, Any]] = []
    if "workload" in trace:
        path = data / str(trace["workload"])
        if not path.is_file():
            raise ScenarioError(f"trace.workload: file not found: {path}")
        for line, cells in _read_trace(path, "workload", ("name", "time", "application", "num_replicas", "batch_size"))[:limit]:
            at = f"trace.workload: {path} line {line}"
            asked = _cell(cells, "num_replicas", int, at)
            gpus = 1 if span else min(asked, 4)
            batch, arrival = _cell(cells, "batch_size", int, at), _cell(cells, "time", float, at) * scale
            row = {**defaults, "id": cells["name"], "model": cells["application"], "batch_size": batch,
                   "kind": "gpu", "arrival": arrival, "max_gpus": gpus}  # fmt: skip
            row.setdefault("min_gpus", 1)
            if span:
                row.update(min_gpus=1, replicas=asked, min_replicas=1, elastic=bool(defaults.get("elastic", False)))
                row["max_nodes"] = max(1, min(int(defaults.get("max_nodes", asked)), asked, n_nodes))
            row["_where"] = f"trace.workload row {cells['name']}"
            rows.append(row)
    elif "philly" in trace:
        path = data / str(trace["philly"])
        if not path.is_file():
            raise ScenarioError(f"trace.philly: file not found: {path}")
        all_rows = [
            (_timestamp(cells["timestamp"], path), _cell(cells, "num_gpus", int, f"trace.philly: {path} line {line}"))
            for line, cells in _read_trace(path, "philly", ("timestamp", "num_gpus"))
        ]
        all_rows.sort()
        n = min(limit, len(all_rows))
        start = int(rng.integers(0, max(1, len(all_rows) - n)))
        window = all_rows[start : start + n]
        t0 = window[0][0] if window else 0.0
        default_mix = [["cifar10", 128], ["yolov3", 64], ["deepspeech2", 40], ["imagenet", 800], ["ncf", 1024], ["bert", 96]]
        mix = trace.get("models", default_mix)
        for k, (ts, g) in enumerate(window):
            model, batch = mix[int(rng.integers(0, len(mix)))]
            row = {**defaults, "id": f"philly-{k}", "model": model, "batch_size": int(batch), "kind": "gpu",
                   "arrival": (ts - t0) * scale, "max_gpus": max(1, min(g, 4))}  # fmt: skip
            row.setdefault("min_gpus", 1)
            row["_where"] = f"trace.philly row {start + k}"
            rows.append(row)
    else:
        raise ScenarioError("trace: needs 'workload' (a Pollux workload CSV) or 'philly' (the Philly trace CSV)")
    for r in rows:
        _check_job_row({k: v for k, v in r.items() if k != "_where"}, r["_where"])
        if max_epochs < 10**9:
            try:
                r["epochs"] = min(max_epochs, library.curve(r["model"], int(r["batch_size"])).epochs)
            except TraceError as e:
                raise ScenarioError(f"{r['_where']}: {e}") from None
        if r["max_gpus"] < r["min_gpus"]:
            r["min_gpus"] = r["max_gpus"]
    return rows


_TRACE_KEYS = {"workload", "philly", "span", "job", "limit", "max_epochs", "time_scale", "models"}


def _check_trace(trace: Any) -> None:
    """The ``[trace]`` table's own fields (its jobs' rows are checked as they are drawn)."""
    if not isinstance(trace, dict):
        raise ScenarioError("trace: expected a table [trace]")
    unknown = sorted(set(trace) - _TRACE_KEYS)
    if unknown:
        raise ScenarioError(f"trace.{unknown[0]}: unknown field (known: {', '.join(sorted(_TRACE_KEYS))})")
    for key in ("workload", "philly"):
        if key in trace and not (isinstance(trace[key], str) and trace[key]):
            raise ScenarioError(f"trace.{key}: expected a path in the data folder, got {trace[key]!r}")
    if "span" in trace:
        _flag(trace["span"], "trace.span")
    if not isinstance(trace.get("job", {}), dict):
        raise ScenarioError(f"trace.job: expected a table of job fields, got {trace['job']!r}")
    if "limit" in trace:
        _num(trace["limit"], "trace.limit", lo=1, hi=10**6, integer=True)
    if "max_epochs" in trace:
        _num(trace["max_epochs"], "trace.max_epochs", lo=1, hi=10**9, integer=True)
    if "time_scale" in trace:
        _num(trace["time_scale"], "trace.time_scale", lo=1e-6, hi=1e6)
    if "models" in trace:
        mix = trace["models"]
        if not isinstance(mix, list) or not mix:
            raise ScenarioError(f"trace.models: expected a list of [model, batch_size] pairs, got {mix!r}"[:300])
        for i, pair in enumerate(mix):
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise ScenarioError(f"trace.models[{i}]: expected [model, batch_size], got {pair!r}"[:300])
            _num(pair[1], f"trace.models[{i}].batch_size", lo=1, integer=True)


def parse_scenario(doc: dict[str, Any], path: str = "") -> Scenario:
    known = {
        "name", "description", "paper", "metric", "baseline", "headline", "headline_text", "interval_seconds",
        "migration_budget", "deadline_confidence", "noise", "stop_at_target", "max_hours", "nodes", "jobs", "trace",
        "policies", "checkpoint_every_seconds", "replan_on_events", "startup_cpu",
    }  # fmt: skip
    for key in doc:
        if key not in known:
            raise ScenarioError(f"{key}: unknown field (known: {', '.join(sorted(known))})")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise ScenarioError("name: missing or not a string")
    metric = doc.get("metric", "makespan")
    if metric not in SCENARIO_METRICS:
        raise ScenarioError(f"metric: unknown metric {metric!r} (known: {', '.join(SCENARIO_METRICS)})")
    baseline = doc.get("baseline", "docker")
    raw_policies = doc.get("policies", list(_POLICY_NAMES))
    if not isinstance(raw_policies, list) or not raw_policies:
        raise ScenarioError(f"policies: expected a list of policy names, got {raw_policies!r}")
    policies = tuple(raw_policies)
    for p in (baseline, *policies):
        if p not in _POLICY_NAMES:
            raise ScenarioError(f"baseline/policies: unknown policy {p!r} (known: {', '.join(_POLICY_NAMES)})")
    nodes: list[NodeSpec] = []
    raw_nodes = doc.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise ScenarioError("nodes: a scenario needs at least one [[nodes]] table")
    for i, n in enumerate(raw_nodes):
        w = f"nodes[{i}]"
        if not isinstance(n, dict) or "name" not in n or "cpu_millis" not in n:
            raise ScenarioError(f"{w}: needs 'name' and 'cpu_millis'")
        count = int(_num(n.get("count", 1), f"{w}.count", lo=1, hi=10_000, integer=True))
        node_name = _name(n["name"], f"{w}.name", _count_suffix(count))
        cpu = int(_num(n["cpu_millis"], f"{w}.cpu_millis", lo=1, hi=10**7, integer=True))
        gpus = int(_num(n.get("gpus", 0), f"{w}.gpus", lo=0, hi=1024, integer=True))
        mem = int(_num(n.get("memory_mib", 0), f"{w}.memory_mib", lo=0, hi=10**9, integer=True))
        gpu_type = n.get("gpu_type")
        if gpu_type is not None and not (isinstance(gpu_type, str) and gpu_type):
            raise ScenarioError(f"{w}.gpu_type: expected a GPU model name, got {gpu_type!r}")
        for k in range(count):
            nodes.append(NodeSpec(f"{node_name}-{k}" if count > 1 else node_name, cpu, gpus, mem, gpu_type))
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ScenarioError("nodes: duplicate node names")
    jobs_raw = doc.get("jobs", [])
    if not isinstance(jobs_raw, list):
        raise ScenarioError("jobs: expected an array of tables [[jobs]]")
    table = tuple(_check_job_row(dict(r) if isinstance(r, dict) else r, f"jobs[{i}]") for i, r in enumerate(jobs_raw))
    ids = [r["id"] for r in table]
    if len(set(ids)) != len(ids):
        dup = next(x for x in ids if ids.count(x) > 1)
        raise ScenarioError(f"jobs: duplicate job id {dup!r}")
    trace = doc.get("trace")
    if trace is not None:
        _check_trace(trace)
    if not table and trace is None:
        raise ScenarioError("jobs: a scenario needs [[jobs]] or a [trace]")
    headline = doc.get("headline")
    return Scenario(
        name=name,
        description=str(doc.get("description", "")),
        paper=str(doc.get("paper", "")),
        metric=metric,
        baseline=baseline,
        headline=None if headline is None else _num(headline, "headline"),
        headline_text=str(doc.get("headline_text", "")),
        interval_seconds=_num(doc.get("interval_seconds", 60.0), "interval_seconds", lo=1, hi=86400),
        migration_budget=int(_num(doc.get("migration_budget", 4), "migration_budget", lo=0, hi=10**6, integer=True)),
        deadline_confidence=_num(doc.get("deadline_confidence", 0.5), "deadline_confidence", lo=0.5, hi=0.99),
        noise=_num(doc.get("noise", 0.003), "noise", lo=0, hi=0.5),
        stop_at_target=_flag(doc.get("stop_at_target", True), "stop_at_target"),
        max_hours=_num(doc.get("max_hours", 72.0), "max_hours", lo=0.01, hi=24 * 365),
        nodes=tuple(nodes),
        job_table=table,
        trace=trace,
        path=path,
        policies=policies,
        checkpoint_every_seconds=_num(doc.get("checkpoint_every_seconds", 600.0), "checkpoint_every_seconds", lo=1, hi=10**6),
        replan_on_events=_flag(doc.get("replan_on_events", True), "replan_on_events"),
        startup_cpu=_flag(doc.get("startup_cpu", False), "startup_cpu"),
    )


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{p}: file not found") from None
    except OSError as e:
        raise ScenarioError(f"{p}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{p}: not a TOML file (byte {e.start} is not UTF-8 text)") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{p}: not valid TOML ({e})") from None
    try:
        return parse_scenario(doc, str(p))
    except ScenarioError as e:
        raise ScenarioError(f"{p}: {e}") from None
