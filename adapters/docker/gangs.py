"""Gangs on Docker: a job's replicas as containers on one or several hosts, found again by their labels.

A job whose labels declare ``flowplan.replicas`` above 1 is a *gang* (``flowplan.min_replicas``, when
set, lets the planner choose a count in between; ``flowplan.max_nodes`` how many hosts it may spread
over). The user's labelled container is **rank 0** and the template of the others: every replica is
created from its configuration (image, command, environment, mounts, labels) by
:func:`~adapters.docker.engine.recreate_spec`, on the host the plan's placement names.

What the adapter writes on each container of a gang it starts (all of them, rank 0's new container too):

==============================  ===================================================================
label                           meaning
==============================  ===================================================================
``flowplan.rank``               the replica's rank: 0 on the job's own container, 1..n-1 on the others
``flowplan.generation``         one more at every (re)start: the containers of one start share it, so
                                a replica left by an earlier one is recognised (and removed)
``flowplan.world_size``         how many replicas this start made (``WORLD_SIZE``)
``flowplan.master_port``        the rendezvous port (``MASTER_PORT``), kept from one start to the next
==============================  ===================================================================

**Rendezvous.** Every replica gets ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` (torchrun's names; what the template had under those names is
replaced) and runs with **host networking**: ``MASTER_ADDR`` is the address of rank 0's host
(:attr:`~adapters.docker.engine.HostSpec.rendezvous_addr`), and any port a replica opens is open on
its host, as NCCL and gloo need (they connect every rank to every other on ports of their own). Ranks
are numbered along the placement: rank 0's host first, then each host's replicas in turn.
The port is the job's ``flowplan.master_port`` when no other running gang holds it, else the first
free one from a hash of the job id in [29500, 32768) (:func:`~adapters.docker.ranks.choose_port`), so it is the same at every
restart and differs between the gangs the adapter runs; below Linux's ephemeral ports, which any
outgoing connection on the host may hold.

A gang labelled ``flowplan.rendezvous=tensorflow`` gets TensorFlow's ``TF_CONFIG`` instead (and
none of torchrun's variables): the cluster's workers, ``<host address>:<port + rank>`` in rank
order, and its own task, ``{"type": "worker", "index": rank}``. Each worker listens on its own port,
so such a gang holds ``world size`` consecutive ports from its port (:func:`~adapters.docker.ranks.ports_held`),
and no other gang's port falls among them. Without a ``chief`` task, TensorFlow's multi-worker
strategies make worker 0 the chief: rank 0, the replica that checkpoints and reports.

**Parameter servers** (``flowplan.servers.*``, a ``tensorflow`` gang only): the plan's ``servers``
on each host of the placement, as containers made from rank 0's configuration like the workers, at
the servers' CPU share (``flowplan.servers.cpu_millis``), without GPUs or a cap, labelled
``flowplan.role=ps`` and ``flowplan.rank=<index>``. ``TF_CONFIG`` lists them as the cluster's ``ps``
tasks, ``<host address>:<port + world size + index>``, on every worker and server (each server's
task ``{"type": "ps", "index": index}``); every container of the start carries ``flowplan.ps``, the
servers in all, which the snapshot reads back (``Allocation.servers``, per host). A running gang
whose servers are not all running is broken, like one missing a worker. New servers (a new
count) are a checkpoint-restart of the whole set, as a new worker count is; a ``resize`` keeps them.

**State.** The job is its rank 0 (``adapter.Placed``): created → pending, exited 75/137/143 →
pending, 0 → finished, running → running with its replicas where they are (``Job.placement`` when they
are not all ``replicas`` on one host). A running rank 0 whose replicas are not all running (one
died, a host went away, or rank 0 was started by hand without its gang) is *broken*: it is left out
of the snapshot (the log says why) and :meth:`GangOps.reconcile` stops it with a checkpoint, so the
next plan starts it whole. Replicas of another generation, or of a gang whose rank 0 is not running,
are stopped and removed by :meth:`GangOps.reconcile`.

**Changes** (each all or nothing):

- ``start``: every target host must answer; then all replicas are created and started; if one
  cannot be, those made are removed and the job stays pending as it was. Then the old rank 0 (the
  template) and any old replicas are removed.
- ``migrate`` (a new count, placement, rank 0 host, or GPUs): rank 0 is asked to checkpoint
  (SIGTERM, as for one container) and the other ranks are stopped; the new set is started as for a
  start, with the new ``WORLD_SIZE``; only then are the old containers removed. If the new set cannot
  be made, what was made is removed and the old set is started again where it was (it resumes from
  its checkpoint).
- ``resize`` (same count and placement): the CPU guarantee and cap of every replica, live; a
  ``resize`` that changes the count or placement is refused (``invalid``): Docker cannot rescale a
  gang live, the planner sends a ``migrate`` for a job that is not ``elastic``.
- ``pause``: rank 0 checkpoints and stops; the other replicas are stopped and removed.
- ``deliver``: SIGUSR1 to rank 0.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from adapters.base import Change, Shares, change_shares, finished_before
from adapters.docker.engine import DEFAULT_SHARES, ContainerView, effective_cap, ended_ok, recreate_spec, shares_for
from adapters.docker.errors import DockerAdapterError
from adapters.docker.gpu import gpu_request
from adapters.docker.ranks import (
    GENERATION,
    MASTER_PORT,
    PS,
    RANK,
    ROLE,
    SERVER_ROLE,
    TF_CONFIG,
    WORLD_SIZE,
    WRITTEN_LABELS,
    broken,
    choose_port,
    member_of,
    ports_held,
    rank_layout,
    rendezvous_env,
    shares_of,
    shares_problem,
    tf_config,
    workers_of,
)

if TYPE_CHECKING:
    from adapters.docker.adapter import DockerAdapter, Placed

log = logging.getLogger("flowplan.docker")

#: Seconds a replica other than rank 0 gets to exit after SIGTERM before it is killed.
STOP_SECONDS = 10.0


class GangOps:
    """The changes of :mod:`adapters.docker.gangs` (module docstring), carried out on the adapter's hosts."""

    def __init__(self, adapter: DockerAdapter) -> None:
        self.ad = adapter

    # -- reading the gang now ----------------------------------------------------------------------

    def _members_now(self, placed: Placed) -> list[tuple[str, ContainerView]]:
        """The members as the engines show them now (those gone, or on a host that is down, left out)."""
        out = []
        for host, c in placed.members:
            if host in self.ad.last.down:
                continue
            try:
                out.append((host, self.ad.hosts[host].inspect(c.id)))
            except DockerAdapterError as exc:
                if exc.kind != "not_found":
                    raise
        return out

    def _in_effect(self, ch: Change, host: str, c: ContainerView, fields: Mapping[str, Any]) -> bool:
        cap = self.ad._wanted_cap(host, c, dict(fields), ch.cpu_limit_millis)
        now = ((c.cpu_shares or DEFAULT_SHARES), effective_cap(c, self.ad._engine_cpu(host)), c.gpu_count)
        return now == (shares_for(ch.cpu_millis), cap, ch.gpus)

    def _as_asked(self, ch: Change, placed: Placed, rank0: ContainerView, members: list[tuple[str, ContainerView]]) -> bool:
        """Is the gang running as ``ch`` asks (rank 0's host, the placement, every replica's CPU and GPUs)?"""
        fields = placed.labels.fields
        if rank0.state != "running" or broken(placed.host, rank0, members, fields) is not None:
            return False
        if placed.host != ch.node or shares_of(placed.host, members) != change_shares(ch):
            return False
        if member_of(rank0.labels).servers != _servers_wanted(ch, fields):
            return False
        return all(self._in_effect(ch, h, c, fields) for h, c in [(placed.host, rank0), *workers_of(members)])

    # -- the changes -------------------------------------------------------------------------------

    def apply(self, ch: Change, placed: Placed) -> str:
        if ch.kind in ("start", "migrate", "resize"):
            problem = shares_problem(placed.labels.fields, change_shares(ch), self.ad.hosts)
            if problem is not None:
                raise DockerAdapterError(problem[0], f"job {ch.job}: {problem[1]}")
        act = {"start": self.start, "migrate": self.migrate, "resize": self.resize, "pause": self.pause}.get(ch.kind)
        if ch.kind == "deliver":  # rank 0 hears it (SIGUSR1), as a single container does
            act = self.ad._deliver
        if act is None:
            raise DockerAdapterError("invalid", f"job {ch.job}: unknown change kind {ch.kind!r}")
        return act(ch, placed)

    def start(self, ch: Change, placed: Placed) -> str:
        down = placed.host in self.ad.last.down
        rank0 = placed.container if down else self.ad._fresh(placed)
        members = self._members_now(placed)
        if not down and rank0.state in ("running", "paused", "restarting"):
            if self._as_asked(ch, placed, rank0, members):
                return f"already running: {_where(change_shares(ch))}"
            raise DockerAdapterError(
                "conflict", f"job {ch.job}: already running on {placed.host}; a start is for a pending job (re-planned next)"
            )
        self._stop_members(members)  # left by an earlier start: they wait for a rank 0 that is gone
        return self._launch(ch, placed, rank0, members, restart_old=False)

    def _running(self, ch: Change, placed: Placed, rank0: ContainerView, verb: str) -> list[tuple[str, ContainerView]]:
        """The members now, given rank 0 as read now; a ``conflict`` when rank 0 is not running (a
        pending job is started; a gang that finished since the observe is moot, before this)."""
        if rank0.state not in ("running", "paused", "restarting"):
            raise DockerAdapterError(
                "conflict", f"job {ch.job}: not running ({rank0.state}): a pending job is started, not {verb}"
            )
        return self._members_now(placed)

    def migrate(self, ch: Change, placed: Placed) -> str:
        rank0 = self.ad._fresh(placed)
        if ended_ok(rank0):
            return finished_before(ch.kind)
        members = self._running(ch, placed, rank0, "migrated")
        if self._as_asked(ch, placed, rank0, members):
            return f"already running: {_where(change_shares(ch))} at {ch.cpu_millis}m/{ch.gpus}g"
        return self._restart(ch, placed, rank0, members)

    def _restart(self, ch: Change, placed: Placed, rank0: ContainerView, members: list[tuple[str, ContainerView]]) -> str:
        """Checkpoint rank 0 (it is left running if it does not exit in time), stop the others, start the new set."""
        for host in {h for h, _ in change_shares(ch)}:  # the targets must answer before anything is stopped
            self.ad._info[host] = self.ad.hosts[host].info()
        code = self.ad._checkpoint_stop(self.ad.hosts[placed.host], rank0)
        self._stop_members(members)
        rank0 = self.ad._fresh(placed)
        self.ad._read_progress(ch.job, placed.host, rank0, placed.labels.steps_per_epoch)
        if code not in (0, 75, 137, 143):
            log.warning("job %s: rank 0 (%s) exited with %d while checkpointing", ch.job, rank0.name, code)
        return self._launch(ch, placed, rank0, members, restart_old=True)

    def resize(self, ch: Change, placed: Placed) -> str:
        rank0 = self.ad._fresh(placed)
        if ended_ok(rank0):
            return finished_before(ch.kind)
        members = self._running(ch, placed, rank0, "resized")
        now = shares_of(placed.host, members)
        if ch.node != placed.host or now != change_shares(ch):
            raise DockerAdapterError(
                "invalid",
                f"job {ch.job}: a resize from {_where(now)} to {_where(change_shares(ch))}: Docker changes a gang's "
                "count or placement by checkpoint-restart (migrate), not live",
            )
        if member_of(rank0.labels).servers != _servers_wanted(ch, placed.labels.fields):
            return self._restart(ch, placed, rank0, members)  # new servers: a new cluster for TensorFlow
        replicas = [(placed.host, rank0), *workers_of(members)]
        if any(c.gpu_count != ch.gpus for _, c in replicas):
            return self._restart(ch, placed, rank0, members)
        if all(self._in_effect(ch, h, c, placed.labels.fields) for h, c in replicas):
            return f"already at {ch.cpu_millis}m on {len(replicas)} replicas"
        what = ""
        for host, c in replicas:
            cap = self.ad._wanted_cap(host, c, placed.labels.fields, ch.cpu_limit_millis)
            engine = self.ad._engine_cpu(host) or max(self.ad.hosts[host].spec.cpu_millis or 0, 1000)
            what = self.ad.hosts[host].set_cpu(c, ch.cpu_millis, cap, engine_cpu_millis=engine)
        return f"{len(replicas)} replicas: {what}"

    def pause(self, ch: Change, placed: Placed) -> str:
        rank0 = self.ad._fresh(placed)
        members = self._members_now(placed)
        if rank0.state not in ("running", "paused", "restarting"):
            self._stop_members(members)
            return f"already stopped ({rank0.state}){self._remove(members)}"
        code = self.ad._checkpoint_stop(self.ad.hosts[placed.host], rank0)
        self._stop_members(members)
        return f"checkpointed and stopped (exit {code}){self._remove(members)}"

    # -- the machinery -------------------------------------------------------------------------------

    def _stop_members(self, members: Sequence[tuple[str, ContainerView]]) -> None:
        for host, c in members:
            if c.state in ("running", "paused", "restarting"):
                try:
                    self.ad.hosts[host].stop(c.id, STOP_SECONDS)
                except DockerAdapterError as exc:
                    if exc.kind != "not_found":
                        raise
                finally:
                    self.ad._touch(c.id)

    def _remove(self, members: Sequence[tuple[str, ContainerView]]) -> str:
        """Remove stopped members; ``"; removed N other replicas"`` (or what could not be removed)."""
        gone, left = 0, []
        for host, c in members:
            try:
                self.ad.hosts[host].remove(c.id, force=True)
                gone += 1
            except DockerAdapterError as exc:
                if exc.kind == "not_found":
                    gone += 1
                else:
                    left.append(f"{c.name} on {host} ({exc.kind})")
            self.ad._touch(c.id)
        text = f"; removed {gone} other replica(s)" if gone else ""
        return text + (f"; not removed: {', '.join(left)}" if left else "")

    def _port(self, job: str, template: ContainerView, width: int) -> int:
        """The first of ``width`` consecutive ports for ``job``, clear of every port another running gang holds."""
        taken: set[int] = set()
        for other, p in self.ad.last.placed.items():
            if other != job and p.container.state == "running":
                taken.update(ports_held(p.container.labels))
        return choose_port(job, taken, member_of(template.labels).port, width)

    def _spec(
        self,
        ch: Change,
        placed: Placed,
        template: ContainerView,
        slot: tuple[str, int, int, int],
        rendezvous: Mapping[str, Any],
        generation: int,
        gpus_taken: dict[str, list[str]],
        workers: Sequence[str] | None = None,
        servers: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The create spec of the replica at ``slot`` (host, rank, local rank, local world size);
        ``workers`` (``host:port`` per rank): a ``tensorflow`` gang's, whose replicas get ``TF_CONFIG``
        instead of torchrun's variables, with its parameter ``servers`` (``host:port`` each) if any."""
        host, rank, local_rank, local_world = slot
        target = self.ad.hosts[host]
        fields = placed.labels.fields
        gpu = None
        if ch.gpus:
            held = self._held_gpus(host, ch.job) + gpus_taken.setdefault(host, [])
            gpu = gpu_request(ch.gpus, held, target.spec.gpus)
            gpus_taken[host].extend((gpu or {}).get("device_ids", []))
        cap = self.ad._wanted_cap(host, template, fields, ch.cpu_limit_millis)
        spec = recreate_spec(template, ch.cpu_millis, cap, gpu, mechanism=target.spec.mechanism)
        values: dict[str, Any] = {**rendezvous, "RANK": rank, "LOCAL_RANK": local_rank, "LOCAL_WORLD_SIZE": local_world}
        if workers is not None:
            values = {TF_CONFIG: tf_config(workers, rank, servers)}
        return _labelled(spec, values, rank, generation, rendezvous, len(servers))

    def _server_spec(
        self,
        placed: Placed,
        template: ContainerView,
        index: int,
        rendezvous: Mapping[str, Any],
        generation: int,
        workers: Sequence[str],
        servers: Sequence[str],
    ) -> dict[str, Any]:
        """The create spec of parameter server ``index``: the template's image and command, the
        servers' CPU share (``flowplan.servers.cpu_millis``), no GPU and no cap, ``TF_CONFIG`` with
        task ``{"type": "ps", "index": index}``, ``flowplan.role=ps``."""
        role = placed.labels.fields["servers"]
        spec = recreate_spec(template, int(role.get("cpu_millis", 1000)), None, None)
        spec = _labelled(
            spec, {TF_CONFIG: tf_config(workers, index, servers, task="ps")}, index, generation, rendezvous, len(servers)
        )
        spec["config"]["labels"][ROLE] = SERVER_ROLE
        return spec

    def _held_gpus(self, host: str, job: str) -> list[str]:
        """GPU ids running containers of the other jobs hold on ``host`` (their gangs' replicas too)."""
        held: list[str] = []
        for other, p in self.ad.last.placed.items():
            if other == job:
                continue
            for h, c in [(p.host, p.container), *p.members]:
                if h == host and c.state == "running":
                    held.extend(c.gpu_ids)
        return held

    def _launch(
        self, ch: Change, placed: Placed, template: ContainerView, old: list[tuple[str, ContainerView]], *, restart_old: bool
    ) -> str:
        """Create and start every replica of ``ch`` from ``template``, all or none; then remove the old containers."""
        shares = change_shares(ch)
        layout = rank_layout(shares)
        for host in {h for h, _ in shares}:
            self.ad._info[host] = self.ad.hosts[host].info()
        tf = placed.labels.rendezvous == "tensorflow"
        per_node = _servers_wanted(ch, placed.labels.fields) // len(shares)
        ps_hosts = [h for h, _ in shares for _ in range(per_node)]  # the same number on each worker host
        port = self._port(ch.job, template, len(layout) + len(ps_hosts) if tf else 1)
        master = self.ad.hosts[shares[0][0]].spec.rendezvous_addr
        rendezvous = {"MASTER_ADDR": master, "MASTER_PORT": port, "WORLD_SIZE": len(layout)}
        # TensorFlow's tasks each listen on a port of their own: rank r on the job's port + r, then the servers'.
        workers = [f"{self.ad.hosts[h].spec.rendezvous_addr}:{port + r}" for h, r, _, _ in layout] if tf else None
        servers = [f"{self.ad.hosts[h].spec.rendezvous_addr}:{port + len(layout) + i}" for i, h in enumerate(ps_hosts)]
        generation = member_of(template.labels).generation + 1
        from adapters.docker.adapter import _next_name

        name0 = _next_name(template.name)
        made: list[tuple[str, str]] = []
        gpus_taken: dict[str, list[str]] = {}
        try:
            for slot in layout:
                spec = self._spec(ch, placed, template, slot, rendezvous, generation, gpus_taken, workers, servers)
                host, rank = slot[0], slot[1]
                cid = self.ad.hosts[host].create(spec, name0 if rank == 0 else f"{name0}-rank{rank}")
                made.append((host, cid))
                self.ad._touch(cid)
            for i, host in enumerate(ps_hosts):
                assert workers is not None  # servers need TensorFlow's rendezvous (labels.parse_labels)
                spec = self._server_spec(placed, template, i, rendezvous, generation, workers, servers)
                cid = self.ad.hosts[host].create(spec, f"{name0}-ps{i}")
                made.append((host, cid))
                self.ad._touch(cid)
            for host, cid in made:
                self.ad.hosts[host].start(cid)
                self.ad._touch(cid)
        except DockerAdapterError as exc:
            undone = self._undo(made)
            again = self._start_again(placed, template, old) if restart_old else ""
            raise DockerAdapterError(
                exc.kind, f"job {ch.job}: gang of {len(layout)} on {_where(shares)} not started: {exc.message}; {undone}{again}"
            ) from exc
        removed = self._remove(old)
        if placed.host not in self.ad.last.down:
            try:
                self.ad.hosts[placed.host].remove(template.id, force=False)
            except DockerAdapterError as exc:
                removed += f"; old rank 0 not removed ({exc.kind}: {exc.message})"
            self.ad._touch(template.id)
        self._remember_new(ch, placed, made)
        cap = self.ad._wanted_cap(shares[0][0], template, placed.labels.fields, ch.cpu_limit_millis)
        cap_text = f" cap {cap}m" if cap is not None else ""
        ps_text = f" and {len(ps_hosts)} parameter server(s), {per_node} on each host" if ps_hosts else ""
        return (
            f"{len(layout)} replicas on {_where(shares)}{ps_text} (rendezvous {master}:{port}) at {ch.cpu_millis}m{cap_text}"
            f"/{ch.gpus}g each{removed}"
        )

    def _undo(self, made: Sequence[tuple[str, str]]) -> str:
        for host, cid in made:
            try:
                self.ad.hosts[host].remove(cid, force=True)
            except DockerAdapterError:
                pass
            self.ad._touch(cid)
        return f"removed the {len(made)} container(s) made" if made else "nothing was made"

    def _start_again(self, placed: Placed, rank0: ContainerView, members: Sequence[tuple[str, ContainerView]]) -> str:
        """After a failed restart: the old set started again where it was (it resumes from its checkpoint)."""
        try:
            for host, cid in [(placed.host, rank0.id), *((h, c.id) for h, c in members)]:
                self.ad.hosts[host].start(cid)
                self.ad._touch(cid)
                self.ad._drained.discard(cid)
        except DockerAdapterError as exc:
            return f"; could not start the old set again ({exc.kind}: {exc.message})"
        return f"; the old set started again on {_where(shares_of(placed.host, members))}"

    def _remember_new(self, ch: Change, placed: Placed, made: Sequence[tuple[str, str]]) -> None:
        """The new set is the job now: a repeat of ``ch`` before the next observe sees it."""
        from adapters.docker.adapter import Placed as PlacedNow

        try:
            views = [(h, self.ad.hosts[h].inspect(cid)) for h, cid in made]
        except DockerAdapterError:
            return  # the next observe finds them
        host0, rank0 = views[0]
        self.ad.last.placed[ch.job] = PlacedNow(host0, rank0, placed.labels, members=list(views[1:]))

    # -- reconcile -------------------------------------------------------------------------------

    def reconcile(self) -> list[str]:
        """Stale replicas removed; a broken gang stopped with a checkpoint; the replicas of a gang
        whose rank 0 is not running stopped and removed. A line per thing done."""
        done: list[str] = []
        for job_id, placed in self.ad.last.placed.items():
            stale = [(h, c) for h, c in placed.stale if h not in self.ad.last.down]
            rank0_runs = placed.container.state in ("running", "paused", "restarting") and placed.host not in self.ad.last.down
            members = [(h, c) for h, c in placed.members if h not in self.ad.last.down]
            try:
                if job_id in self.ad.last.broken and rank0_runs:
                    code = self.ad._checkpoint_stop(self.ad.hosts[placed.host], placed.container)
                    done.append(f"{job_id}: broken gang ({self.ad.last.broken[job_id]}): rank 0 checkpointed (exit {code})")
                    rank0_runs = False
                if not rank0_runs and members:
                    stale.extend(members)
                if stale:
                    self._stop_members(stale)
                    done.append(f"{job_id}: {len(stale)} replica(s) of no running gang stopped{self._remove(stale)}")
            except DockerAdapterError as exc:
                done.append(f"{job_id}: could not settle its gang: {exc.kind}: {exc.message}")
        for job_id, orphans in self.ad.last.orphans.items():
            alive = [(h, c) for h, c in orphans if h not in self.ad.last.down]
            if job_id in self.ad.last.placed or not alive:
                continue
            try:
                self._stop_members(alive)
                done.append(f"{job_id}: {len(alive)} replica(s) without a rank 0 stopped{self._remove(alive)}")
            except DockerAdapterError as exc:
                done.append(f"{job_id}: could not remove replicas without a rank 0: {exc.kind}: {exc.message}")
        return done


def _servers_wanted(ch: Change, fields: Mapping[str, Any]) -> int:
    """The parameter servers ``ch`` asks for, in all: its servers on each host of its placement (the
    job's ``servers.min`` spread over them when the plan names none); 0 for a job without servers."""
    role = fields.get("servers")
    if role is None:
        return 0
    nodes = len(change_shares(ch))
    per = ch.servers if ch.servers is not None else max(1, -(-int(role.get("min", 1)) // nodes))
    return per * nodes


def _labelled(
    spec: dict[str, Any], values: Mapping[str, Any], rank: int, generation: int, rendezvous: Mapping[str, Any], servers: int
) -> dict[str, Any]:
    """``spec`` with the rendezvous ``values`` in its environment, the adapter's labels (rank or server
    index, generation, world size, port, the servers in all) and host networking."""
    spec["config"]["environment"] = rendezvous_env(spec["config"]["environment"], values)
    labels = {k: v for k, v in spec["config"]["labels"].items() if k not in WRITTEN_LABELS}
    labels.update({RANK: str(rank), GENERATION: str(generation), WORLD_SIZE: str(rendezvous["WORLD_SIZE"])})
    labels[MASTER_PORT] = str(rendezvous["MASTER_PORT"])
    if servers:
        labels[PS] = str(servers)
    spec["config"]["labels"] = labels
    spec["host_config"]["network_mode"] = "host"
    return spec


def _where(shares: Shares) -> str:
    return " + ".join(f"{k} on {h}" for h, k in shares) or "nowhere"
