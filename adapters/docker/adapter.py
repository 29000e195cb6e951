"""The Docker adapter: Docker hosts as FlowPlan nodes, labelled containers as jobs.

What it assumes (read before relying on it):

- **One container per job, or a gang.** A job is a container with a ``flowplan.job`` label
  (:mod:`adapters.docker.labels`). A job whose labels declare ``flowplan.replicas`` above 1 is a gang:
  that container is its rank 0 and the template of the others, which the adapter creates on the
  hosts the plan names, with the rendezvous variables (:mod:`adapters.docker.gangs`). Several rank-0
  containers with the same job id happen only after an interrupted migration or a host that came
  back; :meth:`DockerAdapter.observe` then uses the running one (or the newest) and
  :meth:`DockerAdapter.reconcile` removes the others.
- **Container state is the job state.** ``running``/``paused`` → running; ``created`` → pending (a
  submitted job waiting to be placed); exited with 75 (checkpointed, see ``examples/jobs``), 143 or 137
  (stopped by a signal) → pending again; exited with 0 → finished; any other exit → finished, and the
  reason is logged.
- **Checkpoints live on a volume every host mounts at the same path** (NFS, or one directory when
  the engines share a machine, as in the tests). The adapter never copies checkpoints itself.
- **The same image exists on every host** (a registry, or ``docker load`` on each). A migration to a
  host without it fails with ``not_found`` and the job restarts where it was.
- **Eventual consistency, partial failure.** Each change is carried out on its own; a failure is an
  :class:`~adapters.base.Outcome` with an error kind, never an exception, and the next interval
  observes the result and plans again. Changes are idempotent: repeating one that already took
  effect is a no-op that reports ``ok``. A change for a job in another state than its action
  starts from (a start of a running container, a migration or resize of a stopped one) is a
  ``conflict`` and changes nothing (the contract: :mod:`adapters.base`, ``docs/adapters.md``); a
  resize or move of a job that finished (exited 0) since the observe is moot, ok with nothing
  changed, as a deliver then records its final model.

Migration (and every re-create: a GPU change, a start on another host): SIGTERM asks the job to
checkpoint and exit; the adapter waits up to ``checkpoint_timeout`` seconds. If the job does not exit
in time, nothing else happens (it keeps running: an error of kind ``transient``). Then the container
is created on the target with the same image, command, environment, mounts and labels and started;
only then is the old one removed. If creating or starting fails, the new container is removed and
the old one started again where it was (it resumes from its checkpoint). So a job is never running
twice, and never left stopped by a failure the adapter can still act on.

CPU: a planned ``cpu_millis`` is a *guaranteed share*, applied as a weight (``CpuShares``, 1024 per
core), so a core other jobs leave idle flows to whoever can use it. A hard cap (a CFS quota) is set
only where a cap is the point: a planned ``cpu_limit_millis``, or the job's own declared maximum
(the ``flowplan.max_cpu_millis`` label) when it is below the host's cores. ``observe`` reports the
guarantee from ``CpuShares`` and the cap from the quota (``None`` when there is none, or it is the
job's own maximum), so observe → plan → diff comes back to the same figures and changes nothing.

A host whose engine cannot be reached is a node with ``schedulable: false`` and the label
``flowplan.io/down`` (the error). After ``down_grace`` seconds its migratable jobs are reported as
pending (from the container specification remembered when they were last seen), so the planner can
start them elsewhere; the others are left out. Unmanaged containers (bad labels) are named in their
host's node labels, ``flowplan.io/unmanaged.<container>``: the reason, and in the log.
"""

from __future__ import annotations

import logging
import math
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from adapters.base import Adapter, Change, Clock, Outcome, WallClock, apply_each, finished_before, refuse_fractions
from adapters.docker.engine import (
    DEFAULT_SHARES,
    ContainerView,
    Host,
    HostSpec,
    effective_cap,
    ended_ok,
    recreate_spec,
    shares_for,
    view,
)
from adapters.docker.errors import DockerAdapterError, LabelError
from adapters.docker.gangs import GangOps
from adapters.docker.gpu import gpu_request
from adapters.docker.labels import JobLabels, parse_labels
from adapters.docker.memory import MemoryStore, ProgressStore
from adapters.docker.progress import LogProgress, curve_priors, kv_json, parse_timestamp, set_kv_json, to_seconds
from adapters.docker.ranks import broken, is_gang, is_member, member_of, shares_of, split_members
from adapters.logs import Declaration
from adapters.logs.mlflow import MlflowClient
from planner.snapshot import (
    Allocation,
    Job,
    JobStatus,
    MetricPoint,
    Node,
    QoETarget,
    Settings,
    Share,
    Snapshot,
    SpeedPoint,
    SpeedPrior,
)
from store import PRIOR_MIN_EPOCHS, declared_json

log = logging.getLogger("flowplan.docker")

#: Exit codes after which a job can resume from its checkpoint (75 = EX_TEMPFAIL, "checkpointed").
RESUMABLE_EXITS = (75, 137, 143)
#: Container states in which the job is running (observed as ``running``).
RUNNING_STATES = ("running", "paused", "restarting")
DOWN_LABEL = "flowplan.io/down"
UNMANAGED_PREFIX = "flowplan.io/unmanaged."
MAX_CPU_LABEL = "flowplan.max_cpu_millis"
#: Speed points are kept per CPU actually used, rounded to this many millicores.
SPEED_GRID_MILLIS = 50
#: Bar rates kept per container until stats samples can pair them with the CPU used.
MAX_RATES = 50
#: CPU-time samples kept per container (one per observe) to pair epochs with the CPU they used.
SPEED_SAMPLES = 200
#: An engine event about a container the adapter started, stopped, created or removed this recently
#: (seconds after the call returned) is the adapter's own doing (:meth:`DockerAdapter.own_event`).
OWN_EVENT_GRACE = 2.0
#: A container asked to deliver (SIGUSR1) is not asked again for this long while its log has not yet
#: said it delivered (the SDK saves the model at its next step; every plan until then asks again,
#: and each ask would save it once more): asked again after it, in case the signal was missed.
DELIVER_REASK_SECONDS = 60.0
#: A container (re)started this recently that has printed nothing since is not signalled yet: its
#: process may not have set its SIGUSR1 handler, and a signal before that is lost (PID 1 of a
#: container drops a signal it has no handler for; under an init process it would end the job).
#: Found on the real-engine demo: a job started and asked to deliver in the same plan never
#: delivered, and was not asked again for a minute. After this long it is asked anyway (a job may
#: report through MLflow or TensorBoard only, and print nothing).
DELIVER_START_GRACE_SECONDS = 30.0


@dataclass
class Placed:
    """Where a job's container (a gang's rank 0) is, as last observed; a gang's other replicas in ``members``."""

    host: str
    container: ContainerView
    labels: JobLabels
    duplicates: list[tuple[str, ContainerView]] = field(default_factory=list)
    #: A gang's replicas of rank 0's generation, rank order (:mod:`adapters.docker.gangs`).
    members: list[tuple[str, ContainerView]] = field(default_factory=list)
    #: Replicas of another generation, or of a gang whose rank 0 is gone: to remove.
    stale: list[tuple[str, ContainerView]] = field(default_factory=list)


@dataclass
class Observation:
    """Everything :meth:`DockerAdapter.observe` learned besides the snapshot itself."""

    placed: dict[str, Placed] = field(default_factory=dict)
    unmanaged: dict[str, str] = field(default_factory=dict)  # "host/container" -> reason
    down: dict[str, str] = field(default_factory=dict)  # host -> error
    cpu_usage: dict[str, float] = field(default_factory=dict)  # job -> cores used over the last interval
    failed: dict[str, int] = field(default_factory=dict)  # job -> exit code
    broken: dict[str, str] = field(default_factory=dict)  # gang job -> why it is not whole (left out; reconciled)
    orphans: dict[str, list[tuple[str, ContainerView]]] = field(default_factory=dict)  # job -> replicas, no rank 0 seen


class DockerAdapter(Adapter):
    """Observe and change jobs on one or more Docker hosts (see the module docstring for what it assumes)."""

    def __init__(
        self,
        hosts: Sequence[HostSpec],
        *,
        store: ProgressStore | None = None,
        clock: Clock | None = None,
        settings: Settings | None = None,
        checkpoint_timeout: float = 60.0,
        down_grace: float = 60.0,
        read_stats: bool = True,
        timeout: float = 10.0,
        scope: Mapping[str, str] | None = None,
        mlflow: str | None = None,
    ) -> None:
        names = [h.name for h in hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"hosts: duplicate host name in {names}")
        self.hosts = {h.name: Host(h, timeout=timeout) for h in hosts}
        self.store: ProgressStore = store if store is not None else MemoryStore()
        self.clock = clock or WallClock()
        self.settings = settings or Settings()
        self.checkpoint_timeout = checkpoint_timeout
        self.down_grace = down_grace
        self.read_stats = read_stats
        #: Only ``flowplan.job`` containers carrying every one of these labels are this adapter's;
        #: the others belong to another daemon and are left alone (not observed, never changed).
        self.scope = dict(scope or {})
        self._unmanaged_said: dict[str, str] = {}  # "host/container" -> the reason already logged
        self._failed_said: dict[str, str] = {}  # job -> the failed container already logged
        self.last = Observation()
        self._info: dict[str, dict[str, Any]] = {}
        self._down_since: dict[str, float] = {}
        #: What the containers' logs said (points, declarations, deliveries), under ``docker.*`` keys.
        self.progress = LogProgress(self.store, "docker", log)
        #: An MLflow tracking server whose runs tagged ``flowplan.job=<id>`` also give jobs' progress.
        self.mlflow = MlflowClient(mlflow, timeout=5.0) if mlflow else None
        self._mlflow_ok = True  # False once the server failed this observe: the other jobs skip it
        self._usage: dict[str, list[tuple[float, float]]] = {}  # container id -> recent (time, cpu seconds) samples
        self._last_used: dict[str, float] = {}  # container id -> cores used over its latest measured window (status)
        self._rates: dict[str, list[tuple[float, float]]] = {}  # container id -> (time, s/epoch) its bars showed, not yet used
        self._speed_done: dict[str, float] = {}  # container id -> end of the last epoch counted in a speed point
        self._speeds_recorded: dict[str, tuple[Any, ...]] = {}  # job -> what record_speeds last got (unchanged: not written)
        self._drained: set[str] = set()
        self._touched: dict[str, float] = {}  # container id -> time.monotonic() when a call of ours on it returned
        self._stats_pool: Any = None  # a ThreadPoolExecutor, made at the first stats request
        self._stats_pending: dict[str, Any] = {}  # container id -> the Future of its next stats sample
        self._broken_said: dict[str, str] = {}  # gang job -> why it is broken, as last logged
        self._tensorboard_said: dict[str, str] = {}  # job -> why its event files were not (all) read, as last logged
        self._deliver_asked: dict[str, tuple[str, float]] = {}  # job -> (container id, clock time) of the last SIGUSR1
        self.gangs = GangOps(self)

    # -- persistent per-job state (in the store's key-value table) ------------------------------

    def _kv_json(self, key: str) -> Any:
        return kv_json(self.store, key)

    def _set_kv_json(self, key: str, value: Any) -> None:
        set_kv_json(self.store, key, value)

    # -- observe ---------------------------------------------------------------------------------

    def observe(self) -> Snapshot:
        """The hosts now: one node per host, one job per labelled container (see the module docstring)."""
        now = self.clock.now()
        obs = Observation()
        self._mlflow_ok = True
        nodes: list[Node] = []
        found: dict[str, list[tuple[str, ContainerView, JobLabels]]] = {}  # rank 0 (or a single container)
        others: dict[str, list[tuple[str, ContainerView]]] = {}  # a gang's other ranks
        for name, host in self.hosts.items():
            node_labels: dict[str, str] = {}
            try:
                if name not in self._info:
                    self._info[name] = host.info()
                containers = host.job_containers()
                self._down_since.pop(name, None)
            except DockerAdapterError as exc:
                host.close()
                self._down_since.setdefault(name, now)
                obs.down[name] = f"{exc.kind}: {exc.message}"
                log.warning("host %s is unavailable: %s", name, obs.down[name])
                nodes.append(self._node(name, {DOWN_LABEL: obs.down[name][:200]}, schedulable=False))
                continue
            for c in containers:
                if any(c.labels.get(k) != v for k, v in self.scope.items()):
                    continue  # another daemon's job
                try:
                    parsed = parse_labels(c.labels, created=c.created)
                    member = is_member(c.labels)
                except LabelError as exc:
                    obs.unmanaged[f"{name}/{c.name}"] = str(exc)
                    node_labels[UNMANAGED_PREFIX + c.name] = str(exc)[:200]
                    if self._unmanaged_said.get(f"{name}/{c.name}") != str(exc):  # once per container and reason
                        self._unmanaged_said[f"{name}/{c.name}"] = str(exc)
                        log.warning("container %s on %s is unmanaged: %s", c.name, name, exc)
                    continue
                if parsed is None or c.state in ("removing", "dead"):
                    continue
                if member:
                    others.setdefault(parsed.job_id, []).append((name, c))
                else:
                    found.setdefault(parsed.job_id, []).append((name, c, parsed))
            nodes.append(self._node(name, node_labels, schedulable=True))

        for job_id in sorted(found):
            placed = obs.placed[job_id] = self._primary(found[job_id])
            placed.members, placed.stale = split_members(placed.container, others.pop(job_id, []))
        obs.orphans = others
        if self.read_stats:  # before the logs are read: a speed point pairs the epochs and the CPU of one window
            self._read_cpu_usage(obs)
        jobs: list[Job] = []
        for job_id in sorted(found):
            job = self._job(obs.placed[job_id], obs, now)
            if job is not None:
                jobs.append(job)
        jobs.extend(self._jobs_of_down_hosts(obs, set(found), now))
        for job_id in [j for j in obs.orphans if j in obs.placed]:  # rank 0's host is down: a new gang replaces them
            obs.placed[job_id].stale.extend(obs.orphans.pop(job_id))
        self.last = obs
        return Snapshot(time=now, nodes=nodes, jobs=jobs, settings=self.settings, curve_priors=curve_priors(self.store, jobs))

    def _node(self, name: str, labels: dict[str, str], *, schedulable: bool) -> Node:
        spec = self.hosts[name].spec
        info = self._info.get(name, {})
        cpu = spec.cpu_millis if spec.cpu_millis is not None else int(info.get("NCPU", 0)) * 1000
        mem = int(info.get("MemTotal", 0)) // 2**20
        return Node(name=name, cpu_millis=cpu, gpus=spec.gpus, memory_mib=mem, labels=labels, schedulable=schedulable)

    @staticmethod
    def _primary(candidates: list[tuple[str, ContainerView, JobLabels]]) -> Placed:
        """The container that is the job: the running one (newest start first), else the newest created."""

        def rank(t: tuple[str, ContainerView, JobLabels]) -> tuple[int, float]:
            c = t[1]
            return (
                1 if c.state in ("running", "paused", "restarting") else 0,
                c.started or c.created if c.state == "running" else c.created,
            )

        ordered = sorted(candidates, key=rank, reverse=True)
        host, c, labels = ordered[0]
        return Placed(host, c, labels, [(h, o) for h, o, _ in ordered[1:]])

    def _status(self, c: ContainerView) -> JobStatus:
        if c.state in ("running", "paused", "restarting"):
            return "running"
        if c.state == "created":
            return "pending"
        return "pending" if c.exit_code in RESUMABLE_EXITS else "finished"

    def _job(self, placed: Placed, obs: Observation, now: float) -> Job | None:
        c, host = placed.container, placed.host
        job_id = placed.labels.job_id
        status = self._status(c)
        gang = is_gang(placed.labels.fields)
        if gang and status == "running":
            why = broken(host, c, placed.members, placed.labels.fields)
            if why is not None:  # left out; reconcile stops it with a checkpoint, the next plan starts it whole
                obs.broken[job_id] = why
                if self._broken_said.get(job_id) != why:
                    self._broken_said[job_id] = why
                    log.warning("job %s: its gang is broken (%s): left out, stopped with a checkpoint", job_id, why)
                return None
        shares = shares_of(host, placed.members) if gang and status == "running" else None
        failure = None
        if status == "finished" and c.exit_code != 0:
            obs.failed[job_id] = c.exit_code
            oom = bool((c.raw.get("State") or {}).get("OOMKilled"))
            failure = f"exit {c.exit_code}" + (" (OOMKilled)" if oom else "")
            if self._failed_said.get(job_id) != c.id:  # once per container, not at every observe while it stays
                self._failed_said[job_id] = c.id
                log.warning("job %s: container %s exited with %d (counted as finished)", job_id, c.name, c.exit_code)
        self._remember(job_id, host, c)
        self._read_progress(job_id, host, c, placed.labels.steps_per_epoch)
        self._read_tensorboard(job_id, host, c, placed.labels)
        if self.mlflow is not None and self._mlflow_ok and c.state != "created":
            self._mlflow_ok = self.progress.read_mlflow(job_id, self.mlflow, steps_per_epoch=placed.labels.steps_per_epoch)
        fields = dict(placed.labels.fields)
        history = self.store.history(job_id)
        ps = member_of(c.labels).servers if "servers" in placed.labels.fields else None
        speed = self._speeds(job_id, c, history, status, shares, ps)
        image = _image(c)
        delivered = self.progress.delivered(job_id)
        fields["target"] = self._with_declared(job_id, fields.get("target"))
        fields["schedule"] = self._declared_schedule(job_id, fields["target"])
        target = fields["target"]
        declared = declared_json(fields["schedule"], target.max_epochs if target is not None else None)
        self._record_speeds(job_id, fields.get("task"), image, speed, history, finished=status == "finished", declared=declared)
        allocation = self._allocation(host, c, fields) if status == "running" else None
        if allocation is not None and ps:
            allocation = allocation.model_copy(update={"servers": ps // len(shares or ((host, 1),))})
        # The latest measured window (a sample comes at the engine's 1 s tick, not at every observe).
        used = obs.cpu_usage.get(job_id, self._last_used.get(c.id)) if status == "running" else None
        return Job(
            id=job_id,
            status=status,
            image=image,
            node=host if status == "running" else None,
            allocation=allocation,
            started=c.started if status == "running" else None,
            cpu_used_millis=None if used is None else round(used * 1000.0, 1),
            history=list(history),
            speed=speed,
            speed_prior=self._speed_prior(job_id, fields.get("task"), image) if not speed and status != "finished" else None,
            delivered=delivered,
            failure=failure,
            placement=_placement(shares, fields.get("replicas", 1)),
            **fields,
        )

    def _record_speeds(
        self,
        job_id: str,
        task: str | None,
        image: str | None,
        speed: list[SpeedPoint],
        history: Sequence[MetricPoint],
        *,
        finished: bool,
        declared: str | None = None,
    ) -> None:
        """Keep the job's speed points with its task and image in the store, for later jobs to borrow
        (:meth:`ProgressStore.record_speeds`). Written when something a borrower reads changes: the
        points, the task or image, finishing, or passing the epochs a running job needs to lend. A job
        that finished without speed points is recorded too: its curve lends (:meth:`ProgressStore.task_curves`)."""
        if not speed and not (finished and history):
            return
        epochs = max((p.epoch for p in history), default=0.0)
        key = (tuple(speed), task, image, finished, epochs >= PRIOR_MIN_EPOCHS, declared)
        if self._speeds_recorded.get(job_id) == key:
            return
        self.store.record_speeds(job_id, speed, task=task, image=image, epochs=epochs, finished=finished, schedule=declared)
        self._speeds_recorded[job_id] = key

    def _speed_prior(self, job_id: str, task: str | None, image: str | None) -> SpeedPrior | None:
        """Speeds of similar jobs for a job with none of its own (:meth:`ProgressStore.speed_prior`): the
        planner uses them until the job's own speed is observed."""
        if task is None and image is None:
            return None
        return self.store.speed_prior(task=task, image=image, exclude=job_id)

    def declared(self, job_id: str) -> Declaration | None:
        """What the job declared in its log (``{"event": "declare", ...}``: ``flowplan.sdk.init``), kept in the store.

        The schedule becomes the snapshot job's ``schedule`` (validated: :meth:`_declared_schedule`).
        """
        return self.progress.declared(job_id)

    def _keep_declared(self, job_id: str, events: list[dict[str, Any]]) -> None:
        self.progress.keep_declared(job_id, events)

    def _with_declared(self, job_id: str, target: QoETarget | None) -> QoETarget | None:
        return self.progress.with_declared(job_id, target)

    def _declared_schedule(self, job_id: str, target: QoETarget | None) -> Any:
        return self.progress.declared_schedule(job_id, target)

    def _engine_cpu(self, host: str) -> int | None:
        """The engine's cores in millicores (its ``NCPU``): a cap at or above it caps nothing."""
        n = int(self._info.get(host, {}).get("NCPU") or 0)
        return n * 1000 if n > 0 else None

    def _allocation(self, host: str, c: ContainerView, fields: dict[str, Any]) -> Allocation:
        """The guarantee (from ``CpuShares``, never above the cap) and the cap, as the planner states them.

        A cap equal to the job's own maximum is reported as none (``None`` means "none beyond the
        job's max" in the contract), so a job capped at its declared max is not resized every interval.
        """
        cap = effective_cap(c, self._engine_cpu(host))
        guarantee = c.guarantee_millis() if cap is None else min(c.guarantee_millis(), cap)
        shown = None if cap is None or cap == fields["max_cpu_millis"] else cap
        return Allocation(cpu_millis=guarantee, gpus=c.gpu_count, cpu_limit_millis=shown)

    def _wanted_cap(self, host: str, c: ContainerView, fields: dict[str, Any], asked: int | None) -> int | None:
        """The cap a change means on ``host``: the planned one or the job's own declared max, the lower.

        ``None`` (no cap) when neither is set, when it is at least every core of the engine, or on a
        ``mechanism=shares`` host for a container that was never capped.
        """
        if self.hosts[host].spec.mechanism == "shares" and c.mechanism() is None:
            return None
        declared = fields["max_cpu_millis"] if MAX_CPU_LABEL in c.labels else None
        caps = [x for x in (asked, declared) if x is not None]
        if not caps:
            return None
        engine = self._engine_cpu(host)
        return None if engine is not None and min(caps) >= engine else min(caps)

    def _touch(self, *containers: str | None) -> None:
        now = time.monotonic()
        if len(self._touched) > 1000:  # a long-lived daemon: forget what no event can still be about
            self._touched = {k: t for k, t in self._touched.items() if t > now - 10 * OWN_EVENT_GRACE}
        for cid in containers:
            if cid:
                self._touched[cid] = now

    def own_event(self, container: str, received: float) -> bool:
        """Was an engine event about ``container``, received at ``received`` (``time.monotonic()``), our doing?

        True when the adapter itself started, stopped, created or removed that container and the
        event came before the call returned or within :data:`OWN_EVENT_GRACE` seconds after it.
        The daemon does not re-plan for its own actions.
        """
        t = self._touched.get(container)
        return t is not None and received <= t + OWN_EVENT_GRACE

    def _remember(self, job_id: str, host: str, c: ContainerView) -> None:
        """Keep what a re-create needs, so the job can be started elsewhere if its host goes down."""
        key = f"docker.spec.{job_id}"
        minimal = {"host": host, "id": c.id, "state": c.state, "exit": c.exit_code, "raw": _minimal_raw(c.raw)}
        old = self._kv_json(key)
        if old is None or old.get("id") != c.id or old.get("state") != c.state or old.get("host") != host:
            self._set_kv_json(key, minimal)
        if old is None:
            known = self._kv_json("docker.jobs") or []
            if job_id not in known:
                self._set_kv_json("docker.jobs", [*known, job_id])

    def _read_progress(self, job_id: str, host: str, c: ContainerView, steps_per_epoch: float | None = None) -> None:
        if c.id in self._drained or c.state == "created":
            return
        cursor = self.progress.cursor(c.id)
        since = parse_timestamp(cursor.since)[0] if cursor.since else None
        try:
            raw = self.hosts[host].logs(c.id, since, tty=bool((c.raw.get("Config") or {}).get("Tty")))
        except DockerAdapterError as exc:
            log.warning("job %s: cannot read logs of %s: %s", job_id, c.name, exc)
            return
        stopped = c.state not in ("running", "paused", "restarting")
        progress = self.progress.read(job_id, c.id, raw, final=stopped, steps_per_epoch=steps_per_epoch)
        if progress.rates:
            self._rates[c.id] = (self._rates.get(c.id, []) + progress.rates)[-MAX_RATES:]
        if stopped:
            self._drained.add(c.id)

    def _read_tensorboard(self, job_id: str, host: str, c: ContainerView, labels: JobLabels) -> None:
        """The points in the event files under the job's ``flowplan.tensorboard`` path, fetched from the
        container as an archive (as ``docker cp`` reads it: the job is not touched; a stopped container's
        files too). A path not there yet (the writer has not started), or files past the size limit, is
        one log line for as long as it lasts."""
        if labels.tensorboard is None or c.state == "created":
            return
        said = self._tensorboard_said.get(job_id)
        try:
            from adapters.logs.tensorboard import MAX_BYTES, TensorBoardError, files_in_tar, masked_crc32c

            masked_crc32c(b"")  # imports the tensorboard package, which decodes the events
        except ImportError as exc:
            why = f"flowplan.tensorboard: not read, the tensorboard package is missing ({exc.name}): "
            why += "pip install 'flowplan[tensorboard]'"
            if said != why:
                self._tensorboard_said[job_id] = why
                log.warning("job %s: %s", job_id, why)
            return
        try:
            files = files_in_tar(self.hosts[host].archive(c.id, labels.tensorboard, MAX_BYTES + 1024 * 1024))
            stopped = c.state not in ("running", "paused", "restarting")
            read = self.progress.read_tensorboard(job_id, files, final=stopped, steps_per_epoch=labels.steps_per_epoch)
        except (DockerAdapterError, TensorBoardError, tarfile.TarError) as exc:
            why = f"flowplan.tensorboard {labels.tensorboard}: not read ({exc})"
            if said != why:
                self._tensorboard_said[job_id] = why
                log.info("job %s: %s", job_id, why)
            return
        why = "; ".join(read.problems) or ("" if read.files else f"flowplan.tensorboard {labels.tensorboard}: no event file yet")
        if why and said != why:
            log.info("job %s: %s", job_id, why)
        self._tensorboard_said[job_id] = why

    def _read_cpu_usage(self, obs: Observation) -> None:
        """Cores used by each running job since its previous sample, from engine stats, without waiting.

        The engine answers a one-shot stats request at its collector's next 1 s tick (measured on
        20.10: one at a time, 100 containers took 100 s; together, one tick). So the requests run in
        the background: each observe collects the samples that came since the previous one and asks
        for the next ones, and never waits for the tick (a job that arrives is started sooner). Each
        sample carries the engine's own time, so a late one is as good as a prompt one.
        """
        running = {
            p.container.id: (job, p.host)
            for job, p in obs.placed.items()
            if p.container.state == "running" and p.host not in obs.down
        }
        for cid in [cid for cid in self._usage if cid not in running]:  # forget containers that stopped or went
            self._usage.pop(cid, None)
            self._speed_done.pop(cid, None)
            self._last_used.pop(cid, None)
        for cid in [cid for cid in self._rates if cid not in running]:
            self._rates.pop(cid, None)
        for cid in [cid for cid in self._stats_pending if cid not in running]:
            self._stats_pending.pop(cid).cancel()
        if not running:
            return
        if self._stats_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._stats_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="flowplan-stats")
        for cid, (job, host) in running.items():
            pending = self._stats_pending.get(cid)
            if pending is not None and not pending.done():
                continue  # still waiting for the engine's tick: collected at a later observe
            if pending is not None:
                usage = self._add_sample(cid, pending.result())
                if usage is not None:
                    obs.cpu_usage[job] = usage
                    self._last_used[cid] = usage
            self._stats_pending[cid] = self._stats_pool.submit(self._sample, host, cid)

    def _sample(self, host: str, cid: str) -> tuple[float, float] | None:
        try:
            return self.hosts[host].cpu_usage(cid)
        except DockerAdapterError:
            return None

    def _add_sample(self, cid: str, sample: tuple[float, float] | None) -> float | None:
        """Keep a (CPU seconds, engine time) sample for the speeds; cores used since the previous one."""
        if sample is None:
            return None
        cpu, t = sample
        samples = self._usage.setdefault(cid, [])
        prev = samples[-1] if samples else None
        if prev is not None and (t <= prev[0] or cpu < prev[1]):
            return None
        samples.append((t, cpu))
        del samples[:-SPEED_SAMPLES]
        if prev is None:
            return None
        return (cpu - prev[1]) / (t - prev[0])

    def _speeds(
        self,
        job_id: str,
        c: ContainerView,
        history: Sequence[MetricPoint],
        status: str,
        shares: tuple[tuple[str, int], ...] | None = None,
        servers: int | None = None,
    ) -> list[SpeedPoint]:
        """Observed seconds per epoch, at the CPU the job actually used.

        The guarantee is a floor, not what a job gets: a job guaranteed 250m runs at a whole core
        while the others are idle. So every epoch that ran inside this container between two of its
        stats samples is paired with the cores it used meanwhile (the container's CPU time,
        interpolated between samples, over the epoch's wall time). Epochs are grouped by that CPU
        (rounded to :data:`SPEED_GRID_MILLIS`); each group's median is averaged into the point kept
        for it. Each epoch counts once. The rates progress bars show join the same groups.

        A running gang's points (``shares``: its replicas per host) are kept per CPU (rank 0's), count
        and hosts: the seconds an epoch of the whole job took with that many replicas on that many hosts
        (and, for a parameter-server job, ``servers`` in all).
        """
        shape = "" if shares is None else f":{sum(k for _, k in shares)}:{len(shares)}"
        if shape and servers:
            shape += f":{servers}"
        key = f"docker.speed.{job_id}"
        table: dict[str, float] = self._kv_json(key) or {}
        samples = self._usage.get(c.id) or []
        if status == "running" and len(samples) >= 2:
            lo, hi = samples[0][0], samples[-1][0]
            done = self._speed_done.get(c.id, -math.inf)
            groups: dict[str, list[float]] = {}
            for a, b in zip(history, history[1:], strict=False):
                if b.epoch <= a.epoch or b.time <= a.time or a.time < lo or b.time > hi or b.time <= done:
                    continue
                cores = (_cpu_at(samples, b.time) - _cpu_at(samples, a.time)) / (b.time - a.time)
                self._speed_done[c.id] = max(self._speed_done.get(c.id, -math.inf), b.time)
                if cores > 0.005:
                    millis = max(SPEED_GRID_MILLIS, SPEED_GRID_MILLIS * round(cores * 1000 / SPEED_GRID_MILLIS))
                    groups.setdefault(f"{millis}{shape}", []).append((b.time - a.time) / (b.epoch - a.epoch))
            # A bar's own rate (tqdm's it/s, Keras' ms/step): known from an epoch's first steps, before
            # two epoch ends can be timed. Its line is stamped when it began, so it is paired with the
            # cores used from then to the latest sample; one less than a second old waits.
            waiting = []
            for t, per_epoch in self._rates.pop(c.id, []):
                start = max(t, lo)
                if hi - start < 1.0:
                    waiting.append((t, per_epoch))
                    continue
                cores = (_cpu_at(samples, hi) - _cpu_at(samples, start)) / (hi - start)
                if cores > 0.005:
                    millis = max(SPEED_GRID_MILLIS, SPEED_GRID_MILLIS * round(cores * 1000 / SPEED_GRID_MILLIS))
                    groups.setdefault(f"{millis}{shape}", []).append(per_epoch)
            if waiting:
                self._rates[c.id] = waiting
            for key_, gaps in groups.items():
                seen = float(median(gaps))
                old = table.get(key_)
                table[key_] = seen if old is None or not math.isfinite(old) else (old + seen) / 2
            if groups:
                self._set_kv_json(key, table)
        out = []
        for k, v in sorted(table.items(), key=lambda kv: [int(x) for x in kv[0].split(":")]):
            millis, *gang = (int(x) for x in k.split(":"))
            if millis >= 1 and math.isfinite(v) and v > 0:
                count, nodes = gang[:2] if len(gang) >= 2 else (None, 1)
                ps = gang[2] if len(gang) == 3 and servers is not None else None
                out.append(
                    SpeedPoint(cpu_millis=millis, gpus=c.gpu_count, seconds_per_epoch=v, replicas=count, nodes=nodes, servers=ps)
                )
        return out

    def _jobs_of_down_hosts(self, obs: Observation, seen: set[str], now: float) -> list[Job]:
        """Jobs last seen on a host that is down: pending after ``down_grace`` if they can migrate."""
        out: list[Job] = []
        if not obs.down:
            return out
        for job_id in self._kv_json("docker.jobs") or []:
            if job_id in seen:
                continue
            rec = self._kv_json(f"docker.spec.{job_id}") or {}
            host = rec.get("host")
            if host not in obs.down or rec.get("state") not in ("running", "created", "exited", "paused"):
                continue
            c = view(rec["raw"])
            if rec.get("state") == "exited" and rec.get("exit") not in RESUMABLE_EXITS:
                continue
            try:
                parsed = parse_labels(c.labels, created=c.created)
            except LabelError:
                continue
            if parsed is None:
                continue
            if not parsed.fields.get("migratable", True) or now - self._down_since.get(host, now) < self.down_grace:
                log.info("job %s is on host %s, which is down: left out", job_id, host)
                continue
            obs.placed[job_id] = Placed(host, c, parsed)
            history = self.store.history(job_id)
            fields = dict(parsed.fields)
            fields["target"] = self._with_declared(job_id, fields.get("target"))
            fields["schedule"] = self._declared_schedule(job_id, fields["target"])
            speed = self._speeds(job_id, c, history, "pending")
            out.append(
                Job(
                    id=job_id,
                    status="pending",
                    image=_image(c),
                    history=list(history),
                    speed=speed,
                    speed_prior=None if speed else self._speed_prior(job_id, fields.get("task"), _image(c)),
                    delivered=self.progress.delivered(job_id),
                    **fields,
                )
            )
        return out

    # -- apply -----------------------------------------------------------------------------------

    def apply(self, changes: Sequence[Change]) -> list[Outcome]:
        """Carry out ``changes`` in order, each on its own; one outcome per change, errors as data. A
        plan that places a GPU fraction is refused whole, before anything is applied: Docker hands
        out whole devices (``--gpus``) and cannot share one without MPS or vGPU."""
        refused = refuse_fractions(changes, "Docker", "it hands out whole devices; sharing one needs MPS or vGPU", log)
        if refused is not None:
            return refused
        return apply_each(changes, self._apply_one, DockerAdapterError, log)

    def _apply_one(self, ch: Change) -> str:
        placed = self.last.placed.get(ch.job)
        if placed is None:
            raise DockerAdapterError("not_found", f"job {ch.job}: no container seen for it")
        if ch.node is not None and ch.node not in self.hosts:
            raise DockerAdapterError("invalid", f"job {ch.job}: unknown host {ch.node!r}")
        if is_gang(placed.labels.fields):
            return self.gangs.apply(ch, placed)
        if ch.replicas != 1 or (ch.placement is not None and ch.placement != ((ch.node, 1),)):
            raise DockerAdapterError(
                "invalid", f"job {ch.job}: replicas={ch.replicas}, but its labels declare no gang (flowplan.replicas is 1)"
            )
        if ch.kind == "resize":
            return self._resize(ch, placed)
        if ch.kind == "start":
            return self._start(ch, placed)
        if ch.kind == "pause":
            return self._pause(ch, placed)
        if ch.kind == "migrate":
            return self._migrate(ch, placed)
        if ch.kind == "deliver":
            return self._deliver(ch, placed)
        raise DockerAdapterError("invalid", f"job {ch.job}: unknown change kind {ch.kind!r}")

    def _fresh(self, placed: Placed) -> ContainerView:
        return self.hosts[placed.host].inspect(placed.container.id)

    def _set_cpu(self, ch: Change, placed: Placed, c: ContainerView) -> str:
        """Apply ``ch``'s guarantee and cap to ``c`` where it is (nothing is called when both are in effect)."""
        host = placed.host
        cap = self._wanted_cap(host, c, placed.labels.fields, ch.cpu_limit_millis)
        engine = self._engine_cpu(host) or max(self.hosts[host].spec.cpu_millis or 0, 1000)
        return self.hosts[host].set_cpu(c, ch.cpu_millis, cap, engine_cpu_millis=engine)

    def _in_effect(self, ch: Change, placed: Placed, c: ContainerView) -> bool:
        cap = self._wanted_cap(placed.host, c, placed.labels.fields, ch.cpu_limit_millis)
        now = ((c.cpu_shares or DEFAULT_SHARES), effective_cap(c, self._engine_cpu(placed.host)))
        return now == (shares_for(ch.cpu_millis), cap)

    def _resize(self, ch: Change, placed: Placed) -> str:
        c = self._fresh(placed)
        if ended_ok(c):
            return finished_before(ch.kind)
        if c.state not in RUNNING_STATES:
            raise DockerAdapterError("conflict", f"job {ch.job}: not running ({c.state}): a pending job is started, not resized")
        if ch.node != placed.host:
            raise DockerAdapterError("invalid", f"job {ch.job}: resize on {ch.node} but it runs on {placed.host}")
        if c.gpu_count != ch.gpus:
            return self._recreate(ch, placed, c, ch.node)
        if self._in_effect(ch, placed, c):
            return f"already at {ch.cpu_millis}m"
        before = self._allocation(placed.host, c, placed.labels.fields)
        what = self._set_cpu(ch, placed, c)
        cap = f" cap {before.cpu_limit_millis}m" if before.cpu_limit_millis is not None else ""
        return f"{before.cpu_millis}m{cap} -> {what}"

    def _start(self, ch: Change, placed: Placed) -> str:
        assert ch.node is not None
        host = self.hosts[ch.node]
        if placed.host in self.last.down:  # its host is gone: started elsewhere from its checkpoint
            return self._recreate(ch, placed, placed.container, ch.node, stop_first=False)
        c = self._fresh(placed)
        if c.state in RUNNING_STATES:
            # A start is for a pending job (planner/transitions.py): one already running there as asked
            # is a repeat (ok); anywhere else or otherwise, moving or resizing it is another action.
            if self._running_as_asked(ch, placed, c):
                return f"already running on {ch.node}"
            raise DockerAdapterError(
                "conflict", f"job {ch.job}: already running on {placed.host}; a start is for a pending job (re-planned next)"
            )
        if placed.host != ch.node:
            return self._recreate(ch, placed, c, ch.node)
        if c.gpu_count != ch.gpus:
            return self._recreate(ch, placed, c, ch.node, stop_first=False)
        what = self._set_cpu(ch, placed, c)
        try:
            host.start(c.id)
        finally:
            self._touch(c.id)
        self._drained.discard(c.id)
        return f"started on {ch.node}: {what}"

    def _checkpoint_stop(self, host: Host, c: ContainerView) -> int:
        """Ask the job to checkpoint and exit (SIGTERM); wait for it. A timeout leaves it running."""
        if c.state not in ("running", "paused", "restarting"):
            return c.exit_code
        if c.state == "paused":
            host.api().unpause(c.id)
        host.signal(c.id, "SIGTERM")
        try:
            code = host.wait(c.id, self.checkpoint_timeout)
        except DockerAdapterError as exc:
            if exc.kind == "transient":
                raise DockerAdapterError(
                    "transient", f"{c.name} did not checkpoint within {self.checkpoint_timeout:g} s; left running"
                ) from exc
            raise
        finally:
            self._touch(c.id)
        return code

    def _running_as_asked(self, ch: Change, placed: Placed, c: ContainerView) -> bool:
        """Is ``c`` running on the change's host with its GPUs, guarantee and cap (a repeat of ``ch``)?"""
        return c.state in RUNNING_STATES and placed.host == ch.node and c.gpu_count == ch.gpus and self._in_effect(ch, placed, c)

    def _pause(self, ch: Change, placed: Placed) -> str:
        c = self._fresh(placed)
        if ended_ok(c):
            return finished_before(ch.kind)
        if c.state not in RUNNING_STATES:
            return f"already stopped ({c.state})"
        code = self._checkpoint_stop(self.hosts[placed.host], c)
        return f"checkpointed and stopped (exit {code})"

    def _migrate(self, ch: Change, placed: Placed) -> str:
        assert ch.node is not None
        c = self._fresh(placed)
        if ended_ok(c):
            return finished_before(ch.kind)
        if c.state not in RUNNING_STATES:
            raise DockerAdapterError("conflict", f"job {ch.job}: not running ({c.state}): a pending job is started, not migrated")
        if self._running_as_asked(ch, placed, c):  # migrated already (a repeated change): nothing to do
            return f"already running on {ch.node} at {ch.cpu_millis}m/{ch.gpus}g"
        # To another host, or a restart in place with a new share (a job that cannot resize live).
        return self._recreate(ch, placed, c, ch.node)

    def _deliver(self, ch: Change, placed: Placed) -> str:
        if self.progress.delivered(ch.job):
            return "already delivered"
        c = self._fresh(placed)
        if c.state == "exited" and c.exit_code == 0:
            # Tier 1 was reached at the last epoch and the job ended before the signal: its final
            # model is the delivery. Recorded, so the next snapshot says delivered and no one asks again.
            self.progress.mark_delivered(ch.job)
            return "finished before the deliver: its final model is the delivery"
        if c.state != "running":
            raise DockerAdapterError("conflict", f"job {ch.job}: cannot deliver, container is {c.state}")
        now = self.clock.now()
        asked = self._deliver_asked.get(ch.job)
        if asked is not None and asked[0] == c.id and now - asked[1] < DELIVER_REASK_SECONDS:
            return f"already asked to deliver {now - asked[1]:.0f} s ago (SIGUSR1); its log has not said it delivered yet"
        if c.started is not None and c.started > now - DELIVER_START_GRACE_SECONDS and not self._printed_since_start(c):
            return "not asked yet: it has printed nothing since its start (a signal before its handler is set is lost)"
        self.hosts[placed.host].signal(c.id, "SIGUSR1")
        self._deliver_asked[ch.job] = (c.id, now)
        return "asked to deliver (SIGUSR1)"

    def _printed_since_start(self, c: ContainerView) -> bool:
        """Whether the container's log has a line read since its last start (engine clock both)."""
        cursor = self.progress.cursor(c.id)
        return bool(cursor.since) and c.started is not None and to_seconds(parse_timestamp(cursor.since)) >= c.started

    def _recreate(self, ch: Change, placed: Placed, c: ContainerView, target_name: str, *, stop_first: bool = True) -> str:
        """Checkpoint-stop ``c``, create and start it on ``target_name``, remove the old one (see the module docstring)."""
        source = self.hosts[placed.host]
        target = self.hosts[target_name]
        self._info[target_name] = target.info()  # the target must answer before anything is stopped
        gpu = gpu_request(ch.gpus, self._held_gpus(target_name, exclude=c.id), target.spec.gpus) if ch.gpus else None
        cap = self._wanted_cap(target_name, c, placed.labels.fields, ch.cpu_limit_millis)
        spec = recreate_spec(c, ch.cpu_millis, cap, gpu, mechanism=target.spec.mechanism)
        if stop_first:
            code = self._checkpoint_stop(source, c)
            fresh = self._fresh(placed)
            self._read_progress(ch.job, placed.host, fresh, placed.labels.steps_per_epoch)
            self._read_tensorboard(ch.job, placed.host, fresh, placed.labels)
            if code not in RESUMABLE_EXITS and code != 0:
                log.warning("job %s: %s exited with %d while checkpointing", ch.job, c.name, code)
        name = c.name if target_name != placed.host else _next_name(c.name)
        new_id: str | None = None
        try:
            new_id = target.create(spec, name)
            self._touch(new_id)
            target.start(new_id)
            self._touch(new_id)
        except DockerAdapterError as exc:
            if new_id is not None:
                try:
                    target.remove(new_id, force=True)
                except DockerAdapterError:
                    pass
                self._touch(new_id)
            restarted = ""
            if stop_first:
                try:
                    source.start(c.id)
                    self._drained.discard(c.id)
                    restarted = f"; restarted on {placed.host}"
                except DockerAdapterError as exc2:
                    restarted = f"; could not restart on {placed.host} either ({exc2.kind}: {exc2.message})"
                self._touch(c.id)
            raise DockerAdapterError(
                exc.kind, f"job {ch.job}: re-create on {target_name} failed: {exc.message}{restarted}"
            ) from exc
        removed = "old container left (host down)"
        if placed.host not in self.last.down:
            try:
                source.remove(c.id, force=False)
                removed = f"removed {c.name} on {placed.host}"
            except DockerAdapterError as exc:
                removed = f"old container not removed ({exc.kind}: {exc.message})"
            self._touch(c.id)
        try:  # the job is the new container now: a repeat of this change before the next observe sees it
            self.last.placed[ch.job] = Placed(target_name, target.inspect(new_id), placed.labels, placed.duplicates)
        except DockerAdapterError:
            pass  # the next observe finds it
        cap_text = f" cap {cap}m" if cap is not None else ""
        return f"re-created on {target_name} at {ch.cpu_millis}m{cap_text}/{ch.gpus}g; {removed}"

    def _held_gpus(self, host: str, exclude: str) -> list[str]:
        held: list[str] = []
        for p in self.last.placed.values():
            for h, c in [(p.host, p.container), *p.members]:  # a gang's replicas hold devices too
                if h == host and c.id != exclude and c.state == "running":
                    held.extend(c.gpu_ids)
        return held

    # -- reconcile -------------------------------------------------------------------------------

    def reconcile(self) -> list[str]:
        """Remove the extra containers of jobs that have several (an interrupted migration, a host
        that came back). Keeps the running one, or the newest; stops (with a checkpoint) a second
        running one. Returns what it did, one line each."""
        done: list[str] = []
        for job_id, placed in self.last.placed.items():
            for host_name, other in placed.duplicates:
                if host_name in self.last.down:
                    continue
                host = self.hosts[host_name]
                try:
                    if other.state in ("running", "paused", "restarting"):
                        self._checkpoint_stop(host, other)
                    host.remove(other.id, force=False)
                    self._touch(other.id)
                    done.append(
                        f"{job_id}: removed duplicate {other.name} on {host_name} (kept {placed.container.name} on {placed.host})"
                    )
                except DockerAdapterError as exc:
                    done.append(f"{job_id}: could not remove duplicate {other.name} on {host_name}: {exc.kind}: {exc.message}")
        done.extend(self.gangs.reconcile())
        for line in done:
            log.info("reconcile: %s", line)
        return done

    def close(self) -> None:
        if self._stats_pool is not None:
            self._stats_pool.shutdown(wait=False, cancel_futures=True)
            self._stats_pool = None
        self._stats_pending.clear()
        for h in self.hosts.values():
            h.close()


def _cpu_at(samples: Sequence[tuple[float, float]], t: float) -> float:
    """A container's CPU seconds at time ``t``, interpolated between (time, CPU seconds) samples around it."""
    for (t0, c0), (t1, c1) in zip(samples, samples[1:], strict=False):
        if t0 <= t <= t1:
            return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1
    return samples[-1][1] if t > samples[-1][0] else samples[0][1]


def _image(c: ContainerView) -> str | None:
    """The container's image as the snapshot's ``Job.image`` (``None`` when unknown or too long for the contract)."""
    image = c.image
    return image if image is not None and len(image) <= 1000 else None


def _placement(shares: tuple[tuple[str, int], ...] | None, replicas: int) -> list[Share] | None:
    """A running gang's ``Job.placement``: ``None`` when all ``replicas`` run on one host (or it is no gang)."""
    if shares is None or (len(shares) == 1 and shares[0][1] == replicas):
        return None
    return [Share(node=n, replicas=k) for n, k in shares]


def _next_name(name: str) -> str:
    base, sep, n = name.rpartition("-r")
    if sep and n.isdigit():
        return f"{base}-r{int(n) + 1}"
    return f"{name}-r1"


def _minimal_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """The parts of an ``inspect`` result a re-create and :func:`~adapters.docker.engine.view` need."""
    cfg = raw.get("Config") or {}
    hc = raw.get("HostConfig") or {}
    keep_cfg = ("Image", "Cmd", "Entrypoint", "Env", "Labels", "WorkingDir", "User")
    keep_hc = (
        "Binds",
        "Mounts",
        "NetworkMode",
        "Init",
        "Memory",
        "NanoCpus",
        "CpuQuota",
        "CpuPeriod",
        "CpuShares",
        "CpusetCpus",
        "DeviceRequests",
    )
    return {
        "Id": raw.get("Id", ""),
        "Name": raw.get("Name", ""),
        "Created": raw.get("Created"),
        "State": {"Status": (raw.get("State") or {}).get("Status"), "ExitCode": (raw.get("State") or {}).get("ExitCode")},
        "Config": {k: cfg.get(k) for k in keep_cfg},
        "HostConfig": {k: hc.get(k) for k in keep_hc},
    }
