"""Many changes applied at once (adapters/kubernetes/pool.py), against a real kube-apiserver with kwok nodes.

Nothing of the API is mocked (tests/k8s_env.py): one daemon interval (:class:`adapters.loop.ControlLoop`
with the SQLite state store as its recorder, as the daemon runs it) over 40 FlowPlan pods on the
sandbox's 3 nodes: 24 running, 12 pending single pods and a pending gang of 4. The plan is the
FlowPlan planner's, with one running job's assignment moved to another node: on an idle cluster
the planner has no reason to migrate anything, and the interval must carry out a migration among
the binds and resizes. The edited plan must still pass the plan checker (asserted).

Case matrix (one interval, up to 8 changes at once):

- the server ends exactly in the planned state: every job's live pod(s) on the planned node with
  the planned CPU request and cap; the migrated job as one pod on the target node, the old pod
  gone; the gang's 4 pods all on one node;
- one outcome per change, in the order of the changes, every one ``ok``; every change recorded in
  the state store as an action of the interval's plan, ``done``, with its outcome's message;
- the changes did overlap: more than one API call was in flight at some moment (counted by
  wrapping the client's ``call_api``), so the interval did not fall back to one at a time.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from k8s_env import NAMESPACE, core, create_pod, pod_body, pods, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("k8s_no_pods")]

BOUNDS = {"flowplan.io/min_cpu_millis": "500", "flowplan.io/max_cpu_millis": "2000"}


class InFlight:
    """Wraps ``ApiClient.call_api``: the most calls in flight at once."""

    def __init__(self, api_client: Any) -> None:
        self.now = self.peak = 0
        lock = threading.Lock()
        real = api_client.call_api

        def call_api(*args: Any, **kwargs: Any) -> Any:
            with lock:
                self.now += 1
                self.peak = max(self.peak, self.now)
            try:
                return real(*args, **kwargs)
            finally:
                with lock:
                    self.now -= 1

        api_client.call_api = call_api


def with_one_migration(plan: Any, snapshot: Any, job_id: str) -> Any:
    """``plan`` with ``job_id`` (running) moved to the next node, its CPU as planned."""
    job = next(j for j in snapshot.jobs if j.id == job_id)
    nodes = sorted(n.name for n in snapshot.nodes)
    target = nodes[(nodes.index(job.node) + 1) % len(nodes)]
    out = []
    for a in plan.assignments:
        if a.job == job_id:
            a = a.model_copy(update={"node": target, "action": "migrate"})
        out.append(a)
    return plan.model_copy(update={"assignments": out})


def test_one_interval_of_many_changes_at_once_ends_in_the_planned_state(k8s_sandbox: Any, tmp_path: Path) -> None:
    from adapters.base import WallClock
    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.pods import job_id_of, millis
    from adapters.kubernetes.sandbox import api_client
    from adapters.loop import ControlLoop, Tick
    from planner.policies import make_policy
    from store import StateStore

    api = core(k8s_sandbox)
    nodes = k8s_sandbox.nodes
    for i in range(24):
        create_pod(api, pod_body(f"run-{i:02d}", cpu="500m", limit="2", node=nodes[i % len(nodes)], annotations=BOUNDS))
    for i in range(12):
        create_pod(api, pod_body(f"wait-{i:02d}", cpu="500m", limit="2", annotations=BOUNDS))
    gang = {**BOUNDS, "flowplan.io/gang-size": "4"}
    for i in range(4):
        create_pod(api, pod_body(f"gang-{i}", cpu="500m", limit="2", annotations=gang, labels={"flowplan.io/gang": "g"}))
    wait_for(
        lambda: sum((p.get("status") or {}).get("phase") == "Running" for p in pods(api)) == 24, 60, "the 24 bound pods Running"
    )

    client = api_client(k8s_sandbox)
    adapter = KubernetesAdapter(client, namespaces=[NAMESPACE], workers=8)
    flight = InFlight(client)
    planner = make_policy("flowplan", time_limit=2.0)
    migrated = "run-00"

    def policy(snapshot: Any) -> Any:
        return with_one_migration(planner(snapshot), snapshot, migrated)

    store = StateStore(str(tmp_path / "state.db"))
    try:
        tick = ControlLoop(adapter, policy, WallClock(), recorder=store).step()
        assert isinstance(tick, Tick), tick
        assert tick.violations == [], tick.violations
        records = [r for r in store.actions(limit=1000) if r.plan_id == tick.plan_id]
    finally:
        store.close()
        adapter.close()

    kinds = {c.kind for c in tick.changes}
    assert {"start", "resize", "migrate"} <= kinds, kinds
    assert any(c.job == "g" and c.kind == "start" and c.replicas == 4 for c in tick.changes)
    assert [o.change for o in tick.outcomes] == tick.changes  # one outcome per change, in order
    assert all(o.ok for o in tick.outcomes), [o for o in tick.outcomes if not o.ok]
    assert flight.peak > 1, "no two API calls were ever in flight at once"

    # every change recorded, done, with its outcome's message
    assert sorted((r.job, r.kind) for r in records) == sorted((c.job, c.kind) for c in tick.changes)
    said = {o.change.job: o.message for o in tick.outcomes}
    assert all(r.status == "done" and r.message == said[r.job] for r in records), records

    # the server's state is the plan
    live: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in pods(api):
        if not p["metadata"].get("deletionTimestamp"):
            live[job_id_of(p)].append(p)
    planned = {a.job: a for a in tick.plan.assignments}
    assert set(live) == set(planned)
    for job_id, a in planned.items():
        assert a.node is not None, a
        assert len(live[job_id]) == a.replicas, (job_id, [p["metadata"]["name"] for p in live[job_id]])
        for p in live[job_id]:
            res = p["spec"]["containers"][0]["resources"]
            got = (p["spec"].get("nodeName"), millis(res["requests"]["cpu"]), millis(res["limits"]["cpu"]))
            assert got == (a.node, a.cpu_millis, max(a.cpu_limit_millis or 2000, a.cpu_millis)), (p["metadata"]["name"], a)
    [moved] = live[migrated]
    assert moved["metadata"]["name"] != migrated and moved["spec"]["nodeName"] != nodes[0]  # a replacement, elsewhere
