"""Training progress from an MLflow tracking server, read incrementally over its REST API.

Teams that already log to MLflow tag each run with the FlowPlan job id (``flowplan.job=<job id>``;
``mlflow.set_tag("flowplan.job", "<the container's flowplan.job label>")``) and FlowPlan reads the metrics from
there; nothing in the training image changes otherwise. Calls, all on the 2.0 REST API:

- ``POST /api/2.0/mlflow/experiments/search``: every experiment (runs are searched per experiment);
- ``POST /api/2.0/mlflow/runs/search`` with the filter ``tags.`flowplan.job` = '<job id>'``: the
  job's runs (several when it was restarted under a new run) and each metric's latest value;
- ``GET /api/2.0/mlflow/metrics/get-history`` per (run, metric key): the metric's whole history.

MLflow has no "since" on a history, so a :class:`MlflowCursor` remembers, per run and key, the last
(step, timestamp) read: a key whose latest value is that one is not fetched at all, and of a fetched
history only the values past it are kept. A value logged later at a smaller step (a job that went
back to a checkpoint under the same run) is therefore not read again; the store keeps one point per
epoch anyway.

How values become the snapshot's points (:class:`LogPoint`, the meaning in :mod:`adapters.logs.points`):
values are grouped per run by ``step``; ``epoch`` is the ``epoch`` metric at that step, else the
step divided by ``steps_per_epoch`` when the caller declared it (a step that has neither is counted
in ``unplaced``); a run whose first epoch (or step) is 0 counts from 0 and is shifted by one, as
``flowplan logs`` does for logs; ``loss`` is the first of :attr:`MetricKeys.loss` present at the
step, ``metric`` the first of :attr:`MetricKeys.metric`; ``time`` the value's timestamp (Unix s).

The HTTP client is the standard library's (``urllib``): FlowPlan gains no dependency for this and
the ``mlflow`` package is needed only by the tests. Failures come back as :class:`MlflowError`
with one line naming the server and what failed.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from adapters.logs.points import LogPoint, finite, number, points_by_step

#: The tag a run carries to say which FlowPlan job it is.
JOB_TAG = "flowplan.job"
PAGE = 1000


class MlflowError(Exception):
    """The tracking server could not be read: unreachable, an HTTP error, or an answer that is not its JSON."""


@dataclass(frozen=True)
class MetricKeys:
    """Which MLflow metric keys mean what (the first key present at a step wins)."""

    epoch: str = "epoch"
    loss: tuple[str, ...] = ("loss", "train_loss")
    metric: tuple[str, ...] = ("val_accuracy", "accuracy")

    def all(self) -> tuple[str, ...]:
        return (self.epoch, *self.loss, *self.metric)


@dataclass
class MlflowCursor:
    """Where reading each run left off: ``seen[run][key] = [step, timestamp]`` of the last value read,
    and ``base[run]`` 0 or 1: whether the run counts its epochs (or steps) from 0 or from 1."""

    seen: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    base: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "base": self.base}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> MlflowCursor:
        if not isinstance(d, dict):
            return cls()
        seen = d.get("seen") if isinstance(d.get("seen"), dict) else {}
        base = d.get("base") if isinstance(d.get("base"), dict) else {}
        return cls(seen=dict(seen or {}), base={str(k): int(v) for k, v in (base or {}).items() if v in (0, 1)})


@dataclass
class MlflowRead:
    """What one read found: new points (sorted by epoch), the runs tagged with the job, steps not placed."""

    points: list[LogPoint]
    runs: list[str]
    unplaced: int = 0


class MlflowClient:
    """A tracking server's REST API, the few calls FlowPlan needs (``uri``: ``http://host:port``)."""

    def __init__(self, uri: str, *, timeout: float = 10.0) -> None:
        parsed = urllib.parse.urlsplit(uri)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"mlflow: tracking URI {uri!r} is not an http(s)://host:port address")
        self.uri = uri.rstrip("/")
        self.timeout = timeout

    def _call(self, path: str, *, body: dict[str, Any] | None = None, query: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"{self.uri}/api/2.0/mlflow/{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                text = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode("utf-8", "replace").strip()
            raise MlflowError(f"mlflow server {self.uri}: {path} answered HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise MlflowError(f"mlflow server {self.uri} unreachable: {reason}") from None
        try:
            doc = json.loads(text or b"{}")
        except ValueError:
            raise MlflowError(f"mlflow server {self.uri}: {path} answered something that is not JSON") from None
        if not isinstance(doc, dict):
            raise MlflowError(f"mlflow server {self.uri}: {path} answered JSON that is not an object")
        return doc

    def experiment_ids(self) -> list[str]:
        ids: list[str] = []
        token = None
        while True:
            body: dict[str, Any] = {"max_results": PAGE, **({"page_token": token} if token else {})}
            doc = self._call("experiments/search", body=body)
            ids += [str(e["experiment_id"]) for e in doc.get("experiments", []) if isinstance(e, dict) and "experiment_id" in e]
            token = doc.get("next_page_token")
            if not token:
                return ids

    def job_runs(self, job_id: str) -> list[dict[str, Any]]:
        """The runs tagged ``flowplan.job=<job_id>``, oldest first."""
        if "'" in job_id or "`" in job_id:
            raise ValueError(f"mlflow: job id {job_id!r} has a quote, which an MLflow filter cannot hold")
        experiments = self.experiment_ids()
        if not experiments:
            return []
        runs: list[dict[str, Any]] = []
        token = None
        while True:
            body: dict[str, Any] = {
                "experiment_ids": experiments,
                "filter": f"tags.`{JOB_TAG}` = '{job_id}'",
                "max_results": PAGE,
                **({"page_token": token} if token else {}),
            }
            doc = self._call("runs/search", body=body)
            runs += [r for r in doc.get("runs", []) if isinstance(r, dict) and isinstance(r.get("info"), dict)]
            token = doc.get("next_page_token")
            if not token:
                return sorted(runs, key=lambda r: (number(r["info"].get("start_time")) or 0.0, str(r["info"].get("run_id"))))

    def history(self, run_id: str, key: str) -> list[dict[str, Any]]:
        values: list[dict[str, Any]] = []
        token = None
        while True:
            query = {"run_id": run_id, "metric_key": key, "max_results": 25000, **({"page_token": token} if token else {})}
            doc = self._call("metrics/get-history", query=query)
            values += [m for m in doc.get("metrics", []) if isinstance(m, dict)]
            token = doc.get("next_page_token")
            if not token:
                return values


def _mark(m: dict[str, Any]) -> list[int]:
    return [int(number(m.get("step")) or 0), int(number(m.get("timestamp")) or 0)]


def read_job(
    client: MlflowClient,
    job_id: str,
    cursor: MlflowCursor,
    *,
    keys: MetricKeys = MetricKeys(),
    steps_per_epoch: float | None = None,
) -> tuple[MlflowRead, MlflowCursor]:
    """The points the job's runs logged since ``cursor``, and the advanced cursor (``cursor`` is not changed)."""
    seen = {run: dict(k) for run, k in cursor.seen.items()}
    base = dict(cursor.base)
    out = MlflowRead(points=[], runs=[])
    for run in client.job_runs(job_id):
        run_id = str(run["info"].get("run_id") or run["info"].get("run_uuid"))
        out.runs.append(run_id)
        latest = {m.get("key"): m for m in (run.get("data") or {}).get("metrics", []) if isinstance(m, dict)}
        by_step: dict[int, dict[str, tuple[float, float]]] = {}  # step -> key -> (value, time)
        run_seen = seen.setdefault(run_id, {})
        for key in keys.all():
            if key not in latest or _mark(latest[key]) == run_seen.get(key):
                continue  # nothing new under this key: its history is not fetched
            last = run_seen.get(key)
            for m in client.history(run_id, key):
                mark = _mark(m)
                value = finite(number(m.get("value")))
                if (last is not None and mark <= last) or value is None:
                    continue
                by_step.setdefault(mark[0], {})[key] = (value, mark[1] / 1000.0)
                run_seen[key] = max(run_seen.get(key, mark), mark)
        points, unplaced, run_base = points_by_step(
            by_step,
            epoch_keys=(keys.epoch,),
            loss_keys=keys.loss,
            metric_keys=keys.metric,
            base=base.get(run_id),
            steps_per_epoch=steps_per_epoch,
            fmt="mlflow",
        )
        out.points += points
        out.unplaced += unplaced
        if run_base is not None:
            base[run_id] = run_base
    out.points.sort(key=lambda p: (p.epoch, p.time or 0.0))
    return out, MlflowCursor(seen=seen, base=base)
