"""The integer program's options (:func:`planner.build._options`, built for all jobs at once) against
their definition, enumerated job by job, candidate by candidate, level by level in plain Python.

Random snapshots from ``conftest.random_snapshot`` (real measured curves; every job kind mixed in:
pending/running, pinned, non-resizable, CPU/GPU, gangs, selectors) with Hypothesis-drawn candidate
nodes per job (any subset, any order). Nothing is faked: real menus, real pricing.
"""

from __future__ import annotations

import numpy as np
from conftest import random_snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import PlannerConfig
from planner.build import _options, _stay_levels, eligibility
from planner.menu import MOVE, START, STAY, build_menu
from planner.objective import price_menus
from planner.outlook import build_outlook
from planner.problem import WAIT_WAY


def _setup(seed: int):  # type: ignore[no-untyped-def]
    snap = random_snapshot(seed)
    config = PlannerConfig()
    outlooks = [build_outlook(j, snap.settings, config) for j in snap.jobs if j.status != "finished"]
    max_gpus = max((n.gpus for n in snap.nodes), default=0)
    menus = [build_menu(i, o, snap.time, snap.settings.interval_seconds, config, max_gpus) for i, o in enumerate(outlooks)]
    pricing = price_menus(menus, config, snap.time)
    index = {n.name: i for i, n in enumerate(snap.nodes)}
    cap = np.array([[n.cpu_millis for n in snap.nodes], [n.gpus for n in snap.nodes], [n.memory_mib for n in snap.nodes]])
    current = np.array(
        [index[m.outlook.job.node] if m.outlook.job.status == "running" and m.outlook.job.node else -1 for m in menus]
    )
    pinned = np.array([m.outlook.job.status == "running" and not m.outlook.job.migratable for m in menus], dtype=bool)
    stay_ok = [_stay_levels(m) for m in menus]
    return snap, menus, pricing, index, cap.astype(np.int64), current.astype(np.int64), pinned, stay_ok


def _expected(menus, cand, current, pinned, stay_ok, cap):  # type: ignore[no-untyped-def]
    """Every (job, node, way, level) the options should hold, in the problem's order."""
    out = []
    for j, m in enumerate(menus):
        job = m.outlook.job
        L = m.cpu.size

        def fits(n: int, lv: int, m=m) -> bool:  # type: ignore[no-untyped-def]
            return bool(m.dem_cpu[lv] <= cap[0, n] and m.dem_gpu[lv] <= cap[1, n] and m.dem_mem <= cap[2, n])

        for n in cand[j]:
            if n == current[j]:
                ok = stay_ok[j]
                out += [(j, n, STAY, lv) for lv in range(L) if ok[lv] and (fits(n, lv) or pinned[j])]
                if job.migratable and not job.resizable:
                    out += [(j, n, MOVE, lv) for lv in range(L) if fits(n, lv) and not ok[lv]]
            elif job.status == "running":
                if job.migratable:
                    out += [(j, n, MOVE, lv) for lv in range(L) if fits(n, lv)]
            else:
                out += [(j, n, START, lv) for lv in range(L) if fits(n, lv)]
        if job.status == "pending" or job.migratable:
            out.append((j, -1, WAIT_WAY, -1))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**31 - 1), data=st.data())
def test_options_are_every_candidate_level_that_fits_in_order(seed: int, data: st.DataObject) -> None:
    snap, menus, pricing, index, cap, current, pinned, stay_ok = _setup(seed)
    N = len(snap.nodes)
    cand = [data.draw(st.permutations(range(N)).map(lambda p: list(p[: data.draw(st.integers(0, N))]))) for _ in menus]
    problem = _options(menus, cand, current, pinned, stay_ok, cap, pricing, index, snap.settings.migration_budget)

    want = _expected(menus, cand, current, pinned, stay_ok, cap)
    got = list(
        zip(
            problem.opt_job.tolist(), problem.opt_node.tolist(), problem.opt_way.tolist(), problem.opt_level.tolist(), strict=True
        )
    )
    assert got == want
    assert problem.job_start.tolist() == [0, *np.cumsum(np.bincount(problem.opt_job, minlength=len(menus))).tolist()]
    for o, (j, _n, way, lv) in enumerate(got):
        m = menus[j]
        if way == WAIT_WAY:
            assert (problem.cost[o], problem.finish_q[o], problem.dem_cpu[o], problem.dem_mem[o]) == (m.wait_cost, m.wait_q, 0, 0)
        else:
            assert m.cost is not None and m.finish_q is not None
            assert (problem.cost[o], problem.finish_q[o]) == (m.cost[way, lv], m.finish_q[way, lv])
            assert (problem.dem_cpu[o], problem.dem_gpu[o], problem.dem_mem[o]) == (m.dem_cpu[lv], m.dem_gpu[lv], m.dem_mem)
        assert problem.moves[o] == int(way == MOVE or (way == WAIT_WAY and m.outlook.job.status == "running"))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**31 - 1))
def test_eligible_nodes_are_each_jobs_own_and_read_only(seed: int) -> None:
    """Jobs of one shape share one eligible array: it must be what the job alone would get, and a
    write to it must fail rather than change another job's nodes."""
    snap, menus, _, _, cap, _, _, _ = _setup(seed)
    eligible = eligibility(snap.nodes, menus, cap)
    for m, el in zip(menus, eligible, strict=True):
        job = m.outlook.job
        own = [
            i
            for i, n in enumerate(snap.nodes)
            if n.schedulable
            and (job.gpu_type is None or n.gpu_type == job.gpu_type)
            and all(n.labels.get(k) == v for k, v in job.node_selector.items())
            and cap[0, i] >= m.dem_cpu[0]
            and cap[1, i] >= m.dem_gpu[0]
            and cap[2, i] >= m.dem_mem
        ]
        assert el.tolist() == own
        assert not el.flags.writeable
