"""A gang's ranks on Docker: the labels that find them again, where they go, the rendezvous they get,
and whether a running gang is whole. Pure functions of labels and placements (no engine calls);
:mod:`adapters.docker.gangs` carries out the changes with them (its docstring has the rules).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.base import ErrorKind, Shares
from adapters.docker.engine import ContainerView
from adapters.docker.errors import DockerAdapterError, LabelError
from adapters.docker.labels import PREFIX, RENDEZVOUS

RANK = PREFIX + "rank"
GENERATION = PREFIX + "generation"
WORLD_SIZE = PREFIX + "world_size"
MASTER_PORT = PREFIX + "master_port"
ROLE = PREFIX + "role"
PS = PREFIX + "ps"
WRITTEN_LABELS = (RANK, GENERATION, WORLD_SIZE, MASTER_PORT, ROLE, PS)
#: ``flowplan.role`` of a parameter server (a worker has none).
SERVER_ROLE = "ps"
#: The rendezvous variables every replica of a ``torch`` gang gets (torchrun's names).
RENDEZVOUS_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
#: What every replica of a ``tensorflow`` gang gets instead: the cluster and its own task, as JSON.
TF_CONFIG = "TF_CONFIG"
#: Every variable the adapter sets, in the order it writes them; a template's own values are dropped.
WRITTEN_ENV = (*RENDEZVOUS_ENV, TF_CONFIG)
PORT_BASE = 29500  # torchrun's default MASTER_PORT
#: Up to 32768, where Linux's default ephemeral range starts (``net.ipv4.ip_local_port_range``, 32768-60999):
#: a port in that range can be the source port of any outgoing connection on the host, and a replica
#: (host networking) cannot listen on a port a connection holds. It was [29500, 49500): in CI a
#: parameter-server gang's rank 0 exited 1, and the tests' Kubernetes sandbox alone holds ~70 ports there.
PORT_SPAN = 32768 - PORT_BASE


@dataclass(frozen=True)
class Member:
    """What the adapter-written labels of one container of a gang say (defaults: the user's own container)."""

    rank: int = 0  # a parameter server's: its index among the servers
    generation: int = 0
    world_size: int | None = None
    port: int | None = None
    server: bool = False  # a parameter server (``flowplan.role=ps``), not a worker
    servers: int = 0  # the parameter servers of this start, in all (``flowplan.ps``)


def member_of(labels: Mapping[str, str]) -> Member:
    """The :class:`Member` labels of a container; raises :class:`LabelError` naming a bad one."""

    def whole(key: str, lo: int, hi: int) -> int | None:
        text = labels.get(key)
        if text is None:
            return None
        try:
            v = int(text.strip())
        except ValueError:
            raise LabelError(f"label {key}: not a whole number ({text!r})") from None
        if not lo <= v <= hi:
            raise LabelError(f"label {key}: must be between {lo} and {hi} ({text!r})")
        return v

    role = labels.get(ROLE)
    if role is not None and role.strip() != SERVER_ROLE:
        raise LabelError(f"label {ROLE}: expected {SERVER_ROLE} (a parameter server) or none ({role!r})")
    return Member(
        rank=whole(RANK, 0, 1023) or 0,
        generation=whole(GENERATION, 0, 10**9) or 0,
        world_size=whole(WORLD_SIZE, 1, 1024),
        port=whole(MASTER_PORT, 1, 65535),
        server=role is not None,
        servers=whole(PS, 0, 1024) or 0,
    )


def is_member(labels: Mapping[str, str]) -> bool:
    """A container of a gang other than its rank 0: a worker of rank 1 or more, or a parameter server."""
    m = member_of(labels)
    return m.server or m.rank > 0


def is_gang(fields: Mapping[str, Any]) -> bool:
    """A job whose labels declare more than one replica, or parameter servers."""
    return int(fields.get("replicas", 1)) > 1 or "servers" in fields


def shares_problem(fields: Mapping[str, Any], shares: Shares, hosts: Iterable[str]) -> tuple[ErrorKind, str] | None:
    """Why a gang with ``fields`` (its labels) cannot run at ``shares`` (``None``: it can): the error
    kind and one line. A malformed placement (a host listed twice or with no replica, an unknown
    host) is ``invalid``: it can never work. A count or a spread outside the job's declared bounds
    is ``conflict``: the plan was made for other labels (a stale snapshot), and is re-planned."""
    names = [n for n, _ in shares]
    count = sum(k for _, k in shares)
    replicas = int(fields.get("replicas", 1))
    fewest = int(fields.get("min_replicas") or replicas)
    if not shares or any(k < 1 for _, k in shares):
        return "invalid", f"placement {list(shares)}: a host listed with no replica"
    if len(set(names)) != len(names):
        return "invalid", f"placement {list(shares)}: a host listed twice"
    unknown = sorted(set(names) - set(hosts))
    if unknown:
        return "invalid", f"unknown host {unknown[0]!r} in placement {list(shares)}"
    if len(names) > int(fields.get("max_nodes", 1)):
        return "conflict", f"placement over {len(names)} hosts, but flowplan.max_nodes is {fields.get('max_nodes', 1)}"
    if not fewest <= count <= replicas:
        return "conflict", f"{count} replicas, outside [{fewest}, {replicas}] (flowplan.min_replicas, flowplan.replicas)"
    return None


def rank_layout(shares: Shares) -> list[tuple[str, int, int, int]]:
    """``(host, rank, local rank, replicas on that host)`` of every replica, ranks along ``shares``."""
    out: list[tuple[str, int, int, int]] = []
    for host, k in shares:
        for local in range(k):
            out.append((host, len(out), local, k))
    return out


def rendezvous_env(env: Sequence[str], values: Mapping[str, Any]) -> list[str]:
    """``env`` (``NAME=value`` items) without any variable the adapter sets (:data:`WRITTEN_ENV`), then
    ``values`` (some of those names) in that order."""
    names = set(WRITTEN_ENV)
    kept = [item for item in env if item.partition("=")[0] not in names]
    return [*kept, *(f"{name}={values[name]}" for name in WRITTEN_ENV if name in values)]


def tf_config(workers: Sequence[str], index: int, servers: Sequence[str] = (), task: str = "worker") -> str:
    """TensorFlow's ``TF_CONFIG`` for task ``index`` of type ``task`` (``worker`` or ``ps``): the cluster
    of ``workers`` (``host:port`` each, rank order) and, for a parameter-server job, its ``servers``
    (``ps``), and this container's task. There is no ``chief`` task: TensorFlow's multi-worker
    strategies then make worker 0 the chief, and worker 0 is rank 0, the replica that checkpoints and
    reports (``docs/docker.md``)."""
    cluster: dict[str, list[str]] = {"worker": list(workers)}
    if servers:
        cluster["ps"] = list(servers)
    return json.dumps({"cluster": cluster, "task": {"type": task, "index": index}}, separators=(",", ":"))


def ports_held(labels: Mapping[str, str]) -> range:
    """The ports a running gang's rank 0 (its ``labels``) says its gang holds: its master port, and for a
    ``tensorflow`` gang one port per replica from it (each worker listens on its own). Empty: none written."""
    m = member_of(labels)
    if m.port is None:
        return range(0)
    tf = labels.get(RENDEZVOUS, "").strip().lower() == "tensorflow"
    return range(m.port, m.port + ((m.world_size or 1) + m.servers if tf else 1))


def choose_port(job_id: str, taken: Iterable[int], preferred: int | None = None, width: int = 1) -> int:
    """The rendezvous port of ``job_id``, the first of ``width`` consecutive ones (a ``tensorflow`` gang's
    workers each listen on one): ``preferred`` (its last one) when that block is free, else the first
    block clear of ``taken`` from a hash of the id in [:data:`PORT_BASE`, +:data:`PORT_SPAN`), wrapping
    within it; deterministic."""
    used = set(taken)

    def clear(port: int) -> bool:
        return not any(p in used for p in range(port, port + width))

    if preferred is not None and clear(preferred):
        return preferred
    first = zlib.crc32(job_id.encode()) % PORT_SPAN
    for i in range(PORT_SPAN):
        port = PORT_BASE + (first + i) % PORT_SPAN
        if port + width <= PORT_BASE + PORT_SPAN and clear(port):
            return port
    raise DockerAdapterError("conflict", f"job {job_id}: no free rendezvous port in [{PORT_BASE}, {PORT_BASE + PORT_SPAN})")


def shares_of(rank0_host: str, members: Sequence[tuple[str, ContainerView]]) -> Shares:
    """Replicas (workers) per host, rank 0's host first, then the hosts in the order of their lowest rank."""
    counts: dict[str, int] = {rank0_host: 1}
    workers = [m for m in members if not member_of(m[1].labels).server]
    for host, _ in sorted(workers, key=lambda m: member_of(m[1].labels).rank):
        counts[host] = counts.get(host, 0) + 1
    return tuple(counts.items())


def split_members(
    rank0: ContainerView, others: Sequence[tuple[str, ContainerView]]
) -> tuple[list[tuple[str, ContainerView]], list[tuple[str, ContainerView]]]:
    """``(members, stale)``: the replicas of rank 0's generation (one per rank, rank order; then its
    parameter servers, one per index), and the rest."""
    gen = member_of(rank0.labels).generation
    members: dict[tuple[bool, int], tuple[str, ContainerView]] = {}
    stale: list[tuple[str, ContainerView]] = []
    for host, c in sorted(others, key=lambda m: -m[1].created):  # the newest of a rank wins
        m = member_of(c.labels)
        if m.generation == gen and gen > 0 and (m.server, m.rank) not in members:
            members[(m.server, m.rank)] = (host, c)
        else:
            stale.append((host, c))
    return [members[k] for k in sorted(members)], stale


def servers_of(members: Sequence[tuple[str, ContainerView]]) -> list[tuple[str, ContainerView]]:
    """The parameter servers among a gang's members."""
    return [m for m in members if member_of(m[1].labels).server]


def workers_of(members: Sequence[tuple[str, ContainerView]]) -> list[tuple[str, ContainerView]]:
    """The workers among a gang's members (rank 0 is not a member)."""
    return [m for m in members if not member_of(m[1].labels).server]


def broken(
    rank0_host: str, rank0: ContainerView, members: Sequence[tuple[str, ContainerView]], fields: Mapping[str, Any]
) -> str | None:
    """Why a running rank 0 is not a whole gang (``None``: it is), in one line."""
    own = member_of(rank0.labels)
    world = own.world_size
    if world is None:
        return "rank 0 runs without its gang (started outside FlowPlan?)"
    running = [m for m in workers_of(members) if m[1].state == "running"]
    if len(running) + 1 != world:
        return f"{len(running) + 1} of its {world} replicas running"
    serving = [m for m in servers_of(members) if m[1].state == "running"]
    if len(serving) != own.servers:
        return f"{len(serving)} of its {own.servers} parameter servers running"
    problem = shares_problem(fields, shares_of(rank0_host, running), [rank0_host, *(h for h, _ in running)])
    return None if problem is None else problem[1]
