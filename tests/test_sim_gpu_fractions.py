"""GPU fractions in the simulator and the adapters' refusal.

Simulator cases (real measured curves, real policies, every plan through the checker):

- four jobs of 460, 500, 300 and 700 milli on one 1-GPU node and one 2-GPU node run to the end
  under FlowPlan and the Kubernetes default; at some point two of them share a device (observed in
  the snapshots the adapter writes), and no device ever holds more than 1000 milli;
- a fractional job trains at its 1-GPU speed (the simulator does not model interference);
- GPU utilisation counts milli-GPUs: one 500-milli job alone on a 1-GPU node uses at most half of it;
- the simulator refuses a start onto a device without room, naming the device (a stale plan);
- a scenario row with ``gpu_milli`` and two GPUs is refused in one line naming the field.

Adapter cases: :func:`adapters.base.refuse_fractions` (the Docker and Kubernetes adapters' first step
in ``apply``) refuses a whole change list that places a fraction, every outcome ``invalid``, the
fractional one naming the job and its ``gpu_milli``; a list without one passes through. The Docker
and Kubernetes adapters themselves need an engine / an API server: they call this function before
touching either (their own suites run against real ones).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import pytest

from adapters.base import Change, refuse_fractions
from adapters.loop import ControlLoop
from adapters.sim.cluster import SimCluster
from adapters.sim.run import simulate
from adapters.sim.scenario import ScenarioError, parse_scenario
from adapters.sim.truth import TraceLibrary
from planner.check import check_plan
from planner.plan import Plan
from planner.policies import make_policy
from planner.snapshot import Snapshot


@pytest.fixture(scope="module")
def library() -> TraceLibrary:
    return TraceLibrary.bundled()


def _frac(job_id: str, milli: int, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "model": "cifar10", "batch_size": 512, "kind": "gpu", "epochs": 4, "arrival": 0,
            "min_cpu_millis": 1000, "max_cpu_millis": 1000, "gpu_milli": milli, **extra}  # fmt: skip


def _scenario(jobs: list[dict[str, Any]], gpus: tuple[int, ...] = (1, 2)) -> dict[str, Any]:
    nodes = [{"name": f"g{i}", "cpu_millis": 8000, "gpus": g} for i, g in enumerate(gpus)]
    return {"name": "frac", "interval_seconds": 30, "noise": 0.0, "nodes": nodes, "jobs": jobs}


@pytest.mark.parametrize("policy", ["flowplan", "kubernetes"])
def test_fractional_jobs_share_devices_and_finish(library: TraceLibrary, policy: str) -> None:
    sc = parse_scenario(_scenario([_frac("a", 460), _frac("b", 500), _frac("c", 300), _frac("d", 700)]))
    cluster = SimCluster(sc, sc.draw(0, library), library, seed=0)
    seen: list[Snapshot] = []
    checked: list[list[str]] = []

    def checker(snapshot: Snapshot, plan: Plan) -> list[str]:
        seen.append(snapshot)
        checked.append(check_plan(snapshot, plan))
        return checked[-1]

    loop = ControlLoop(cluster, make_policy(policy), cluster, interval=sc.interval_seconds, checker=checker)
    loop.run(until=lambda _: cluster.done() or cluster.timed_out())
    assert cluster.done() and not any(checked)
    shared = 0
    for snap in seen:
        load: dict[tuple[str | None, int], int] = defaultdict(int)
        for j in snap.jobs:
            if j.status == "running" and j.allocation is not None and j.allocation.gpu_device is not None:
                load[(j.node, j.allocation.gpu_device)] += j.gpu_milli or 0
        assert all(v <= 1000 for v in load.values()), load
        shared += sum(1 for v in load.values() if v > 700)  # only two jobs together go past 700
    assert shared > 0


def test_a_fraction_trains_at_its_one_gpu_speed_and_counts_its_milli(library: TraceLibrary) -> None:
    sc = parse_scenario(_scenario([_frac("a", 500)], gpus=(1,)))
    r = simulate(sc, make_policy("kubernetes"), "kubernetes", 0, library)
    whole = parse_scenario(_scenario([{k: v for k, v in _frac("a", 500).items() if k != "gpu_milli"}], gpus=(1,)))
    w = simulate(whole, make_policy("kubernetes"), "kubernetes", 0, library)
    assert r.jobs[0].finish == pytest.approx(w.jobs[0].finish)  # no interference modelled
    assert r.gpu_utilisation is not None and w.gpu_utilisation is not None
    assert r.gpu_utilisation == pytest.approx(w.gpu_utilisation / 2)
    assert r.gpu_utilisation <= 0.5


def test_the_simulator_refuses_a_device_without_room(library: TraceLibrary) -> None:
    sc = parse_scenario(_scenario([_frac("a", 600), _frac("b", 600)], gpus=(1,)))
    cluster = SimCluster(sc, sc.draw(0, library), library, seed=0)
    cluster.observe()
    start = {"kind": "start", "node": "g0", "cpu_millis": 1000, "gpus": 1, "gpu_milli": 600, "gpu_device": 0}
    first, second = cluster.apply([Change(job="a", **start), Change(job="b", **start)])  # type: ignore[arg-type]
    assert first.ok and not second.ok and second.error == "conflict"
    assert "GPU device 0 has 400 milli free for a fraction of 600" in second.message


def test_a_scenario_fraction_of_two_gpus_is_refused(library: TraceLibrary) -> None:
    sc = parse_scenario(_scenario([_frac("a", 500, min_gpus=2, max_gpus=2)]))
    with pytest.raises(ScenarioError, match=r"jobs\[0\]\.gpu_milli: 500, but a fraction of one GPU needs"):
        sc.draw(0, library)


def test_adapters_refuse_a_plan_with_a_fraction_before_applying_anything() -> None:
    log = logging.getLogger("test")
    whole = Change(job="w", kind="start", node="n", cpu_millis=1000, gpus=1)
    frac = Change(job="f", kind="start", node="n", cpu_millis=1000, gpus=1, gpu_milli=460, gpu_device=0)
    assert refuse_fractions([whole], "Docker", "whole devices only", log) is None
    got = refuse_fractions([whole, frac], "Docker", "whole devices only", log)
    assert got is not None and [o.ok for o in got] == [False, False] and {o.error for o in got} == {"invalid"}
    assert got[1].message == "job f: gpu_milli 460 (a shared GPU) cannot be enforced on Docker (whole devices only)"
    assert got[0].message.startswith("job w: not applied, the plan was refused: job f: gpu_milli 460")
    assert all("\n" not in o.message for o in got)
