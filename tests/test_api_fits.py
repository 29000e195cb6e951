"""A worker's cache of model fits (:class:`api.work.FitCache`), in this process with the real planner.

Cases:

- **warm equals cold** on 50-job snapshots of ``benchmarks/workload.py`` (real node and pod shapes,
  measured curves), the size the service's latency goal names: the second plan of the same snapshot
  fits nothing and is the first one, and the plan of a planner with no cache, byte for byte but for
  ``solver.seconds``. Seed 2000 is solved whole by CP-SAT; seed 2002 goes through relax-and-fix,
  whose ``solver.message`` quotes the LP's measured seconds (it differs between any two runs, warm
  or cold), so there the message is left out too (the assignments, objective terms, status, bound
  and objective value are not);
- **the bound**: the least recently used fits go first, never the last plan's; a cluster planned
  again after its fits were dropped fits exactly the dropped jobs again;
- **the key**: changed settings refit every job (the deadline confidence enters every fit).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import benchmark_module

from api.work import FitCache
from planner import PlannerConfig, check_plan, plan
from planner.plan import Plan
from planner.snapshot import Snapshot

SECONDS = {"solver": {"seconds"}}
WALL = {"solver": {"seconds", "message"}}


def _workload(data_dir: Path, seed: int, n_jobs: int = 50, n_nodes: int = 20) -> Snapshot:
    snapshot: Snapshot = benchmark_module("workload.py").make_snapshot(n_jobs, n_nodes, seed=seed, data_dir=data_dir)
    return snapshot


def _active(snapshot: Snapshot) -> int:
    return sum(1 for job in snapshot.jobs if job.status != "finished")


def _same(a: Plan, b: Plan, exclude: dict[str, set[str]] = WALL) -> bool:
    return a.model_dump_json(exclude=exclude) == b.model_dump_json(exclude=exclude)


@pytest.mark.parametrize(("seed", "relax"), [(2000, False), (2002, True)])
def test_a_warm_plan_is_the_cold_plan(data_dir: Path, seed: int, relax: bool) -> None:
    snapshot = _workload(data_dir, seed=seed)
    cache = FitCache()
    cold, hits, misses = cache.plan(snapshot, PlannerConfig())
    assert (hits, misses) == (0, _active(snapshot)) and misses == 50
    assert cold.plan.solver.message.startswith("relax-and-fix") == relax
    warm, hits, misses = cache.plan(snapshot, PlannerConfig())
    assert (hits, misses) == (50, 0)
    exclude = WALL if relax else SECONDS
    assert _same(warm.plan, cold.plan, exclude)
    assert _same(warm.plan, plan(snapshot, PlannerConfig()).plan, exclude)  # and the planner's without any cache
    assert check_plan(snapshot, warm.plan) == []


def test_the_least_recently_used_fits_go_first(data_dir: Path) -> None:
    a, b = _workload(data_dir, seed=2001, n_jobs=12, n_nodes=4), _workload(data_dir, seed=2002, n_jobs=12, n_nodes=4)
    cache = FitCache(limit=16)
    cache.plan(a, PlannerConfig())
    _, hits, misses = cache.plan(b, PlannerConfig())
    assert (hits, misses) == (0, 12)
    assert len(cache.fits) == 16  # all of b, the 4 most recent of a
    _, hits, misses = cache.plan(a, PlannerConfig())
    assert (hits, misses) == (4, 8)
    tiny = FitCache(limit=1)
    tiny.plan(a, PlannerConfig())
    assert len(tiny.fits) == 12  # never fewer than the last plan's jobs
    _, hits, _ = tiny.plan(a, PlannerConfig())
    assert hits == 12


def test_changed_settings_refit_every_job(data_dir: Path) -> None:
    snapshot = _workload(data_dir, seed=2003, n_jobs=12, n_nodes=4)
    cache = FitCache()
    cache.plan(snapshot, PlannerConfig())
    stricter = snapshot.model_copy(update={"settings": snapshot.settings.model_copy(update={"deadline_confidence": 0.9})})
    got, hits, misses = cache.plan(stricter, PlannerConfig())
    assert (hits, misses) == (0, 12)
    assert _same(got.plan, plan(stricter, PlannerConfig()).plan)
