"""The adapter protocol: what the control loop and the daemon need from a cluster, whatever runs it.

An adapter turns a cluster (Docker hosts, a Kubernetes cluster, the simulator) into four calls, and
:class:`Adapter` is their contract. Every adapter subclasses it explicitly, so mypy checks each one
against it and the calls an adapter has nothing to do for inherit a default.

``observe() -> Snapshot``
    The cluster now, as a :class:`~planner.snapshot.Snapshot`: nodes, FlowPlan's jobs, their
    allocations and metric histories. Only what the adapter can see, never a ground truth. A
    workload that is not FlowPlan's (another user's container or pod, another daemon's scope) is
    not a job; it is never changed, at most named in its node's labels. ``observe`` may raise when
    the cluster cannot be read at all (an API server down); the loop then records a failed interval.
``apply(changes) -> list[Outcome]``
    Carries out the :class:`Change` list in order, each on its own, and returns one
    :class:`Outcome` per change, in the same order. It acts on what the last ``observe`` saw (the
    jobs it names must have been observed), re-reading each workload it touches.
``reconcile() -> list[str]``
    Settles what the last ``observe`` found inconsistent and no plan can express: today, a job with
    two workloads after an interrupted migration. Returns a line per thing it did. The daemon calls
    it on start (after an ``observe``) and after every applied interval, so it must call nothing
    when there is nothing to settle. Default: nothing to settle.
``close()``
    Releases connections and threads. Default: nothing to release.

What every adapter guarantees (``tests/test_adapter_contract.py`` checks each one against the
simulator, real Docker engines and a real kube-apiserver):

- **Errors are data.** A change that cannot be carried out becomes a failed :class:`Outcome` with an
  :data:`ErrorKind`, never an exception out of ``apply``; the other changes of the list still run
  (partial failure). The loop records the outcome; the next interval observes and plans again.
- **Idempotent.** A change whose effect is already observed (the job runs on that node with that
  allocation; a paused job is pending; a delivery was asked) is a no-op reported ``ok``, however
  often it is repeated, by this adapter or a fresh one (a restarted daemon). Nothing is restarted,
  re-created or counted twice. :meth:`Change.key` identifies a change for that purpose.
- **One meaning per action** (:mod:`planner.transitions`): a change applies to the job state its
  transition starts from. ``start`` is for a pending job (a job already running there with that
  allocation is the no-op above); ``migrate`` and ``resize`` are for a running job; ``pause`` stops a
  running one. A change for a job in another state (a plan made from a stale snapshot: a start for
  a job running elsewhere, a migration of a pending job) is refused as ``conflict`` and changes
  nothing: an adapter never turns one action into another that costs the job more (a start into a
  migration spends a checkpoint-restart the plan did not price).
- **Observe after apply.** After an ``ok`` outcome the next ``observe`` shows what was asked
  (:func:`adapters.daemon.in_effect`), or the job has moved on by itself (finished); a delivery
  shows once the job reports it (Docker) or once it was asked (Kubernetes, the simulator).
- **Restart safe.** All the state that matters lives in the cluster (and the state store): a fresh
  adapter on the same cluster observes the same nodes, jobs and allocations.
- **Eventual consistency.** An outcome says what the adapter did and saw; a real cluster may still
  be carrying it out (a kubelet resizing), and the next ``observe`` is the truth.

``docs/adapters.md`` has the same with a table of each change by its job's state. Failure kinds
(:data:`ErrorKind`), each mapped from the backend's own errors at the boundary
(``adapters/docker/errors.py``, ``adapters/kubernetes/errors.py``):

============  ==============================================================================
kind          meaning
============  ==============================================================================
not_found     the job (or its workload) is not there: never observed, gone since, not active
conflict      the job is not in the state the change starts from, another writer got there
              first (a stale version, a name taken, a lost lease), or the node lacks room
transient     a timeout or a busy server; the same change may work next interval
engine_down   the cluster (a Docker engine, the API server) cannot be reached
invalid       a change that can never work as asked: an unknown node, a gang where there are
              none, a resize that cannot be done live, a request the server refuses
forbidden     the credentials may not do this (Kubernetes RBAC)
============  ==============================================================================

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
#: What went wrong with a change, in a few kinds (the module docstring's table says what each means).
ErrorKind = Literal["not_found", "conflict", "transient", "engine_down", "invalid", "forbidden"]


#: Replicas per node, ``(node, replicas)``, rank 0's node first.
Shares = tuple[tuple[str, int], ...]


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
    #: A fractional job's share of one GPU (the snapshot's ``gpu_milli``) and the device it shares
    #: (the plan's ``gpu_device``); ``None`` for whole-GPU jobs. See :func:`refuse_fractions`.
    gpu_milli: int | None = None
    gpu_device: int | None = None
    #: A gang spread over nodes (the plan's ``placement``): ``(node, replicas)`` per node, rank 0's
    #: first; ``None``: all ``replicas`` on ``node``. See :func:`refuse_spanning`.
    placement: Shares | None = None
    #: Parameter servers on each node of the placement (the plan's ``servers``); ``None``: none.
    servers: int | None = None

    def key(self) -> str:
        """Identifies the change, so that applying it twice can be recognised (idempotency)."""
        cap = f":cap{self.cpu_limit_millis}m" if self.cpu_limit_millis is not None else ""
        dev = f":{self.gpu_milli}mg@dev{self.gpu_device}" if self.gpu_milli is not None else ""
        spread = "@" + ",".join(f"{n}x{k}" for n, k in self.placement) if self.placement is not None else ""
        ps = f"+{self.servers}ps" if self.servers is not None else ""
        what = f"{self.cpu_millis}m{cap}:{self.gpus}g{dev}:{self.replicas}r{ps}{spread}"
        return f"{self.job}:{self.kind}:{self.from_node}->{self.node}:{what}"

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
            **({"gpu_milli": self.gpu_milli, "gpu_device": self.gpu_device} if self.gpu_milli is not None else {}),
            **({"placement": [list(s) for s in self.placement]} if self.placement is not None else {}),
            **({"servers": self.servers} if self.servers is not None else {}),
        }


def change_shares(ch: Change) -> Shares:
    """Where ``ch`` puts the job's replicas, rank 0's node first (``()`` for a pause)."""
    if ch.node is None:
        return ()
    if ch.placement is None:
        return ((ch.node, ch.replicas),)
    return tuple(ch.placement)


@dataclass(frozen=True)
class Outcome:
    """What happened to one change: ``ok`` (done now, or already in effect: ``message`` says which), or
    failed with an ``error`` kind (:data:`ErrorKind`) and a ``message`` naming the job and the cause.

    A failed outcome means the adapter left the job as it found it, or, where it could not (a
    re-create that could not start the old workload again), the message says what is left.
    """

    change: Change
    ok: bool
    error: ErrorKind | None = None
    message: str = ""


#: The changes that are moot, not failures, for a job that finished since the observe they were planned
#: from (a plan made while it ran its last epoch): what each is called in the ok message.
MOOT_WHEN_ENDED = {"resize": ("resize", "change"), "migrate": ("move", "move"), "pause": ("pause", "pause")}


def finished_before(kind: str) -> str:
    """The ``ok`` message of a ``kind`` change (one of :data:`MOOT_WHEN_ENDED`) of a job that
    finished since the observe ("finished before the move: nothing to move"), every adapter's."""
    noun, verb = MOOT_WHEN_ENDED[kind]
    return f"finished before the {noun}: nothing to {verb}"


def refuse_fractions(changes: Sequence[Change], adapter: str, why: str, log: logging.Logger) -> list[Outcome] | None:
    """For an adapter that cannot enforce a GPU fraction: ``None`` when no change places one, else
    every change refused as ``invalid`` before anything is applied (the plan is refused whole), each
    message one line naming the fractional job and its ``gpu_milli`` (logged once)."""
    frac = next((c for c in changes if c.gpu_milli is not None and c.node is not None), None)
    if frac is None:
        return None
    what = f"job {frac.job}: gpu_milli {frac.gpu_milli} (a shared GPU) cannot be enforced on {adapter} ({why})"
    return refuse_whole(changes, frac, what, log)


def refuse_spanning(changes: Sequence[Change], adapter: str, log: logging.Logger) -> list[Outcome] | None:
    """For an adapter that runs a gang on one node only (none here now: Docker places a gang's
    replicas on several hosts, :mod:`adapters.docker.gangs`, and Kubernetes binds its pods to several
    nodes, :mod:`adapters.kubernetes.gangs`): ``None`` when no change spreads a job's
    replicas over several nodes, else every change refused as ``invalid`` before anything is applied,
    each message one line naming the job and its placement (logged once)."""
    spread = next((c for c in changes if c.placement is not None and len(c.placement) > 1 and c.node is not None), None)
    if spread is None:
        return None
    where = ", ".join(f"{k} on {n}" for n, k in spread.placement or ())
    count = len(spread.placement or ())
    what = f"job {spread.job}: replicas on {count} nodes ({where}) cannot be placed by {adapter} yet (one node per job)"
    return refuse_whole(changes, spread, what, log)


def refuse_whole(changes: Sequence[Change], culprit: Change, what: str, log: logging.Logger) -> list[Outcome]:
    """Every change refused as ``invalid`` (the plan refused whole, before anything is applied):
    ``culprit``'s outcome says ``what``, the others that the plan was refused (logged once)."""
    log.warning("plan refused: %s", what)
    return [
        Outcome(c, False, "invalid", what if c is culprit else f"job {c.job}: not applied, the plan was refused: {what}")
        for c in changes
    ]


def apply_each(
    changes: Sequence[Change],
    apply_one: Callable[[Change], str],
    errors: type[Exception],
    log: logging.Logger,
    *,
    catch_bugs: bool = False,
) -> list[Outcome]:
    """Carry out ``changes`` in order, each on its own, with ``apply_one`` (its message on success);
    each outcome as :func:`outcome_of` makes it."""
    return [outcome_of(change, apply_one, errors, log, catch_bugs=catch_bugs) for change in changes]


def outcome_of(
    change: Change,
    apply_one: Callable[[Change], str],
    errors: type[Exception],
    log: logging.Logger,
    *,
    catch_bugs: bool = False,
) -> Outcome:
    """Carry out one change with ``apply_one`` (its message on success) and log its outcome; an
    ``errors`` exception (with ``kind`` and ``message``) becomes a failed outcome, and with
    ``catch_bugs`` so does any other exception (an ``invalid`` outcome, logged with its traceback)."""
    try:
        message = apply_one(change)
    except errors as exc:
        kind, text = exc.kind, exc.message  # type: ignore[attr-defined]
        log.warning("%s failed (%s): %s", change.key(), kind, text)
        return Outcome(change, False, kind, text)
    except Exception as exc:
        if not catch_bugs:
            raise
        log.exception("%s failed", change.key())
        return Outcome(change, False, "invalid", f"{type(exc).__name__}: {exc}")
    log.info("%s: %s", change.key(), message)
    return Outcome(change, True, None, message)


class Adapter(Protocol):
    """A cluster as the control loop and the daemon see it: the contract of the module docstring.

    Adapters subclass it explicitly (``class DockerAdapter(Adapter)``): mypy then checks every member
    against it, and ``reconcile`` and ``close`` default to doing nothing.
    """

    def observe(self) -> Snapshot:
        """The cluster now (nodes, FlowPlan's jobs, allocations, histories, settings); may raise when
        the cluster cannot be read at all."""
        ...

    def apply(self, changes: Sequence[Change]) -> list[Outcome]:
        """Carry out ``changes`` in order, each on its own; one outcome per change, in order, errors as
        data; idempotent (a change already in effect is an ``ok`` no-op)."""
        ...

    def reconcile(self) -> list[str]:
        """Settle what the last ``observe`` found inconsistent (a job with two workloads); a line per
        thing done. Called after every applied interval: calls nothing when nothing is inconsistent."""
        return []

    def close(self) -> None:
        """Release connections and threads."""
        return None


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
