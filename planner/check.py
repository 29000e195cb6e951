"""Independent plan checker: re-derives every hard rule from the Snapshot and the Plan alone.

It shares no code with the model builder or the backends, so a bug there cannot hide itself here.
Rules:

- every active job (pending/running) has exactly one assignment; no other job has one;
- a placed job is on a known node; a job that *arrives* on a node (start, migrate) finds it
  schedulable, with the job's GPU type and labels;
- CPU and GPU are within the job's bounds, and a CPU cap (``cpu_limit_millis``) is not below the
  guaranteed share (a kept allocation of a job that cannot resize live is
  exempt: it is what the job already has);
- gangs are all or nothing: an assignment places between ``min_replicas`` (else ``replicas``) and
  ``replicas`` replicas, or none; on one node, or, with a ``placement``, on at most ``max_nodes``
  distinct known nodes, rank 0's node (the assignment's ``node``) first, adding up to its count;
  every node a replica arrives on is schedulable and qualifies;
- parameter servers: a placed job with ``servers`` names the servers on each of its nodes, within
  ``servers.min..max`` in all; no other assignment names any; new servers are a new shape (a restart
  unless the job is elastic);
- per node, CPU, GPU and memory used by all jobs placed there fit its capacity (a gang's per-replica
  figures times its replicas there, plus its servers there) — a node that jobs
  which cannot move already overfill may stay over, as long as the plan adds nothing to it; a node's
  GPUs in use are the whole-GPU jobs' GPUs plus the devices fractional jobs share;
- GPU fractions: a placed fractional job (``gpu_milli``) names a ``gpu_device`` in range, no other
  assignment names one; per device, the fractional jobs' ``gpu_milli`` add up to at most 1000 (a
  device the staying jobs already overfill may stay so, if the plan adds no job to it). Whole-GPU
  jobs are counted, not numbered, so "no device both whole-held and shared" is the count rule above;
- a job that cannot migrate keeps its node and is not paused; a job that cannot resize live changes
  its allocation only by restarting (``migrate``);
- actions match the transition (``start`` only for pending jobs, ``keep``/``resize`` only in place ...);
- checkpoint-restarts (migrations, restarts in place, pauses) do not exceed the snapshot's
  ``migration_budget``; every number is finite.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping

from planner.plan import Assignment, Plan, assigned_shares
from planner.snapshot import Job, Snapshot
from planner.transitions import PLACED, TABLE, allowed_actions


def check_plan(snapshot: Snapshot, plan: Plan) -> list[str]:
    """Return every violation found (empty: the plan is valid)."""
    bad: list[str] = []
    nodes = {n.name: n for n in snapshot.nodes}
    jobs = {j.id: j for j in snapshot.jobs}
    active = {j.id for j in snapshot.jobs if j.status != "finished"}
    seen: dict[str, int] = defaultdict(int)
    use: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    grew: set[str] = set()
    shared: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))  # node -> device -> milli
    joined: set[tuple[str, int]] = set()  # (node, device) a fractional job arrives on
    migrations = 0

    for a in plan.assignments:
        seen[a.job] += 1
        job: Job | None = jobs.get(a.job)
        if job is None:
            bad.append(f"{a.job}: assignment for an unknown job")
            continue
        if job.status == "finished":
            bad.append(f"{a.job}: assignment for a finished job")
            continue
        if a.node is not None and not job.fewest_replicas <= a.replicas <= job.replicas:
            span = f"[{job.fewest_replicas}, {job.replicas}]"
            bad.append(f"{a.job}: {a.replicas} replicas placed, outside {span} (gangs are all or nothing)")
        shares = assigned_shares(a)
        bad.extend(_placement_problems(job, a, nodes))
        for name in ("cpu_millis", "gpus", "lost_seconds"):
            v = getattr(a, name)
            if isinstance(v, float) and not math.isfinite(v):
                bad.append(f"{a.job}: {name} is not finite")
        running = job.status == "running"
        cur_alloc = job.allocation if running else None
        moved = running and a.node is not None and a.node != job.node
        current = dict(job.shares())
        servers = _servers_problems(job, a, len(shares), bad)
        # Servers are part of the shape: new ones are a new count (a restart unless elastic).
        same_shares = dict(shares) == current and (not running or servers == job.running_servers)
        frac = job.gpu_milli is not None
        if a.gpu_device is not None and (not frac or a.node is None):
            what = "the job uses whole GPUs" if not frac else "the job has no node"
            bad.append(f"{a.job}: gpu_device {a.gpu_device} set, but {what}")
        if a.node is None:
            expected = allowed_actions(job, None, False)
            if a.action not in expected:
                bad.append(f"{a.job}: no node ({job.status}) but action '{a.action}' (expected {_either(expected)})")
            if running and not job.migratable:
                bad.append(f"{a.job}: cannot checkpoint (migratable=false) but is paused")
            migrations += int(TABLE[a.action].restart)
            continue
        if a.action not in PLACED:
            bad.append(f"{a.job}: placed on {a.node} but action '{a.action}'")
        node = nodes.get(a.node)
        if node is None:
            bad.append(f"{a.job}: unknown node '{a.node}'")
            continue
        same = cur_alloc is not None and (a.cpu_millis, a.gpus, a.cpu_limit_millis) == (
            cur_alloc.cpu_millis,
            cur_alloc.gpus,
            cur_alloc.cpu_limit_millis,
        )
        kept_as_is = running and not moved and same
        if not kept_as_is or job.resizable:
            if not job.min_cpu_millis <= a.cpu_millis <= job.max_cpu_millis:
                bad.append(f"{a.job}: cpu_millis {a.cpu_millis} outside [{job.min_cpu_millis}, {job.max_cpu_millis}]")
            if not job.min_gpus <= a.gpus <= job.max_gpus:
                bad.append(f"{a.job}: gpus {a.gpus} outside [{job.min_gpus}, {job.max_gpus}]")
        if a.cpu_limit_millis is not None and a.cpu_limit_millis < a.cpu_millis and not kept_as_is:
            bad.append(f"{a.job}: cpu_limit_millis {a.cpu_limit_millis} below its guaranteed cpu_millis {a.cpu_millis}")
        # Transitions (planner.transitions: the one table every part reads).
        expected = allowed_actions(job, a.node, same, same_shares)
        if a.action in PLACED and a.action not in expected:
            if not running:
                what = "pending job placed"
            elif moved:
                what = f"moved {job.node} -> {a.node}"
            elif not same_shares:
                what = "replicas changed" if dict(shares) != current else f"servers changed ({job.running_servers} -> {servers})"
                what += "" if job.elastic else " (not elastic)"
            elif same:
                what = "allocation unchanged"
            elif not job.resizable:
                what = "cannot resize live but changed allocation"
            else:
                what = "allocation changed"
            bad.append(f"{a.job}: {what} with action '{a.action}' (expected {_either(expected)})")
        if moved and not job.migratable:
            bad.append(f"{a.job}: cannot migrate but moved {job.node} -> {a.node}")
        elif running and not same_shares and not job.elastic and not job.migratable:
            bad.append(f"{a.job}: cannot checkpoint (migratable=false) but its replicas changed")
        if running:
            migrations += int(TABLE[a.action].restart)
        arrives = (not running) or moved
        for name, count in shares:
            there = nodes.get(name)
            if there is None:
                continue  # reported by _placement_problems
            if arrives or name not in current:
                if not there.schedulable:
                    bad.append(f"{a.job}: placed on unschedulable node {there.name}")
                if not job.takes_gpu_type(there.gpu_type):
                    bad.append(f"{a.job}: needs GPU type {job.gpu_type_text()}, node {there.name} has {there.gpu_type}")
                for k, v in job.node_selector.items():
                    if there.labels.get(k) != v:
                        bad.append(f"{a.job}: node {there.name} lacks label {k}={v}")
            u = use[name]
            u[0] += a.cpu_millis * count
            u[2] += job.memory_mib * count
            if job.servers is not None:
                u[0] += servers * job.servers.cpu_millis
                u[2] += servers * job.servers.memory_mib
            if not frac:
                u[1] += a.gpus * count
            if arrives or count > current.get(name, 0) or cur_alloc is None:
                grew.add(name)
            elif a.cpu_millis > cur_alloc.cpu_millis or a.gpus > cur_alloc.gpus:
                grew.add(name)
        if frac and a.gpus > 0:
            if a.gpu_device is None or not 0 <= a.gpu_device < node.gpus:
                where = f"{node.name} with {node.gpus} GPU(s)"
                bad.append(f"{a.job}: fractional (gpu_milli {job.gpu_milli}) but gpu_device {a.gpu_device} on {where}")
            else:
                shared[node.name][a.gpu_device] += job.gpu_milli or 0
                kept = running and not moved and cur_alloc is not None and cur_alloc.gpu_device == a.gpu_device
                if not kept:
                    joined.add((node.name, a.gpu_device))

    for jid in sorted(active):
        if seen.get(jid, 0) != 1:
            bad.append(f"{jid}: {seen.get(jid, 0)} assignments (expected exactly 1)")

    # Capacity, with the exemption for nodes that jobs which cannot move already overfill.
    before: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    shared_before: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for j in snapshot.jobs:
        if j.status == "running" and j.allocation is not None and j.node is not None:
            if j.gpu_milli is not None and j.allocation.gpu_device is not None:
                shared_before[j.node][j.allocation.gpu_device] += j.gpu_milli
            for name, count in j.shares():
                b = before[name]
                b[0] += j.allocation.cpu_millis * count
                b[2] += j.memory_mib * count
                if j.servers is not None:
                    b[0] += j.running_servers * j.servers.cpu_millis
                    b[2] += j.running_servers * j.servers.memory_mib
                if j.gpu_milli is None or j.allocation.gpu_device is None:
                    b[1] += j.allocation.gpus * count
    for name, devices in shared_before.items():
        before[name][1] += len(devices)
    for name, devices in sorted(shared.items()):
        use[name][1] += len(devices)
        for d, milli in sorted(devices.items()):
            if milli > 1000 and ((name, d) in joined or milli > shared_before[name].get(d, 0)):
                bad.append(f"node {name}: GPU device {d} shared by fractional jobs using {milli} milli (over 1000)")
    for name, (cpu, gpu, mem) in sorted(use.items()):
        n = nodes[name]
        over = [
            (r, v, c)
            for r, v, c in (("cpu_millis", cpu, n.cpu_millis), ("gpus", gpu, n.gpus), ("memory_mib", mem, n.memory_mib))
            if v > c
        ]
        if not over:
            continue
        if name not in grew and all(v <= before[name][i] for i, v in enumerate((cpu, gpu, mem))):
            continue  # already over before this plan, and the plan added nothing
        for r, v, c in over:
            bad.append(f"node {name}: {r} {v} exceeds capacity {c}")

    # Running jobs that cannot stay as they are (overfull node, or a share outside their bounds that
    # cannot change live) must restart or pause whatever the budget says.
    forced = 0
    for j in snapshot.jobs:
        if j.status != "running" or j.allocation is None or j.node is None:
            continue
        caps = {name: (nodes[name].cpu_millis, nodes[name].gpus, nodes[name].memory_mib) for name, _ in j.shares()}
        overfull = any(any(v > c for v, c in zip(before[name], cap, strict=True)) for name, cap in caps.items())
        outside = not (
            j.min_cpu_millis <= j.allocation.cpu_millis <= j.max_cpu_millis and j.min_gpus <= j.allocation.gpus <= j.max_gpus
        )
        forced += int(j.migratable and (overfull or outside))
    if migrations > max(snapshot.settings.migration_budget, forced):
        bad.append(f"{migrations} migrations and pauses exceed the budget of {snapshot.settings.migration_budget}")
    return bad


def _servers_problems(job: Job, a: Assignment, nodes: int, bad: list[str]) -> int:
    """The servers per node an assignment gives (0: none), its problems appended to ``bad``: a
    parameter-server job that is placed names them, the same on each of its nodes, within
    ``servers.min..max`` in all; no other assignment does."""
    if job.servers is None or a.node is None:
        if a.servers is not None:
            what = "the job has no parameter servers" if job.servers is None else "the job has no node"
            bad.append(f"{a.job}: servers {a.servers} set, but {what}")
        return 0
    if a.servers is None or a.servers < 1:
        bad.append(f"{a.job}: a parameter-server job placed without its servers (servers {a.servers})")
        return 0
    total = a.servers * nodes
    if not job.servers.min <= total <= job.servers.max:
        span = f"[{job.servers.min}, {job.servers.max}]"
        bad.append(f"{a.job}: {a.servers} server(s) on each of {nodes} node(s), {total} in all, outside {span}")
    return a.servers


def _placement_problems(job: Job, a: Assignment, nodes: Mapping[str, object]) -> list[str]:
    """What is wrong with an assignment's ``placement`` (its shape; capacity is checked per node)."""
    if a.placement is None:
        return []
    if a.node is None:
        return [f"{a.job}: a placement but no node"]
    bad: list[str] = []
    names = [s.node for s in a.placement]
    if names[0] != a.node:
        bad.append(f"{a.job}: placement starts on {names[0]}, but rank 0's node is {a.node}")
    if len(set(names)) != len(names):
        bad.append(f"{a.job}: placement names a node twice ({', '.join(names)})")
    if len(set(names)) > job.max_nodes:
        bad.append(f"{a.job}: placement spans {len(set(names))} nodes, max_nodes is {job.max_nodes}")
    if sum(s.replicas for s in a.placement) != a.replicas:
        bad.append(f"{a.job}: placement holds {sum(s.replicas for s in a.placement)} replicas, the assignment {a.replicas}")
    bad.extend(f"{a.job}: unknown node '{n}' in its placement" for n in names if n not in nodes)
    return bad


def _either(actions: tuple[str, ...]) -> str:
    return " or ".join(f"'{a}'" for a in actions)
