"""Independent plan checker: re-derives every hard rule from the Snapshot and the Plan alone.

It shares no code with the model builder or the backends, so a bug there cannot hide itself here.
Rules:

- every active job (pending/running) has exactly one assignment; no other job has one;
- a placed job is on a known node; a job that *arrives* on a node (start, migrate) finds it
  schedulable, with the job's GPU type and labels;
- CPU and GPU are within the job's bounds, and a CPU cap (``cpu_limit_millis``) is not below the
  guaranteed share (a kept allocation of a job that cannot resize live is
  exempt: it is what the job already has);
- gangs are all or nothing: an assignment places all ``replicas`` of a job on one node, or none;
- per node, CPU, GPU and memory used by all jobs placed there fit its capacity — a node that jobs
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

from planner.plan import Plan
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
        if a.replicas != job.replicas:
            bad.append(f"{a.job}: {a.replicas} of {job.replicas} replicas placed (gangs are all or nothing)")
        for name in ("cpu_millis", "gpus", "lost_seconds"):
            v = getattr(a, name)
            if isinstance(v, float) and not math.isfinite(v):
                bad.append(f"{a.job}: {name} is not finite")
        running = job.status == "running"
        cur_alloc = job.allocation if running else None
        moved = running and a.node is not None and a.node != job.node
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
        expected = allowed_actions(job, a.node, same)
        if a.action in PLACED and a.action not in expected:
            if not running:
                what = "pending job placed"
            elif moved:
                what = f"moved {job.node} -> {a.node}"
            elif same:
                what = "allocation unchanged"
            elif not job.resizable:
                what = "cannot resize live but changed allocation"
            else:
                what = "allocation changed"
            bad.append(f"{a.job}: {what} with action '{a.action}' (expected {_either(expected)})")
        if moved and not job.migratable:
            bad.append(f"{a.job}: cannot migrate but moved {job.node} -> {a.node}")
        if running:
            migrations += int(TABLE[a.action].restart)
        arrives = (not running) or moved
        if arrives:
            if not node.schedulable:
                bad.append(f"{a.job}: placed on unschedulable node {node.name}")
            if job.gpu_type is not None and node.gpu_type != job.gpu_type:
                bad.append(f"{a.job}: needs GPU type {job.gpu_type}, node {node.name} has {node.gpu_type}")
            for k, v in job.node_selector.items():
                if node.labels.get(k) != v:
                    bad.append(f"{a.job}: node {node.name} lacks label {k}={v}")
        u = use[node.name]
        u[0] += a.cpu_millis * job.replicas
        u[2] += job.memory_mib * job.replicas
        if frac and a.gpus > 0:
            if a.gpu_device is None or not 0 <= a.gpu_device < node.gpus:
                where = f"{node.name} with {node.gpus} GPU(s)"
                bad.append(f"{a.job}: fractional (gpu_milli {job.gpu_milli}) but gpu_device {a.gpu_device} on {where}")
            else:
                shared[node.name][a.gpu_device] += job.gpu_milli or 0
                kept = running and not moved and cur_alloc is not None and cur_alloc.gpu_device == a.gpu_device
                if not kept:
                    joined.add((node.name, a.gpu_device))
        else:
            u[1] += a.gpus * job.replicas
        if arrives or cur_alloc is None or a.cpu_millis > cur_alloc.cpu_millis or a.gpus > cur_alloc.gpus:
            grew.add(node.name)

    for jid in sorted(active):
        if seen.get(jid, 0) != 1:
            bad.append(f"{jid}: {seen.get(jid, 0)} assignments (expected exactly 1)")

    # Capacity, with the exemption for nodes that jobs which cannot move already overfill.
    before: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    shared_before: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for j in snapshot.jobs:
        if j.status == "running" and j.allocation is not None and j.node is not None:
            b = before[j.node]
            b[0] += j.allocation.cpu_millis * j.replicas
            b[2] += j.memory_mib * j.replicas
            if j.gpu_milli is not None and j.allocation.gpu_device is not None:
                shared_before[j.node][j.allocation.gpu_device] += j.gpu_milli
            else:
                b[1] += j.allocation.gpus * j.replicas
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
        n, b = nodes[j.node], before[j.node]
        overfull = b[0] > n.cpu_millis or b[1] > n.gpus or b[2] > n.memory_mib
        outside = not (
            j.min_cpu_millis <= j.allocation.cpu_millis <= j.max_cpu_millis and j.min_gpus <= j.allocation.gpus <= j.max_gpus
        )
        forced += int(j.migratable and (overfull or outside))
    if migrations > max(snapshot.settings.migration_budget, forced):
        bad.append(f"{migrations} migrations and pauses exceed the budget of {snapshot.settings.migration_budget}")
    return bad


def _either(actions: tuple[str, ...]) -> str:
    return " or ".join(f"'{a}'" for a in actions)
