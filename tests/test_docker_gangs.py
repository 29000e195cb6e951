"""Gangs on real Docker engines: a job's replicas as containers on two engines, with rendezvous and rescale.

Every replica runs ``examples/jobs/train_gang.py``: softmax regression on digits, its gradient summed
over the ranks by an all-reduce over real TCP sockets (rank 0 listens on ``MASTER_PORT``), so its
result does not depend on ``WORLD_SIZE``. The engines are the three private ones of ``docker_env``
(``docker_engines``: main, extra0, extra1), on one machine: host networking makes rank 0's port
reachable from the other engine's containers at 127.0.0.1. Case matrix:

- a 2-replica gang (main:1 + extra0:1) started by the adapter from a created template: both
  containers get the rendezvous variables and host networking, rank 0 reports epochs; observe says
  running, 2 replicas, placement main:1 + extra0:1; a repeated start is a no-op;
- the plan rescales it to 3 (main:2 + extra0:1) with a ``migrate``: rank 0 checkpoints, the new set
  starts with ``WORLD_SIZE=3`` and resumes from the checkpoint's epoch (not 0), the old containers
  are gone, the history is epochs 1..n with no gap, and the final loss equals that of the same job
  run unscaled (one process, no container) to 1e-9;
- a pause checkpoints rank 0 and removes the other replicas: the job is pending;
- a gang that finished (rank 0 exited 0) after the observe a plan was made from: its move and its
  resize are ok and change nothing (no container made);
- a gang's template started by hand (rank 0 alone, no rendezvous) is broken: left out of the
  snapshot, and ``reconcile`` stops it with a checkpoint, so it is pending for the next plan;
- a rescale whose new replica cannot be created (its host lacks the image) fails with ``not_found``:
  what was made is removed and the old set runs again where it was, resumed from the checkpoint;
- a start whose second replica cannot be created (the image exists on main only) fails with
  ``not_found`` and leaves nothing behind: no container on extra0, the template on main as it was;
- the real planner in the control loop: it starts the pending gang (a count in [2, 3], over at most
  2 hosts), every change is applied ``ok``, no plan violates the checker, and the next intervals
  find the gang as planned (no change asked for is already in effect); the same for a gang with
  parameter servers, whose planned servers (the same number on each host) the next observe reads back;
- a gang labelled ``flowplan.rendezvous=tensorflow`` (main:1 + extra0:1): each replica gets
  ``TF_CONFIG`` (the workers at the job's port and the next, its own index) and no torchrun
  variable; the ranks find each other through it and train to the loss of one process;
- a parameter-server gang (``flowplan.servers.*``, TensorFlow's rendezvous) started with 2 workers
  and a server on each of main and extra0: every worker and server gets ``TF_CONFIG`` listing the
  workers and the ``ps`` tasks (ports after the workers'), the servers run at their own CPU share
  with ``flowplan.role=ps``; observe says 1 server per host; the plan grows it to 3 workers and 2
  servers on main (a checkpoint-restart): the old servers are removed, the new set resumes from the
  checkpoint, and the servers' sums train it to the loss of one process; a ``resize`` keeps them;
- bad gang labels (min_replicas "x", negative, above replicas; elastic true; servers without
  TensorFlow's rendezvous) make the container unmanaged with one line naming the label and its value.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import pytest
from test_docker_engine import _clean, adapter_for, containers, job_of, log_events, wait_for  # noqa: F401 (_clean: autouse)

from adapters.base import Change
from adapters.docker import UNMANAGED_PREFIX
from adapters.docker.engine import shares_for
from adapters.docker.ranks import MASTER_PORT, PS, RANK, ROLE

pytestmark = pytest.mark.slow

#: 300 epochs of ~0.05 s (work 3000) on an idle machine: the gang must still be training when the
#: test rescales it, and 60 epochs of 0.006 s (work 300) were often over before the rescale came
#: (the new rank 0 then had nothing to resume).
EPOCHS = 300
ARGS = ["--epochs", str(EPOCHS), "--work", "3000", "--checkpoint-every", "0"]
#: For the tests that act on a gang while it trains and never need it to finish: 60 short epochs can
#: end before the pause, the rescale or the reconcile comes (then the job exits 0, not 75, and a
#: rank restarted from its checkpoint has nothing left to resume).
LONG = ["--epochs", "100000", "--work", "300", "--checkpoint-every", "0"]
GANG = {"flowplan.replicas": "3", "flowplan.min_replicas": "2", "flowplan.max_nodes": "2"}


def template(
    engines: Any,
    name: str,
    job: str,
    *,
    image: str | None = None,
    labels: dict[str, str] | None = None,
    args: list[str] | None = None,
) -> str:
    """A created (pending) container of the gang job on main: rank 0 and the template of the others."""
    from docker_env import IMAGE, api, create_job, python_mounts

    cid = create_job(
        engines.engines[0].url,
        name,
        job,
        engines.ckpt,
        labels=labels if labels is not None else GANG,
        command=[python_mounts()[0], "/jobs/train_gang.py", *(args or ARGS)],
        start=False,
    )
    if image is None or image == IMAGE:
        return cid
    client = api(engines.engines[0].url)  # the same container, from an image only main has
    spec = client.inspect_container(cid)
    client.remove_container(cid)
    res = client.create_container(
        image,
        command=spec["Config"]["Cmd"],
        name=name,
        labels=spec["Config"]["Labels"],
        environment=spec["Config"]["Env"],
        host_config=client.create_host_config(binds=spec["HostConfig"]["Binds"], network_mode="none"),
    )
    return str(res["Id"])


def logs(engines: Any, job: str) -> Callable[[], str]:
    """For ``wait_for``'s ``explain``: a wait that times out shows the job's containers, their exit
    codes and the ends of their logs (a replica that exited early says why there)."""
    from docker_env import job_logs

    return lambda: job_logs(engines, job)


def env_of(engine: Any, cid: str) -> dict[str, str]:
    from docker_env import api

    return dict(item.partition("=")[::2] for item in api(engine.url).inspect_container(cid)["Config"]["Env"])


def unscaled_loss(tmp: Path) -> float:
    """The job's loss at its last epoch, run here as one process (no rendezvous variables, no container)."""
    from docker_env import JOBS, REPO

    out = subprocess.run(
        [sys.executable, str(JOBS / "train_gang.py"), "--job", "ref", "--checkpoint-dir", str(tmp), "--epochs", str(EPOCHS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    points = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"epoch"')]
    assert points[-1]["epoch"] == EPOCHS
    return float(points[-1]["loss"])


def test_gang_on_two_engines_trains_and_rescales_through_a_checkpoint(docker_engines: Any, tmp_path: Path) -> None:
    main, e0, _ = docker_engines.engines
    template(docker_engines, "fp-gang", "gang")
    ad = adapter_for(docker_engines)
    pending = job_of(ad, "gang")
    assert (pending.status, pending.replicas, pending.min_replicas, pending.max_nodes) == ("pending", 3, 2, 2)
    two = Change("gang", "start", "main", 500, 0, replicas=2, placement=(("main", 1), ("extra0", 1)))
    (out,) = ad.apply([two])
    assert out.ok, out
    (r0,) = containers(main, "gang")
    (r1,) = containers(e0, "gang")
    port = r0["Labels"][MASTER_PORT]
    for engine, c, rank in ((main, r0, "0"), (e0, r1, "1")):
        env = env_of(engine, c["Id"])
        assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"]) == (rank, "2", "127.0.0.1", port)
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("0", "1")
        assert c["HostConfig"]["NetworkMode"] == "host" and c["Labels"][RANK] == rank
    running = wait_for(
        lambda: (j := job_of(ad, "gang")) and len(j.history) >= 5 and j,
        90,
        "5 epochs of the 2-replica gang",
        explain=logs(docker_engines, "gang"),
    )
    assert running.status == "running" and running.node == "main"
    assert [(s.node, s.replicas) for s in running.placement] == [("main", 1), ("extra0", 1)]
    assert running.allocation.cpu_millis == 500
    (again,) = ad.apply([Change("gang", "start", "main", 500, 0, replicas=2, placement=(("main", 1), ("extra0", 1)))])
    assert again.ok and "already running" in again.message, again
    assert [e["world_size"] for e in log_events(main, r0["Id"]) if e["event"] == "rendezvous"] == [2]

    # The plan grows it to 3, two on main: a restart through rank 0's checkpoint.
    three = Change("gang", "migrate", "main", 500, 0, replicas=3, from_node="main", placement=(("main", 2), ("extra0", 1)))
    t0 = time.time()
    (out,) = ad.apply([three])
    took = time.time() - t0
    assert out.ok, out
    assert "3 replicas on 2 on main + 1 on extra0" in out.message, out.message
    now = {c["Labels"][RANK]: c for c in containers(main, "gang") + containers(e0, "gang")}
    assert sorted(now) == ["0", "1", "2"] and r0["Id"] not in {c["Id"] for c in now.values()}
    assert [c["Id"] for c in containers(e0, "gang")] == [now["2"]["Id"]]  # ranks along the placement: main's first
    assert env_of(main, now["1"]["Id"])["WORLD_SIZE"] == "3"
    assert (env_of(main, now["1"]["Id"])["LOCAL_RANK"], env_of(main, now["1"]["Id"])["LOCAL_WORLD_SIZE"]) == ("1", "2")
    # The old rank 0's log was read to its end (its checkpoint) before it was removed.
    held = max(p.epoch for p in ad.store.history("gang"))
    assert held >= 5, held
    resumed = wait_for(
        lambda: [e for e in log_events(main, now["0"]["Id"]) if e["event"] == "resumed"],
        180,
        "the new rank 0 to resume",
        explain=logs(docker_engines, "gang"),
    )
    assert resumed[0]["epoch"] == held  # from the checkpoint, not from 0
    assert [e["world_size"] for e in log_events(main, now["0"]["Id"]) if e["event"] == "rendezvous"] == [3]
    grown = wait_for(
        lambda: (j := job_of(ad, "gang")) and j.status == "running" and j,
        30,
        "the gang of 3",
        explain=logs(docker_engines, "gang"),
    )
    assert [(s.node, s.replicas) for s in grown.placement] == [("main", 2), ("extra0", 1)]
    (same,) = ad.apply([three])
    assert same.ok and "already running" in same.message, same
    done = wait_for(
        lambda: (j := job_of(ad, "gang")) and j.status == "finished" and j,
        120,
        "the gang to finish",
        explain=logs(docker_engines, "gang"),
    )
    print(
        "speed points (cpu, replicas, hosts, s/epoch):",
        [(p.cpu_millis, p.replicas, p.nodes, round(p.seconds_per_epoch, 3)) for p in done.speed],
    )
    assert {(p.replicas, p.nodes) for p in done.speed} <= {(2, 2), (3, 2)}, done.speed  # each with the gang it ran as
    epochs = [p.epoch for p in done.history]
    assert epochs == [float(i) for i in range(1, EPOCHS + 1)], epochs  # no gap, no epoch twice
    times = {p.epoch: p.time for p in done.history}
    gaps = {e: times[e] - times[e - 1] for e in times if e - 1 in times}
    two_s = median(v for e, v in gaps.items() if e <= held)  # epochs of the 2-replica gang
    three_s = median(v for e, v in gaps.items() if e > held + 1)  # of the 3-replica one (after its first)
    first = times[held + 1] - t0  # the new gang's first epoch: its start, imports, rendezvous and one step
    print(
        f"rescale 2 -> 3: apply {took:.2f} s (checkpoint, stop, create and start 3), first epoch of the 3 at +{first:.2f} s; "
        f"epoch {two_s:.3f} s at 2, {three_s:.3f} s at 3"
    )
    reference = unscaled_loss(tmp_path)
    print(f"final loss: rescaled gang {done.history[-1].loss!r}, one process {reference!r}")
    assert done.history[-1].loss == pytest.approx(reference, rel=1e-9)
    # Finished: its other replicas are removed; rank 0 stays (its log is the job's record).
    lines = ad.reconcile()
    assert any("gang: 2 replica(s) of no running gang stopped; removed 2" in line for line in lines), lines
    assert [c["Labels"][RANK] for c in containers(main, "gang") + containers(e0, "gang")] == ["0"]


def test_a_tensorflow_gang_finds_its_workers_through_tf_config(docker_engines: Any, tmp_path: Path) -> None:
    """``flowplan.rendezvous=tensorflow``: the two replicas (main:1 + extra0:1) get ``TF_CONFIG`` (every
    worker at its own port, its own index) and none of torchrun's variables; the example job's ranks
    find each other through it and train to the loss of one process."""
    main, e0, _ = docker_engines.engines
    template(docker_engines, "fp-tf", "tf", labels={**GANG, "flowplan.rendezvous": "tensorflow"})
    ad = adapter_for(docker_engines)
    assert job_of(ad, "tf").status == "pending"
    (out,) = ad.apply([Change("tf", "start", "main", 500, 0, replicas=2, placement=(("main", 1), ("extra0", 1)))])
    assert out.ok, out
    (r0,) = containers(main, "tf")
    (r1,) = containers(e0, "tf")
    port = int(r0["Labels"][MASTER_PORT])
    workers = [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]
    for engine, c, rank in ((main, r0, 0), (e0, r1, 1)):
        env = env_of(engine, c["Id"])
        assert json.loads(env["TF_CONFIG"]) == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
        assert not {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"} & set(env), env
    done = wait_for(
        lambda: (j := job_of(ad, "tf")) and j.status == "finished" and j,
        180,
        "the TF_CONFIG gang to finish",
        explain=logs(docker_engines, "tf"),
    )
    assert [e["world_size"] for e in log_events(main, r0["Id"]) if e["event"] == "rendezvous"] == [2]
    reference = unscaled_loss(tmp_path)
    print(f"final loss: TF_CONFIG gang of 2 {done.history[-1].loss!r}, one process {reference!r}")
    assert done.history[-1].loss == pytest.approx(reference, rel=1e-9)


def test_a_parameter_server_gang_trains_through_its_servers_and_rescales(docker_engines: Any, tmp_path: Path) -> None:
    """Workers and parameter servers on two engines, through TF_CONFIG; grown 2 -> 3 workers with
    new servers by a checkpoint-restart; the final loss that of one process (module docstring)."""
    from docker_env import api

    main, e0, _ = docker_engines.engines
    labels = {**GANG, "flowplan.rendezvous": "tensorflow", "flowplan.servers.max": "2", "flowplan.servers.cpu_millis": "300"}
    template(docker_engines, "fp-ps", "ps", labels=labels)
    ad = adapter_for(docker_engines)
    pending = job_of(ad, "ps")
    assert pending.status == "pending" and pending.servers is not None
    assert (pending.servers.min, pending.servers.max, pending.servers.cpu_millis) == (1, 2, 300)
    start = Change("ps", "start", "main", 500, 0, replicas=2, placement=(("main", 1), ("extra0", 1)), servers=1)
    (out,) = ad.apply([start])
    assert out.ok and "2 parameter server(s), 1 on each host" in out.message, out
    by_engine = {
        name: {(c["Labels"].get(ROLE, "worker"), c["Labels"][RANK]): c for c in containers(e, "ps")}
        for name, e in (("main", main), ("extra0", e0))
    }
    assert sorted(by_engine["main"]) == [("ps", "0"), ("worker", "0")] and sorted(by_engine["extra0"]) == [
        ("ps", "1"),
        ("worker", "1"),
    ]
    port = int(by_engine["main"][("worker", "0")]["Labels"][MASTER_PORT])
    cluster = {"worker": [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"], "ps": [f"127.0.0.1:{port + 2}", f"127.0.0.1:{port + 3}"]}
    for name, engine in (("main", main), ("extra0", e0)):
        for (role, index), c in by_engine[name].items():
            task = {"type": role, "index": int(index)}
            assert json.loads(env_of(engine, c["Id"])["TF_CONFIG"]) == {"cluster": cluster, "task": task}
            assert c["Labels"][PS] == "2" and c["HostConfig"]["NetworkMode"] == "host"
            shares = api(engine.url).inspect_container(c["Id"])["HostConfig"]["CpuShares"]
            assert shares == shares_for(300 if role == "ps" else 500)
    running = wait_for(
        lambda: (j := job_of(ad, "ps")) and len(j.history) >= 5 and j,
        90,
        "5 epochs through the servers",
        explain=logs(docker_engines, "ps"),
    )
    assert running.allocation.servers == 1 and [(s.node, s.replicas) for s in running.placement] == [("main", 1), ("extra0", 1)]
    (again,) = ad.apply([start])
    assert again.ok and "already running" in again.message, again
    (kept,) = ad.apply(
        [Change("ps", "resize", "main", 400, 0, replicas=2, from_node="main", placement=start.placement, servers=1)]
    )
    assert kept.ok and "2 replicas" in kept.message, kept  # the workers' share, live; the servers kept
    assert len(containers(main, "ps")) == 2 and len(containers(e0, "ps")) == 2

    # The plan grows it to 3 workers, two servers on main: a restart through rank 0's checkpoint.
    three = Change("ps", "migrate", "main", 500, 0, replicas=3, from_node="main", placement=(("main", 3),), servers=2)
    (out,) = ad.apply([three])
    assert out.ok and "3 replicas on 3 on main and 2 parameter server(s), 2 on each host" in out.message, out
    assert containers(e0, "ps") == []  # the old worker and server there removed
    now = {(c["Labels"].get(ROLE, "worker"), c["Labels"][RANK]): c for c in containers(main, "ps")}
    assert sorted(now) == [("ps", "0"), ("ps", "1"), ("worker", "0"), ("worker", "1"), ("worker", "2")]
    held = max(p.epoch for p in ad.store.history("ps"))
    resumed = wait_for(
        lambda: [e for e in log_events(main, now[("worker", "0")]["Id"]) if e["event"] == "resumed"],
        180,
        "rank 0 to resume",
        explain=logs(docker_engines, "ps"),
    )
    assert resumed[0]["epoch"] == held
    assert [
        (e["world_size"], e["servers"]) for e in log_events(main, now[("worker", "0")]["Id"]) if e["event"] == "rendezvous"
    ] == [(3, 2)]
    grown = wait_for(
        lambda: (j := job_of(ad, "ps")) and j.status == "running" and j,
        30,
        "the gang of 3 with 2 servers",
        explain=logs(docker_engines, "ps"),
    )
    assert grown.allocation.servers == 2 and grown.placement is None and grown.replicas == 3
    done = wait_for(
        lambda: (j := job_of(ad, "ps")) and j.status == "finished" and j,
        180,
        "the PS gang to finish",
        explain=logs(docker_engines, "ps"),
    )
    assert {(p.replicas, p.nodes, p.servers) for p in done.speed} <= {(2, 2, 2), (3, 1, 2)}, done.speed
    assert [p.epoch for p in done.history] == [float(i) for i in range(1, EPOCHS + 1)]
    reference = unscaled_loss(tmp_path)
    print(f"final loss: PS gang 2 -> 3 workers {done.history[-1].loss!r}, one process {reference!r}")
    assert done.history[-1].loss == pytest.approx(reference, rel=1e-9)
    servers = [c for c in containers(main, "ps") if c["Labels"].get(ROLE) == "ps"]
    assert len(servers) == 2 and all(c["State"] == "exited" and c["Status"].startswith("Exited (0)") for c in servers), servers


def test_pause_checkpoints_rank_0_and_removes_the_others(docker_engines: Any) -> None:
    main, e0, _ = docker_engines.engines
    template(docker_engines, "fp-pause", "pause", args=LONG)
    ad = adapter_for(docker_engines)
    ad.observe()
    (out,) = ad.apply([Change("pause", "start", "extra0", 500, 0, replicas=2)])  # both on extra0
    assert out.ok, out
    assert containers(main, "pause") == [] and len(containers(e0, "pause")) == 2
    running = wait_for(
        lambda: (j := job_of(ad, "pause")) and len(j.history) >= 2 and j,
        90,
        "2 epochs on extra0",
        explain=logs(docker_engines, "pause"),
    )
    assert running.placement is None or [(s.node, s.replicas) for s in running.placement] == [("extra0", 2)]
    (out,) = ad.apply([Change("pause", "pause", None, 0, 0, replicas=2, from_node="extra0")])
    assert out.ok and "exit 75" in out.message and "removed 1" in out.message, out
    (left,) = containers(e0, "pause")
    assert left["Labels"][RANK] == "0" and left["State"] == "exited"
    assert job_of(ad, "pause").status == "pending"


def test_a_gang_that_finished_since_the_observe_is_not_moved_or_resized(docker_engines: Any) -> None:
    main, e0, _ = docker_engines.engines
    template(docker_engines, "fp-ends", "ends", args=["--epochs", "3", "--work", "30", "--checkpoint-every", "0"])
    ad = adapter_for(docker_engines)
    ad.observe()
    (out,) = ad.apply([Change("ends", "start", "extra0", 500, 0, replicas=2)])
    assert out.ok, out
    assert job_of(ad, "ends").status == "running"  # the plan below is made from this observe

    def rank0() -> dict[str, Any]:
        return next(c for c in containers(e0, "ends") if c["Labels"][RANK] == "0")

    wait_for(lambda: rank0()["State"] == "exited", 90, "the gang to finish", explain=logs(docker_engines, "ends"))
    before = sorted(c["Id"] for c in containers(e0, "ends") + containers(main, "ends"))
    moot = ad.apply(
        [
            Change("ends", "migrate", "main", 500, 0, replicas=2, from_node="extra0"),
            Change("ends", "resize", "extra0", 900, 0, replicas=2, from_node="extra0"),
        ]
    )
    assert [(o.ok, o.message) for o in moot] == [
        (True, "finished before the move: nothing to move"),
        (True, "finished before the resize: nothing to change"),
    ], moot
    assert sorted(c["Id"] for c in containers(e0, "ends") + containers(main, "ends")) == before  # nothing made


def test_a_rank_0_running_without_its_gang_is_stopped_with_a_checkpoint(docker_engines: Any) -> None:
    from docker_env import api

    main = docker_engines.engines[0]
    cid = template(docker_engines, "fp-alone", "alone", args=LONG)
    api(main.url).start(cid)  # by hand: one process, WORLD_SIZE unset
    ad = adapter_for(docker_engines)
    wait_for(
        lambda: any(e["event"] == "rendezvous" for e in log_events(main, cid)),
        60,
        "the job to start",
        explain=logs(docker_engines, "alone"),
    )
    assert "alone" not in {j.id for j in ad.observe().jobs}
    assert ad.last.broken["alone"] == "rank 0 runs without its gang (started outside FlowPlan?)"
    lines = ad.reconcile()
    assert any(line.startswith("alone: broken gang") and "exit 75" in line for line in lines), lines
    after = job_of(ad, "alone")
    assert after.status == "pending" and after.history, after
    assert [c["Id"] for c in containers(main, "alone")] == [cid]


def test_a_rescale_that_cannot_make_its_new_set_starts_the_old_one_again(docker_engines: Any) -> None:
    from docker_env import IMAGE, api

    main, e0, e1 = docker_engines.engines
    for engine in (main, e0):  # not on extra1
        api(engine.url).tag(IMAGE, "flowplan/not-on-extra1", "1")
    template(docker_engines, "fp-back", "back", image="flowplan/not-on-extra1:1", args=LONG)
    ad = adapter_for(docker_engines)
    ad.observe()
    ok = ad.apply([Change("back", "start", "main", 500, 0, replicas=2, placement=(("main", 1), ("extra0", 1)))])
    assert ok[0].ok, ok
    before = {c["Id"] for e in (main, e0) for c in containers(e, "back")}
    wait_for(
        lambda: (j := job_of(ad, "back")) and len(j.history) >= 3 and j, 90, "3 epochs", explain=logs(docker_engines, "back")
    )
    three = Change("back", "migrate", "main", 500, 0, replicas=3, from_node="main", placement=(("main", 2), ("extra1", 1)))
    (out,) = ad.apply([three])
    assert not out.ok and out.error == "not_found", out
    assert (
        "removed the 2 container(s) made" in out.message and "the old set started again on 1 on main + 1 on extra0" in out.message
    )
    assert containers(e1, "back") == []
    after = {c["Id"]: c for e in (main, e0) for c in containers(e, "back")}
    assert set(after) == before and all(c["State"] == "running" for c in after.values()), after
    (rank0,) = [cid for cid, c in after.items() if c["Labels"][RANK] == "0"]
    wait_for(
        lambda: [e for e in log_events(main, rank0) if e["event"] == "resumed"],
        180,
        "the old rank 0 to resume",
        explain=logs(docker_engines, "back"),
    )
    back = wait_for(
        lambda: (j := job_of(ad, "back")) and j.status == "running" and j,
        30,
        "the old gang running",
        explain=logs(docker_engines, "back"),
    )
    assert [(s.node, s.replicas) for s in back.placement] == [("main", 1), ("extra0", 1)]


def test_a_start_that_cannot_make_every_replica_leaves_nothing(docker_engines: Any) -> None:
    from docker_env import IMAGE, api

    main, e0, _ = docker_engines.engines
    api(main.url).tag(IMAGE, "flowplan/only-on-main", "1")
    cid = template(docker_engines, "fp-half", "half", image="flowplan/only-on-main:1")
    ad = adapter_for(docker_engines)
    ad.observe()
    (out,) = ad.apply([Change("half", "start", "main", 500, 0, replicas=2, placement=(("main", 1), ("extra0", 1)))])
    assert not out.ok and out.error == "not_found", out
    assert "removed the 1 container(s) made" in out.message and "\n" not in out.message, out.message
    assert containers(e0, "half") == []
    (still,) = containers(main, "half")
    assert (still["Id"], still["State"]) == (cid, "created")
    assert job_of(ad, "half").status == "pending"


PS_LABELS = {**GANG, "flowplan.rendezvous": "tensorflow", "flowplan.servers.max": "4", "flowplan.servers.cpu_millis": "200"}


@pytest.mark.parametrize("labels", [GANG, PS_LABELS], ids=["workers", "with-servers"])
def test_the_planner_starts_a_gang_and_the_next_intervals_keep_it(docker_engines: Any, labels: dict[str, str]) -> None:
    """The real planner in the loop starts the gang (with its servers where it has them: the plan's
    servers on each host, read back by the next observe), and the next intervals change nothing."""
    from adapters.loop import ControlLoop
    from planner.policies import make_policy

    template(docker_engines, "fp-planned", "planned", labels=labels, args=["--epochs", "100000", "--work", "300"])
    ad = adapter_for(docker_engines)
    loop = ControlLoop(ad, make_policy("flowplan", time_limit=0.5), ad.clock)
    ticks = []
    for _ in range(4):
        ticks.append(loop.step())
        time.sleep(1.0)
    for t in ticks:
        print([(c.kind, c.replicas, c.placement, c.node, c.cpu_millis) for c in t.changes], [o.message for o in t.outcomes])
    assert not [t.violations for t in ticks if t.violations]
    assert all(o.ok for t in ticks for o in t.outcomes), [o for t in ticks for o in t.outcomes if not o.ok]
    assert ticks[0].changes and ticks[0].changes[0].kind == "start", ticks[0].changes
    assert not [o for t in ticks for o in t.outcomes if "already" in o.message]
    job = wait_for(
        lambda: (j := job_of(ad, "planned")) and j.history and j,
        60,
        "the planned gang's epochs",
        explain=logs(docker_engines, "planned"),
    )
    assert job.status == "running"
    shares = [(s.node, s.replicas) for s in job.placement] if job.placement else [(job.node, job.replicas)]
    assert 2 <= sum(k for _, k in shares) <= 3 and len(shares) <= 2, shares
    seen = sorted(
        (h, c["Labels"].get(ROLE, "worker"), c["Labels"][RANK])
        for h, e in zip(("main", "extra0", "extra1"), docker_engines.engines, strict=True)
        for c in containers(e, "planned")
    )
    workers = [x for x in seen if x[1] == "worker"]
    assert len(workers) == sum(k for _, k in shares), seen
    servers = [x for x in seen if x[1] == "ps"]
    if labels is PS_LABELS:
        per = job.allocation.servers
        assert per is not None and per >= 1 and len(servers) == per * len(shares), (per, seen)
        assert all(sum(1 for x in servers if x[0] == h) == per for h, _ in shares), seen  # the same on each host
        assert ticks[0].changes[0].servers == per
    else:
        assert servers == [] and job.allocation.servers is None


BAD = {
    "not a number": ({**GANG, "flowplan.min_replicas": "x"}, "label flowplan.min_replicas: not a number ('x')"),
    "negative": ({**GANG, "flowplan.min_replicas": "-1"}, "label flowplan.min_replicas: must be between 1 and 1024 ('-1')"),
    "above replicas": (
        {"flowplan.replicas": "2", "flowplan.min_replicas": "5"},
        "label flowplan.min_replicas: 5 exceeds flowplan.replicas 2 ('5')",
    ),
    "elastic": ({**GANG, "flowplan.elastic": "true"}, "label flowplan.elastic: a live rescale is not supported on Docker"),
    "servers without TensorFlow": (
        {**GANG, "flowplan.servers.max": "2"},
        "label flowplan.servers.max: parameter servers find the workers through TF_CONFIG",
    ),
    "servers min above max": (
        {**GANG, "flowplan.rendezvous": "tensorflow", "flowplan.servers.max": "2", "flowplan.servers.min": "3"},
        "label flowplan.servers.min: 3 exceeds flowplan.servers.max 2",
    ),
    "servers fewer than hosts": (
        {**GANG, "flowplan.rendezvous": "tensorflow", "flowplan.servers.max": "1"},
        "label flowplan.max_nodes: 2, but servers.max is 1",
    ),
}


def test_bad_gang_labels_make_the_container_unmanaged_in_one_line(docker_engines: Any) -> None:
    for i, (labels, _) in enumerate(BAD.values()):
        template(docker_engines, f"fp-bad{i}", f"bad{i}", labels=labels)
    ad = adapter_for(docker_engines)
    snap = ad.observe()
    assert not [j for j in snap.jobs if j.id.startswith("bad")]
    node = snap.node("main").labels
    for i, (case, (_, must)) in enumerate(BAD.items()):
        said = node[UNMANAGED_PREFIX + f"fp-bad{i}"]
        assert said.startswith(must) and "\n" not in said, (case, said)
