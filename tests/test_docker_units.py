"""The Docker adapter's pure parts, without an engine: labels, log parsing, host specs, GPU requests, errors.

Case matrix:

- labels: not a job; defaults; every field; targets with absolute and relative deadlines; each kind
  of bad value (not a number, NaN, out of range, min above max, unknown key, bad bool, bad id,
  tier without tier1, both deadline and within) → LabelError naming the label and value;
- logs: Loss-only; JSON-only; both (JSON wins, no double points); cursor skips what was read;
  trailing Loss held back until final; events; garbage, NaN and negative epochs ignored; recorded
  framework logs (Keras, Lightning, HF Trainer, PyTorch, tqdm) read over three intervals, the cursor
  through JSON between them, give the points ``flowplan logs`` gives; a step log gives a speed point
  from its first lines, inside the first epoch;
- host specs: good forms; each bad part named;
- GPU requests: none, lowest free ids, not enough free → conflict (no GPU here: request construction only);
- recreate_spec: the guarantee as CpuShares, a cap only when there is one (keeping the container's
  mechanism), and image, command, env, binds, labels, devices carried over;
- CPU round trip: for every kind of container (never capped, ``--cpus``, ``--cpu-quota``), guarantee,
  planned cap and declared max, what ``set_cpu`` posts (to a fake engine that keeps the real engine's
  rules) is observed back as the same guarantee and cap, and the change is then "already" in effect;
- error classification for docker-py / requests exceptions;
- the engine client: on a unix socket it reads no proxy settings from the environment, over tcp it
  does (``HTTPS_PROXY``, ``NO_PROXY``, a CA bundle still apply);
- daemon recovery: which recorded actions count as in effect (caps included);
- the daemon's wake clock: a wake-up cuts the sleep short after the debounce; an ignored one (the
  daemon's own action) does not; one that came while busy cuts the next sleep; halt returns at once;
- speed borrowed through a real state file: a job of a task, its speed measured from the first steps
  of a recorded log, finishes; a new job of the task (another adapter, same file) is planned at that
  speed with the basis naming the task and the job; another task of the same image borrows by image;
  the new job's own first observation replaces the borrowed speed.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from adapters.base import Change
from adapters.daemon import WakeClock, in_effect
from adapters.docker import (
    DockerAdapter,
    DockerAdapterError,
    HostSpec,
    LabelError,
    LogCursor,
    classify,
    gpu_request,
    parse_labels,
    read_lines,
)
from adapters.docker.adapter import Placed
from adapters.docker.engine import api_client, guarantee_of, recreate_spec, shares_for, view
from planner.snapshot import Allocation, Job, Node, Share, Snapshot

# -- labels -----------------------------------------------------------------------------------

GOOD = [
    ("not-a-job", {"other": "x"}, None),
    ("defaults", {"flowplan.job": "j1"}, {"min_cpu_millis": 250, "max_cpu_millis": 1000}),
    (
        "every-field",
        {
            "flowplan.job": "j2",
            "flowplan.min_cpu_millis": "500",
            "flowplan.max_cpu_millis": "2000",
            "flowplan.priority": "3",
            "flowplan.migratable": "false",
            "flowplan.resizable": "True",
            "flowplan.memory_mib": "1024",
            "flowplan.checkpoint_seconds": "5",
            "flowplan.task": "digits-mlp",
        },
        {
            "min_cpu_millis": 500,
            "max_cpu_millis": 2000,
            "priority": 3.0,
            "migratable": False,
            "resizable": True,
            "task": "digits-mlp",
        },
    ),
]


@pytest.mark.parametrize("name,labels,expect", GOOD, ids=[g[0] for g in GOOD])
def test_labels_parse(name: str, labels: dict[str, str], expect: dict | None) -> None:
    parsed = parse_labels(labels, created=1000.0)
    if expect is None:
        assert parsed is None
        return
    assert parsed is not None
    for k, v in expect.items():
        assert parsed.fields[k] == v, k
    assert parsed.fields["submitted"] == 1000.0
    Job(id=parsed.job_id, status="pending", **parsed.fields)  # the fields fit the contract


def test_the_engine_client_reads_the_environment_only_where_a_proxy_can_apply() -> None:
    """Building a client connects to nothing (the API version is given): no engine needed."""
    local = api_client("unix:///var/run/nowhere.sock", timeout=1)
    remote = api_client("tcp://127.0.0.1:1", timeout=1)
    try:
        assert local.trust_env is False and local.known_tty == {}
        assert remote.trust_env is True
    finally:
        local.close()
        remote.close()


def test_labels_target_relative_and_absolute_deadlines() -> None:
    parsed = parse_labels(
        {
            "flowplan.job": "t",
            "flowplan.target.metric": "accuracy",
            "flowplan.target.direction": "higher",
            "flowplan.target.tier1": "0.9",
            "flowplan.target.tier1.within": "600",
            "flowplan.target.tier2": "0.95",
            "flowplan.target.tier2.deadline": "5000",
            "flowplan.target.max_epochs": "40",
        },
        created=1000.0,
    )
    assert parsed is not None
    t = parsed.fields["target"]
    assert (t.metric, t.direction, t.tier1.value, t.tier1.deadline) == ("accuracy", "higher", 0.9, 1600.0)
    assert (t.tier2.value, t.tier2.deadline, t.max_epochs) == (0.95, 5000.0, 40.0)


BAD = [
    ("not-a-number", {"flowplan.min_cpu_millis": "lots"}, "flowplan.min_cpu_millis", "lots"),
    ("nan", {"flowplan.priority": "NaN"}, "flowplan.priority", "NaN"),
    ("inf", {"flowplan.max_cpu_millis": "inf"}, "flowplan.max_cpu_millis", "inf"),
    ("out-of-range", {"flowplan.priority": "1000"}, "flowplan.priority", "1000"),
    ("fraction", {"flowplan.max_gpus": "1.5"}, "flowplan.max_gpus", "1.5"),
    (
        "min-above-max",
        {"flowplan.min_cpu_millis": "3000", "flowplan.max_cpu_millis": "1000"},
        "labels flowplan.min_cpu_millis and flowplan.max_cpu_millis",
        "3000",
    ),
    ("unknown-key", {"flowplan.cpus": "2"}, "flowplan.cpus", "2"),
    ("bad-bool", {"flowplan.migratable": "maybe"}, "flowplan.migratable", "maybe"),
    ("zero-steps-per-epoch", {"flowplan.steps_per_epoch": "0"}, "flowplan.steps_per_epoch", "0"),
    ("nan-steps-per-epoch", {"flowplan.steps_per_epoch": "nan"}, "flowplan.steps_per_epoch", "nan"),
    ("bad-id", {"flowplan.job": "has space"}, "flowplan.job", "has space"),
    ("tier-without-tier1", {"flowplan.target.tier2": "0.9"}, "flowplan.target.tier1", "missing"),
    ("bad-direction", {"flowplan.target.tier1": "1", "flowplan.target.direction": "up"}, "flowplan.target.direction", "up"),
    (
        "deadline-and-within",
        {"flowplan.target.tier1": "1", "flowplan.target.tier1.deadline": "5", "flowplan.target.tier1.within": "5"},
        "flowplan.target.tier1.within",
        "5",
    ),
    (
        "tiers-out-of-order",
        {"flowplan.target.tier1": "0.9", "flowplan.target.tier2": "0.8", "flowplan.target.direction": "higher"},
        "flowplan.target",
        "tier2",
    ),
]


@pytest.mark.parametrize("name,labels,label,value", BAD, ids=[b[0] for b in BAD])
def test_bad_labels_name_the_label_and_value(name: str, labels: dict[str, str], label: str, value: str) -> None:
    with pytest.raises(LabelError) as err:
        parse_labels({"flowplan.job": "j", **labels}, created=0.0)
    text = str(err.value)
    assert label in text and value in text, text
    assert "\n" not in text


# -- logs -------------------------------------------------------------------------------------


def _log(*lines: str, start: int = 0) -> bytes:
    return "".join(f"2026-01-01T00:00:{start + i:02d}.{i:09d}Z {line}\n" for i, line in enumerate(lines)).encode()


def test_loss_lines_numbered_after_last_epoch() -> None:
    prog, cur = read_lines(_log("Loss: 2.0", "noise", "Loss: 1.5", "Loss: nan", "Loss: 1.2"), LogCursor(), 4.0, final=True)
    assert [(p["epoch"], p["loss"]) for p in prog.points] == [(5.0, 2.0), (6.0, 1.5), (7.0, 1.2)]
    assert prog.ignored == 1
    assert cur.since.startswith("2026-01-01T00:00:04")


def test_json_wins_over_loss_and_cursor_skips_read_lines() -> None:
    raw = _log(
        "Loss: 0.9",
        json.dumps({"epoch": 1, "loss": 0.9, "metric": 0.5, "time": 10.0}),
        "Loss: 0.7",
        json.dumps({"epoch": 2, "loss": 0.7, "metric": 0.6}),
        json.dumps({"event": "delivered", "epoch": 2}),
        '{"epoch": -1, "loss": 1}',
        '{"epoch": 3, "loss": NaN}',
        "{not json",
    )
    prog, cur = read_lines(raw, LogCursor(), 0.0, final=False)
    assert [(p["epoch"], p.get("metric")) for p in prog.points] == [(1.0, 0.5), (2.0, 0.6)]
    assert prog.points[0]["time"] == 10.0 and prog.points[1]["time"] > 1.7e9  # log timestamp when JSON has none
    assert [e["event"] for e in prog.events] == ["delivered"]
    assert cur.json_seen
    again, cur2 = read_lines(raw + _log(json.dumps({"epoch": 3, "loss": 0.6}), start=30), cur, 2.0, final=False)
    assert [p["epoch"] for p in again.points] == [3.0]
    assert cur2.since > cur.since


def test_trailing_loss_line_held_back_until_final() -> None:
    raw = _log("Loss: 1.0", "Loss: 0.8")
    prog, cur = read_lines(raw, LogCursor(), 0.0, final=False)
    assert [p["loss"] for p in prog.points] == [1.0]
    prog2, _ = read_lines(raw, cur, 1.0, final=True)
    assert [(p["epoch"], p["loss"]) for p in prog2.points] == [(2.0, 0.8)]


def test_empty_and_garbage_logs() -> None:
    for raw in (b"", b"\n\n", b"not a timestamp Loss: 1\n", "\u00ff\u00fe".encode("latin-1")):
        prog, cur = read_lines(raw, LogCursor(), 0.0, final=True)
        assert prog.points == [] and cur.since == ""


FIXTURE_LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"


def _engine_lines(raw: bytes, t0: int = 0) -> list[bytes]:
    """A recorded log as ``docker logs --timestamps`` shows it: split at "\\n" only, one stamp a line."""
    out = []
    for i, line in enumerate(raw.split(b"\n")[:-1] if raw.endswith(b"\n") else raw.split(b"\n")):
        out.append(f"2026-01-01T00:{(t0 + i) // 60:02d}:{(t0 + i) % 60:02d}.{i:09d}Z ".encode() + line + b"\n")
    return out


@pytest.mark.parametrize(
    "fixture",
    ["keras/keras-fit-pty.log", "lightning/lightning-rich-pty.log", "lightning/lightning-tqdm-pipe.log",
     "transformers/hf-trainer-pipe.log", "pytorch/pytorch-example.log", "tqdm/tqdm-colour-pipe.log"],
)  # fmt: skip
def test_framework_logs_read_across_intervals_like_whole(fixture: str) -> None:
    """Three intervals, the cursor through JSON between them (as the state store keeps it): the points
    are the ones ``flowplan logs`` shows, stamped with the engine's time when the log has none."""
    from adapters.logs import read_log

    raw = (FIXTURE_LOGS / fixture).read_bytes()
    lines = _engine_lines(raw)
    cuts = [len(lines) // 3, 2 * len(lines) // 3, len(lines)]
    cursor, got = LogCursor(), []
    for n, cut in enumerate(cuts):
        prog, cursor = read_lines(b"".join(lines[:cut]), cursor, 0.0, final=n == len(cuts) - 1)
        cursor = LogCursor.from_dict(json.loads(json.dumps(cursor.as_dict())))
        got += prog.points
    want, _, _ = read_log(raw)
    assert [(p["epoch"], p.get("loss"), p.get("metric")) for p in got] == [(p.epoch, p.loss, p.metric) for p in want]
    assert all(p["time"] > 1.7e9 for p in got)


def _engine_partials(raw: bytes, size: int) -> list[bytes]:
    """A log as the engine keeps a long line: cut every ``size`` bytes into partial messages, all
    stamped with the line's first timestamp (as the engine does), "\\n" only after the last piece
    (UTF-8 characters cut too, as the engine does)."""
    out = []
    for i, line in enumerate(raw.split(b"\n")[:-1]):
        stamp = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.{i:09d}Z ".encode()
        chunks = [line[j : j + size] for j in range(0, max(len(line), 1), size)]
        for k, chunk in enumerate(chunks):
            out.append(stamp + chunk + (b"\n" if k == len(chunks) - 1 else b""))
    return out


@pytest.mark.parametrize("fixture", ["keras/keras-fit-pipe.log", "tqdm/tqdm-colour-pipe.log"])
def test_partial_messages_of_long_redrawn_lines(fixture: str) -> None:
    """A bar redrawn for a whole epoch is one long line, which the engine cuts into pieces stamped
    alike: read across intervals that end mid-line (between pieces of one stamp), the points are
    those of the whole log, none lost and none read twice."""
    from adapters.logs import read_log

    raw = (FIXTURE_LOGS / fixture).read_bytes()
    pieces = _engine_partials(raw, 500)
    assert sum(not p.endswith(b"\n") for p in pieces) > 10
    cursor, got = LogCursor(), []
    for cut in [7, 8, 20, 33, len(pieces) // 2, len(pieces) - 1, len(pieces)]:
        prog, cursor = read_lines(b"".join(pieces[:cut]), cursor, 0.0, final=cut == len(pieces))
        cursor = LogCursor.from_dict(json.loads(json.dumps(cursor.as_dict())))
        got += prog.points
    want, _, _ = read_log(raw)
    assert [(p["epoch"], p.get("loss"), p.get("metric")) for p in got] == [(p.epoch, p.loss, p.metric) for p in want]
    times = [p["time"] for p in got]
    assert times == sorted(times)


def test_steps_per_epoch_label_places_step_logs() -> None:
    parsed = parse_labels({"flowplan.job": "j", "flowplan.steps_per_epoch": "23"}, created=0.0)
    assert parsed is not None and parsed.steps_per_epoch == 23.0 and "steps_per_epoch" not in parsed.fields
    raw = b"".join(_engine_lines((FIXTURE_LOGS / "pytorch/pytorch-steps.log").read_bytes()))
    none, _ = read_lines(raw, LogCursor(), 0.0, final=True)
    placed, _ = read_lines(raw, LogCursor(), 0.0, final=True, steps_per_epoch=parsed.steps_per_epoch)
    assert none.points == []
    assert [(round(p["epoch"], 4), p["loss"]) for p in placed.points] == [(round(k * 10 / 23, 4), v) for k, v in
        enumerate([2.1580, 1.7033, 0.8250, 0.4730, 0.3339, 0.1903], start=1)]  # fmt: skip


# -- host specs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expect",
    [
        ("a=unix:///var/run/docker.sock", HostSpec("a", "unix:///var/run/docker.sock")),
        ("b=tcp://10.0.0.2:2375,cpu=4000,gpus=2", HostSpec("b", "tcp://10.0.0.2:2375", 4000, 2)),
        ("unix:///run/d.sock", HostSpec("run-d.sock", "unix:///run/d.sock")),
        ("c=unix:///s,mechanism=quota", HostSpec("c", "unix:///s", mechanism="quota")),
    ],
)
def test_host_spec_parse(text: str, expect: HostSpec) -> None:
    assert HostSpec.parse(text) == expect


@pytest.mark.parametrize(
    "text,needle",
    [
        ("a=http://x", "unix://"),
        ("a=unix:///s,cpu=lots", "cpu='lots'"),
        ("a=unix:///s,cpu=-1", "cpu='-1'"),
        ("a=unix:///s,mechanism=magic", "mechanism='magic'"),
        ("a=unix:///s,colour=red", "'colour'"),
        ("bad name=unix:///s", "bad name"),
    ],
)
def test_host_spec_errors(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=None) as err:
        HostSpec.parse(text)
    assert needle in str(err.value)


# -- GPUs (request construction only: no GPU on this machine) ---------------------------------


def test_gpu_requests() -> None:
    assert gpu_request(0, [], 4) is None
    req = gpu_request(2, ["0", "2"], 4)
    assert req == {"driver": "nvidia", "device_ids": ["1", "3"], "capabilities": [["gpu"]]}
    with pytest.raises(DockerAdapterError) as err:
        gpu_request(3, ["0", "2"], 4)
    assert err.value.kind == "conflict"


def _inspect(**hc: object) -> dict:
    return {
        "Id": "abc",
        "Name": "/job-a",
        "Created": "2026-01-01T00:00:00.5Z",
        "State": {"Status": "running", "ExitCode": 0, "StartedAt": "2026-01-01T00:00:01Z"},
        "Config": {
            "Image": "img:1",
            "Cmd": ["python", "train.py"],
            "Env": ["A=1"],
            "Labels": {"flowplan.job": "a"},
            "WorkingDir": "/w",
        },
        "HostConfig": {"Binds": ["/ckpt:/ckpt"], "NetworkMode": "none", **hc},
    }


@pytest.mark.parametrize(
    "hc,cap,mechanism,key,value",
    [
        ({"NanoCpus": 2_000_000_000}, 500, "quota", "nano_cpus", 500_000_000),
        ({"CpuQuota": 200_000, "CpuPeriod": 100_000}, 500, "nano", "cpu_quota", 50_000),
        ({}, 500, "nano", "nano_cpus", 500_000_000),
        ({}, 500, "quota", "cpu_quota", 50_000),
        ({}, 500, "shares", None, None),
        ({"NanoCpus": 2_000_000_000}, None, "nano", None, None),
        ({"CpuQuota": 200_000, "CpuPeriod": 100_000}, None, "nano", None, None),
    ],
    ids=["nano-stays-nano", "quota-stays-quota", "uncapped-nano", "uncapped-quota", "shares-host", "no-cap", "no-cap-q"],
)
def test_recreate_spec_shares_cap_and_everything_else(hc: dict, cap: int | None, mechanism: Any, key: Any, value: Any) -> None:
    c = view(_inspect(**hc))
    spec = recreate_spec(c, 400, cap, {"driver": "nvidia", "device_ids": ["1"], "capabilities": [["gpu"]]}, mechanism=mechanism)
    assert spec["host_config"]["cpu_shares"] == 410  # the guarantee, 1024 per core
    if key is not None:
        assert spec["host_config"][key] == value
    other = {"nano_cpus", "cpu_quota"} - {key}
    assert not other & set(spec["host_config"])
    assert spec["config"]["image"] == "img:1" and spec["config"]["command"] == ["python", "train.py"]
    assert spec["config"]["environment"] == ["A=1"] and spec["config"]["labels"] == {"flowplan.job": "a"}
    assert spec["host_config"]["binds"] == ["/ckpt:/ckpt"] and spec["host_config"]["network_mode"] == "none"
    (dev,) = spec["host_config"]["device_requests"]
    assert dev["DeviceIDs"] == ["1"] and dev["Capabilities"] == [["gpu"]] and dev["Driver"] == "nvidia"


def test_view_reads_limits_and_gpus() -> None:
    c = view(_inspect(CpuQuota=150_000, CpuPeriod=100_000, DeviceRequests=[{"Driver": "nvidia", "DeviceIDs": ["0", "1"]}]))
    assert (c.cpu_cap_millis(), c.mechanism(), c.gpu_count, c.gpu_ids, c.name) == (1500, "quota", 2, ["0", "1"], "job-a")
    assert c.guarantee_millis() == 1000  # CpuShares unset: the kernel's 1024
    assert c.created == pytest.approx(1767225600.5)


# -- CPU: guarantees as shares, caps where they are the point ---------------------------------


def test_shares_round_trip() -> None:
    assert shares_for(1000) == 1024 and shares_for(250) == 256 and shares_for(1) == 2
    assert guarantee_of(0) == 1000 and guarantee_of(2) == 2
    assert all(guarantee_of(shares_for(m)) == m for m in range(2, 200_001))


class FakeEngine:
    """The update endpoint with the real engine's CPU rules (docs/docker.md), for one container."""

    def __init__(self, hc: dict[str, Any], ncpu: int) -> None:
        self.hc = {"NanoCpus": 0, "CpuQuota": 0, "CpuPeriod": 0, "CpuShares": 0, **hc}
        self.ncpu = ncpu
        self.posts: list[dict[str, Any]] = []

    def _url(self, path: str, *args: str) -> str:
        return path

    def _post_json(self, url: str, data: dict[str, Any]) -> dict[str, Any]:
        self.posts.append(dict(data))
        return data

    def _result(self, data: dict[str, Any], json: bool = False) -> None:
        hc = self.hc
        if data.get("NanoCpus") and (hc["CpuPeriod"] or hc["CpuQuota"] > 0):
            raise DockerAdapterError("conflict", "Nano CPUs cannot be updated as CPU Period has already been set")
        if data.get("CpuQuota") and hc["NanoCpus"]:
            raise DockerAdapterError("conflict", "CPU Quota cannot be updated as NanoCPUs has already been set")
        if data.get("NanoCpus", 0) > self.ncpu * 10**9:
            raise DockerAdapterError("invalid", f"Range of CPUs is from 0.01 to {self.ncpu}.00")
        for key in ("NanoCpus", "CpuQuota", "CpuPeriod", "CpuShares"):
            if data.get(key):  # 0 is ignored by the engine
                hc[key] = data[key]


CONTAINERS = {"uncapped": {}, "nano": {"NanoCpus": 700_000_000}, "quota": {"CpuQuota": 30_000, "CpuPeriod": 100_000}}


@pytest.mark.parametrize("kind", list(CONTAINERS))
@pytest.mark.parametrize("declared", [None, 1000, 4000])
@pytest.mark.parametrize("cap", [None, 600, 1000, 8000])
@pytest.mark.parametrize("guarantee", [250, 600])
@pytest.mark.parametrize("mechanism", ["nano", "quota"])
def test_cpu_round_trip_no_spurious_resize(kind: str, declared: Any, cap: Any, guarantee: int, mechanism: Any) -> None:
    ncpu = 2
    labels = {"flowplan.job": "a", **({"flowplan.max_cpu_millis": str(declared)} if declared else {})}
    inspect = _inspect(**CONTAINERS[kind])
    inspect["Config"]["Labels"] = labels
    parsed = parse_labels(labels)
    assert parsed is not None
    ad = DockerAdapter([HostSpec("h", "unix:///nowhere", mechanism=mechanism)])
    ad._info["h"] = {"NCPU": ncpu}
    engine = FakeEngine(CONTAINERS[kind], ncpu)
    ad.hosts["h"]._api = engine
    c = view(inspect)
    ch = Change("a", "resize", "h", guarantee, 0, from_node="h", cpu_limit_millis=cap)
    ad._set_cpu(ch, Placed("h", c, parsed), c)
    after = view({**inspect, "HostConfig": {**inspect["HostConfig"], **engine.hc}})
    alloc = ad._allocation("h", after, parsed.fields)
    # What the cap should be: the planned one or the declared max, the lower; none from 2 cores up.
    want = min([x for x in (cap, declared) if x is not None], default=None)
    want = None if want is None or want >= ncpu * 1000 else want
    assert engine.hc["CpuShares"] == shares_for(guarantee)
    assert after.cpu_cap_millis() == want or (want is None and after.cpu_cap_millis() in (None, ncpu * 1000)), engine.posts
    # Observed back: the same guarantee, and the cap (none when it is the job's own max).
    assert alloc.cpu_millis == guarantee
    assert alloc.cpu_limit_millis == (None if want is None or want == parsed.fields["max_cpu_millis"] else want)
    # ... so a second identical change is in effect: no call, no spurious resize.
    engine.posts.clear()
    assert ad._in_effect(ch, Placed("h", after, parsed), after)
    ad._set_cpu(ch, Placed("h", after, parsed), after)
    assert engine.posts == []


def test_shares_host_never_caps() -> None:
    labels = {"flowplan.job": "a", "flowplan.max_cpu_millis": "1000"}
    parsed = parse_labels(labels)
    assert parsed is not None
    ad = DockerAdapter([HostSpec("h", "unix:///nowhere", mechanism="shares")])
    ad._info["h"] = {"NCPU": 8}
    ad.hosts["h"]._api = engine = FakeEngine({}, 8)
    inspect = _inspect()
    inspect["Config"]["Labels"] = labels
    c = view(inspect)
    ad._set_cpu(Change("a", "resize", "h", 300, 0, cpu_limit_millis=500), Placed("h", c, parsed), c)
    assert engine.posts == [{"CpuShares": 307}]


# -- errors -----------------------------------------------------------------------------------


def _api_error(status: int, text: str) -> Exception:
    import docker.errors
    import requests

    resp = requests.Response()
    resp.status_code = status
    cls = docker.errors.NotFound if status == 404 else docker.errors.APIError
    return cls(text, response=resp, explanation=text)


@pytest.mark.parametrize(
    "make,kind",
    [
        (lambda: _api_error(404, "No such container: x"), "not_found"),
        (lambda: _api_error(409, "name in use"), "conflict"),
        (lambda: _api_error(400, "Conflicting options: CPU Quota cannot be updated as NanoCPUs is set"), "conflict"),
        (lambda: _api_error(500, "boom"), "transient"),
        (lambda: _api_error(400, "bad parameter"), "invalid"),
        (lambda: __import__("requests").exceptions.ConnectionError("refused"), "engine_down"),
        (lambda: __import__("requests").exceptions.ReadTimeout("slow"), "transient"),
    ],
    ids=["404", "409", "quota-on-nano", "500", "400", "connection", "timeout"],
)
def test_error_kinds(make, kind: str) -> None:
    got, message = classify(make())
    assert got == kind and message


# -- daemon recovery --------------------------------------------------------------------------


def test_in_effect() -> None:
    snap = Snapshot(
        time=0,
        nodes=[Node(name="a", cpu_millis=2000), Node(name="b", cpu_millis=2000)],
        jobs=[
            Job(id="r", status="running", node="b", allocation=Allocation(cpu_millis=500)),
            Job(id="p", status="pending"),
        ],
    )
    assert in_effect(snap, {"job": "r", "kind": "migrate", "node": "b", "cpu_millis": 500, "gpus": 0})
    assert not in_effect(snap, {"job": "r", "kind": "migrate", "node": "a", "cpu_millis": 500, "gpus": 0})
    assert not in_effect(snap, {"job": "r", "kind": "resize", "node": "b", "cpu_millis": 700, "gpus": 0})
    assert in_effect(snap, {"job": "p", "kind": "pause"})
    assert not in_effect(snap, {"job": "p", "kind": "start", "node": "a", "cpu_millis": 500, "gpus": 0})
    assert not in_effect(snap, {"job": "gone", "kind": "pause"})
    # Caps: asked and seen; "none" also covers a cap at the job's max (1000) or the node's size.
    capped = snap.model_copy(
        update={"jobs": [Job(id="r", status="running", node="b", allocation=Allocation(cpu_millis=500, cpu_limit_millis=700))]}
    )
    resize = {"job": "r", "kind": "resize", "node": "b", "cpu_millis": 500, "gpus": 0}
    assert in_effect(capped, {**resize, "cpu_limit_millis": 700})
    assert not in_effect(capped, {**resize, "cpu_limit_millis": None})
    assert not in_effect(snap, {**resize, "cpu_limit_millis": 700})
    assert in_effect(snap, {**resize, "cpu_limit_millis": 1000})
    # A gang: its replicas must be where the action put them (count and placement); an action
    # recorded without a count (an older store) is not checked for one.
    spread = [Share(node="b", replicas=2), Share(node="a", replicas=1)]
    gang = Job(
        id="g", status="running", node="b", allocation=Allocation(cpu_millis=500), replicas=3, max_nodes=2, placement=spread
    )
    grown = snap.model_copy(update={"jobs": [gang]})
    move = {"job": "g", "kind": "migrate", "node": "b", "cpu_millis": 500, "gpus": 0, "replicas": 3}
    assert in_effect(grown, {**move, "placement": [["b", 2], ["a", 1]]})
    assert not in_effect(grown, {**move, "placement": [["b", 1], ["a", 2]]})
    assert not in_effect(grown, move)  # all 3 on b was asked
    assert in_effect(snap, {**resize, "replicas": 1}) and not in_effect(snap, {**resize, "replicas": 2})


# -- the daemon's wake clock ------------------------------------------------------------------


def _later(seconds: float, fn: Any, *args: Any) -> threading.Timer:
    t = threading.Timer(seconds, fn, args)
    t.start()
    return t


def test_wake_clock_wakes_after_debounce_and_ignores_own_events() -> None:
    clock = WakeClock(debounce=0.2, ignore=lambda w: w.container == "mine")
    t0 = time.monotonic()
    clock.sleep(0.05)  # nothing: the whole interval
    assert time.monotonic() - t0 >= 0.05 and clock.woken == 0
    _later(0.1, clock.wake, "ours", "mine")  # the daemon's own action: ignored
    _later(0.4, clock.wake, "create job x", "theirs")
    _later(0.45, clock.wake, "create job y", "theirs2")  # in the debounce: the same re-plan
    t0 = time.monotonic()
    clock.sleep(10)
    took = time.monotonic() - t0
    assert 0.55 <= took < 2.0, took
    assert clock.woken == 1 and clock.reasons == ["create job x", "create job y"]
    clock.wake("arrived while busy", "theirs3")  # while the loop plans: cuts the next sleep short
    t0 = time.monotonic()
    clock.sleep(10)
    assert time.monotonic() - t0 < 0.5 and clock.reasons == ["arrived while busy"]
    _later(0.1, clock.halt)
    t0 = time.monotonic()
    clock.sleep(10)
    assert time.monotonic() - t0 < 1.0 and clock.stop.is_set()


def test_daemon_survives_a_failing_interval_and_stops_without_another() -> None:
    from adapters.base import Adapter as AdapterProtocol
    from adapters.daemon import Daemon
    from planner.policies import make_policy

    snap = Snapshot(time=0, nodes=[Node(name="a", cpu_millis=2000)], jobs=[])

    class Adapter(AdapterProtocol):
        def observe(self) -> Snapshot:
            return snap

        def apply(self, changes: Any) -> list[Any]:
            return []

    class Store:
        def save_plan(self, plan: Any, snapshot: Any = None) -> int:
            return 1

        def record_actions(self, plan_id: int, actions: Any) -> list[int]:
            return []

        def finish_action(self, action_id: int, status: str, message: str = "") -> None: ...

        def pending_actions(self) -> list[Any]:
            return []

    real = make_policy("flowplan", time_limit=0.2)
    calls: list[int] = []

    def policy(s: Snapshot) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a planner bug")
        return real(s)

    clock = WakeClock()
    errors: list[BaseException] = []
    stop_after = 4

    def sleep(seconds: float) -> None:
        if len(calls) >= stop_after:
            clock.stop.set()

    clock.sleep = sleep  # type: ignore[method-assign]
    daemon = Daemon(Adapter(), policy, clock, Store(), interval=1.0)
    count, last = daemon.run(stopped=clock.stop.is_set, on_error=errors.append)
    assert len(calls) == stop_after and count == stop_after and last is not None  # kept going after the failure
    assert [str(e) for e in errors] == ["a planner bug"]


def test_speed_known_from_the_first_steps_of_a_step_log() -> None:
    """PyTorch's example loop logs every 5 batches: the adapter's speed table gets a point from the
    first five lines, all inside epoch 1, instead of waiting for whole epochs (issue 13, "speed known
    fast"). One line a second, 320 of 1,437 samples a line, one core used: 1437/320 = 4.49 s an epoch."""
    from adapters.docker.progress import parse_timestamp, to_seconds
    from planner.snapshot import MetricPoint

    lines = _engine_lines((FIXTURE_LOGS / "pytorch/pytorch-example.log").read_bytes())[:5]
    prog, _ = read_lines(b"".join(lines), LogCursor(), 0.0, final=False)
    history = [MetricPoint(**p) for p in prog.points]
    assert [round(p.epoch, 3) for p in history] == [0.0, 0.223, 0.445, 0.668, 0.891]
    t0 = to_seconds(parse_timestamp(lines[0].split(b" ")[0].decode()))
    ad = DockerAdapter([HostSpec("h", "unix:///nowhere")])
    c = view(_inspect())
    ad._usage[c.id] = [(t0 - 1, 0.0), (t0 + 10, 11.0)]  # (engine time, CPU seconds): one core throughout
    (speed,) = ad._speeds("a", c, history, "running")
    assert speed.cpu_millis == 1000
    assert speed.seconds_per_epoch == pytest.approx(1437 / 320, rel=1e-6)


def test_speed_known_from_a_bars_own_rate() -> None:
    """Keras prints one line an epoch at verbose 2 (``90/90 - 1s - 7ms/step - ...``): after epoch 1 the
    history has one point, so no two epoch ends can be timed, but the bar's rate gives the speed:
    90 steps x 7 ms = 0.63 s an epoch, at the one core used since the line began."""
    from adapters.docker.progress import parse_timestamp, to_seconds
    from planner.snapshot import MetricPoint

    lines = _engine_lines((FIXTURE_LOGS / "keras/keras-fit-verbose2.log").read_bytes())[:2]
    prog, _ = read_lines(b"".join(lines), LogCursor(), 0.0, final=False)
    history = [MetricPoint(**p) for p in prog.points]
    assert [(p.epoch, p.loss, p.metric) for p in history] == [(1.0, 2.032, 0.6)]
    t0 = to_seconds(parse_timestamp(lines[0].split(b" ")[0].decode()))
    ad = DockerAdapter([HostSpec("h", "unix:///nowhere")])
    c = view(_inspect())
    ad._usage[c.id] = [(t0 - 1, 0.0), (t0 + 0.5, 1.5)]  # less than a second after the line: waits
    ad._rates[c.id] = prog.rates
    assert ad._speeds("a", c, history, "running") == [] and ad._rates[c.id] == prog.rates
    ad._usage[c.id].append((t0 + 10, 11.0))  # one core throughout
    (speed,) = ad._speeds("a", c, history, "running")
    assert (speed.cpu_millis, speed.seconds_per_epoch) == (1000, pytest.approx(0.63))
    assert c.id not in ad._rates  # each rate counts once


DECLARED_CASES = {
    # name: (labels' target max_epochs or "none" for no target, declarations in order, expected target max_epochs)
    "declared fills the target": (None, [{"max_epochs": 90}], 90.0),
    "a label wins over the declaration": (40.0, [{"max_epochs": 90}], 40.0),
    "nothing declared": (None, [], None),
    "a later declaration replaces an earlier one": (None, [{"max_epochs": 90}, {"max_epochs": 120}], 120.0),
    "a schedule alone keeps the earlier max_epochs": (None, [{"max_epochs": 90}, {"schedule": {"kind": "cosine"}}], 90.0),
    "a bad max_epochs is no declaration": (None, [{"max_epochs": -3}], None),
    "no target: nowhere to put it": ("none", [{"max_epochs": 90}], "none"),
}


@pytest.mark.parametrize("name", DECLARED_CASES)
def test_declare_events_reach_the_target(name: str) -> None:
    """``{"event": "declare", ...}`` lines (``flowplan.sdk.init``), read as the adapter reads a log,
    give ``target.max_epochs`` where the labels set none; the schedule is kept beside it."""
    from planner.snapshot import QoETarget

    label_max, declarations, expected = DECLARED_CASES[name]
    ad = DockerAdapter([HostSpec("h", "unix:///nowhere")])
    for i, d in enumerate(declarations):
        raw = f"2026-11-23T09:00:0{i}.000000000Z {json.dumps({'event': 'declare', **d})}\n".encode()
        prog, _ = read_lines(raw, LogCursor(), 0.0, final=True)
        ad._keep_declared("j", prog.events)
    target = (
        None
        if label_max == "none"
        else QoETarget(tier1={"value": 0.9}, metric="accuracy", direction="higher", max_epochs=label_max)
    )
    got = ad._with_declared("j", target)
    assert (got.max_epochs if got is not None else "none") == expected
    if any("schedule" in d for d in declarations):
        assert ad.declared("j").schedule == {"kind": "cosine"}


SCHEDULE_CASES = {
    # name: (target max_epochs, declared schedule, expected kind on the job or None)
    "a step schedule": (None, {"kind": "step", "milestones": [30, 60], "gamma": 0.1}, "step"),
    "cosine over the declared epochs": (90.0, {"kind": "cosine"}, "cosine"),
    "cosine without planned epochs is left out": (None, {"kind": "cosine"}, None),
    "an unknown kind is left out": (None, {"kind": "cosin"}, None),
    "a bad gamma is left out": (None, {"kind": "exp", "gamma": 7}, None),
}


@pytest.mark.parametrize("name", SCHEDULE_CASES)
def test_declared_schedule_becomes_the_jobs_schedule(name: str, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 13: the schedule a job declares (``flowplan.sdk.init(schedule=...)``) is the snapshot
    job's ``schedule`` when the contract accepts it, and is left out with one warning otherwise."""
    from planner.snapshot import QoETarget

    max_epochs, schedule, expected = SCHEDULE_CASES[name]
    ad = DockerAdapter([HostSpec("h", "unix:///nowhere")])
    raw = f"2026-11-23T09:00:00.000000000Z {json.dumps({'event': 'declare', 'schedule': schedule})}\n".encode()
    prog, _ = read_lines(raw, LogCursor(), 0.0, final=True)
    ad._keep_declared("j", prog.events)
    target = QoETarget(tier1={"value": 0.9}, metric="accuracy", direction="higher", max_epochs=max_epochs)
    with caplog.at_level("WARNING"):
        got = ad._declared_schedule("j", target)
        again = ad._declared_schedule("j", target)
    assert (got.kind if got is not None else None) == expected
    assert (again.kind if again is not None else None) == expected
    warned = [r for r in caplog.records if "declared schedule left out" in r.getMessage()]
    assert len(warned) == (0 if expected else 1)


# -- speed borrowed from similar jobs in the state store (issue 13, "speed known fast") -------------


def _container(job: str, state: str, cid: str, **labels: str) -> Any:
    raw = _inspect()
    raw["Id"], raw["Name"] = cid, f"/{job}"
    raw["State"] = {"Status": state, "ExitCode": 0, "StartedAt": "2026-01-01T00:00:01Z"}
    raw["Config"]["Labels"] = {"flowplan.job": job, **{f"flowplan.{k}": v for k, v in labels.items()}}
    return view(raw)


def _adapter_job(ad: DockerAdapter, c: Any) -> Job:
    from adapters.docker.adapter import Observation

    ad._drained.add(c.id)  # no engine here: the log is not read (the history is in the store already)
    job = ad._job(Placed("h", c, parse_labels(c.labels, created=c.created)), Observation(), 0.0)
    assert job is not None
    return job


def test_a_new_job_borrows_the_speed_of_a_finished_job_of_its_task(tmp_path: Path) -> None:
    """A job of task ``digits`` ran the recorded PyTorch example loop (4.49 s an epoch at one core,
    measured by the adapter from its first steps) and finished. A new job of the same task, created
    later and seen by another adapter on the same state file, is planned at 4.49 s an epoch, not the
    60 s assumed without it, and the plan says where the speed comes from. Once the new job's own
    speed is observed, the borrowed one is gone."""
    from adapters.docker.progress import parse_timestamp, to_seconds
    from planner import PlannerConfig, plan
    from planner.snapshot import MetricPoint
    from store import StateStore

    path = tmp_path / "state.db"
    lines = _engine_lines((FIXTURE_LOGS / "pytorch/pytorch-example.log").read_bytes())[:5]
    prog, _ = read_lines(b"".join(lines), LogCursor(), 0.0, final=False)
    t0 = to_seconds(parse_timestamp(lines[0].split(b" ")[0].decode()))
    with StateStore(path) as store:
        ad = DockerAdapter([HostSpec("h", "unix:///nowhere")], store=store)
        old = _container("old", "running", "c-old", task="digits")
        store.add_points("old", [MetricPoint(**p) for p in prog.points])
        ad._usage[old.id] = [(t0 - 1, 0.0), (t0 + 10, 11.0)]  # one core throughout
        running = _adapter_job(ad, old)
        (seen,) = running.speed
        assert seen.seconds_per_epoch == pytest.approx(1437 / 320, rel=1e-6) and running.image == "img:1"
        assert store.speed_prior(task="digits", image=None, exclude="new") is None  # 0.9 epochs: not yet a lender
        _adapter_job(ad, _container("old", "exited", "c-old", task="digits"))  # it finished

    with StateStore(path) as store:  # another daemon (or a restarted one) on the same state
        ad = DockerAdapter([HostSpec("h", "unix:///nowhere")], store=store)
        new = _adapter_job(ad, _container("new", "created", "c-new", task="digits"))
        assert new.status == "pending" and new.speed == [] and new.speed_prior is not None
        assert (new.speed_prior.basis, new.speed_prior.key, new.speed_prior.jobs) == ("task", "digits", ["old"])
        snap = Snapshot(time=t0 + 60, nodes=[Node(name="h", cpu_millis=4000)], jobs=[new])
        (a,) = plan(snap, PlannerConfig(solver="greedy", time_limit=0.5)).plan.assignments
        assert a.action == "start" and a.predictions.seconds_per_epoch == pytest.approx(1437 / 320, rel=1e-3)
        assert "speed borrowed from 1 job(s) of task digits (old): 4.49 s/epoch on 1 CPU" in a.predictions.basis

        # A job of another task but the same image borrows by image; one with neither, nothing.
        other = _adapter_job(ad, _container("other", "created", "c-other", task="mnist"))
        assert other.speed_prior is not None and (other.speed_prior.basis, other.speed_prior.key) == ("image", "img:1")

        # Its own first observation replaces the borrowed speed.
        store.add_points(
            "new", [MetricPoint(time=t0 + 100, epoch=0.5, loss=1.0), MetricPoint(time=t0 + 101, epoch=0.6, loss=0.9)]
        )
        started = _container("new", "running", "c-new", task="digits")
        ad._usage[started.id] = [(t0 + 99, 0.0), (t0 + 102, 3.0)]
        ad._drained.discard(started.id)
        mine = _adapter_job(ad, started)
        assert [p.seconds_per_epoch for p in mine.speed] == [pytest.approx(10.0)] and mine.speed_prior is None
        snap = Snapshot(time=t0 + 110, nodes=[Node(name="h", cpu_millis=4000)], jobs=[mine])
        (a,) = plan(snap, PlannerConfig(solver="greedy", time_limit=0.5)).plan.assignments
        assert "speed observed" in a.predictions.basis and "borrowed" not in a.predictions.basis


def test_a_new_job_gets_the_curves_of_finished_jobs_of_its_task(tmp_path: Path) -> None:
    """Job ``old`` of task ``yolov3`` reported the measured yolov3 (batch 64) loss curve and finished,
    with no speed point (its log had no times the adapter could use); it is recorded all the same.
    Another adapter on the same state file puts old's curve, with the schedule its log declared, into
    the snapshot's ``curve_priors`` for a new job of the task; a job of another task brings none."""
    from conftest import real_curve

    from adapters.docker.progress import curve_priors
    from planner.snapshot import MetricPoint
    from store import StateStore

    path = tmp_path / "state.db"
    curve = real_curve("yolov3", 64)
    with StateStore(path) as store:
        ad = DockerAdapter([HostSpec("h", "unix:///nowhere")], store=store)
        store.add_points("old", [MetricPoint(time=1000.0, epoch=float(i + 1), loss=float(v)) for i, v in enumerate(curve)])
        step = {"kind": "step", "milestones": [30], "gamma": 0.1}
        raw = f"2026-11-23T09:00:00.000000000Z {json.dumps({'event': 'declare', 'schedule': step})}\n".encode()
        ad._keep_declared("old", read_lines(raw, LogCursor(), 0.0, final=True)[0].events)  # its log declared a schedule
        running = _adapter_job(ad, _container("old", "running", "c-old", task="yolov3"))
        assert store.task_curves("yolov3") is None  # still training: its curve is not whole yet
        done = _adapter_job(ad, _container("old", "exited", "c-old", task="yolov3"))
        assert running.status == "running" and done.status == "finished" and done.speed == []

    with StateStore(path) as store:
        ad = DockerAdapter([HostSpec("h", "unix:///nowhere")], store=store)
        new = _adapter_job(ad, _container("new", "created", "c-new", task="yolov3"))
        other = _adapter_job(ad, _container("other", "created", "c-other", task="bert"))
        (got,) = curve_priors(store, [new, other])
        assert (got.task, [r.job for r in got.runs]) == ("yolov3", ["old"])
        assert [p.loss for p in got.runs[0].points] == pytest.approx(list(curve))
        assert got.runs[0].schedule is not None and got.runs[0].schedule.model_dump() == {**step, "milestones": [30.0]}


def test_log_points_the_contract_refuses_are_left_out_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A log line whose loss is beyond the contract's ±1e12: the point is left out of the job's history
    (the others are kept), and the daemon's log says so once, naming the epoch, field and value."""
    import logging

    from adapters.docker.progress import LogProgress
    from store import StateStore

    store = StateStore(tmp_path / "state.db")
    progress = LogProgress(store, "docker", logging.getLogger("test.refused"))
    raw = b"".join(
        f"2026-11-30T04:00:0{i}.000000000Z epoch {i} loss={loss}\n".encode()
        for i, loss in ((1, "2.0"), (2, "-1e300"), (3, "1.5"))
    )
    with caplog.at_level(logging.WARNING, logger="test.refused"):
        progress.read("j", "c1", raw, final=True)
    assert [(p.epoch, p.loss) for p in store.history("j")] == [(1.0, 2.0), (3.0, 1.5)]
    said = [r.getMessage() for r in caplog.records if r.name == "test.refused"]
    assert len(said) == 1 and "job j: 1 progress point(s) left out: epoch 2: loss:" in said[0] and "-1e+300" in said[0]
