"""The Docker adapter on real engines: three private ones (``docker_engines`` fixture), named main, extra0, extra1.

Every job is a real container running ``examples/jobs/train_digits.py`` (numpy, scikit-learn's
digits). Case matrix:

- CPU: a ``--cpus`` container resized live → ``NanoCpus`` and the cgroup quota change, and epochs
  get measurably slower; a ``--cpu-quota`` container is resized with its quota; the engine rejects a
  quota update on a ``--cpus`` container and the adapter reports it as a ``conflict``;
- labels: a container with a bad ``flowplan.*`` label is unmanaged, named in its host's node labels;
- a container that vanishes before a change is applied → ``not_found`` outcome, no exception;
- migration between two engines: checkpoint, re-create, resume from the checkpoint, history intact,
  exactly one container afterwards; a migration to an engine without the image fails and the job
  runs again where it was;
- an engine going down: its node is unschedulable, the other hosts are still observed and planned,
  its job is started elsewhere from its checkpoint; when it comes back, the stale container is removed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from adapters.base import Change
from adapters.docker import DOWN_LABEL, UNMANAGED_PREFIX, DockerAdapter, DockerAdapterError, HostSpec
from adapters.loop import ControlLoop
from planner.policies import make_policy

pytestmark = pytest.mark.slow

FAST = ["--work", "60", "--epochs", "400"]


@pytest.fixture(autouse=True)
def _clean(docker_engines: Any) -> Any:
    yield
    from docker_env import remove_jobs

    for e in docker_engines.engines:
        if e.proc is not None:
            remove_jobs(e.url)


def wait_for(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def adapter_for(engines: Any, **kw: Any) -> DockerAdapter:
    names = ["main", "extra0", "extra1"]
    specs = [HostSpec(n, e.url, cpu_millis=2000) for n, e in zip(names, engines.engines, strict=True)]
    kw.setdefault("checkpoint_timeout", 30.0)
    return DockerAdapter(specs, **kw)


def job_of(ad: DockerAdapter, job_id: str) -> Any:
    snap = ad.observe()
    return next((j for j in snap.jobs if j.id == job_id), None)


def epochs_seen(ad: DockerAdapter, job_id: str, n: int) -> Any:
    j = job_of(ad, job_id)
    return j if j is not None and len(j.history) >= n else None


def containers(engine: Any, job_id: str) -> list[dict[str, Any]]:
    from docker_env import api

    return list(api(engine.url).containers(all=True, filters={"label": f"flowplan.job={job_id}"}))


def log_events(engine: Any, container: str) -> list[dict[str, Any]]:
    from docker_env import api

    out = []
    for line in api(engine.url).logs(container).decode().splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            if "event" in rec:
                out.append(rec)
    return out


def test_cpu_limit_change_is_visible_and_slows_epochs(docker_engines: Any) -> None:
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    cid = create_job(main.url, "fp-cpu", "cpu", docker_engines.ckpt, args=FAST, cpus=1.0)
    ad = adapter_for(docker_engines)
    before = wait_for(lambda: epochs_seen(ad, "cpu", 5), 60, "5 epochs at 1000m")
    assert before.allocation.cpu_millis == 1000
    t_change = time.time()
    (out,) = ad.apply([Change("cpu", "resize", "main", 250, 0, from_node="main")])
    assert out.ok, out
    hc = api(main.url).inspect_container(cid)["HostConfig"]
    assert (hc["NanoCpus"], hc["CpuQuota"]) == (250_000_000, 0)
    cgroup = Path(f"/sys/fs/cgroup/cpu/docker/{cid}/cpu.cfs_quota_us")
    if cgroup.exists():  # cgroup v1 with the cgroupfs driver, as on this machine
        assert int(cgroup.read_text()) == 25_000
    # Repeating the change is a no-op.
    (again,) = ad.apply([Change("cpu", "resize", "main", 250, 0, from_node="main")])
    assert again.ok and "already" in again.message
    after = wait_for(
        lambda: (j := epochs_seen(ad, "cpu", 1)) and sum(p.time > t_change for p in j.history) >= 4 and j, 90, "4 epochs at 250m"
    )
    assert after.allocation.cpu_millis == 250

    def durations(points: list[Any]) -> list[float]:
        return [b.time - a.time for a, b in zip(points, points[1:], strict=False)]

    fast = median(durations([p for p in after.history if p.time <= t_change][1:]))
    slow = median(durations([p for p in after.history if p.time > t_change])[1:])
    print(f"epoch time at 1000m {fast:.3f} s, at 250m {slow:.3f} s, ratio {slow / fast:.2f}")
    assert slow > 1.8 * fast, (fast, slow)
    speeds = {s.cpu_millis: s.seconds_per_epoch for s in after.speed}
    assert set(speeds) >= {1000, 250} and speeds[250] > 1.8 * speeds[1000], speeds
    api(main.url).remove_container(cid, force=True)


def test_quota_container_keeps_quota_and_engine_conflicts_are_data(docker_engines: Any) -> None:
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    cid = create_job(main.url, "fp-quota", "quota", docker_engines.ckpt, args=FAST, cpu_quota=100_000)
    ad = adapter_for(docker_engines)
    wait_for(lambda: job_of(ad, "quota"), 30, "the quota job")
    (out,) = ad.apply([Change("quota", "resize", "main", 500, 0, from_node="main")])
    assert out.ok, out
    hc = api(main.url).inspect_container(cid)["HostConfig"]
    assert (hc["CpuQuota"], hc["CpuPeriod"], hc["NanoCpus"]) == (50_000, 100_000, 0)
    # What the adapter avoids: the engine refuses NanoCpus on a quota container. Reported as data.
    c = ad.hosts["main"].inspect(cid)
    c.cpu_quota = c.cpu_period = 0  # pretend it has no limit, so the host's default mechanism (nano) is tried
    with pytest.raises(DockerAdapterError) as err:
        ad.hosts["main"].set_cpu(c, 700)
    assert err.value.kind == "conflict" and "Nano" in err.value.message
    api(main.url).remove_container(cid, force=True)


def test_unmanaged_container_and_vanished_container(docker_engines: Any) -> None:
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    bad = create_job(main.url, "fp-bad", "bad", docker_engines.ckpt, labels={"flowplan.priority": "NaN"}, start=False)
    good = create_job(main.url, "fp-good", "good", docker_engines.ckpt, args=FAST, cpus=0.5)
    ad = adapter_for(docker_engines)
    snap = wait_for(lambda: (s := ad.observe()) and any(j.id == "good" for j in s.jobs) and s, 30, "the good job")
    assert "bad" not in {j.id for j in snap.jobs}
    labels = snap.node("main").labels
    assert "flowplan.priority" in labels[UNMANAGED_PREFIX + "fp-bad"] and "NaN" in labels[UNMANAGED_PREFIX + "fp-bad"]
    assert "main/fp-bad" in ad.last.unmanaged
    api(main.url).remove_container(good, force=True)  # vanishes after observe, before apply
    (out,) = ad.apply([Change("good", "resize", "main", 250, 0, from_node="main")])
    assert not out.ok and out.error == "not_found"
    api(main.url).remove_container(bad, force=True)


def test_migration_between_engines_resumes_from_checkpoint(docker_engines: Any) -> None:
    from docker_env import create_job

    _, e0, e1 = docker_engines.engines
    create_job(e0.url, "fp-mig", "mig", docker_engines.ckpt, args=FAST, cpus=1.0)
    ad = adapter_for(docker_engines)
    before = wait_for(lambda: epochs_seen(ad, "mig", 3), 60, "3 epochs on extra0")
    assert before.node == "extra0"
    (out,) = ad.apply([Change("mig", "migrate", "extra1", 700, 0, from_node="extra0")])
    assert out.ok, out
    assert containers(e0, "mig") == []
    (moved,) = containers(e1, "mig")
    assert moved["State"] == "running"
    # Wait for the new container's own lines: the epochs the old one finished while checkpointing can
    # already make up the history (on an idle machine an epoch takes ~0.3 s).
    resumed = wait_for(
        lambda: [e for e in log_events(e1, moved["Id"]) if e["event"] == "resumed"], 60, "the job to resume on extra1"
    )
    assert resumed and resumed[0]["epoch"] >= len(before.history)
    n = int(resumed[0]["epoch"]) + 2
    after = wait_for(lambda: (j := epochs_seen(ad, "mig", n)) and j.node == "extra1" and j, 60, "epochs on extra1")
    assert after.allocation.cpu_millis == 700
    epochs = [p.epoch for p in after.history]
    assert epochs == [float(i) for i in range(1, len(epochs) + 1)]  # intact: no gap, no duplicate
    # Repeating the migration once it is done is reported, not redone blindly.
    ad.observe()
    (again,) = ad.apply([Change("mig", "migrate", "extra1", 700, 0, from_node="extra1")])
    assert len(containers(e1, "mig")) == 1 and len(containers(e0, "mig")) == 0, again


def test_failed_migration_leaves_the_job_running_where_it_was(docker_engines: Any) -> None:
    from docker_env import IMAGE, api, create_job

    _, e0, e1 = docker_engines.engines
    api(e0.url).tag(IMAGE, "flowplan/only-on-extra0", "1")
    cid = create_job(e0.url, "fp-stay", "stay", docker_engines.ckpt, args=FAST, cpus=1.0)
    client = api(e0.url)
    # Re-create the container from the image that only extra0 has.
    spec = client.inspect_container(cid)
    client.remove_container(cid, force=True)
    res = client.create_container(
        "flowplan/only-on-extra0:1",
        command=spec["Config"]["Cmd"],
        name="fp-stay",
        labels=spec["Config"]["Labels"],
        environment=spec["Config"]["Env"],
        host_config=client.create_host_config(binds=spec["HostConfig"]["Binds"], network_mode="none", nano_cpus=1_000_000_000),
    )
    client.start(res["Id"])
    ad = adapter_for(docker_engines)
    wait_for(lambda: epochs_seen(ad, "stay", 2), 60, "2 epochs on extra0")
    (out,) = ad.apply([Change("stay", "migrate", "extra1", 1000, 0, from_node="extra0")])
    assert not out.ok and out.error == "not_found", out
    assert "restarted on extra0" in out.message
    assert containers(e1, "stay") == []
    (still,) = containers(e0, "stay")
    assert still["State"] == "running"
    wait_for(lambda: any(e["event"] == "resumed" for e in log_events(e0, still["Id"])), 30, "the job to resume on extra0")
    client.remove_container(still["Id"], force=True)


def test_engine_down_does_not_stop_planning_for_the_others(docker_engines: Any) -> None:
    from docker_env import create_job

    main, e0, e1 = docker_engines.engines
    create_job(e1.url, "fp-down", "down", docker_engines.ckpt, args=FAST, cpus=1.0)
    create_job(main.url, "fp-up", "up", docker_engines.ckpt, args=FAST, cpus=0.5)
    ad = adapter_for(docker_engines, down_grace=0.0)
    wait_for(lambda: epochs_seen(ad, "down", 2) and epochs_seen(ad, "up", 1), 60, "both jobs running")
    e1.stop()  # the host shuts down: its container gets SIGTERM, checkpoints, the engine goes away
    try:
        snap = ad.observe()
        n1 = snap.node("extra1")
        assert not n1.schedulable and DOWN_LABEL in n1.labels
        jobs = {j.id: j for j in snap.jobs}
        assert jobs["up"].status == "running" and jobs["up"].node == "main"
        assert jobs["down"].status == "pending" and len(jobs["down"].history) >= 2
        loop = ControlLoop(ad, make_policy("flowplan", time_limit=0.5), ad.clock)
        tick = loop.step()
        assert not tick.violations, tick.violations
        start = [c for c in tick.changes if c.job == "down"]
        assert start and start[0].kind == "start" and start[0].node in ("main", "extra0"), tick.changes
        out = tick.outcomes[tick.changes.index(start[0])]
        assert out.ok, out
        where = main if start[0].node == "main" else e0
        (moved,) = containers(where, "down")
        wait_for(lambda: any(e["event"] == "resumed" for e in log_events(where, moved["Id"])), 30, "resume elsewhere")
    finally:
        e1.start()
    # Back: the old, stopped container is a duplicate; reconcile removes it, the running one stays.
    ad.observe()
    done = ad.reconcile()
    assert any("down" in line and "removed" in line for line in done), done
    assert containers(e1, "down") == []
    assert len(containers(where, "down")) == 1
