"""Gangs that span nodes and choose their count, in the contract, the checker and the adapters.

Contract cases (each refused in one line naming the field and value): min_replicas above replicas ·
a placement on a pending job · rank 0 not listed first · a node listed twice · more nodes than
max_nodes · a running count outside [min_replicas, replicas] · an unknown node in a placement · a
fractional job allowed to span. Accepted: an old snapshot (no field) is one gang on one node.

Checker cases (a valid hand-written plan for three 4-GPU nodes, broken one way each; each case fails
without its rule): a count below min_replicas · a placement not starting at rank 0's node · a
placement whose sum is not the count · more nodes than max_nodes · a node listed twice · an unknown
node · a second node over its GPUs · a replica arriving on a cordoned node · a non-elastic gang
whose count changes named ``resize`` · a gang that cannot checkpoint restarted with a new count.

Adapters: ``adapters.base.refuse_spanning`` refuses a plan that spreads a gang, whole, before
applying anything, for an adapter that runs gangs on one node (tested here on the function). Docker
(``tests/test_docker_gangs.py``) and Kubernetes (``tests/test_kubernetes_spread_gangs.py``) place
spread gangs.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from hand_plans import assignment, plan_dict, refused_in_one_line, set_field

from adapters.base import Change, refuse_spanning
from planner import Snapshot, check_plan
from planner.io import validate_snapshot
from planner.plan import Plan, assigned_shares
from planner.transitions import action_for, previous_placement

NODES = [
    {"name": "a", "cpu_millis": 32000, "gpus": 4},
    {"name": "b", "cpu_millis": 32000, "gpus": 4},
    {"name": "c", "cpu_millis": 32000, "gpus": 4, "schedulable": False},
]
GANG = {"status": "pending", "min_gpus": 1, "max_gpus": 1, "min_cpu_millis": 1000, "max_cpu_millis": 1000}
SPREAD = [{"node": "a", "replicas": 4}, {"node": "b", "replicas": 2}]


def _gang(job_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, **GANG, "replicas": 8, "min_replicas": 2, "max_nodes": 2, **extra}


def _running(job_id: str, placement: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return _gang(job_id, status="running", node="a", allocation={"cpu_millis": 1000, "gpus": 1}, placement=placement, **extra)


def _snap(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"time": 0.0, "nodes": NODES, "jobs": jobs}


REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "min above replicas": (_gang("x", min_replicas=9), "jobs[0].min_replicas: 9 exceeds replicas 8"),
    "placement on a pending job": (_gang("x", placement=SPREAD), "jobs[0].placement: set, but the job is pending"),
    "rank 0 not first": (
        _running("x", [{"node": "b", "replicas": 2}, {"node": "a", "replicas": 4}]),
        "jobs[0].placement[0].node: 'b', but rank 0 runs on node 'a'",
    ),
    "a node twice": (
        _running("x", [{"node": "a", "replicas": 2}, {"node": "a", "replicas": 2}]),
        "jobs[0].placement[1].node: 'a' listed twice",
    ),
    "too many nodes": (_running("x", SPREAD, max_nodes=1), "jobs[0].placement: 2 nodes, but max_nodes is 1"),
    "count above replicas": (
        _running("x", [{"node": "a", "replicas": 4}, {"node": "b", "replicas": 4}], replicas=6, min_replicas=1),
        "jobs[0].placement: 8 replicas in all, outside [1, 6]",
    ),
    "count below min": (_running("x", [{"node": "a", "replicas": 1}]), "jobs[0].placement: 1 replicas in all, outside [2, 8]"),
    "empty placement": (_running("x", []), "jobs[0].placement: empty"),
    "unknown node": (
        _running("x", [{"node": "a", "replicas": 2}, {"node": "zz", "replicas": 2}]),
        "jobs[0].placement[1].node: unknown node name 'zz'",
    ),
    "a spanning fraction": (
        {"id": "x", "status": "pending", "min_gpus": 1, "max_gpus": 1, "gpu_milli": 300, "max_nodes": 2},
        "jobs[0].max_nodes: 2, but a fractional job (gpu_milli 300)",
    ),
    "zero max_nodes": (_gang("x", max_nodes=0), "jobs[0].max_nodes"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_contract_refuses_in_one_line(case: str) -> None:
    job, must = REFUSED[case]
    refused_in_one_line(_snap([job]), must)


def test_old_snapshots_mean_one_gang_on_one_node() -> None:
    snap = validate_snapshot(
        _snap([{"id": "x", "status": "running", "replicas": 3, "node": "a", "allocation": {"cpu_millis": 1000}}])
    )
    job = snap.jobs[0]
    assert (job.max_nodes, job.min_replicas, job.fewest_replicas, job.elastic, job.placement) == (1, None, 3, False, None)
    assert job.shares() == (("a", 3),)
    prev = previous_placement(job)
    assert prev is not None and (prev.replicas, prev.placement) == (3, None)
    spread = validate_snapshot(_snap([_running("y", SPREAD)])).jobs[0]
    assert spread.shares() == (("a", 4), ("b", 2))
    assert previous_placement(spread).replicas == 6  # type: ignore[union-attr]


def test_transitions_of_a_count_change() -> None:
    """Rank 0 stays on a; the count or placement changes: a resize only for an elastic gang."""
    fixed = Snapshot.model_validate(_snap([_running("x", SPREAD)])).jobs[0]
    elastic = Snapshot.model_validate(_snap([_running("x", SPREAD, elastic=True)])).jobs[0]
    assert action_for(fixed, "a", True, same_shares=False) == "migrate"
    assert action_for(elastic, "a", True, same_shares=False) == "resize"
    assert action_for(elastic, "b", True, same_shares=False) == "migrate"  # rank 0 moves: a restart
    assert action_for(fixed, "a", True, same_shares=True) == "keep"


# --- the checker -------------------------------------------------------------------------------

SNAP = Snapshot.model_validate(
    _snap(
        [
            _running("big", SPREAD),  # 6 replicas: a:4, b:2
            _gang("new", replicas=2, min_replicas=None, max_nodes=1),
            {"id": "cpu", "status": "pending", "min_cpu_millis": 1000, "max_cpu_millis": 1000},
        ]
    )
)


def _a(job: str, node: str | None, action: str, **extra: Any) -> dict[str, Any]:
    return assignment(job, node, action, gpus=0 if job == "cpu" or node is None else 1, **extra)


def _valid() -> dict[str, Any]:
    """big keeps a:4 + b:2, new (2 replicas) starts on b, cpu starts on a (CPU only)."""
    return plan_dict(
        [
            _a("big", "a", "keep", replicas=6, placement=copy.deepcopy(SPREAD)),
            _a("new", "b", "start", replicas=2),
            _a("cpu", "a", "start"),
        ]
    )


_set = set_field


def _grow(d: dict[str, Any], placement: list[dict[str, Any]], action: str = "migrate") -> dict[str, Any]:
    return _set(d, "big", replicas=sum(s["replicas"] for s in placement), placement=placement, action=action)


BROKEN: dict[str, tuple[Any, str]] = {
    "count below min": (lambda d: _grow(d, [{"node": "a", "replicas": 1}]), "big: 1 replicas placed, outside [2, 8]"),
    "rank 0 not first": (
        lambda d: _set(d, "big", placement=[{"node": "b", "replicas": 2}, {"node": "a", "replicas": 4}]),
        "big: placement starts on b, but rank 0's node is a",
    ),
    "sum is not the count": (lambda d: _set(d, "big", replicas=5), "big: placement holds 6 replicas, the assignment 5"),
    "more nodes than max_nodes": (
        lambda d: _grow(d, [{"node": "a", "replicas": 2}, {"node": "b", "replicas": 1}, {"node": "c", "replicas": 1}]),
        "big: placement spans 3 nodes, max_nodes is 2",
    ),
    "a node twice": (
        lambda d: _grow(d, [{"node": "a", "replicas": 2}, {"node": "a", "replicas": 2}]),
        "big: placement names a node twice",
    ),
    "unknown node": (lambda d: _grow(d, [{"node": "a", "replicas": 4}, {"node": "q", "replicas": 2}]), "unknown node 'q'"),
    "second node over its GPUs": (
        lambda d: _grow(d, [{"node": "a", "replicas": 4}, {"node": "b", "replicas": 3}]),
        "node b: gpus 5 exceeds capacity 4",
    ),
    "a replica on a cordoned node": (
        lambda d: _grow(d, [{"node": "a", "replicas": 4}, {"node": "c", "replicas": 2}]),
        "big: placed on unschedulable node c",
    ),
    "count change named resize": (
        lambda d: _grow(d, [{"node": "a", "replicas": 4}], action="resize"),
        "big: replicas changed (not elastic) with action 'resize' (expected 'migrate')",
    ),
}


def test_the_hand_written_plan_is_valid() -> None:
    plan = Plan.model_validate(_valid())
    assert check_plan(SNAP, plan) == []
    assert assigned_shares(plan.assignments[0]) == (("a", 4), ("b", 2))
    assert assigned_shares(plan.assignments[1]) == (("b", 2),)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_checker_catches(case: str) -> None:
    breaker, must = BROKEN[case]
    found = check_plan(SNAP, Plan.model_validate(breaker(copy.deepcopy(_valid()))))
    assert any(must in v for v in found), found


def test_count_changes_by_restart_or_live() -> None:
    """Shrinking the non-elastic gang to a:4 is a migrate (a restart) and spends the budget; an
    elastic one resizes live; a gang that cannot checkpoint may not restart with a new count."""
    shrunk = _grow(copy.deepcopy(_valid()), [{"node": "a", "replicas": 4}])
    assert check_plan(SNAP, Plan.model_validate(shrunk)) == []
    tight = Snapshot.model_validate(SNAP.model_dump() | {"settings": {"migration_budget": 0}})
    assert any("exceed the budget of 0" in v for v in check_plan(tight, Plan.model_validate(shrunk)))
    elastic = Snapshot.model_validate(_snap([_running("big", SPREAD, elastic=True), *SNAP.model_dump()["jobs"][1:]]))
    live = _grow(copy.deepcopy(_valid()), [{"node": "a", "replicas": 4}], action="resize")
    assert check_plan(elastic, Plan.model_validate(live)) == []
    stuck = Snapshot.model_validate(_snap([_running("big", SPREAD, migratable=False), *SNAP.model_dump()["jobs"][1:]]))
    found = check_plan(stuck, Plan.model_validate(shrunk))
    assert any("cannot checkpoint (migratable=false) but its replicas changed" in v for v in found), found


def test_adapters_refuse_a_spread_gang_whole() -> None:
    changes = [
        Change(job="one", kind="start", node="a", cpu_millis=1000, gpus=1),
        Change(job="big", kind="start", node="a", cpu_millis=1000, gpus=1, replicas=6, placement=(("a", 4), ("b", 2))),
    ]
    assert refuse_spanning(changes[:1], "Kubernetes", logging.getLogger("test")) is None
    packed = Change(job="p", kind="start", node="a", cpu_millis=1000, gpus=1, replicas=2, placement=(("a", 2),))
    assert refuse_spanning([packed], "Kubernetes", logging.getLogger("test")) is None
    out = refuse_spanning(changes, "Kubernetes", logging.getLogger("test"))
    assert out is not None and [o.ok for o in out] == [False, False]
    assert out[1].message == "job big: replicas on 2 nodes (4 on a, 2 on b) cannot be placed by Kubernetes yet (one node per job)"
    assert out[0].message.startswith("job one: not applied, the plan was refused: job big:")
    assert changes[1].as_dict()["placement"] == [["a", 4], ["b", 2]]
    assert changes[1].key() != Change(job="big", kind="start", node="a", cpu_millis=1000, gpus=1, replicas=6).key()
