"""The example job, reporting through ``flowplan.sdk``, under a real engine and the real planner.

One short story (``examples/jobs/train_digits.py``, numpy, on the ``docker_engines`` private engines):

1. its SDK lines are its history (epochs 1, 2, ... with the validation accuracy), and its
   ``declare`` event reaches the snapshot: ``max_epochs`` into the target the labels gave (which set
   none), the schedule kept by the adapter for later;
2. a pause (the adapter's SIGTERM) is a checkpoint request: the SDK's handler makes the loop write its
   checkpoint, print ``checkpoint`` and exit 75, and the job is pending;
3. the control loop with the FlowPlan policy starts it again: it prints ``resumed`` at the
   checkpoint's epoch and goes on, the history with no gap and no duplicate;
4. once its accuracy reaches tier 1, the plan's ``deliver`` (SIGUSR1) reaches the SDK, the job
   prints ``delivered`` with the model's path, and the snapshot says ``delivered``.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_docker_engine import adapter_for, containers, job_of, log_events, wait_for

from adapters.base import Change
from adapters.loop import ControlLoop
from planner.policies import make_policy

pytestmark = pytest.mark.slow

TARGET = {
    "flowplan.target.metric": "accuracy",
    "flowplan.target.direction": "higher",
    "flowplan.target.tier1": "0.9",
    "flowplan.min_cpu_millis": "250",
    "flowplan.max_cpu_millis": "1000",
}


@pytest.fixture(autouse=True)
def _clean(docker_engines: Any) -> Any:
    yield
    from docker_env import remove_jobs

    for e in docker_engines.engines:
        if e.proc is not None:
            remove_jobs(e.url)


def test_sdk_job_pauses_resumes_and_delivers_under_the_planner(docker_engines: Any) -> None:
    from docker_env import create_job

    main = docker_engines.engines[0]
    create_job(main.url, "fp-sdk", "sdk", docker_engines.ckpt, args=["--work", "60", "--epochs", "60"], labels=TARGET)
    ad = adapter_for(docker_engines)

    # 1. progress and the declaration, through the SDK's JSON lines.
    job = wait_for(lambda: (j := job_of(ad, "sdk")) is not None and len(j.history) >= 2 and j, 60, "2 epochs")
    assert [p.epoch for p in job.history[:2]] == [1.0, 2.0] and all(p.metric is not None for p in job.history)
    assert job.target is not None and job.target.max_epochs == 60  # declared, not labelled
    declared = ad.declared("sdk")
    assert declared is not None and declared.schedule == {"kind": "constant"}
    assert not job.delivered

    # 2. a pause is a checkpoint request: checkpoint, exit 75, pending.
    (out,) = ad.apply([Change("sdk", "pause", None, 0, 0, from_node="main")])
    assert out.ok and "exit 75" in out.message, out
    (old,) = containers(main, "sdk")
    events = log_events(main, old["Id"])
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["declare", "started"] and kinds[-2:] == ["requested", "checkpoint"], kinds
    assert events[-2]["by"] == "SIGTERM"
    held = events[-1]["epoch"]
    assert held >= 2 and events[-1]["path"] == "/ckpt/sdk.npz"
    assert job_of(ad, "sdk").status == "pending"

    # 3 and 4. the planner starts it again (it resumes) and delivers at tier 1.
    loop = ControlLoop(ad, make_policy("flowplan", time_limit=0.5), ad.clock)
    delivered = None
    for _ in range(120):
        tick = loop.step()
        assert not tick.violations, tick.violations
        assert all(o.ok for o in tick.outcomes), tick.outcomes
        j = job_of(ad, "sdk")
        if j is not None and j.delivered:
            delivered = j
            break
        ad.clock.sleep(0.5)
    assert delivered is not None, "no delivery within 60 s"
    (new,) = [c for e in docker_engines.engines[:3] for c in containers(e, "sdk") if c["State"] == "running"]
    where = next(e for e in docker_engines.engines if any(c["Id"] == new["Id"] for c in containers(e, "sdk")))
    events = log_events(where, new["Id"])
    resumed = [e for e in events if e["event"] == "resumed"]
    assert resumed and resumed[0]["epoch"] == held, events
    got = [e for e in events if e["event"] == "delivered"]
    assert got and got[0]["path"] == "/ckpt/sdk.delivered.npz" and got[0]["metric"] >= 0.9, events
    assert (docker_engines.ckpt / "sdk.delivered.npz").exists()
    epochs = [p.epoch for p in delivered.history]
    assert epochs == [float(i) for i in range(1, len(epochs) + 1)]  # intact across the pause
    assert max(p.metric for p in delivered.history if p.metric is not None) >= 0.9
