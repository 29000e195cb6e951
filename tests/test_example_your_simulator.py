"""``examples/your_simulator.py``: the planner's Python API as the policy of a simulator that is not
FlowPlan's (``docs/adapters.md``, "The planner as a policy in your own simulator").

Cases: the example runs as a process and prints both policies' mean JCT and makespan; in process,
every job finishes under both policies, FlowPlan's decisions are plans that pass the checker (the
example asserts it at each one), every arrived job is either given a weight or left waiting, and a
job's rate is reported once it trained 2 % of an epoch; its share split gives every CPU of the host
away while a job could use it (work conservation) and none beyond a cap.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "your_simulator.py"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("your_simulator", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_the_example_runs_as_a_process() -> None:
    out = subprocess.run([sys.executable, str(EXAMPLE), "--step", "2"], capture_output=True, text=True, timeout=300, check=True)
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["job", "FlowPlan", "JCT", "equal", "share"]
    assert [line.split(":")[0] for line in lines[-2:]] == ["flowplan", "equal"]
    assert all("mean JCT" in line and "makespan" in line for line in lines[-2:]), out.stdout


def test_every_job_finishes_under_both_policies_and_every_plan_is_applied() -> None:
    ys = _module()
    seen: list[tuple[float, dict[str, int]]] = []
    decide = ys.decide

    def spy(policy: str, now: float, jobs: list[Any], previous: Any, config: Any) -> Any:
        got = decide(policy, now, jobs, previous, config)
        if policy == "flowplan":
            here = {j.id for j in jobs if j.arrival <= now and j.finish is None}
            assert {a.job for a in got.plan.assignments} | {u.job for u in got.plan.unserved} == here
            seen.append((now, {j.id: j.weight for j in jobs if j.id in here}))
        return got

    ys.decide = spy
    for policy in ("flowplan", "equal"):
        got = ys.run(policy, 30.0, 2.0)
        assert set(got) == {j[0] for j in ys.JOBS}
        assert all(end > start for start, end in got.values()), got
    assert len(seen) > 10 and any(sum(w.values()) > 0 for _, w in seen)


@pytest.mark.parametrize(
    ("weights", "caps", "expected"),
    [
        ([1024, 1024], [6000, 6000], [4000, 4000]),
        ([1000, 3000], [6000, 6000], [2000, 6000]),  # 1:3 would be 2000:6000, the cap is not binding
        ([1000, 3000], [6000, 2000], [6000, 2000]),  # a capped job's rest flows to the other, up to its cap
        ([500, 0], [2000, 6000], [2000, 0]),  # one job, capped: the rest idles (nothing else can use it)
    ],
)
def test_the_share_split_is_work_conserving_up_to_the_caps(weights: list[int], caps: list[int], expected: list[int]) -> None:
    ys = _module()
    pairs = enumerate(zip(weights, caps, strict=True))
    jobs = [ys.SimJob(f"j{i}", None, 1, 0.0, 500, 6000, weight=w, cap=c) for i, (w, c) in pairs]
    got = ys.share_cpu(jobs)
    assert [round(got.get(j.id, 0.0)) for j in jobs] == expected


def test_a_rate_is_reported_once_two_percent_of_an_epoch_was_trained() -> None:
    ys = _module()
    job = ys.SimJob("j", None, 1, 0.0, 500, 6000, ran=[10.0, 0.01, 10.0 * 2000])
    job.measure()
    assert job.speed == []
    job.ran = [10.0, 0.05, 10.0 * 2000]
    job.measure()
    assert [(p.cpu_millis, p.seconds_per_epoch) for p in job.speed] == [(2000, pytest.approx(200.0))]
    assert job.ran == [0.0, 0.0, 0.0]
