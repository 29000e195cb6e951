"""Parameter-server jobs (``Job.servers``): the contract, the planner's choice of workers and servers,
and the checker.

A parameter-server job has ``replicas`` workers (a count the planner chooses down to ``min_replicas``)
and servers placed as Optimus places them: the same number on each node that holds workers. The
planner picks that number per worker count from the job's (w, s) speed model
(``models.gang_speed.PSScaling``) and charges the servers' CPU and memory to the nodes they are on.

Nothing here is faked: real snapshots through the real planner (CP-SAT, PuLP and the greedy
fallback), checked by the independent checker; the expected server counts are computed here by
enumerating the speed model, not read from the planner. The adapters do not start servers yet: the
refusal is tested on the function both call first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hand_plans import refused_in_one_line

from adapters.loop import diff
from models import fit_ps_speed_model
from models.gang_speed import SERVER_TOLERANCE, ps_scaling
from planner import PlannerConfig, Snapshot, check_plan, plan
from planner.plan import Plan, assigned_shares

SOLVERS = ("cpsat", "pulp", "greedy")
HISTORY = [{"epoch": e, "loss": 2.0 / (e + 1), "time": 100.0 * e} for e in range(1, 6)]


def _nodes(cpu: int, gpus: int, n: int = 3) -> list[dict[str, Any]]:
    return [{"name": f"n{i}", "cpu_millis": cpu, "gpus": gpus, "memory_mib": 65536} for i in range(n)]


def _ps(gpus: int = 1, **extra: Any) -> dict[str, Any]:
    job = {
        "id": "ps",
        "status": "pending",
        "replicas": 8,
        "min_replicas": 1,
        "max_nodes": 3,
        "min_cpu_millis": 2000,
        "max_cpu_millis": 2000,
        "min_gpus": gpus,
        "max_gpus": gpus,
        "servers": {"min": 1, "max": 6, "cpu_millis": 3000, "memory_mib": 1024},
        "history": HISTORY,
        "target": {"max_epochs": 50, "tier1": {"value": 0.05}},
    }
    return {**job, **extra}


def _snap(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"time": 600.0, "nodes": nodes, "jobs": jobs}


def _plan(snap: dict[str, Any], solver: str) -> tuple[Snapshot, Plan]:
    s = Snapshot.model_validate(snap)
    result = plan(s, PlannerConfig(solver=solver))  # type: ignore[arg-type]
    assert check_plan(s, result.plan) == []
    # A plan the checker refused falls back to the greedy one: the solver's own plan must pass.
    assert result.plan.solver.status != "fallback", result.plan.solver
    return s, result.plan


def _used(s: Snapshot, p: Plan) -> dict[str, int]:
    """CPU millis each node holds under ``p``, workers and servers, counted here from the plan."""
    jobs = {j.id: j for j in s.jobs}
    out: dict[str, int] = {n.name: 0 for n in s.nodes}
    for a in p.assignments:
        for name, k in assigned_shares(a) if a.node else ():
            role = jobs[a.job].servers
            out[name] += a.cpu_millis * k + (a.servers or 0) * (role.cpu_millis if role else 0)
    return out


def _fewest_within(model: Any, w: int, candidates: list[int], nodes: int) -> int:
    """The fewest servers per node among ``candidates`` within the tolerance of the fastest (by hand)."""
    times = [model.seconds_per_epoch(w, c * nodes) for c in candidates]
    best = min(times)
    return next(c for c, t in zip(candidates, times, strict=True) if t <= best * (1 + SERVER_TOLERANCE))


# --- the contract ----------------------------------------------------------------------------------

REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "min above max": (_ps(servers={"min": 3, "max": 2}), "jobs[0].servers: servers.min 3 exceeds servers.max 2"),
    "wider than its servers": (_ps(servers={"max": 2}), "jobs[0].max_nodes: 3, but servers.max is 2"),
    "servers on a plain job": (
        {"id": "x", "status": "running", "node": "n0", "allocation": {"cpu_millis": 1000, "servers": 2}},
        "jobs[0].allocation.servers: 2, but the job has no parameter servers",
    ),
    "running outside the bounds": (
        _ps(
            status="running",
            node="n0",
            allocation={"cpu_millis": 2000, "gpus": 1, "servers": 4},
            servers={"max": 3},
            replicas=4,
            min_replicas=None,
        ),
        "jobs[0].allocation.servers: 4 per node on 1 node(s) is 4 in all, outside [1, 3]",
    ),
    "zero server CPU": (_ps(servers={"cpu_millis": 0}), "jobs[0].servers.cpu_millis"),
    "a fractional job with servers": (
        {"id": "x", "status": "pending", "min_gpus": 1, "max_gpus": 1, "gpu_milli": 300, "servers": {}},
        "jobs[0].servers: set, but a fractional job",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_contract_refuses_in_one_line(case: str) -> None:
    job, must = REFUSED[case]
    refused_in_one_line(_snap(_nodes(16000, 4), [job]), must)


# --- the speed model's choice ------------------------------------------------------------------


@pytest.mark.parametrize("form", ["optimus", "coach"])
def test_servers_per_node_are_the_fewest_near_the_fastest(form: str) -> None:
    """On each form's prior: per node, the fewest servers within 3 % of the fastest (enumerated here);
    never more per node on a wider spread than on one node; none where the spread exceeds ``hi``."""
    scaling = ps_scaling(8, 1, 6, form, [])  # type: ignore[arg-type]
    model = fit_ps_speed_model([], form)  # type: ignore[arg-type]
    for w in (1, 2, 4, 8):
        one = _fewest_within(model, w, list(range(1, 7)), 1)
        assert int(scaling.servers_per_node(np.array([w]), np.array([1]))[0]) == one
        for n in (2, 3):
            got = int(scaling.servers_per_node(np.array([w]), np.array([n]))[0])
            assert got == _fewest_within(model, w, list(range(1, min(6 // n, one) + 1)), n)
            assert 1 <= got <= one
        assert int(scaling.servers_per_node(np.array([w]), np.array([7]))[0]) == 0


def test_observed_speeds_move_the_choice() -> None:
    """A job whose epochs show servers do not help (the same time at 1, 2 and 4 servers) is given one
    per node, where the prior would give it more."""
    prior = ps_scaling(8, 1, 6, "optimus", [])
    assert int(prior.servers_per_node(np.array([8]), np.array([1]))[0]) > 1
    from models.gang_speed import GangShape

    flat = [GangShape(8, 1, 1.0, s) for s in (1, 2, 4)] + [GangShape(4, 1, 1.8, s) for s in (1, 2)]
    fitted = ps_scaling(8, 1, 6, "optimus", flat)
    assert fitted.source != "prior"
    assert int(fitted.servers_per_node(np.array([8]), np.array([1]))[0]) == 1


# --- plans ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("solver", SOLVERS)
def test_servers_are_charged_to_their_nodes(solver: str) -> None:
    """Three 8-core CPU nodes: a worker takes 2 cores, a server 3. Every node's workers and servers fit
    its cores (counted here from the plan), the servers are the same on each of the job's nodes
    and within [1, 6] in all, and the plan passes the checker."""
    s, p = _plan(_snap(_nodes(8000, 0), [_ps(gpus=0)]), solver)
    a = next(x for x in p.assignments if x.job == "ps")
    assert a.node is not None and a.servers is not None and a.servers >= 1
    nodes = len(assigned_shares(a))
    assert 1 <= a.servers * nodes <= 6
    assert all(v <= 8000 for v in _used(s, p).values()), _used(s, p)
    assert "parameter server(s) of 3 CPU" in a.explanation
    if solver != "greedy":  # more than the fewest: the count levels are 1, 2, 4, 8, and 8 does not fit
        assert a.replicas == 4


@pytest.mark.parametrize("solver", ["cpsat", "pulp"])
def test_a_gpu_ps_job_spreads_with_its_servers(solver: str) -> None:
    """Three 4-GPU, 16-core nodes and an idle third: the PS job takes two nodes' GPUs (8 workers),
    with its servers on both; a data-parallel job takes the other node. (The greedy fallback starts a
    gang at its fewest count, by design: not asked here.)"""
    dp = {
        "id": "dp",
        "status": "pending",
        "replicas": 4,
        "min_cpu_millis": 2000,
        "max_cpu_millis": 4000,
        "min_gpus": 1,
        "max_gpus": 1,
        "history": HISTORY,
        "target": {"max_epochs": 30, "tier1": {"value": 0.08}},
    }
    s, p = _plan(_snap(_nodes(16000, 4), [_ps(), dp]), solver)
    a = next(x for x in p.assignments if x.job == "ps")
    assert a.replicas == 8 and len(assigned_shares(a)) == 2
    assert a.servers is not None and a.servers * 2 <= 6
    assert all(v <= 16000 for v in _used(s, p).values())


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_running_ps_job_keeps_its_servers(solver: str) -> None:
    """A running job at 4 workers with 2 servers on n0, alone: it keeps them (no restart), and the
    checker counts its servers in n0's CPU before and after."""
    job = _ps(
        status="running", node="n0", allocation={"cpu_millis": 2000, "gpus": 1, "servers": 2}, replicas=4, min_replicas=None
    )
    s, p = _plan(_snap(_nodes(16000, 4), [job]), solver)
    a = p.assignments[0]
    assert (a.action, a.node, a.replicas, a.servers) == ("keep", "n0", 4, 2)
    assert a.previous is not None and a.previous.servers == 2
    assert _used(s, p)["n0"] == 4 * 2000 + 2 * 3000


# --- the checker ---------------------------------------------------------------------------------


def _broken(p: Plan, **update: Any) -> Plan:
    return p.model_copy(update={"assignments": [a.model_copy(update=update) if a.job == "ps" else a for a in p.assignments]})


def test_the_checker_counts_servers() -> None:
    """The kept plan above, broken one way each: no servers · too many in all · servers that overfill
    the node · new servers named 'keep' (a new shape restarts) · servers on a job that has none."""
    job = _ps(
        status="running", node="n0", allocation={"cpu_millis": 2000, "gpus": 1, "servers": 2}, replicas=4, min_replicas=None
    )
    s, p = _plan(_snap(_nodes(16000, 4), [job]), "cpsat")
    assert check_plan(s, p) == []
    cases = {
        "ps: a parameter-server job placed without its servers": _broken(p, servers=None),
        "ps: 7 server(s) on each of 1 node(s), 7 in all, outside [1, 6]": _broken(p, servers=7),
        "node n0: cpu_millis 17000 exceeds capacity 16000": _broken(p, servers=3),
        "ps: servers changed (2 -> 1) (not elastic) with action 'keep'": _broken(p, servers=1),
    }
    for must, broken in cases.items():
        bad = check_plan(s, broken)
        assert any(must in b for b in bad), (must, bad)
    plain = Snapshot.model_validate(_snap(_nodes(16000, 4), [{"id": "ps", "status": "pending"}]))
    bad = check_plan(plain, _broken(p, servers=2, action="start", previous=None))
    assert any("servers 2 set, but the job has no parameter servers" in b for b in bad), bad


# --- the adapters --------------------------------------------------------------------------------


def test_the_diff_carries_the_servers_into_the_change() -> None:
    """The loop's diff carries the plan's servers (on each node) into the change the adapters apply,
    and into its key, so a change of servers alone is a change."""
    dp = {"id": "dp", "status": "pending", "min_gpus": 1, "max_gpus": 1, "history": HISTORY}
    s, p = _plan(_snap(_nodes(16000, 4), [_ps(), dp]), "cpsat")
    changes = diff(s, p)
    ps = next(c for c in changes if c.job == "ps")
    a = next(x for x in p.assignments if x.job == "ps")
    assert ps.servers == a.servers and ps.as_dict()["servers"] == a.servers and f"+{a.servers}ps" in ps.key()
    assert next(c for c in changes if c.job == "dp").servers is None


def test_the_plan_table_shows_the_servers() -> None:
    """``flowplan plan``'s table: the spread, then the servers on each of its nodes (``n0x4+n2x4 +2ps``)."""
    from flowplan.render import render_table

    dp = {"id": "dp", "status": "pending", "replicas": 4, "min_gpus": 1, "max_gpus": 1, "history": HISTORY}
    _, p = _plan(_snap(_nodes(16000, 4), [_ps(), dp]), "cpsat")
    a = next(x for x in p.assignments if x.job == "ps")
    where = "+".join(f"{s.node}x{s.replicas}" for s in a.placement or [])
    assert f"{where} +{a.servers}ps" in render_table(p)


def test_servers_not_named_are_the_fewest_spread_over_the_nodes() -> None:
    """A running job whose allocation names no servers runs its fewest: ``servers.min`` spread over its
    nodes, at least one on each (what the Docker adapter and the simulator start)."""
    job = _ps(
        status="running",
        node="n0",
        allocation={"cpu_millis": 2000, "gpus": 1},
        placement=[{"node": "n0", "replicas": 2}, {"node": "n1", "replicas": 2}],
        replicas=4,
        min_replicas=None,
        servers={"min": 4, "max": 6},
    )
    s = Snapshot.model_validate(_snap(_nodes(16000, 4), [job]))
    assert s.jobs[0].running_servers == 2 and s.jobs[0].fewest_servers(3) == 2 and s.jobs[0].fewest_servers(8) == 1


def test_the_fastest_count_is_offered_where_the_levels_step_over_it() -> None:
    """A job of 1-12 workers is offered the geometric counts 1, 2, 5 and 12; a parameter-server job's
    prior peaks at 9 workers (more workers load the servers more than they add), and 9 is offered too.
    A data-parallel gang's measured-table prior speeds up to its full count: nothing is added."""
    from models.gang_speed import gang_scaling
    from planner.gang_levels import _blocks, count_levels, fastest_count
    from planner.snapshot import Job

    base = {"id": "g", "status": "pending", "replicas": 12, "min_replicas": 1, "max_nodes": 4, "min_gpus": 1, "max_gpus": 1}
    ps = Job.model_validate({**base, "servers": {"min": 1, "max": 12, "cpu_millis": 4000}})
    dp = Job.model_validate(base)
    config = PlannerConfig()
    assert count_levels(ps, config) == [1, 2, 5, 12]
    scaling = ps_scaling(12, 1, 12, "optimus", [])
    best = fastest_count(ps, scaling)
    at = {(w, n): float(scaling.per_step(np.array([w]), np.array([n]))[0]) for w in range(1, 13) for n in (1, 2, 3, 4) if n <= w}
    assert best == 9 and min(t for (w, _), t in at.items() if w == 9) == min(at.values())
    assert 9 in set(_blocks(ps, config, scaling)[0].tolist())
    assert fastest_count(dp, gang_scaling(12, [])) == 12
    assert set(_blocks(dp, config, gang_scaling(12, []))[0].tolist()) == {1, 2, 5, 12}
