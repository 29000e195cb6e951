"""The adapter protocol: what the control loop needs from a cluster, whatever runs it.

An adapter turns a cluster (Docker hosts, a Kubernetes cluster, the simulator) into two calls:

- ``observe()`` returns the cluster as a :class:`~planner.snapshot.Snapshot`: nodes, jobs, their
  allocations and metric histories: only what the adapter can see, never a ground truth;
- ``apply(changes)`` carries out a list of :class:`Change` (start, resize, migrate, pause, deliver)
  and returns one :class:`Outcome` per change. Errors are data, mapped to a few kinds, never
  exceptions: the loop records them and plans again next interval.

A :class:`Clock` gives the loop its time: the wall clock for real clusters, a virtual one for the
simulator (where ``sleep`` advances the simulation).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from planner.snapshot import Snapshot

ChangeKind = Literal["start", "resize", "migrate", "pause", "deliver"]
#: ``forbidden``: the credentials may not do this (Kubernetes RBAC); the others as their names say.
ErrorKind = Literal["not_found", "conflict", "transient", "engine_down", "invalid", "forbidden"]


@dataclass(frozen=True)
class Change:
    """One thing to do to the cluster, per job (figures per replica).

    ``node`` is where the job should run (``None`` for pause); ``from_node`` where it runs now
    (``None`` for a start). ``deliver`` asks the job to hand its tier-1 model over (TRADL).
    """

    job: str
    kind: ChangeKind
    node: str | None
    cpu_millis: int
    gpus: int
    replicas: int = 1
    from_node: str | None = None
    deliver: bool = False
    #: Hard CPU cap per replica (a quota); ``None``: none beyond the job's max. ``cpu_millis`` is a
    #: guaranteed share (a weight), not a cap.
    cpu_limit_millis: int | None = None

    def key(self) -> str:
        """Identifies the change, so that applying it twice can be recognised (idempotency)."""
        cap = f":cap{self.cpu_limit_millis}m" if self.cpu_limit_millis is not None else ""
        return f"{self.job}:{self.kind}:{self.from_node}->{self.node}:{self.cpu_millis}m{cap}:{self.gpus}g:{self.replicas}r"

    def as_dict(self) -> dict[str, object]:
        return {
            "job": self.job,
            "kind": self.kind,
            "node": self.node,
            "cpu_millis": self.cpu_millis,
            "gpus": self.gpus,
            "replicas": self.replicas,
            "from_node": self.from_node,
            "deliver": self.deliver,
            "cpu_limit_millis": self.cpu_limit_millis,
        }


@dataclass(frozen=True)
class Outcome:
    """What happened to one change: ``ok``, or an error of one of a few kinds with a message."""

    change: Change
    ok: bool
    error: ErrorKind | None = None
    message: str = ""


def apply_each(
    changes: Sequence[Change],
    apply_one: Callable[[Change], str],
    errors: type[Exception],
    log: logging.Logger,
    *,
    catch_bugs: bool = False,
) -> list[Outcome]:
    """Carry out ``changes`` in order, each on its own, with ``apply_one`` (its message on success);
    an ``errors`` exception (with ``kind`` and ``message``) becomes a failed outcome, and with
    ``catch_bugs`` so does any other exception (an ``invalid`` outcome, logged with its traceback)."""
    outcomes = []
    for change in changes:
        try:
            message = apply_one(change)
            outcomes.append(Outcome(change, True, None, message))
            log.info("%s: %s", change.key(), message)
        except errors as exc:
            kind, text = exc.kind, exc.message  # type: ignore[attr-defined]
            outcomes.append(Outcome(change, False, kind, text))
            log.warning("%s failed (%s): %s", change.key(), kind, text)
        except Exception as exc:
            if not catch_bugs:
                raise
            outcomes.append(Outcome(change, False, "invalid", f"{type(exc).__name__}: {exc}"))
            log.exception("%s failed", change.key())
    return outcomes


class Adapter(Protocol):
    """A cluster as the control loop sees it."""

    def observe(self) -> Snapshot:
        """The cluster now (jobs, allocations, histories, settings)."""
        ...

    def apply(self, changes: Sequence[Change]) -> list[Outcome]:
        """Carry out ``changes`` in order; one outcome per change, errors as data."""
        ...


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class WallClock:
    """Unix time and real sleeping: the clock of real clusters."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)
