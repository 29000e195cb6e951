"""Ground truth for simulated jobs, from measured training runs (the Pollux/AdaptDL artifact).

A :class:`TraceLibrary` holds, per model, the measured validation curves at each global batch size
(one value per epoch, with the optimizer steps per epoch) and the measured step times of
data-parallel training on one node (replicas 1-4 at several local batch sizes) and over several
nodes (by node and worker count, with the throughput form fitted to all the rows). From them a
:class:`GroundTruth` answers, for one simulated job:

- ``metric(epoch)``: the measured curve, linearly interpolated between epochs;
- ``epoch_seconds(cpu_millis, gpus, placement=(), servers=None)``: the time of one epoch at an allocation
  (``servers``: a parameter-server job's servers in all; see ``GroundTruth.ps``).

  *GPU jobs on one node* (``placement`` empty or one entry): steps per epoch × the measured step
  time with ``gpus`` (× the replicas there) data-parallel workers at the local batch ``batch /
  workers`` (log-log interpolation between measured batches; counts above 4 are not measured and are
  capped at 4).
  *GPU jobs over several nodes* (``placement`` = replicas per node, e.g. ``(4, 4, 2)``, each replica
  ``gpus`` workers): the same with the step time of ``N`` nodes and ``K`` workers in all at the
  local batch ``batch / K``, read from the multi-node rows of ``placements.csv`` (2-4 nodes, 2-16
  workers) and ``scalability.csv`` (6-16 nodes, 6-64 workers). Rows with the same ``N``, ``K`` and
  local batch (placements such as ``(3, 1)`` and ``(2, 2)``, which the tables time 2-4 % apart) are
  one point, their geometric mean, so the truth of a spread is its node and worker counts. A
  ``(N, K)`` the tables never measured (5 nodes; 6 nodes with 9 workers) takes the measured
  ``(N', K')`` nearest in ``|ln N - ln N'| + |ln K - ln K'|`` (ties: more nodes, then more workers,
  the slower side) and scales it by the ratio, at the same local batch, of the Pollux throughput
  form (:mod:`models.placement`) fitted to all the model's rows: measured where measured, the
  fitted form's shape only between and beyond the measured points.
  *CPU jobs*: an Amdahl curve ``T1 · (s / min(c, 1) + (1 − s) / c)`` for ``c`` cores, where ``T1``
  is the measured one-replica epoch time times ``cpu_scale`` and the serial fraction ``s`` is
  fitted to the model's measured replica scaling at that batch.
  *Jobs of known run time* (the scenario's ``duration_seconds``, e.g. a trace's pod lifetime):
  ``duration / epochs`` per epoch at any allocation they can run at; the model gives their curve.

The library reads the CSVs from a data folder (``../shared/data``) or, when none is given, from a
compact copy bundled with the package (``adapters/sim/data/traces.json``, Apache-2.0, built by
``examples/bundle_traces.py``), so the embedded default scenario runs on a fresh machine.
Policies never see any of this: the simulator shows them only noisy metric reports and timings.
"""

from __future__ import annotations

import bisect
import csv
import json
import math
import statistics
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from models.curve_prior import CurvePrior
from models.placement import PlacementParams, predict_steps, table_prior
from models.speed import PSSpeedModel
from models.step_tables import read_placements, read_scalability
from planner.snapshot import Direction

BUNDLED = Path(__file__).resolve().parent / "data" / "traces.json"

#: Metric of each model's validation trace: (metric name, direction, MetricPoint field).
METRICS: dict[str, tuple[str, Direction, str]] = {
    "cifar10": ("accuracy", "higher", "metric"),  # ResNet-18, top-1
    "imagenet": ("accuracy", "higher", "metric"),  # ResNet-50, top-1
    "bert": ("f1", "higher", "metric"),  # SQuAD fine-tuning
    "deepspeech2": ("wer", "lower", "metric"),  # word error rate (%)
    "yolov3": ("loss", "lower", "loss"),  # validation loss
    "ncf": ("hit_rate", "higher", "metric"),  # hit rate
}

MAX_MEASURED_GPUS = 4
#: Significant digits kept of a multi-node step time (a geometric mean of rows 2-4 % apart).
MULTI_DIGITS = 4

#: Step times of one model by (nodes, workers): sorted (local batch, seconds) points.
Table = dict[tuple[int, int], list[tuple[float, float]]]


class TraceError(ValueError):
    """A model or batch size the measured data does not have."""


@dataclass(frozen=True)
class Curve:
    model: str
    batch: int
    steps_per_epoch: float
    values: tuple[float, ...]

    @property
    def epochs(self) -> int:
        return len(self.values)


class TraceLibrary:
    """Measured curves and step times, keyed by model."""

    def __init__(
        self,
        curves: dict[str, dict[int, Curve]],
        steps: dict[str, dict[int, list[tuple[float, float]]]],
        source: str,
        multi: dict[str, Table] | None = None,
        forms: dict[str, PlacementParams] | None = None,
    ):
        self.curves = curves
        self.steps = steps
        self.source = source
        #: Multi-node step times per model, keyed by (nodes, workers) (module docstring).
        self.multi: dict[str, Table] = multi or {}
        #: The Pollux throughput form fitted to each model's rows (for unmeasured (nodes, workers)).
        self.forms: dict[str, PlacementParams] = forms or {}

    # -- loading -----------------------------------------------------------------------------
    @classmethod
    def from_dir(cls, data: Path) -> TraceLibrary:
        traces = Path(data) / "adaptdl-osdi21" / "traces"
        if not traces.is_dir():
            raise TraceError(f"data: no folder {traces} (expected the AdaptDL traces of ../shared/data)")
        curves: dict[str, dict[int, Curve]] = {}
        steps: dict[str, dict[int, list[tuple[float, float]]]] = {}
        multi: dict[str, Table] = {}
        forms: dict[str, PlacementParams] = {}
        for model in sorted(METRICS):
            mdir = traces / model
            curves[model] = {}
            for f in sorted(mdir.glob("validation-*.csv")):
                batch = int(f.stem.split("-")[1])
                its: list[int] = []
                vals: list[float] = []
                with f.open(newline="") as fh:
                    for r in csv.DictReader(fh):
                        it = int(r["iteration"])
                        if its and it == its[-1]:
                            continue  # the bert traces repeat their last row
                        its.append(it)
                        vals.append(float(r["metric"]))
                per_epoch = statistics.median(b - a for a, b in zip([0, *its], its, strict=False))
                curves[model][batch] = Curve(model, batch, float(per_epoch), tuple(vals))
            table: dict[int, list[tuple[float, float]]] = {}
            rows = read_placements(mdir / "placements.csv") + read_scalability(mdir / "scalability.csv")
            groups: dict[tuple[int, int], dict[float, list[float]]] = {}
            for row in rows:
                if row.nodes == 1 and row.table == "placements":
                    table.setdefault(row.replicas, []).append((float(row.local_batch), row.step_seconds))
                elif row.nodes > 1 and math.isfinite(row.step_seconds) and row.step_seconds > 0:
                    per = groups.setdefault((row.nodes, row.replicas), {})
                    per.setdefault(float(row.local_batch), []).append(row.step_seconds)
            steps[model] = {k: sorted(v) for k, v in sorted(table.items())}
            multi[model] = {
                nk: [(b, float(f"{statistics.geometric_mean(ts):.{MULTI_DIGITS}g}")) for b, ts in sorted(by_batch.items())]
                for nk, by_batch in sorted(groups.items())
            }
            forms[model] = table_prior(rows).params
        return cls(curves, steps, str(data), multi, forms)

    @classmethod
    def bundled(cls) -> TraceLibrary:
        raw = json.loads(BUNDLED.read_text())
        curves = {
            m: {int(b): Curve(m, int(b), c["steps_per_epoch"], tuple(c["values"])) for b, c in per.items()}
            for m, per in raw["curves"].items()
        }
        steps = {m: {int(r): [(a, b) for a, b in pts] for r, pts in per.items()} for m, per in raw["steps"].items()}
        multi = {
            m: {_nk(key): [(float(a), float(b)) for a, b in pts] for key, pts in per.items()} for m, per in raw["multi"].items()
        }
        forms = {m: PlacementParams(*p) for m, p in raw["forms"].items()}
        return cls(curves, steps, "bundled copy of the AdaptDL traces (adapters/sim/data/traces.json)", multi, forms)

    @classmethod
    def load(cls, data: Path | None) -> TraceLibrary:
        return cls.bundled() if data is None else cls.from_dir(data)

    def to_json(self) -> str:
        return json.dumps(
            {
                "source": "Pollux/AdaptDL OSDI'21 artifact, simulator/traces (Apache-2.0); see adapters/sim/data/README.md",
                "curves": {
                    m: {str(b): {"steps_per_epoch": c.steps_per_epoch, "values": list(c.values)} for b, c in per.items()}
                    for m, per in self.curves.items()
                },
                "steps": {m: {str(r): [list(p) for p in pts] for r, pts in per.items()} for m, per in self.steps.items()},
                "multi": {
                    m: {f"{n}x{k}": [[int(b), t] for b, t in pts] for (n, k), pts in per.items()} for m, per in self.multi.items()
                },
                "forms": {m: list(p.as_array()) for m, p in self.forms.items()},
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    # -- lookups -----------------------------------------------------------------------------
    def curve(self, model: str, batch: int) -> Curve:
        if model not in self.curves:
            raise TraceError(f"model: unknown model '{model}' (known: {', '.join(sorted(self.curves))})")
        per = self.curves[model]
        if batch not in per:
            measured = ", ".join(map(str, sorted(per)))
            raise TraceError(f"batch_size: no measured curve for {model} at batch {batch} (measured: {measured})")
        return per[batch]

    def step_time(self, model: str, replicas: int, local_batch: float) -> float:
        """Measured step time with ``replicas`` GPUs on one node at ``local_batch`` (log-log interpolated).

        Above the largest measured local batch the batch is split into ``k`` accumulation micro-steps.
        """
        return _interpolate(self.steps[model][replicas], local_batch)

    def multi_step_time(self, model: str, nodes: int, workers: int, local_batch: float) -> float:
        """Step time of ``workers`` data-parallel workers over ``nodes >= 2`` nodes at ``local_batch``:
        the measured (nodes, workers) rows, else the nearest measured ones scaled by the fitted form
        (module docstring)."""
        table = self.multi[model]
        if (nodes, workers) in table:
            return _interpolate(table[(nodes, workers)], local_batch)
        n0, k0 = min(table, key=lambda nk: (abs(math.log(nk[0] / nodes)) + abs(math.log(nk[1] / workers)), -nk[0], -nk[1]))
        anchor = _interpolate(table[(n0, k0)], local_batch)
        form = self.forms[model].as_array()
        b = np.array([float(local_batch)] * 2)
        pred, _ = predict_steps(form, np.array([float(nodes), float(n0)]), np.array([float(workers), float(k0)]), b)
        return anchor * float(pred[0] / pred[1])


def _nk(key: str) -> tuple[int, int]:
    n, k = key.split("x")
    return int(n), int(k)


def _interpolate(pts: list[tuple[float, float]], local_batch: float) -> float:
    """Log-log interpolation of measured (local batch, step seconds) points; below the smallest batch
    the smallest's time; above the largest the batch is split into ``k`` accumulation micro-steps."""
    lo, hi = pts[0][0], pts[-1][0]
    k = 1
    if local_batch > hi:
        k = math.ceil(local_batch / hi)
        local_batch /= k
    b = max(local_batch, lo)
    xs = [p[0] for p in pts]
    i = bisect.bisect_left(xs, b)
    if i < len(xs) and xs[i] == b:
        return k * pts[i][1]
    (x0, y0), (x1, y1) = pts[i - 1], pts[i]
    w = (math.log(b) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return k * math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))


@dataclass(frozen=True)
class GroundTruth:
    """What really happens to one simulated job: its curve and its speed at any allocation."""

    library: TraceLibrary
    model: str
    batch: int
    kind: str  # "cpu" | "gpu"
    cpu_scale: float = 1.0
    #: Seconds per epoch whatever the allocation (a job of known run time, e.g. a trace's pod that
    #: ran ``duration_seconds``), once it can run at all; ``None``: the measured speed below.
    epoch_time: float | None = None
    #: A parameter-server job's (w, s) model (``None``: data-parallel): its epoch time is one worker's
    #: measured epoch times the model's ``t(w, s) / t(1, 1)`` (modelled: no PS timing is measured).
    ps: PSSpeedModel | None = None

    @cached_property
    def curve(self) -> Curve:
        return self.library.curve(self.model, self.batch)

    @property
    def direction(self) -> str:
        return METRICS[self.model][1]

    def metric(self, epoch: float) -> float:
        """The measured value after ``epoch`` epochs (interpolated; clamped to the measured range)."""
        v = self.curve.values
        e = min(max(epoch, 1.0), float(len(v)))
        i = int(math.floor(e)) - 1
        if i >= len(v) - 1:
            return v[-1]
        w = e - (i + 1)
        return v[i] + w * (v[i + 1] - v[i])

    def first_epoch_reaching(self, value: float) -> int | None:
        for i, x in enumerate(self.curve.values):
            if (x >= value) if self.direction == "higher" else (x <= value):
                return i + 1
        return None

    def _gpu_epoch_seconds(self, gpus: int) -> float:
        g = min(max(gpus, 1), MAX_MEASURED_GPUS)
        return self.curve.steps_per_epoch * self.library.step_time(self.model, g, self.batch / g)

    @cached_property
    def serial_fraction(self) -> float:
        """Amdahl serial fraction fitted (least squares, in [0, 1]) to the measured 1-4 replica times."""
        t1 = self._gpu_epoch_seconds(1)
        rs = np.array([r for r in range(1, MAX_MEASURED_GPUS + 1) if r in self.library.steps[self.model]], dtype=float)
        ratio = np.array([self._gpu_epoch_seconds(int(r)) / t1 for r in rs])
        # ratio = s + (1 - s)/r  =>  ratio - 1/r = s (1 - 1/r)
        x = 1.0 - 1.0 / rs
        y = ratio - 1.0 / rs
        s = float(np.dot(x, y) / np.dot(x, x)) if np.dot(x, x) > 0 else 0.0
        return min(max(s, 0.0), 1.0)

    def epoch_seconds(self, cpu_millis: int, gpus: int, placement: tuple[int, ...] = (), servers: int | None = None) -> float:
        """Seconds for one epoch of the whole job at ``cpu_millis`` and ``gpus`` per replica (``inf``
        when it cannot run). ``placement``: the replicas on each node of a GPU job, each replica
        ``gpus`` workers; ``()`` is one replica on one node, as before gangs. CPU jobs run on one node
        (the scenario refuses a spread CPU job); their ``placement`` is not read. A job with an
        ``epoch_time`` takes exactly that wherever it can run (a GPU job with a GPU, a CPU job with
        some CPU)."""
        if self.epoch_time is not None:
            runs = gpus >= 1 if self.kind == "gpu" else cpu_millis > 0
            return self.epoch_time if runs else math.inf
        if self.kind == "gpu":
            if gpus < 1:
                return math.inf
            used = [k for k in placement if k > 0]
            if self.ps is not None:  # ``servers`` in all (None: one on each node)
                n_w = gpus * max(sum(used), 1)
                n_s = max(servers if servers is not None else len(used), 1)
                return self._gpu_epoch_seconds(1) * self.ps.seconds_per_epoch(n_w, n_s) / self.ps.seconds_per_epoch(1, 1)
            if len(used) <= 1:
                return self._gpu_epoch_seconds(gpus * (used[0] if used else 1))
            workers = gpus * sum(used)
            step = self.library.multi_step_time(self.model, len(used), workers, self.batch / workers)
            return self.curve.steps_per_epoch * step
        c = cpu_millis / 1000.0
        if c <= 0:
            return math.inf
        t1 = self._gpu_epoch_seconds(1) * self.cpu_scale
        s = self.serial_fraction
        return t1 * (s / min(c, 1.0) + (1.0 - s) / c)


def task_name(model: str, batch: int) -> str:
    """The ``Job.task`` a simulated job reports: its model and batch size."""
    return f"{model}/bs{batch}"


def history_priors(library: TraceLibrary) -> dict[str, CurvePrior]:
    """What a cluster that has trained these models before knows: for each task (model, batch size),
    the measured curves of the *same model at the other batch sizes* (never the task's own curve)."""
    out: dict[str, CurvePrior] = {}
    for model, per in library.curves.items():
        for batch in per:
            others = [(np.arange(1, c.epochs + 1, dtype=float), np.array(c.values)) for b, c in sorted(per.items()) if b != batch]
            if others:
                out[task_name(model, batch)] = CurvePrior.of(others, same_task=True)
    return out
