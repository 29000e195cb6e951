"""One Docker host: a thin, typed layer over docker-py's low-level client with errors translated.

Every method either returns plain data or raises :class:`~adapters.docker.errors.DockerAdapterError`
with a protocol error kind. Nothing here decides anything; :mod:`adapters.docker.adapter` does.

CPU, as FlowPlan uses it (``docs/docker.md``):

- a job's **guaranteed share** is a weight, ``CpuShares`` (1024 per core, :func:`shares_for`): while
  every container on the host is busy each gets CPU in proportion to its weight; a core one leaves
  idle flows to the others at once (work-conserving);
- a **cap** is a CFS quota, set only where a cap is the point (a planned ``cpu_limit_millis``, or the
  job's own declared maximum): ``NanoCpus`` (``--cpus``), or ``CpuQuota``/``CpuPeriod``.

The engine's CPU-limit rules, as measured on Docker 20.10 (cgroup v1) on this machine:

- a container started with ``--cpus`` (``NanoCpus``) accepts a ``NanoCpus`` update but rejects a CFS
  quota update ("Conflicting options: CPU Quota cannot be updated as NanoCPUs has already been set");
- a container started with ``--cpu-quota/--cpu-period`` accepts a quota update but rejects a
  ``NanoCpus`` update ("Nano CPUs cannot be updated as CPU Period has already been set");
- a container started without a limit takes either, and is then bound to the one it took;
- ``NanoCpus: 0`` in an update is ignored (the cap stays); the largest accepted value is the host's
  CPU count, which lifts the cap (quota = every core); ``CpuQuota: -1`` lifts a CFS quota;
- ``CpuShares`` can be updated on any container, next to either cap; ``CpuShares: 0`` is ignored.

:meth:`Host.set_cpu` therefore keeps the cap mechanism the container already has. docker-py's
``update_container`` has no ``NanoCpus`` argument, so every update goes to the endpoint directly.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from adapters.docker.errors import DockerAdapterError, translate

CpuMechanism = Literal["nano", "quota", "shares"]
DEFAULT_PERIOD = 100_000  # CFS period in microseconds (the kernel's and Docker's default)
DEFAULT_SHARES = 1024  # the kernel's weight for a cgroup whose CpuShares were never set (0 in inspect)
API_VERSION = "1.41"  # Docker 20.10; newer engines accept it
#: A host name or an IPv4/IPv6 address (``MASTER_ADDR`` of a gang; checked, not resolved).
_ADDRESS = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|[0-9A-Fa-f:.]{2,45}")


def shares_for(cpu_millis: int) -> int:
    """``CpuShares`` for a guaranteed share: 1024 per core, at least 2 (the kernel's minimum)."""
    return max(2, round(cpu_millis * DEFAULT_SHARES / 1000))


def guarantee_of(cpu_shares: int) -> int:
    """The guaranteed share in millicores that ``cpu_shares`` stand for (0, unset, is the kernel's 1024).

    ``guarantee_of(shares_for(m)) == m`` for every ``m >= 2``.
    """
    return max(1, round((cpu_shares if cpu_shares > 0 else DEFAULT_SHARES) * 1000 / DEFAULT_SHARES))


@dataclass(frozen=True)
class HostSpec:
    """A Docker host as the operator names it:
    ``name=URL[,cpu=MILLIS][,gpus=N][,mechanism=nano|quota|shares][,addr=ADDRESS]``.

    ``cpu_millis`` / ``gpus`` override what the engine reports (several engines on one machine, or
    a share of a machine). ``mechanism`` is how a cap is set on a container that has none yet:
    ``nano`` (``--cpus``, the default) or ``quota`` (``--cpu-quota``); ``shares``: never cap on this
    host (weights only, even where a cap was asked for). ``addr`` is the address the other replicas
    of a gang reach this host at when its rank 0 runs here (``MASTER_ADDR``; default
    :attr:`rendezvous_addr`).
    """

    name: str
    url: str
    cpu_millis: int | None = None
    gpus: int = 0
    mechanism: CpuMechanism = "nano"
    addr: str | None = None

    @property
    def rendezvous_addr(self) -> str:
        """``MASTER_ADDR`` for a gang whose rank 0 runs here: ``addr``, else the URL's host for
        ``tcp://``/``ssh://``, else ``127.0.0.1`` (a unix socket: the engine is on this machine)."""
        if self.addr:
            return self.addr
        scheme, _, rest = self.url.partition("://")
        if scheme in ("tcp", "ssh"):
            from urllib.parse import urlsplit

            host = urlsplit(f"//{rest}").hostname
            if host:
                return host
        return "127.0.0.1"

    @classmethod
    def parse(cls, text: str) -> HostSpec:
        """Parse one ``--hosts`` item; raises ``ValueError`` naming the part that is wrong."""
        head, *opts = text.split(",")
        name, sep, url = head.partition("=")
        if not sep:
            name, url = "", head
        url = url.strip()
        if not (url.startswith("unix://") or url.startswith("tcp://") or url.startswith("ssh://")):
            raise ValueError(f"host {text!r}: URL must start with unix://, tcp:// or ssh:// (got {url!r})")
        if not name:
            name = url.split("://", 1)[1].strip("/").replace("/", "-").replace(":", "-") or "local"
        kw: dict[str, Any] = {}
        for opt in opts:
            key, _, value = opt.partition("=")
            key = key.strip()
            if key in ("cpu", "gpus"):
                try:
                    n = int(value)
                except ValueError:
                    raise ValueError(f"host {name}: {key}={value!r} is not a whole number") from None
                if n < 0 or n > 10**9:
                    raise ValueError(f"host {name}: {key}={value!r} is out of range")
                kw["cpu_millis" if key == "cpu" else "gpus"] = n
            elif key == "mechanism":
                if value not in ("nano", "quota", "shares"):
                    raise ValueError(f"host {name}: mechanism={value!r} (expected nano, quota or shares)")
                kw["mechanism"] = value
            elif key == "addr":
                value = value.strip()
                if not _ADDRESS.fullmatch(value):
                    raise ValueError(f"host {name}: addr={value!r} is not a host name or IP address")
                kw["addr"] = value
            else:
                raise ValueError(f"host {name}: unknown option {key!r} (expected cpu, gpus, mechanism or addr)")
        from planner.snapshot import Node

        try:
            Node(name=name, cpu_millis=0)
        except ValueError:
            raise ValueError(f"host {text!r}: {name!r} is not a valid node name") from None
        return cls(name=name, url=url, **kw)


@dataclass
class ContainerView:
    """What the adapter needs to know about one container (from ``inspect``)."""

    id: str
    name: str
    labels: dict[str, str]
    state: str  # created | running | paused | restarting | removing | exited | dead
    exit_code: int
    created: float
    started: float | None
    nano_cpus: int
    cpu_quota: int
    cpu_period: int
    cpu_shares: int
    cpuset: str
    gpu_ids: list[str]
    gpu_count: int
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    def cpu_cap_millis(self) -> int | None:
        """The hard CPU cap (quota) in millicores, or ``None`` when it has none."""
        if self.nano_cpus > 0:
            return round(self.nano_cpus / 1e6)
        if self.cpu_quota > 0:
            return round(self.cpu_quota * 1000 / (self.cpu_period or DEFAULT_PERIOD))
        return None

    def guarantee_millis(self) -> int:
        """The guaranteed share its ``CpuShares`` stand for, in millicores (:func:`guarantee_of`)."""
        return guarantee_of(self.cpu_shares)

    @property
    def image(self) -> str | None:
        """The image it was created from, as given (``Config.Image``: ``repo/name:tag``), or ``None``."""
        image = (self.raw.get("Config") or {}).get("Image")
        return image if isinstance(image, str) and image else None

    def mechanism(self) -> CpuMechanism | None:
        """How its cap is (or once was) set: ``nano``, ``quota``, or ``None`` (never capped)."""
        if self.nano_cpus > 0:
            return "nano"
        if self.cpu_quota > 0 or self.cpu_period > 0:
            return "quota"
        return None


def _time(text: str | None) -> float | None:
    from adapters.docker.progress import parse_timestamp, to_seconds

    if not text or text.startswith("0001-"):
        return None
    try:
        return to_seconds(parse_timestamp(text))
    except ValueError:
        return None


def view(data: dict[str, Any]) -> ContainerView:
    hc = data.get("HostConfig") or {}
    st = data.get("State") or {}
    cfg = data.get("Config") or {}
    ids: list[str] = []
    count = 0
    for req in hc.get("DeviceRequests") or []:
        if ["gpu"] in (req.get("Capabilities") or []) or req.get("Driver") == "nvidia":
            ids.extend(req.get("DeviceIDs") or [])
            count += len(req.get("DeviceIDs") or []) or max(0, int(req.get("Count") or 0))
    return ContainerView(
        id=data["Id"],
        name=str(data.get("Name", "")).lstrip("/"),
        labels=dict(cfg.get("Labels") or {}),
        state=str(st.get("Status", "unknown")),
        exit_code=int(st.get("ExitCode") or 0),
        created=_time(data.get("Created")) or 0.0,
        started=_time(st.get("StartedAt")),
        nano_cpus=int(hc.get("NanoCpus") or 0),
        cpu_quota=int(hc.get("CpuQuota") or 0),
        cpu_period=int(hc.get("CpuPeriod") or 0),
        cpu_shares=int(hc.get("CpuShares") or 0),
        cpuset=str(hc.get("CpusetCpus") or ""),
        gpu_ids=ids,
        gpu_count=count,
        raw=data,
    )


#: At most this many containers' TTY flags are remembered (:func:`api_client`); then it starts again.
KNOWN_TTY_LIMIT = 10_000


def api_client(url: str, **options: Any) -> Any:
    """docker-py's low-level client for the engine at ``url`` (``docker.APIClient`` options), with
    three costs it paid on requests of every interval taken out:

    - on a local socket (``unix://``, ``npipe://``) no HTTP proxy applies, but requests read every
      proxy variable of the environment on each request (``trust_env``); it no longer does. Over
      ``tcp://`` the environment still counts (``HTTPS_PROXY``, ``NO_PROXY``, a CA bundle);
    - on a unix socket docker-py keys its connection pools by the whole request URL, path and query
      included, and keeps 25: a request for another container, or a log read with a new ``since``,
      opened a new connection (and closed the oldest pool's). One engine, one socket: one pool;
    - ``logs`` inspects the container again to learn whether it has a terminal (how its stream is
      framed): a flag fixed when the container is created, which the daemon's own inspect of every
      container already read. :meth:`Host.logs` passes it on; without it docker-py asks as before.

    What that saves on an observe of 100 containers: ``docs/docker.md``, "The daemon's overhead per
    interval"."""
    import docker

    class Client(docker.APIClient):
        def __init__(self) -> None:
            super().__init__(base_url=url, version=API_VERSION, **options)
            #: container (as passed to ``logs``) -> its ``Config.Tty``, at most :data:`KNOWN_TTY_LIMIT`.
            self.known_tty: dict[str, bool] = {}
            if url.startswith(("unix://", "npipe://")):
                self.trust_env = False
            if url.startswith("unix://"):
                transport = self.get_adapter("http+docker://localhost")
                pooled = transport.get_connection
                transport.get_connection = lambda _url, proxies=None: pooled("http+docker://localhost", proxies)

        def remember_tty(self, container: str, tty: bool) -> None:
            if len(self.known_tty) >= KNOWN_TTY_LIMIT and container not in self.known_tty:
                self.known_tty.clear()
            self.known_tty[container] = tty

        def _check_is_tty(self, container: Any) -> bool:
            known = self.known_tty.get(container) if isinstance(container, str) else None
            return known if known is not None else bool(super()._check_is_tty(container))

    return Client()


@contextlib.contextmanager
def _engine_errors() -> Iterator[None]:
    try:
        yield
    except DockerAdapterError:
        raise
    except Exception as exc:  # docker-py, requests and socket errors: all translated here
        raise translate(exc) from exc


class Host:
    """A connection to one Docker engine (created lazily; a dead engine is retried every call)."""

    def __init__(self, spec: HostSpec, *, timeout: float = 10.0) -> None:
        self.spec = spec
        self.timeout = timeout
        self._api: Any = None

    @property
    def name(self) -> str:
        return self.spec.name

    def api(self) -> Any:
        if self._api is None:
            with _engine_errors():
                # A pool as wide as the adapter's parallel stats requests (see DockerAdapter._read_cpu_usage).
                self._api = api_client(self.spec.url, timeout=self.timeout, max_pool_size=32)
        return self._api

    def close(self) -> None:
        if self._api is not None:
            with contextlib.suppress(Exception):
                self._api.close()
            self._api = None

    def info(self) -> dict[str, Any]:
        with _engine_errors():
            return dict(self.api().info())

    def job_containers(self) -> list[ContainerView]:
        """Every container with a ``flowplan.job`` label, in any state."""
        with _engine_errors():
            api = self.api()
            out = []
            for summary in api.containers(all=True, filters={"label": "flowplan.job"}):
                try:
                    out.append(view(api.inspect_container(summary["Id"])))
                except Exception as exc:  # removed between list and inspect: skip it
                    if translate(exc).kind != "not_found":
                        raise
            return out

    def inspect(self, container: str) -> ContainerView:
        with _engine_errors():
            return view(self.api().inspect_container(container))

    def logs(self, container: str, since: float | None, *, tty: bool | None = None) -> bytes:
        """The container's output since ``since`` (whole seconds), with timestamps. ``tty``: whether it
        was created with a terminal, when the caller knows (its inspect says it): docker-py would
        otherwise inspect the container again to know how the stream is framed."""
        with _engine_errors():
            kwargs: dict[str, Any] = {"stdout": True, "stderr": True, "timestamps": True}
            if since is not None and since > 0:
                kwargs["since"] = int(since)  # whole seconds: lines at or before the cursor are dropped by the reader
            api = self.api()
            if tty is not None:
                api.remember_tty(container, tty)
            return bytes(api.logs(container, **kwargs))

    def archive(self, container: str, path: str, limit: int) -> bytes:
        """The tar archive of ``path`` in the container (a file or a directory; ``docker cp``'s read, which
        does not touch the container's processes), at most ``limit`` bytes: more is a ``conflict``."""
        with _engine_errors():
            stream, _ = self.api().get_archive(container, path, chunk_size=1024 * 1024)
            out = bytearray()
            for chunk in stream:
                out += chunk
                if len(out) > limit:
                    close = getattr(stream, "close", None)
                    if close is not None:
                        close()
                    raise DockerAdapterError("conflict", f"{path} in {container[:12]}: more than {limit} bytes")
            return bytes(out)

    def cpu_usage(self, container: str) -> tuple[float, float] | None:
        """(CPU seconds used so far, engine time) from one stats sample; ``None`` if not running."""
        with _engine_errors():
            s = self.api().stats(container, stream=False, one_shot=True)
        total = ((s.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage")
        read = s.get("read")
        if total is None or not read or read.startswith("0001-"):
            return None
        t = _time(read)
        return (total / 1e9, t) if t is not None else None

    def set_cpu(
        self, c: ContainerView, cpu_millis: int, cap_millis: int | None, *, engine_cpu_millis: int, cpuset: str | None = None
    ) -> str:
        """Give ``c`` the guaranteed share ``cpu_millis`` (``CpuShares``) and the cap ``cap_millis`` (``None``: no cap).

        One update call. The cap keeps the mechanism the container already has (see the module
        docstring); lifting one sets ``NanoCpus`` to every core (0 would be ignored) or ``CpuQuota``
        to -1. A cap at or above ``engine_cpu_millis`` is no cap. Returns what it set, in words.
        """
        data: dict[str, Any] = {}
        shares = shares_for(cpu_millis)
        if (c.cpu_shares or DEFAULT_SHARES) != shares:
            data["CpuShares"] = shares
        want = cap_millis if cap_millis is not None and cap_millis < engine_cpu_millis else None
        now = effective_cap(c, engine_cpu_millis)
        mech = c.mechanism() or self.spec.mechanism
        if want != now:
            if want is None:
                if c.nano_cpus > 0:
                    data["NanoCpus"] = engine_cpu_millis * 1_000_000
                elif c.cpu_quota > 0:
                    data["CpuQuota"] = -1
            elif mech == "nano":
                data["NanoCpus"] = int(want) * 1_000_000
            elif mech == "quota":
                period = c.cpu_period or DEFAULT_PERIOD
                data.update(CpuQuota=int(want * period / 1000), CpuPeriod=period)
        if cpuset is not None:
            data["CpusetCpus"] = cpuset
        if data:
            with _engine_errors():
                api = self.api()
                api._result(api._post_json(api._url("/containers/{0}/update", c.id), data=data), True)
        if want is None:
            cap = "no cap"
        elif mech == "shares":
            cap = f"cap {want}m not set (mechanism=shares)"
        else:
            cap = f"cap {want}m ({mech})"
        return f"share {cpu_millis}m (CpuShares {shares}), {cap}"

    def start(self, container: str) -> None:
        with _engine_errors():
            self.api().start(container)

    def stop(self, container: str, timeout: float) -> None:
        """Stop the container: SIGTERM, then SIGKILL after ``timeout`` seconds (``docker stop``)."""
        with _engine_errors():
            self.api().stop(container, timeout=max(0, int(math.ceil(timeout))))

    def signal(self, container: str, sig: str) -> None:
        with _engine_errors():
            self.api().kill(container, signal=sig)

    def wait(self, container: str, timeout: float) -> int:
        """Wait for the container to stop; its exit code. A timeout is a ``transient`` error."""
        with _engine_errors():
            res = self.api().wait(container, timeout=timeout)
        return int(res.get("StatusCode", -1))

    def remove(self, container: str, force: bool = False) -> None:
        with _engine_errors():
            self.api().remove_container(container, force=force)

    def create(self, spec: dict[str, Any], name: str | None) -> str:
        """Create a container from a :func:`recreate_spec`; its id."""
        with _engine_errors():
            api = self.api()
            host_config = api.create_host_config(**spec["host_config"])
            res = api.create_container(name=name, host_config=host_config, **spec["config"])
            return str(res["Id"])


def effective_cap(c: ContainerView, engine_cpu_millis: int | None) -> int | None:
    """``c``'s cap in millicores, ``None`` when it has none or it is at least every core of the engine."""
    cap = c.cpu_cap_millis()
    if cap is None or (engine_cpu_millis is not None and cap >= engine_cpu_millis):
        return None
    return cap


def recreate_spec(
    c: ContainerView,
    cpu_millis: int,
    cap_millis: int | None,
    gpu_request: dict[str, Any] | None,
    *,
    mechanism: CpuMechanism = "nano",
) -> dict[str, Any]:
    """Everything needed to create ``c`` again elsewhere: image, command, environment, mounts, labels.

    The guaranteed share becomes ``CpuShares``; a cap (``cap_millis``, already checked against the
    target's cores) keeps the container's mechanism (``--cpus`` stays ``--cpus``), else the target's
    ``mechanism``; ``gpu_request`` replaces its device requests (``None``: keep none).
    """
    cfg = c.raw.get("Config") or {}
    hc = c.raw.get("HostConfig") or {}
    host_config: dict[str, Any] = {
        "binds": list(hc.get("Binds") or []),
        "network_mode": hc.get("NetworkMode") or "none",
        "init": hc.get("Init"),
        "cpu_shares": shares_for(cpu_millis),
    }
    if hc.get("Memory"):
        host_config["mem_limit"] = int(hc["Memory"])
    mech = c.mechanism() or mechanism
    if cap_millis is not None and mech == "quota":
        period = c.cpu_period or DEFAULT_PERIOD
        host_config.update(cpu_quota=int(cap_millis * period / 1000), cpu_period=period)
    elif cap_millis is not None and mech == "nano":
        host_config["nano_cpus"] = int(cap_millis) * 1_000_000
    if gpu_request is not None:
        import docker.types

        host_config["device_requests"] = [docker.types.DeviceRequest(**gpu_request)]
    mounts = []
    for m in hc.get("Mounts") or []:
        import docker.types

        mounts.append(
            docker.types.Mount(
                target=m["Target"], source=m.get("Source", ""), type=m.get("Type", "volume"), read_only=bool(m.get("ReadOnly"))
            )
        )
    if mounts:
        host_config["mounts"] = mounts
    config: dict[str, Any] = {
        "image": cfg.get("Image"),
        "command": cfg.get("Cmd"),
        "entrypoint": cfg.get("Entrypoint"),
        "environment": list(cfg.get("Env") or []),
        "labels": dict(cfg.get("Labels") or {}),
        "working_dir": cfg.get("WorkingDir") or None,
        "user": cfg.get("User") or None,
    }
    return {"config": config, "host_config": {k: v for k, v in host_config.items() if v is not None}}


def ended_ok(c: ContainerView) -> bool:
    """The container exited 0 (the job finished) since the observe the change was planned from: a
    resize or a move of it (of a gang: of its rank 0) is moot, not a conflict (the plan was made
    while it printed its last epoch; the next observe sees it finished). A deliver is handled alike
    (``DockerAdapter._deliver``)."""
    return c.state == "exited" and c.exit_code == 0
