"""Made-up training for the sandbox's pods (``flowplan sandbox train``), from measured curves.

kwok's fake kubelets run no container, so a pod in the sandbox makes no progress of its own. This
plays each FlowPlan pod's training from the measured curves the simulator uses (the AdaptDL traces,
:mod:`adapters.sim.truth`):

- a pod bound to a node advances at the measured speed of its model at the CPU it is guaranteed
  (its request, which the daemon resizes in place), ``speedup`` times faster than real time;
- each whole epoch becomes a progress point in the state store, as the service's HTTP ingest would
  store a job's report (the daemon given the same ``--state`` reads it);
- a pod that reaches its last epoch (its ``flowplan.io/target.max_epochs``, else the end of the
  measured curve) is marked ``Succeeded``;
- a pod replaced by a migration resumes from its last whole epoch: the work since is lost, as
  after a checkpoint-restart.

The model is the pod's ``sandbox.flowplan.io/model`` annotation (``cifar10/128``: model and batch
size, as measured), or one of the four CPU models picked by the pod's name. This is a stand-in for
real jobs, for trying FlowPlan on the sandbox; a real job reports through the SDK or its logs.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from adapters.kubernetes.annotations import JOB_LABEL
from adapters.kubernetes.pods import pod_view
from adapters.sim.truth import METRICS, GroundTruth, TraceError, TraceLibrary
from planner.snapshot import MetricPoint

#: Which measured run a pod plays: ``model/batch``.
MODEL_ANNOTATION = "sandbox.flowplan.io/model"
#: The CPU models of the simulator's examples and a batch size each was measured at.
CPU_MODELS = ("cifar10/128", "deepspeech2/20", "yolov3/8", "ncf/256")


class SandboxTrainError(ValueError):
    """A pod names a model or batch the measured data does not have (the message names both)."""


def model_of(job: str, annotations: dict[str, str]) -> tuple[str, int]:
    """The (model, batch) a pod plays: its annotation, else one of :data:`CPU_MODELS` by its name."""
    text = annotations.get(MODEL_ANNOTATION) or CPU_MODELS[zlib.crc32(job.encode()) % len(CPU_MODELS)]
    model, _, batch = text.partition("/")
    if not batch.isdigit():
        raise SandboxTrainError(f"annotation {MODEL_ANNOTATION}: expected MODEL/BATCH (e.g. cifar10/128), got {text!r}")
    return model, int(batch)


def target_for(model: str, batch: int, epochs: int, library: TraceLibrary | None = None) -> dict[str, str]:
    """``flowplan.io/target.*`` annotations for a pod playing (model, batch) for ``epochs`` epochs:
    the model's own metric, tier 1 at what the measured run had reached at 60 % of them."""
    truth = GroundTruth(library or TraceLibrary.bundled(), model, batch, "cpu")
    name, direction, field = METRICS[model]
    tier1 = truth.metric(max(1.0, 0.6 * min(epochs, truth.curve.epochs)))
    return {
        "flowplan.io/target.metric": "loss" if field == "loss" else name,
        "flowplan.io/target.direction": direction,
        "flowplan.io/target.tier1": f"{tier1:.4g}",
        "flowplan.io/target.max_epochs": str(epochs),
    }


@dataclass
class _Playing:
    truth: GroundTruth
    uid: str
    epoch: float
    last: float
    end: float


class SandboxTrainer:
    """Advances the sandbox's FlowPlan pods, one :meth:`step` at a time (each returns what changed)."""

    def __init__(
        self,
        api: Any,
        store: Any,
        namespace: str = "default",
        speedup: float = 30.0,
        library: TraceLibrary | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.store = store
        self.namespace = namespace
        self.speedup = speedup
        self.library = library or TraceLibrary.bundled()
        self.clock = clock
        self.playing: dict[str, _Playing] = {}
        self.finished: set[str] = set()
        self.refused: dict[str, str] = {}

    def _pods(self) -> list[dict[str, Any]]:
        resp = self.api.list_namespaced_pod(self.namespace, label_selector=JOB_LABEL, _preload_content=False)
        return list(json.loads(resp.data).get("items") or [])

    def step(self) -> list[str]:
        now = self.clock()
        said: list[str] = []
        for raw in self._pods():
            view = pod_view(raw)
            job = view.labels.get(JOB_LABEL, "")
            if not job or view.node is None or view.deleting or view.phase in ("Succeeded", "Failed"):
                continue
            p = self.playing.get(job)
            if p is None or p.uid != view.uid:
                p = self._start(job, view, now, said)
                if p is None:
                    continue
            said += self._advance(job, view, p, now)
        return said

    def _start(self, job: str, view: Any, now: float, said: list[str]) -> _Playing | None:
        try:
            model, batch = model_of(job, view.annotations)
            truth = GroundTruth(self.library, model, batch, "cpu")
            truth.curve  # noqa: B018  (raises TraceError for a batch not measured)
        except (SandboxTrainError, TraceError) as exc:
            if self.refused.get(job) != str(exc):
                self.refused[job] = str(exc)
                said.append(f"{job}: left alone: {exc}")
            return None
        done = max((pt.epoch for pt in self.store.history(job)), default=0.0)
        planned = view.annotations.get("flowplan.io/target.max_epochs")
        end = float(truth.curve.epochs)
        if planned is not None:
            try:
                end = min(end, max(1.0, float(planned)))
            except ValueError:
                pass  # the adapter reports a bad annotation; the measured run's length stands
        p = _Playing(truth, view.uid, math.floor(done), now, end)
        self.playing[job] = p
        where = f"resumes at epoch {p.epoch:g}" if p.epoch else "starts"
        said.append(f"{job}: plays {model}/{batch} on {view.node}, {where} ({end:g} epochs)")
        return p

    def _advance(self, job: str, view: Any, p: _Playing, now: float) -> list[str]:
        cpu = view.cpu_request or 1
        seconds = p.truth.epoch_seconds(cpu, view.gpus)
        dt, p.last = max(0.0, now - p.last), now
        if not math.isfinite(seconds) or seconds <= 0:
            return []
        new = min(p.end, p.epoch + dt * self.speedup / seconds)
        field = METRICS[p.truth.model][2]
        points = [
            MetricPoint(time=now, epoch=float(k), **{field: p.truth.metric(float(k))})
            for k in range(math.floor(p.epoch) + 1, math.floor(new) + 1)
        ]
        p.epoch = new
        said: list[str] = []
        if points:
            self.store.add_points(job, points)
            last = points[-1]
            value = last.loss if field == "loss" else last.metric
            name = METRICS[p.truth.model][0]
            said.append(f"{job}: epoch {last.epoch:g}/{p.end:g} at {cpu}m on {view.node}: {name} {value:.4g}")
        if new >= p.end:
            self.api.patch_namespaced_pod_status(view.name, view.namespace, {"status": {"phase": "Succeeded"}})
            self.finished.add(job)
            del self.playing[job]
            said.append(f"{job}: done ({p.end:g} epochs): pod {view.name} Succeeded")
        return said
