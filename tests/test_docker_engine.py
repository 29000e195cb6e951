"""The Docker adapter on real engines: three private ones (``docker_engines`` fixture), named main, extra0, extra1.

Every job is a real container running ``examples/jobs/train_digits.py`` (numpy, scikit-learn's
digits), except the busy loops of the kernel test. Case matrix:

- the kernel's semantics the simulator assumes: two busy containers pinned to one CPU with weights
  1:3 (set by the adapter from guarantees 250m and 750m) split it about 1:3; when one stops, the
  other gets about the whole CPU at once (work-conserving);
- CPU: a planned cap on a running container → ``NanoCpus`` and the cgroup quota change, epochs get
  measurably slower, and the speed points are keyed by the CPU actually used; lifting the cap makes
  them fast again; a ``--cpu-quota`` container is capped with its quota; the engine rejects a quota
  update on a ``--cpus`` container and the adapter reports it as a ``conflict``;
- observe → plan → diff with the real planner: guarantees become ``CpuShares``, a declared max
  becomes the only cap, a user's ``--cpus`` is lifted, and no later interval asks for a change that
  is already in effect;
- labels: a container with a bad ``flowplan.*`` label is unmanaged, named in its host's node labels;
- a container that vanishes before a change is applied → ``not_found`` outcome, no exception;
- a bar redrawn on one long line: read while it runs (the engine's first 16 KiB piece), then whole, none twice;
- a bar's own rate (it/s) gives the job's speed after its first epoch's line, before two epoch ends;
- migration between two engines: checkpoint, re-create, resume from the checkpoint, history intact,
  exactly one container afterwards; a migration to an engine without the image fails and the job
  runs again where it was;
- an engine going down: its node is unschedulable, the other hosts are still observed and planned,
  its job is started elsewhere from its checkpoint; when it comes back, the stale container is removed;
- what an observe asks the engine for: a log read with the TTY flag the adapter's inspect read does
  not inspect again, reads of other containers or with a new ``since`` share one connection pool,
  and a TTY container's raw stream and a plain one's frames read the same lines;
- deliver: a container is signalled once, not at every plan until its log says it delivered, and
  a new container afresh; one that has printed nothing since its start is not signalled yet (its
  handler may not be set), and is once its first line is read.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from adapters.base import Change
from adapters.docker import DOWN_LABEL, UNMANAGED_PREFIX, DockerAdapter, DockerAdapterError, HostSpec
from adapters.docker.engine import shares_for
from adapters.docker.events import EngineEvent, EngineEvents
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


def wait_for(
    pred: Callable[[], Any], timeout: float, what: str, every: float = 0.5, explain: Callable[[], str] | None = None
) -> Any:
    """``pred()``'s first true value within ``timeout`` s; else the test fails, with ``explain()``
    (e.g. the job's container logs, ``docker_env.job_logs``) in its message."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}" + (f"\n{explain()}" if explain else ""))


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


def _cores(ad: DockerAdapter, host: str, cids: list[str], seconds: float) -> list[float]:
    """Cores each container used over ``seconds``, from two engine stats samples each (taken in parallel)."""

    def sample() -> list[tuple[float, float]]:
        out: list[Any] = [None] * len(cids)

        def one(i: int) -> None:
            out[i] = ad.hosts[host].cpu_usage(cids[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cids))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(out), out
        return out

    a = sample()
    time.sleep(seconds)
    b = sample()
    return [(y[0] - x[0]) / (y[1] - x[1]) for x, y in zip(a, b, strict=True)]


def test_shares_split_a_pinned_cpu_by_weight_and_idle_cycles_flow(docker_engines: Any) -> None:
    """Real: the kernel's CFS on this machine, through Docker's ``CpuShares`` as the adapter sets them.

    Two busy loops (``sh``, no training) pinned to CPU 0 with ``cpuset_cpus="0"`` are started by the
    adapter with guarantees 250m and 750m, i.e. ``CpuShares`` 256 and 768. Their CPU time comes from
    the engine's stats over 4 s. If the shares were ignored the ratio would be about 1; the test
    asks for 2 to 4.5 (3 expected; the ratio of the two holds whatever else runs on CPU 0). Then the
    heavier one stops, and the lighter one must get more than it had (no cap holds it back; about
    4 times on an idle machine, printed).
    """
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    busy = ["/bin/sh", "-c", "while :; do :; done"]
    light = create_job(main.url, "fp-light", "light", docker_engines.ckpt, command=busy, cpuset="0", start=False)
    heavy = create_job(main.url, "fp-heavy", "heavy", docker_engines.ckpt, command=busy, cpuset="0", start=False)
    ad = adapter_for(docker_engines, read_stats=False)
    ad.observe()
    outs = ad.apply([Change("light", "start", "main", 250, 0), Change("heavy", "start", "main", 750, 0)])
    assert all(o.ok for o in outs), outs
    hc = {cid: api(main.url).inspect_container(cid)["HostConfig"] for cid in (light, heavy)}
    assert [hc[light]["CpuShares"], hc[heavy]["CpuShares"]] == [256, 768]
    assert [hc[light]["NanoCpus"], hc[heavy]["NanoCpus"]] == [0, 0]  # no cap: nothing asked for one
    time.sleep(1.0)
    lo, hi = _cores(ad, "main", [light, heavy], 4.0)
    print(f"pinned to CPU 0, shares 256:768: {lo:.3f} and {hi:.3f} cores, ratio {hi / lo:.2f}")
    assert 2.0 <= hi / lo <= 4.5, (lo, hi)
    api(main.url).remove_container(heavy, force=True)
    time.sleep(0.5)
    (alone,) = _cores(ad, "main", [light], 3.0)
    print(f"alone on CPU 0: {alone:.3f} cores ({alone / lo:.1f} x what it had)")
    # More than it had: the heavy one's cycles flowed to it. (On an idle machine about 4x; other
    # processes on CPU 0 take their own weight's part, so only "more" holds whatever the load.)
    assert alone > 1.1 * lo, (lo, alone)
    api(main.url).remove_container(light, force=True)


def _throttled_periods(url: str, cid: str) -> int:
    """CFS periods in which the kernel throttled the container (Docker's stats API)."""
    from docker_env import api

    return int(api(url).stats(cid, stream=False)["cpu_stats"]["throttling_data"]["throttled_periods"])


def test_cap_where_asked_slows_epochs_and_lifting_it_restores_them(docker_engines: Any) -> None:
    """The cap is checked where it acts, in the kernel's throttling counters: they grow while the
    quota is 250m and stop once it is lifted. Epoch times are printed as figures; they are only
    asserted qualitatively, since on a busy 2-core machine an uncapped job may get little more CPU
    than a capped one (a 1.8x ratio flaked at 1.77, issue 15)."""
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    cid = create_job(main.url, "fp-cpu", "cpu", docker_engines.ckpt, args=FAST, cpus=1.0)
    ad = adapter_for(docker_engines)
    before = wait_for(lambda: epochs_seen(ad, "cpu", 5), 60, "5 epochs at 1000m")
    # A user's --cpus 1 (CpuShares unset: the kernel's 1024): a cap at the job's max (1000) reads as none beyond it.
    assert (before.allocation.cpu_millis, before.allocation.cpu_limit_millis) == (1000, None)
    # Job.started is the container's start (State.StartedAt), which a live resize keeps.
    assert before.started is not None and 0 <= time.time() - before.started < 120
    t_change = time.time()
    (out,) = ad.apply([Change("cpu", "resize", "main", 250, 0, from_node="main", cpu_limit_millis=250)])
    assert out.ok, out
    hc = api(main.url).inspect_container(cid)["HostConfig"]
    assert (hc["NanoCpus"], hc["CpuQuota"], hc["CpuShares"]) == (250_000_000, 0, 256)
    cgroup = Path(f"/sys/fs/cgroup/cpu/docker/{cid}/cpu.cfs_quota_us")
    if cgroup.exists():  # cgroup v1 with the cgroupfs driver, as on this machine
        assert int(cgroup.read_text()) == 25_000
    # Repeating the change is a no-op.
    (again,) = ad.apply([Change("cpu", "resize", "main", 250, 0, from_node="main", cpu_limit_millis=250)])
    assert again.ok and "already" in again.message
    # 8 epochs (~5 s): enough for engine stats samples wholly inside the capped time on a loaded
    # machine; with 4, one CI run paired every capped epoch with samples from before the cap.
    after = wait_for(
        lambda: (j := epochs_seen(ad, "cpu", 1)) and sum(p.time > t_change for p in j.history) >= 8 and j, 90, "8 epochs at 250m"
    )
    assert (after.allocation.cpu_millis, after.allocation.cpu_limit_millis) == (250, 250)
    assert after.started == before.started

    def durations(points: list[Any]) -> list[float]:
        return [b.time - a.time for a, b in zip(points, points[1:], strict=False)]

    fast = median(durations([p for p in after.history if p.time <= t_change][1:]))
    slow = median(durations([p for p in after.history if p.time > t_change])[1:])
    print(f"epoch time at 1000m {fast:.3f} s, capped at 250m {slow:.3f} s, ratio {slow / fast:.2f}")
    assert slow > fast, (fast, slow)
    t0 = _throttled_periods(main.url, cid)
    time.sleep(1.0)
    capped = _throttled_periods(main.url, cid) - t0
    print(f"throttled CFS periods in 1 s under the 250m cap: {capped}")
    assert capped >= 3, capped  # 10 periods a second at the default 100 ms: most are throttled
    # Speed points are keyed by the CPU the job used (engine stats), not by a share it was given. An
    # epoch's CPU is interpolated between stats samples, so one that a sample before the cap brackets
    # reads above 250m (400m in one CI run, at the capped epoch time): below 500m is the capped side.
    speeds = {s.cpu_millis: s.seconds_per_epoch for s in after.speed}
    low = [v for k, v in speeds.items() if k < 500]
    high = [v for k, v in speeds.items() if k >= 600]
    assert low and high, speeds  # speeds observed on both sides of the cap (their timing is printed above, not asserted)
    # Lifting the cap (none planned, none declared): the quota goes to every core, epochs are fast again.
    t_lift = time.time()
    (out,) = ad.apply([Change("cpu", "resize", "main", 250, 0, from_node="main")])
    assert out.ok, out
    ncpu = int(api(main.url).info()["NCPU"])
    assert api(main.url).inspect_container(cid)["HostConfig"]["NanoCpus"] == ncpu * 10**9
    lifted = wait_for(
        lambda: (j := epochs_seen(ad, "cpu", 1)) and sum(p.time > t_lift for p in j.history) >= 4 and j, 60, "4 epochs uncapped"
    )
    assert (lifted.allocation.cpu_millis, lifted.allocation.cpu_limit_millis) == (250, None)
    free = median(durations([p for p in lifted.history if p.time > t_lift])[1:])
    print(f"epoch time with the cap lifted (guarantee still 250m): {free:.3f} s")
    t0 = _throttled_periods(main.url, cid)
    time.sleep(1.0)
    uncapped = _throttled_periods(main.url, cid) - t0
    print(f"throttled CFS periods in 1 s with the cap lifted: {uncapped}")
    assert uncapped == 0, uncapped  # one busy thread never reaches a quota of every core
    assert free < slow, (free, slow)
    api(main.url).remove_container(cid, force=True)


def test_quota_container_keeps_quota_and_engine_conflicts_are_data(docker_engines: Any) -> None:
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    cid = create_job(main.url, "fp-quota", "quota", docker_engines.ckpt, args=FAST, cpu_quota=100_000)
    ad = adapter_for(docker_engines)
    wait_for(lambda: job_of(ad, "quota"), 30, "the quota job")
    (out,) = ad.apply([Change("quota", "resize", "main", 500, 0, from_node="main", cpu_limit_millis=500)])
    assert out.ok, out
    hc = api(main.url).inspect_container(cid)["HostConfig"]
    assert (hc["CpuQuota"], hc["CpuPeriod"], hc["NanoCpus"], hc["CpuShares"]) == (50_000, 100_000, 0, 512)
    # No cap asked for: the quota is lifted (-1), and the container stays a quota one.
    (out,) = ad.apply([Change("quota", "resize", "main", 500, 0, from_node="main")])
    assert out.ok, out
    hc = api(main.url).inspect_container(cid)["HostConfig"]
    assert (hc["CpuQuota"], hc["CpuPeriod"], hc["NanoCpus"]) == (-1, 100_000, 0)
    assert job_of(ad, "quota").allocation.cpu_limit_millis is None
    # What the adapter avoids: the engine refuses NanoCpus on a quota container. Reported as data.
    c = ad.hosts["main"].inspect(cid)
    c.cpu_quota = c.cpu_period = 0  # pretend it has no limit, so the host's default mechanism (nano) is tried
    with pytest.raises(DockerAdapterError) as err:
        ad.hosts["main"].set_cpu(c, 700, 700, engine_cpu_millis=2000)
    assert err.value.kind == "conflict" and "Nano" in err.value.message
    api(main.url).remove_container(cid, force=True)


def test_observe_plan_diff_round_trips_without_spurious_resizes(docker_engines: Any) -> None:
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    declared = {"flowplan.min_cpu_millis": "250", "flowplan.max_cpu_millis": "1000"}
    ids = {
        "declared": create_job(main.url, "fp-rt-d", "declared", docker_engines.ckpt, args=FAST, labels=declared, start=False),
        "free": create_job(main.url, "fp-rt-f", "free", docker_engines.ckpt, args=FAST, start=False),
        "usercap": create_job(main.url, "fp-rt-u", "usercap", docker_engines.ckpt, args=FAST, cpus=0.5),
    }
    ad = DockerAdapter([HostSpec("main", main.url, cpu_millis=2000)])
    loop = ControlLoop(ad, make_policy("flowplan", time_limit=0.5), ad.clock)
    ticks = []
    for _ in range(5):
        ticks.append(loop.step())
        time.sleep(1.0)
    assert not [t.violations for t in ticks if t.violations]
    assert all(o.ok for t in ticks for o in t.outcomes), [o for t in ticks for o in t.outcomes if not o.ok]
    # Nothing asked for is already in effect: observe → plan → diff comes back to the same figures.
    spurious = [(o.change, o.message) for t in ticks for o in t.outcomes if "already" in o.message]
    assert not spurious, spurious
    ncpu = int(api(main.url).info()["NCPU"])
    last = {j.id: j for j in ad.observe().jobs}
    for job, cid in ids.items():
        hc = api(main.url).inspect_container(cid)["HostConfig"]
        j = last[job]
        if j.status != "running":
            continue
        assert hc["CpuShares"] == shares_for(j.allocation.cpu_millis), (job, hc["CpuShares"], j.allocation)
        assert j.allocation.cpu_limit_millis is None, (job, j.allocation)  # the planner asked for no cap
        if job == "declared" and ncpu > 1:
            assert hc["NanoCpus"] == 1_000_000_000, hc  # the job's own max is a cap that is the point
        elif job == "free":
            assert hc["NanoCpus"] == 0, hc  # no cap: idle capacity flows
        elif job == "usercap" and j.allocation.cpu_millis != 500:
            assert hc["NanoCpus"] == ncpu * 10**9, hc  # the user's --cpus 0.5 was lifted
    assert last["declared"].status == "running" and last["free"].status == "running"


def test_a_long_bar_line_is_read_while_it_runs(docker_engines: Any) -> None:
    """A bar redrawn on one line for a long epoch: the engine writes its first 16 KiB piece at once
    and the rest when the line ends (same timestamp). An observe in between sees the frames of the
    first piece; one after the end adds the rest, none twice: the history is the whole text's."""
    from docker_env import api, create_job

    from adapters.logs import read_log

    frame = 'printf "Epoch 1/1: %3d%%|#| %3d/400 [00:00<00:00, 9.9it/s, loss=%3d.5]\\r" $((i/4)) $i $i'
    loop = "while [ $i -lt {n} ]; do i=$((i+1)); " + frame + "; done"
    script = f"i=0; {loop.format(n=300)}; sleep 4; {loop.format(n=400)}; echo"
    text = "".join(f"Epoch 1/1: {i // 4:3d}%|#| {i:3d}/400 [00:00<00:00, 9.9it/s, loss={i:3d}.5]\r" for i in range(1, 401)) + "\n"
    main = docker_engines.engines[0]
    cid = create_job(main.url, "fp-long", "long", docker_engines.ckpt, command=["/bin/sh", "-c", script])
    wait_for(lambda: len(api(main.url).logs(cid)) >= 16384, 10, "the first piece")
    ad = adapter_for(docker_engines)
    during = job_of(ad, "long")
    assert during is not None and during.status == "running"
    seen = [round(p.epoch * 400) for p in during.history]
    assert seen and 150 < max(seen) < 300, seen  # frames of the first piece only
    wait_for(lambda: not api(main.url).inspect_container(cid)["State"]["Running"], 20, "the line's end")
    after = job_of(ad, "long")
    want, _, _ = read_log(text)
    assert [(p.epoch, p.loss) for p in after.history] == [(p.epoch, p.loss) for p in want]


def test_log_reads_share_one_connection_pool_and_inspect_nothing_more(docker_engines: Any) -> None:
    """What an observe asks the engine for each container, and no more: a log read with the TTY flag
    the adapter's inspect already read does not inspect the container again, and reads of other
    containers or with a new ``since`` (each a new URL) go through one connection pool. docker-py
    keyed its unix-socket pools by the whole URL, so each such read opened a connection (the
    ``overhead`` benchmark's observe of 50 containers: 0.28 s of CPU before, 0.13 s after,
    ``docs/docker.md``). Both framings still read right: a TTY container's raw stream and a plain
    one's multiplexed frames, the same JSON lines from each. Without the flag docker-py asks, as before."""
    from docker_env import IMAGE, api, create_job

    from adapters.docker.engine import Host

    main = docker_engines.engines[0]
    script = 'for i in 1 2 3; do echo "{\\"epoch\\": $i, \\"loss\\": 1.5}"; done; sleep 60'
    plain = create_job(main.url, "fp-plain", "plain", docker_engines.ckpt, command=["/bin/sh", "-c", script])
    client = api(main.url)
    hc = client.create_host_config(binds=["/usr:/usr:ro"], network_mode="none")
    tty = client.create_container(
        IMAGE, command=["/bin/sh", "-c", script], tty=True, name="fp-tty", labels={"flowplan.job": "tty"}, host_config=hc
    )["Id"]
    client.start(tty)
    for cid in (plain, tty):
        wait_for(lambda cid=cid: client.logs(cid).count(b'"epoch"') >= 3, 20, f"three lines from {cid[:12]}")
    host = Host(HostSpec("main", main.url))
    engine_api = host.api()
    inspected: list[str] = []
    real_inspect = engine_api.inspect_container
    engine_api.inspect_container = lambda c, *a, **k: (inspected.append(c), real_inspect(c, *a, **k))[1]
    for cid, is_tty in ((plain, False), (tty, True)):
        for since in (None, 1.0, 2.0):
            raw = host.logs(cid, since, tty=is_tty)
            assert b"\x01\x00\x00\x00" not in raw and b"\x00\x00\x00\x00" not in raw, raw[:80]
            got = [json.loads(line.split(b" ", 1)[1]) for line in raw.replace(b"\r", b"").splitlines() if b"epoch" in line]
            assert got == [{"epoch": i, "loss": 1.5} for i in (1, 2, 3)], raw
    assert inspected == []
    assert len(engine_api.get_adapter("http+docker://localhost").pools) == 1
    fresh = Host(HostSpec("main", main.url))  # remembers no flag yet
    fresh_api = fresh.api()
    real_fresh = fresh_api.inspect_container
    fresh_api.inspect_container = lambda c, *a, **k: (inspected.append(c), real_fresh(c, *a, **k))[1]
    assert fresh.logs(plain, None).count(b'"epoch"') == 3
    assert inspected == [plain]


def test_speed_from_a_bars_rate_before_two_epochs_end(docker_engines: Any) -> None:
    """A busy job whose bar says ``10.00it/s`` over 50 steps (5 s an epoch, by its own account; the
    text is fixed, the work real): once its first epoch's line is out, the snapshot has a speed of
    5 s an epoch at the CPU it used, while its second epoch (long) is still running, so no two
    epoch ends could have been timed."""
    from docker_env import create_job

    busy = "busy() { j=0; while [ $j -lt $1 ]; do j=$((j+1)); done; }"
    bar = 'printf "Epoch %d/2: %3d%%|#| %d/50 [00:01<00:04, 10.00it/s, loss=0.5]\\r" $e $((i*2)) $i'
    epoch = "i=0; while [ $i -lt 50 ]; do i=$((i+1)); busy $n; " + bar + "; done; echo"
    script = f"{busy}; e=1; n=2000; {epoch}; e=2; n=200000; {epoch}"
    main = docker_engines.engines[0]
    create_job(main.url, "fp-rate", "rate", docker_engines.ckpt, command=["/bin/sh", "-c", script])
    ad = adapter_for(docker_engines)
    job = wait_for(lambda: (j := job_of(ad, "rate")) and j.speed and j, 40, "a speed", every=0.5)
    assert job.status == "running"
    assert max(p.epoch for p in job.history) < 1.0  # the epoch's end is held until epoch 2 shows
    assert [s.seconds_per_epoch for s in job.speed] == [pytest.approx(5.0)], job.speed
    assert job.speed[0].cpu_millis >= 100


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


def test_a_deliver_asked_again_before_the_log_says_delivered_signals_once(docker_engines: Any) -> None:
    """Every plan asks a job at tier 1 to deliver until its log says it delivered; a real job saves its
    model at each SIGUSR1 it handles. A container that only counts its SIGUSR1s (into the mounted
    checkpoint folder) and never says it delivered: three delivers in a row signal it once, the later
    two say it was already asked; its replacement (a new container) is asked afresh."""
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    count, script = _usr1_counter(docker_engines.ckpt, "fp-asked")
    cid = create_job(main.url, "fp-asked", "asked", docker_engines.ckpt, command=["/bin/sh", "-c", script])
    ad = adapter_for(docker_engines)
    outs = [_asked_once_it_printed(ad, "asked")]
    outs += [ad.apply([Change("asked", "deliver", "main", 0, 0)])[0] for _ in range(2)]
    assert all(o.ok for o in outs), outs
    assert outs[0].message == "asked to deliver (SIGUSR1)"
    assert all(o.message.startswith("already asked to deliver") for o in outs[1:]), outs
    wait_for(lambda: count.exists() and count.read_text().count("usr1") >= 1, 10, "the signal handled")
    time.sleep(0.5)
    assert count.read_text().count("usr1") == 1
    assert not next(j for j in ad.observe().jobs if j.id == "asked").delivered  # its log never said so
    api(main.url).remove_container(cid, force=True)
    cid = create_job(main.url, "fp-asked-2", "asked", docker_engines.ckpt, command=["/bin/sh", "-c", script])
    again = _asked_once_it_printed(ad, "asked")
    assert again.ok and again.message == "asked to deliver (SIGUSR1)", again
    wait_for(lambda: count.read_text().count("usr1") >= 2, 10, "the new container's signal handled")
    api(main.url).remove_container(cid, force=True)
    count.unlink(missing_ok=True)


def _usr1_counter(ckpt: Path, name: str, after: int = 0) -> tuple[Path, str]:
    """A shell script for a job container that, ``after`` seconds in, counts the SIGUSR1s it gets into
    ``<name>.count`` in the mounted checkpoint folder, says "ready", and idles; and that file (removed
    first)."""
    count = ckpt / f"{name}.count"
    count.unlink(missing_ok=True)
    wait = f"sleep {after}; " if after else ""
    return count, f"{wait}trap 'echo usr1 >> /ckpt/{name}.count' USR1; echo ready; while true; do sleep 0.1; done"


def _asked_once_it_printed(ad: Any, job: str, timeout: float = 30.0) -> Any:
    """Observe and ask ``job`` to deliver until the adapter signals it (it waits for a line from the
    container since its start); the outcome that did."""
    deadline = time.monotonic() + timeout
    while True:
        if any(j.id == job and j.status == "running" for j in ad.observe().jobs):
            (out,) = ad.apply([Change(job, "deliver", "main", 0, 0)])
            if not out.message.startswith("not asked yet"):
                return out
        assert time.monotonic() < deadline, f"{job}: never asked to deliver"
        time.sleep(0.2)


def test_a_deliver_waits_for_a_line_since_the_containers_start(docker_engines: Any) -> None:
    """A job asked to deliver in the plan that starts it: its process has not set its SIGUSR1 handler
    yet, and PID 1 of a container drops a signal it has no handler for (the real-engine demo's
    ``job1`` never delivered, and was not asked again for a minute). A container that sets its trap
    after 3 s and then says so: asked at once, the adapter answers "not asked yet" and signals
    nothing; once its line is read, it is signalled, and the signal is handled."""
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    count, script = _usr1_counter(docker_engines.ckpt, "fp-late", after=3)
    cid = create_job(main.url, "fp-late", "late", docker_engines.ckpt, command=["/bin/sh", "-c", script])
    ad = adapter_for(docker_engines)
    wait_for(lambda: any(j.id == "late" and j.status == "running" for j in ad.observe().jobs), 30, "the job running")
    (early,) = ad.apply([Change("late", "deliver", "main", 0, 0)])
    assert early.ok and early.message.startswith("not asked yet"), early
    asked = _asked_once_it_printed(ad, "late")
    assert asked.message == "asked to deliver (SIGUSR1)", asked
    wait_for(lambda: count.exists() and count.read_text().count("usr1") == 1, 10, "the signal handled")
    api(main.url).remove_container(cid, force=True)
    count.unlink(missing_ok=True)


def test_a_deliver_that_comes_after_the_last_epoch_records_the_final_model(docker_engines: Any, caplog: Any) -> None:
    """Issue 15: tier 1 reached at the last epoch, the container exits 0 before the daemon's deliver
    arrives. That is a delivery (the final model), not a conflict; a failed job's is still refused.
    Likewise a resize or a move planned while a job printed its last epoch, applied after it exited
    0, changes nothing and is no failure (session 43: the engine run's one failed action); a failed
    job's is still a conflict."""
    from docker_env import api, create_job

    main = docker_engines.engines[0]
    done = create_job(main.url, "fp-done", "done", docker_engines.ckpt, command=["/bin/sh", "-c", "exit 0"])
    failed = create_job(main.url, "fp-failed", "failed", docker_engines.ckpt, command=["/bin/sh", "-c", "exit 3"])
    ad = adapter_for(docker_engines)
    wait_for(lambda: all(api(main.url).inspect_container(c)["State"]["Status"] == "exited" for c in (done, failed)), 30, "exits")
    with caplog.at_level("WARNING", logger="flowplan.docker"):
        snap = ad.observe()
        ad.observe()  # a failed container is said once, not at every observe while it stays
    said = [r.getMessage() for r in caplog.records if "exited with 3" in r.getMessage()]
    assert said == ["job failed: container fp-failed exited with 3 (counted as finished)"], said
    assert {j.id: j.status for j in snap.jobs if j.id in ("done", "failed")} == {"done": "finished", "failed": "finished"}
    assert {j.id: j.failure for j in snap.jobs if j.id in ("done", "failed")} == {
        "done": None,
        "failed": "exit 3",
    }  # status --all
    ok, refused = ad.apply([Change("done", "deliver", "main", 0, 0), Change("failed", "deliver", "main", 0, 0)])
    assert ok.ok and "final model" in ok.message, ok
    assert not refused.ok and refused.error == "conflict" and "exited" in refused.message, refused
    assert next(j for j in ad.observe().jobs if j.id == "done").delivered
    moot = ad.apply(
        [
            Change("done", "resize", "main", 500, 0, from_node="main"),
            Change("done", "migrate", "extra0", 500, 0, from_node="main"),
            Change("failed", "resize", "main", 500, 0, from_node="main"),
        ]
    )
    assert [(o.ok, o.error) for o in moot] == [(True, None), (True, None), (False, "conflict")], moot
    assert "finished before the resize" in moot[0].message and "finished before the move" in moot[1].message
    assert [c["Id"] for c in api(main.url).containers(all=True, filters={"label": "flowplan.job=done"})] == [done]
    for c in (done, failed):
        api(main.url).remove_container(c, force=True)


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
    seen: list[EngineEvent] = []
    events = EngineEvents([ad.hosts["extra1"].spec], seen.append, retry=0.5).start()
    assert events.wait_connected(5)
    wait_for(lambda: epochs_seen(ad, "down", 2) and epochs_seen(ad, "up", 1), 60, "both jobs running")
    e1.stop()  # the host shuts down: its container gets SIGTERM, checkpoints, the engine goes away
    try:
        # The job's death came through the stream before the engine went; the stream then failed.
        assert any(ev.action == "die" and ev.job == "down" for ev in seen), seen
        wait_for(lambda: not events.connected()["extra1"], 10, "the events stream to notice", every=0.1)
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
    # The stream is back on its own, and says so once (the daemon then re-plans: it may have missed events).
    wait_for(lambda: any(ev.action == "reconnected" for ev in seen), 15, "the events stream to reconnect", every=0.1)
    events.close()
    # Back: the old, stopped container is a duplicate; reconcile removes it, the running one stays.
    ad.observe()
    done = ad.reconcile()
    assert any("down" in line and "removed" in line for line in done), done
    assert containers(e1, "down") == []
    assert len(containers(where, "down")) == 1
