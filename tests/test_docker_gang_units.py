"""Gangs on Docker without an engine: their labels, the rendezvous, and the example data-parallel job.

Cases:

- gang labels: ``flowplan.replicas``/``min_replicas``/``max_nodes`` fill the Job's fields; each bad one
  (not a number, negative, zero, too big, fractional, min above replicas, min without replicas,
  elastic true, elastic neither true nor false) is one line naming the label and its value;
- the adapter-written labels (rank, generation, world size, port): defaults, and each bad one named;
- the rendezvous: ranks along the placement (local rank and local world size per host), the
  variables replacing any the template had, the port deterministic per job, kept when free,
  moved past ports other gangs hold; ``MASTER_ADDR`` per host spec (``addr=``, a tcp/ssh URL's
  host, 127.0.0.1 for a unix socket) and a bad ``addr`` refused in one line;
- each replica's create spec (no engine): its own GPUs on a shared host, past those another job
  holds, ``conflict`` when none is left; its rendezvous variables, host networking and labels;
- placements refused in one line (count outside the bounds, too many hosts: ``conflict``; a host
  twice or unknown: ``invalid``); members of rank 0's generation told from stale ones; a running rank 0 with a replica
  gone, or without its gang, is broken;
- ``examples/jobs/train_gang.py`` as real processes over real sockets on this machine: the loss
  after 30 epochs is the same with 1 and 3 replicas; a 2-replica run stopped by SIGTERM on rank 0
  exits 75 on both ranks and resumes with 3 replicas from its checkpoint's epoch to the loss of an
  uninterrupted run; a SIGUSR1 to rank 0 of a running 2-replica gang delivers its weights once
  (``<job>.delivered.npz``, a ``delivered`` event) and training goes on to the uninterrupted loss;
  a port another process holds (host networking) is named in one line, no traceback: rank 0 exits 75,
  a parameter server 1; a connection that is reset mid-step is a lost peer (75 on rank 0), not a
  traceback; the adapter's ports end below Linux's ephemeral range.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from adapters.docker.engine import HostSpec, view
from adapters.docker.errors import LabelError
from adapters.docker.labels import parse_labels
from adapters.docker.ranks import (
    GENERATION,
    MASTER_PORT,
    PORT_BASE,
    PORT_SPAN,
    RANK,
    WORLD_SIZE,
    broken,
    choose_port,
    member_of,
    ports_held,
    rank_layout,
    rendezvous_env,
    shares_problem,
    split_members,
    tf_config,
)

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "examples" / "jobs" / "train_gang.py"
GANG = {"flowplan.job": "g", "flowplan.replicas": "4", "flowplan.min_replicas": "2", "flowplan.max_nodes": "2"}

BAD_LABELS: dict[str, tuple[dict[str, str | None], str]] = {
    "min not a number": ({"flowplan.min_replicas": "x"}, "label flowplan.min_replicas: not a number ('x')"),
    "min negative": ({"flowplan.min_replicas": "-1"}, "label flowplan.min_replicas: must be between 1 and 1024 ('-1')"),
    "replicas zero": ({"flowplan.replicas": "0"}, "label flowplan.replicas: must be between 1 and 1024 ('0')"),
    "replicas too big": ({"flowplan.replicas": "5000"}, "label flowplan.replicas: must be between 1 and 1024 ('5000')"),
    "replicas fractional": ({"flowplan.replicas": "2.5"}, "label flowplan.replicas: must be a whole number ('2.5')"),
    "max_nodes zero": ({"flowplan.max_nodes": "0"}, "label flowplan.max_nodes: must be between 1 and 1024 ('0')"),
    "min above replicas": ({"flowplan.min_replicas": "5"}, "label flowplan.min_replicas: 5 exceeds flowplan.replicas 4 ('5')"),
    "min without replicas": (
        {"flowplan.replicas": None, "flowplan.min_replicas": "2"},
        "label flowplan.min_replicas: 2 exceeds flowplan.replicas 1 ('2')",
    ),
    "elastic true": ({"flowplan.elastic": "true"}, "label flowplan.elastic: a live rescale is not supported on Docker"),
    "elastic neither": ({"flowplan.elastic": "maybe"}, "label flowplan.elastic: expected true or false ('maybe')"),
    "rank not a number": ({RANK: "one"}, "label flowplan.rank: not a whole number ('one')"),
    "port out of range": ({MASTER_PORT: "70000"}, "label flowplan.master_port: must be between 1 and 65535 ('70000')"),
    "rendezvous unknown": ({"flowplan.rendezvous": "mpi"}, "label flowplan.rendezvous: expected torch or tensorflow ('mpi')"),
}


def _labels(change: dict[str, str | None]) -> dict[str, str]:
    out: dict[str, str | None] = {**GANG, **change}
    return {k: v for k, v in out.items() if v is not None}


def test_gang_labels_fill_the_job() -> None:
    parsed = parse_labels({**GANG, "flowplan.elastic": "false"})
    assert parsed is not None
    assert {k: parsed.fields[k] for k in ("replicas", "min_replicas", "max_nodes")} == {
        "replicas": 4,
        "min_replicas": 2,
        "max_nodes": 2,
    }
    assert member_of(GANG).rank == 0 and member_of(GANG).world_size is None
    written = member_of({**GANG, RANK: "3", GENERATION: "7", WORLD_SIZE: "4", MASTER_PORT: "29600"})
    assert (written.rank, written.generation, written.world_size, written.port) == (3, 7, 4, 29600)


@pytest.mark.parametrize("case", sorted(BAD_LABELS))
def test_bad_gang_label_is_one_line_naming_it(case: str) -> None:
    change, must = BAD_LABELS[case]
    labels = _labels(change)
    with pytest.raises(LabelError) as err:
        parse_labels(labels)
        member_of(labels)
    assert str(err.value).startswith(must) and "\n" not in str(err.value), str(err.value)


def test_ranks_follow_the_placement_and_the_variables_replace_the_templates() -> None:
    assert rank_layout((("a", 2), ("b", 1))) == [("a", 0, 0, 2), ("a", 1, 1, 2), ("b", 2, 0, 1)]
    env = ["PATH=/bin", "RANK=9", "WORLD_SIZE=9", "FLOWPLAN_JOB=g", "MASTER_ADDRESS=keep"]
    values = {"MASTER_ADDR": "10.0.0.2", "MASTER_PORT": 29501, "WORLD_SIZE": 3, "RANK": 2, "LOCAL_RANK": 0, "LOCAL_WORLD_SIZE": 1}
    assert rendezvous_env(env, values) == [
        "PATH=/bin",
        "FLOWPLAN_JOB=g",
        "MASTER_ADDRESS=keep",
        "MASTER_ADDR=10.0.0.2",
        "MASTER_PORT=29501",
        "WORLD_SIZE=3",
        "RANK=2",
        "LOCAL_RANK=0",
        "LOCAL_WORLD_SIZE=1",
    ]


def test_tensorflow_gangs_get_tf_config_instead_of_torchruns_variables() -> None:
    assert parse_labels(GANG).rendezvous == "torch"  # type: ignore[union-attr]
    assert parse_labels({**GANG, "flowplan.rendezvous": " TensorFlow "}).rendezvous == "tensorflow"  # type: ignore[union-attr]
    workers = ["10.0.0.2:31000", "10.0.0.2:31001", "10.0.0.3:31002"]
    assert json.loads(tf_config(workers, 2)) == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 2}}
    env = ["PATH=/bin", 'TF_CONFIG={"old": 1}', "RANK=9", "MASTER_ADDR=x"]
    assert rendezvous_env(env, {"TF_CONFIG": tf_config(workers, 0)}) == ["PATH=/bin", f"TF_CONFIG={tf_config(workers, 0)}"]


def test_a_tensorflow_gang_holds_a_port_per_worker_and_others_keep_clear() -> None:
    torch = {**GANG, WORLD_SIZE: "3", MASTER_PORT: "31000"}
    assert ports_held(torch) == range(31000, 31001)
    assert ports_held({**torch, "flowplan.rendezvous": "tensorflow"}) == range(31000, 31003)
    assert ports_held(GANG) == range(0)  # never started by the adapter
    first = choose_port("job-a", set(), width=3)
    assert choose_port("job-a", set()) == first  # the same hash start, whatever the width
    # A block is clear of every port taken, and a kept port is given up when its block is not.
    assert choose_port("job-a", {first + 2}, width=3) == first + 3
    assert choose_port("job-a", {31002}, preferred=31000, width=2) == 31000
    assert choose_port("job-a", {31001}, preferred=31000, width=2) != 31000
    # Never past the range's end.
    top = PORT_BASE + PORT_SPAN
    assert all(p + 4 <= top for p in (choose_port(f"j{i}", set(), width=4) for i in range(200)))


def test_port_is_deterministic_kept_and_moves_past_taken_ones() -> None:
    # Below Linux's default ephemeral ports (32768-60999): any outgoing connection may hold one of those.
    assert PORT_BASE + PORT_SPAN <= 32768
    first = choose_port("job-a", set())
    assert PORT_BASE <= first < PORT_BASE + PORT_SPAN and choose_port("job-a", set()) == first
    assert choose_port("job-a", {first}) == PORT_BASE + (first - PORT_BASE + 1) % PORT_SPAN
    assert choose_port("job-a", {first}, preferred=30001) == 30001
    assert choose_port("job-a", {30001}, preferred=30001) == first
    assert len({choose_port(f"job-{i}", set()) for i in range(50)}) > 45  # spread over the range


@pytest.mark.parametrize(
    ("url", "addr", "want"),
    [
        ("unix:///var/run/docker.sock", None, "127.0.0.1"),
        ("tcp://10.0.0.2:2375", None, "10.0.0.2"),
        ("ssh://me@gpu-3.lab:22", None, "gpu-3.lab"),
        ("unix:///var/run/docker.sock", "192.168.1.7", "192.168.1.7"),
    ],
)
def test_master_addr_of_a_host(url: str, addr: str | None, want: str) -> None:
    spec = HostSpec.parse(f"h={url}" + (f",addr={addr}" if addr else ""))
    assert spec.rendezvous_addr == want


def test_bad_addr_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^host h: addr='a b' is not a host name or IP address$"):
        HostSpec.parse("h=unix:///x.sock,addr=a b")


@pytest.mark.parametrize(
    ("shares", "kind", "must"),
    [
        ((("a", 1),), "conflict", "1 replicas, outside [2, 4] (flowplan.min_replicas, flowplan.replicas)"),
        ((("a", 3), ("b", 2)), "conflict", "5 replicas, outside [2, 4]"),
        ((("a", 1), ("b", 1), ("c", 1)), "conflict", "placement over 3 hosts, but flowplan.max_nodes is 2"),
        ((("a", 1), ("a", 1)), "invalid", "a host listed twice"),
        ((("a", 1), ("z", 1)), "invalid", "unknown host 'z'"),
        ((("a", 0), ("b", 2)), "invalid", "a host listed with no replica"),
    ],
)
def test_placements_refused_in_one_line(shares: Any, kind: str, must: str) -> None:
    """Outside the declared bounds: a plan made for other labels (``conflict``, re-planned); a
    malformed placement can never work (``invalid``)."""
    fields = parse_labels(GANG).fields  # type: ignore[union-attr]
    problem = shares_problem(fields, shares, ["a", "b", "c"])
    assert problem is not None and problem[0] == kind and must in problem[1], problem
    assert shares_problem(fields, (("a", 2), ("b", 1)), ["a", "b", "c"]) is None


def _container(cid: str, labels: dict[str, str], state: str = "running", created: str = "2026-01-01T00:00:00Z") -> Any:
    return view({"Id": cid, "Name": "/" + cid, "Created": created, "State": {"Status": state}, "Config": {"Labels": labels}})


def test_members_of_rank_0s_generation_and_broken_gangs() -> None:
    gen = {**GANG, GENERATION: "2", WORLD_SIZE: "3", MASTER_PORT: "29600"}
    rank0 = _container("r0", {**gen, RANK: "0"})
    r1 = ("a", _container("r1", {**gen, RANK: "1"}))
    r2 = ("b", _container("r2", {**gen, RANK: "2"}))
    old = ("b", _container("old", {**gen, GENERATION: "1", RANK: "1"}))
    members, stale = split_members(rank0, [r2, old, r1])
    assert [c.id for _, c in members] == ["r1", "r2"] and [c.id for _, c in stale] == ["old"]
    fields = parse_labels(GANG).fields  # type: ignore[union-attr]
    assert broken("a", rank0, members, fields) is None
    assert broken("a", rank0, [r1], fields) == "2 of its 3 replicas running"
    stopped = ("b", _container("r2", {**gen, RANK: "2"}, state="exited"))
    assert broken("a", rank0, [r1, stopped], fields) == "2 of its 3 replicas running"
    alone = _container("r0", {**GANG})  # the template, started by hand
    assert broken("a", alone, [], fields) == "rank 0 runs without its gang (started outside FlowPlan?)"


# --- the example job, as real processes on real sockets ---------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gang(world: int, ckpt: Path, *args: str, tf: bool = False, servers: int = 0) -> list[subprocess.Popen[str]]:
    """``world`` processes of the example job (rank order), then ``servers`` parameter servers; ``tf``
    (implied by ``servers``): they find each other with ``TF_CONFIG``, as the adapter writes it for
    ``flowplan.rendezvous=tensorflow`` (each task its own port, the servers' after the workers'), not
    torchrun's variables."""
    port = _free_port()
    workers = [f"127.0.0.1:{port + r}" for r in range(world)]
    ps = [f"127.0.0.1:{port + world + i}" for i in range(servers)]
    procs = []
    for task, index in [*(("worker", r) for r in range(world)), *(("ps", i) for i in range(servers))]:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        if (world > 1 and tf) or servers:
            env["TF_CONFIG"] = tf_config(workers, index, ps, task=task)
        elif world > 1:
            env.update(WORLD_SIZE=str(world), RANK=str(index), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        cmd = [sys.executable, str(JOB), "--job", "g", "--checkpoint-dir", str(ckpt), *args]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    return procs


def _records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _signalled_after_3_epochs(tmp: Path, sig: int, epochs: int, *args: str, servers: int = 0) -> tuple[str, str, list[int]]:
    """One process run to the end (the reference), and a 2-replica run (with ``servers`` parameter
    servers) whose rank 0 is sent ``sig`` once it has reported 3 epochs: the reference's output, rank
    0's output after the signal, every process's exit code (ranks, then servers)."""
    reference = _gang(1, tmp / "ref", "--epochs", str(epochs), "--work", "1")[0].communicate(timeout=120)[0]
    two = _gang(2, tmp / "ckpt", "--epochs", str(epochs), "--work", "2000", *args, servers=servers)
    assert two[0].stdout is not None
    seen, deadline = 0, time.time() + 120
    while seen < 3 and time.time() < deadline:
        line = two[0].stdout.readline()
        if line.startswith('{"epoch"'):
            seen = json.loads(line)["epoch"]
    assert seen >= 3
    os.kill(two[0].pid, sig)
    rest = two[0].communicate(timeout=120)[0]
    return reference, rest, [two[0].returncode, *(p.wait(timeout=60) for p in two[1:])]


def _last_loss(out: str) -> float:
    return float([r for r in _records(out) if "loss" in r][-1]["loss"])


@pytest.mark.slow
def test_the_job_trains_to_the_same_loss_with_any_world_size(tmp_path: Path) -> None:
    """One process, 3 ranks (torchrun's variables), 2 through TF_CONFIG, and 2 workers summing through
    3 parameter servers (each server one slice of the gradient) reach the same loss; the servers exit 0."""
    losses = {}
    for world, tf, servers in ((1, False, 0), (3, False, 0), (2, True, 0), (2, True, 3)):
        procs = _gang(world, tmp_path / f"w{world}{servers}", "--epochs", "30", "--work", "1", tf=tf, servers=servers)
        outs = [p.communicate(timeout=120)[0] for p in procs]
        assert [p.returncode for p in procs] == [0] * (world + servers)
        rendezvous = [r for r in _records(outs[0]) if r.get("event") == "rendezvous"]
        assert [(r["world_size"], r["servers"]) for r in rendezvous] == [(world, servers)]
        losses[(world, servers)] = _last_loss(outs[0])
    print(f"loss after 30 epochs: {losses!r}")
    for key in ((3, 0), (2, 0), (2, 3)):
        assert losses[key] == pytest.approx(losses[(1, 0)], rel=1e-9), key


@pytest.mark.parametrize(
    ("tf_config_text", "must"),
    [
        ('{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}', "IndexError"),
        ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}', "KeyError"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}}', "parameter server 0, but 0 listed"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}', "only workers and parameter servers"),
        ("not json", "JSONDecodeError"),
    ],
)
def test_the_job_refuses_a_bad_tf_config_in_one_line(tmp_path: Path, tf_config_text: str, must: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "TF_CONFIG": tf_config_text}
    cmd = [sys.executable, str(JOB), "--job", "g", "--checkpoint-dir", str(tmp_path), "--epochs", "1"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.startswith("bad rendezvous: ") and must in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1


def test_a_port_held_by_another_process_is_named_in_one_line(tmp_path: Path) -> None:
    """Rank 0 and a parameter server whose port another process listens on: tried again until the
    rendezvous timeout (1 s here), then one line naming the port; rank 0 exits 75, the server 1."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        workers, ps = [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"], [f"127.0.0.1:{port}"]
        cases = {
            "rank 0": ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}, 75),
            "ps 0": ({"TF_CONFIG": tf_config(workers, 0, ps, task="ps")}, 1),
        }
        for who, (rendezvous, code) in cases.items():
            env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **rendezvous}
            cmd = [sys.executable, str(JOB), "--job", "g", "--checkpoint-dir", str(tmp_path), "--rendezvous-timeout", "1"]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
            assert out.returncode == code and "Traceback" not in out.stderr, (who, out.stderr)
            assert f"{who} cannot listen on port {port}: Address already in use" in out.stderr, (who, out.stderr)
            assert out.stderr.count("\n") == 1, out.stderr


def test_a_reset_connection_mid_step_is_a_lost_peer(tmp_path: Path) -> None:
    """2 workers whose parameter server is something else on its port (it reads a little and closes):
    the reset reaches them while they send, and each exits as for a lost peer (rank 0 75, rank 1 1,
    one line each), not with a traceback."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(4)
        port = other.getsockname()[1]
        procs = []
        for rank in (0, 1):
            env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
            env["TF_CONFIG"] = tf_config([f"127.0.0.1:{port + 1}", f"127.0.0.1:{port + 2}"], rank, [f"127.0.0.1:{port}"])
            cmd = [sys.executable, str(JOB), "--job", "g", "--checkpoint-dir", str(tmp_path), "--epochs", "5"]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        for _ in procs:
            conn, _ = other.accept()
            conn.recv(3)
            conn.close()  # the rest unread: a reset
        errs = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [75, 1], errs
    for rank, err in enumerate(errs):
        assert "Traceback" not in err and f"rank {rank}: a peer was lost: " in err, err


@pytest.mark.slow
def test_a_parameter_server_gang_checkpoints_and_resumes_with_other_servers(tmp_path: Path) -> None:
    """2 workers and 1 server; SIGTERM to rank 0 after 3 epochs: the workers exit 75 (the server passes
    rank 0's stop on), the server 0; resumed with 3 workers and 2 servers from the checkpoint, the
    loss at the end is that of one process."""
    reference, rest, codes = _signalled_after_3_epochs(tmp_path, signal.SIGTERM, 40, "--checkpoint-every", "0", servers=1)
    assert codes == [75, 75, 0]
    (checkpoint,) = [r for r in _records(rest) if r.get("event") == "checkpoint"]
    three = _gang(3, tmp_path / "ckpt", "--epochs", "40", "--work", "1", servers=2)
    outs = [p.communicate(timeout=120)[0] for p in three]
    assert [p.returncode for p in three] == [0] * 5
    (resumed,) = [r for r in _records(outs[0]) if r.get("event") == "resumed"]
    assert resumed["epoch"] == checkpoint["epoch"] >= 3
    assert _last_loss(outs[0]) == pytest.approx(_last_loss(reference), rel=1e-9)


@pytest.mark.slow
def test_sigterm_checkpoints_the_gang_and_it_resumes_with_another_size(tmp_path: Path) -> None:
    reference, rest, codes = _signalled_after_3_epochs(tmp_path, signal.SIGTERM, 40, "--checkpoint-every", "0")
    assert codes == [75, 75]
    (checkpoint,) = [r for r in _records(rest) if r.get("event") == "checkpoint"]
    assert 3 <= checkpoint["epoch"] < 40
    three = _gang(3, tmp_path / "ckpt", "--epochs", "40", "--work", "1")
    outs = [p.communicate(timeout=120)[0] for p in three]
    assert [p.returncode for p in three] == [0, 0, 0]
    (resumed,) = [r for r in _records(outs[0]) if r.get("event") == "resumed"]
    assert resumed["epoch"] == checkpoint["epoch"]
    assert [r["epoch"] for r in _records(outs[0]) if "loss" in r][0] == checkpoint["epoch"] + 1
    assert _last_loss(outs[0]) == pytest.approx(_last_loss(reference), rel=1e-9)


@pytest.mark.slow
def test_sigusr1_delivers_the_model_and_training_goes_on(tmp_path: Path) -> None:
    import numpy as np

    reference, rest, codes = _signalled_after_3_epochs(tmp_path, signal.SIGUSR1, 30)
    assert codes == [0, 0]
    (delivered,) = [r for r in _records(rest) if r.get("event") == "delivered"]
    assert 3 <= delivered["epoch"] < 30
    with np.load(tmp_path / "ckpt" / "g.delivered.npz") as z:
        assert z["w"].shape == (65, 10) and np.isfinite(z["w"]).all()
    assert _last_loss(rest) == pytest.approx(_last_loss(reference), rel=1e-9)


def test_each_replica_gets_its_own_gpus_and_the_rendezvous() -> None:
    """The create spec of each replica, built without an engine (nothing is called: the hosts'
    connections are lazy): replicas on one 4-GPU host get distinct devices, skipping the one a
    running container of another job holds; a fourth replica there finds none (``conflict``)."""
    from adapters.base import Change
    from adapters.docker import DockerAdapter, DockerAdapterError, HostSpec
    from adapters.docker.adapter import Placed

    ad = DockerAdapter([HostSpec("a", "unix:///nonexistent.sock", cpu_millis=8000, gpus=4, addr="10.0.0.9")])
    labels = {**GANG, "flowplan.min_gpus": "1", "flowplan.max_gpus": "1"}
    config = {"Image": "img", "Cmd": ["python", "t.py"], "Env": ["RANK=7", "A=1"], "Labels": labels}
    template = view({"Id": "t", "Name": "/train", "State": {"Status": "created"}, "Config": config, "HostConfig": {}})
    held = {"DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": ["0"], "Capabilities": [["gpu"]]}]}
    other = view({"Id": "o", "Name": "/o", "State": {"Status": "running"}, "Config": {"Labels": {}}, "HostConfig": held})
    mine, theirs = parse_labels(labels), parse_labels({"flowplan.job": "o"})
    assert mine is not None and theirs is not None
    ad.last.placed = {"g": Placed("a", template, mine), "o": Placed("a", other, theirs)}
    ch = Change("g", "start", "a", 1000, 1, replicas=4)
    rendezvous = {"MASTER_ADDR": "10.0.0.9", "MASTER_PORT": 29777, "WORLD_SIZE": 4}
    taken: dict[str, list[str]] = {}
    specs = [ad.gangs._spec(ch, ad.last.placed["g"], template, ("a", r, r, 4), rendezvous, 5, taken) for r in range(3)]
    assert [s["host_config"]["device_requests"][0]["DeviceIDs"] for s in specs] == [["1"], ["2"], ["3"]]
    with pytest.raises(DockerAdapterError) as err:
        ad.gangs._spec(ch, ad.last.placed["g"], template, ("a", 3, 3, 4), rendezvous, 5, taken)
    assert err.value.kind == "conflict" and "1 GPU(s) requested, 0 free of 4" in err.value.message
    env = dict(item.partition("=")[::2] for item in specs[2]["config"]["environment"])
    want = {"RANK": "2", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.9", "A": "1"}
    assert {k: env[k] for k in want} == want and env["MASTER_PORT"] == "29777"
    assert specs[2]["host_config"]["network_mode"] == "host"
    assert {k: specs[2]["config"]["labels"][k] for k in (RANK, GENERATION, WORLD_SIZE, MASTER_PORT)} == {
        RANK: "2",
        GENERATION: "5",
        WORLD_SIZE: "4",
        MASTER_PORT: "29777",
    }


def test_a_tensorflow_gangs_replicas_get_tf_config_and_no_torch_variables() -> None:
    """As above, for a gang labelled ``flowplan.rendezvous=tensorflow``: each replica's spec carries
    ``TF_CONFIG`` with every worker's address and its own index, none of torchrun's variables (the
    template's are dropped), and the same adapter labels."""
    from adapters.base import Change
    from adapters.docker import DockerAdapter, HostSpec
    from adapters.docker.adapter import Placed

    ad = DockerAdapter([HostSpec("a", "unix:///nonexistent.sock", cpu_millis=8000, addr="10.0.0.9")])
    labels = {**GANG, "flowplan.rendezvous": "tensorflow"}
    config = {"Image": "img", "Cmd": ["python", "t.py"], "Env": ["RANK=7", "A=1", "TF_CONFIG={}"], "Labels": labels}
    template = view({"Id": "t", "Name": "/train", "State": {"Status": "created"}, "Config": config, "HostConfig": {}})
    mine = parse_labels(labels)
    assert mine is not None and mine.rendezvous == "tensorflow"
    ad.last.placed = {"g": Placed("a", template, mine)}
    ch = Change("g", "start", "a", 1000, 0, replicas=2)
    workers = ["10.0.0.9:31000", "10.0.0.9:31001"]
    rendezvous = {"MASTER_ADDR": "10.0.0.9", "MASTER_PORT": 31000, "WORLD_SIZE": 2}
    spec = ad.gangs._spec(ch, ad.last.placed["g"], template, ("a", 1, 1, 2), rendezvous, 3, {}, workers)
    env = dict(item.partition("=")[::2] for item in spec["config"]["environment"])
    assert env == {"A": "1", "TF_CONFIG": tf_config(workers, 1)}
    written = {k: spec["config"]["labels"][k] for k in (RANK, WORLD_SIZE, MASTER_PORT)}
    assert written == {RANK: "1", WORLD_SIZE: "2", MASTER_PORT: "31000"}
    assert spec["config"]["labels"]["flowplan.rendezvous"] == "tensorflow"  # kept: its ports are found from it
