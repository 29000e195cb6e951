"""GPU fractions in the contract and the independent checker.

Contract cases (each refused in one line naming the field and value): a fraction with max_gpus 2 ·
with replicas 2 · gpu_milli 0 and 1000 (outside 1..999) · a device on a whole-GPU job's allocation ·
a running fractional job without its device · a device out of the node's range · allocation.gpus 2
on a fractional job. Accepted: an old snapshot (no field) means whole GPUs, as before.

Checker cases (a valid hand-written plan for a 2-GPU node, broken one way each; each case fails
without its rule): a device over 1000 milli · a whole GPU and two shared devices on 2 GPUs · a
fractional job without a device · a device out of range · a device on a whole-GPU job · a device on
a job left waiting · a staying job's over-full device is left alone when nothing joins it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hand_plans import assignment, plan_dict, refused_in_one_line, set_field

from planner import Snapshot, check_plan
from planner.io import validate_snapshot
from planner.plan import Plan

NODES = [
    {"name": "g", "cpu_millis": 16000, "gpus": 2},
    {"name": "h", "cpu_millis": 16000, "gpus": 2},
]


def _frac(job_id: str, milli: int, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "status": "pending", "min_gpus": 1, "max_gpus": 1, "gpu_milli": milli, **extra}


def _snap(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"time": 0.0, "nodes": NODES, "jobs": jobs}


RUNNING_600 = _frac("stay", 600, status="running", node="g", allocation={"cpu_millis": 1000, "gpus": 1, "gpu_device": 0})

REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "fraction of two GPUs": (_frac("x", 460, max_gpus=2), "jobs[0].max_gpus: 2, but a fractional job (gpu_milli 460)"),
    "fraction of a gang": (_frac("x", 460, replicas=2), "jobs[0].replicas: 2"),
    "zero milli": (_frac("x", 0), "jobs[0].gpu_milli"),
    "a whole GPU in milli": (_frac("x", 1000), "jobs[0].gpu_milli"),
    "device on a whole-GPU job": (
        {"id": "x", "status": "running", "node": "g", "allocation": {"cpu_millis": 1000, "gpus": 1, "gpu_device": 1}},
        "jobs[0].allocation.gpu_device: 1, but the job uses whole GPUs",
    ),
    "running fraction without device": (
        _frac("x", 460, status="running", node="g", allocation={"cpu_millis": 1000, "gpus": 1}),
        "jobs[0].allocation.gpu_device: missing",
    ),
    "device out of range": (
        _frac("x", 460, status="running", node="g", allocation={"cpu_millis": 1000, "gpus": 1, "gpu_device": 2}),
        "jobs[0].allocation.gpu_device: 2 is out of range for node 'g' with 2 GPU(s)",
    ),
    "fraction holding two GPUs": (
        _frac("x", 460, status="running", node="g", allocation={"cpu_millis": 1000, "gpus": 2, "gpu_device": 0}),
        "jobs[0].allocation.gpus: 2",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_contract_refuses_in_one_line(case: str) -> None:
    job, must = REFUSED[case]
    refused_in_one_line(_snap([job]), must)


def test_old_snapshots_mean_whole_gpus() -> None:
    snap = validate_snapshot(_snap([{"id": "x", "status": "pending", "min_gpus": 1, "max_gpus": 2}]))
    assert snap.jobs[0].gpu_milli is None
    assert "gpu_device" not in snap.model_dump(exclude_defaults=True)["jobs"][0]
    ok = validate_snapshot(_snap([RUNNING_600]))
    assert ok.jobs[0].allocation is not None and ok.jobs[0].allocation.gpu_device == 0


# --- the checker -------------------------------------------------------------------------------

SNAP = Snapshot.model_validate(
    _snap(
        [
            RUNNING_600,
            _frac("new", 300),
            _frac("other", 500),
            {"id": "whole", "status": "pending", "min_gpus": 1, "max_gpus": 1},
            _frac("queued", 900),
        ]
    )
)


def _a(job: str, node: str | None, action: str, gpus: int, device: int | None) -> dict[str, Any]:
    return assignment(job, node, action, gpus=gpus, gpu_device=device)


def _valid() -> dict[str, Any]:
    """stay (600) keeps device 0 of g, new (300) joins it, whole takes g's other GPU, other (500)
    starts on device 0 of h, queued (900) waits."""
    return plan_dict(
        [
            _a("stay", "g", "keep", 1, 0) | {"previous": {"node": "g", "cpu_millis": 1000, "gpus": 1, "gpu_device": 0}},
            _a("new", "g", "start", 1, 0),
            _a("whole", "g", "start", 1, None),
            _a("other", "h", "start", 1, 0),
            _a("queued", None, "wait", 0, None),
        ],
        unserved=["queued"],
    )


_set = set_field


BROKEN: dict[str, tuple[Any, str]] = {
    "device over 1000 milli": (lambda d: _set(d, "other", node="g"), "node g: GPU device 0 shared by fractional jobs using 1400"),
    "whole GPU plus two shared devices": (lambda d: _set(d, "new", gpu_device=1), "node g: gpus 3 exceeds capacity 2"),
    "fraction without a device": (
        lambda d: _set(d, "new", gpu_device=None),
        "new: fractional (gpu_milli 300) but gpu_device None",
    ),
    "device out of range": (lambda d: _set(d, "other", gpu_device=2), "other: fractional (gpu_milli 500) but gpu_device 2"),
    "device on a whole-GPU job": (
        lambda d: _set(d, "whole", gpu_device=1),
        "whole: gpu_device 1 set, but the job uses whole GPUs",
    ),
    "device on a waiting job": (lambda d: _set(d, "queued", gpu_device=1), "queued: gpu_device 1 set, but the job has no node"),
}


def test_the_hand_written_plan_is_valid() -> None:
    assert check_plan(SNAP, Plan.model_validate(_valid())) == []


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_checker_catches(case: str) -> None:
    breaker, must = BROKEN[case]
    found = check_plan(SNAP, Plan.model_validate(breaker(copy.deepcopy(_valid()))))
    assert any(must in v for v in found), found


def test_a_device_already_over_is_left_alone_when_nothing_joins_it() -> None:
    """Two staying jobs already overfill device 0 (an adapter's reading): keeping them is allowed,
    a newcomer joining them is not."""
    over = _frac("over", 700, status="running", node="g", allocation={"cpu_millis": 1000, "gpus": 1, "gpu_device": 0})
    snap = Snapshot.model_validate(_snap([RUNNING_600, over, _frac("new", 300)]))
    prev = {"node": "g", "cpu_millis": 1000, "gpus": 1, "gpu_device": 0}
    d = _valid()
    d["assignments"] = [
        _a("stay", "g", "keep", 1, 0) | {"previous": prev},
        _a("over", "g", "keep", 1, 0) | {"previous": prev},
        _a("new", "h", "start", 1, 0),
    ]
    d["unserved"] = []
    assert check_plan(snap, Plan.model_validate(d)) == []
    _set(d, "new", node="g")
    assert any("GPU device 0 shared by fractional jobs using 1600" in v for v in check_plan(snap, Plan.model_validate(d)))
