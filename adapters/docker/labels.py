"""The ``flowplan.*`` container labels: which containers are jobs, and their bounds and targets.

A container is a FlowPlan job when it carries ``flowplan.job=<job id>``. Every other key is optional:

========================================  =========================================================
label                                     meaning (the Snapshot field it fills)
========================================  =========================================================
``flowplan.job``                          job id (``Job.id``)
``flowplan.min_cpu_millis``               ``Job.min_cpu_millis`` (default 250)
``flowplan.max_cpu_millis``               ``Job.max_cpu_millis`` (default 1000); when given, a hard cap
``flowplan.min_gpus`` / ``max_gpus``      GPU bounds (default 0)
``flowplan.memory_mib``                   ``Job.memory_mib``
``flowplan.priority``                     ``Job.priority`` (default 1)
``flowplan.resizable``                    ``true``/``false``: CPU can change live (default true)
``flowplan.migratable``                   ``true``/``false``: can checkpoint and move (default true)
``flowplan.checkpoint_seconds``           ``Job.checkpoint_seconds`` (default 10)
``flowplan.restart_seconds``              ``Job.restart_seconds`` (default 10)
``flowplan.checkpoint_every_seconds``     ``Job.checkpoint_every_seconds`` (default: at epoch ends only)
``flowplan.gpu_type``                     ``Job.gpu_type``: one GPU model, or a choice ``V100M16|V100M32``
``flowplan.task``                         ``Job.task``: what is trained; new jobs of the same task
                                          borrow its speed until their own is observed
``flowplan.target.metric``                ``QoETarget.metric`` (``loss`` or the JSON lines' ``metric``)
``flowplan.target.direction``             ``higher`` / ``lower``
``flowplan.target.tier1``                 tier-1 value (a target needs at least this)
``flowplan.target.tier1.deadline``        tier-1 deadline, Unix seconds
``flowplan.target.tier1.within``          tier-1 deadline, seconds after the container was created
``flowplan.target.tier2``                 tier-2 value; ``.deadline`` / ``.within`` as for tier 1
``flowplan.target.max_epochs``            ``QoETarget.max_epochs``
``flowplan.steps_per_epoch``              steps in one epoch, for logs that count steps, not epochs
                                          (not a Snapshot field: it tells the log reader)
``flowplan.tensorboard``                  an absolute path in the container where it writes TensorBoard
                                          event files (a directory, searched recursively): read every
                                          interval besides its log (not a Snapshot field)
``flowplan.replicas``                     ``Job.replicas``: a gang of this many identical containers
                                          (its most when ``min_replicas`` is set; default 1)
``flowplan.min_replicas``                 ``Job.min_replicas``: the fewest it can train with
``flowplan.max_nodes``                    ``Job.max_nodes``: the most hosts it may spread over (default 1)
``flowplan.elastic``                      ``false`` only: on Docker a new count is a checkpoint-restart
``flowplan.rendezvous``                   how a gang's replicas find each other: ``torch`` (default:
                                          torchrun's ``MASTER_ADDR``, ``RANK`` ...) or ``tensorflow``
                                          (``TF_CONFIG``); not a Snapshot field
``flowplan.servers.max``                  ``Job.servers``: parameter servers beside the workers, at most
                                          this many in all (``.min``, default 1; ``.cpu_millis``, each
                                          server's CPU, default 1000; ``.memory_mib``; ``.form``,
                                          ``optimus`` or ``coach``); needs ``flowplan.rendezvous=tensorflow``
========================================  =========================================================

The adapter writes six more on the containers of a gang it starts (:mod:`adapters.docker.ranks`):
``flowplan.rank``, ``flowplan.generation``, ``flowplan.world_size``, ``flowplan.master_port``,
``flowplan.role`` (``ps`` on a parameter server) and ``flowplan.ps`` (the servers in all). They
are accepted here and checked there; they are not Snapshot fields.

Parsing is all or nothing: one bad value (a number that is not one, NaN, min above max, an unknown
``flowplan.*`` key) makes the container *unmanaged*, with a :class:`LabelError` naming the label and
its value. FlowPlan then leaves it alone rather than guessing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from adapters.docker.errors import LabelError
from planner.snapshot import QoETarget

PREFIX = "flowplan."
JOB = "flowplan.job"
RENDEZVOUS = "flowplan.rendezvous"
#: The values of ``flowplan.rendezvous``: the variables a gang's replicas get (:mod:`adapters.docker.ranks`).
RENDEZVOUS_KINDS = ("torch", "tensorflow")

_INTS = {
    "min_cpu_millis": (1, 10**9),
    "max_cpu_millis": (1, 10**9),
    "min_gpus": (0, 10**6),
    "max_gpus": (0, 10**6),
    "memory_mib": (0, 10**9),
    "replicas": (1, 1024),
    "min_replicas": (1, 1024),
    "max_nodes": (1, 1024),
}
_FLOATS = {
    "priority": (0.01, 100.0),
    "checkpoint_seconds": (0.0, 86400.0),
    "restart_seconds": (0.0, 86400.0),
    "checkpoint_every_seconds": (0.001, 86400.0),
}
_BOOLS = ("resizable", "migratable")
_TARGET = {
    "target.metric",
    "target.direction",
    "target.tier1",
    "target.tier1.deadline",
    "target.tier1.within",
    "target.tier2",
    "target.tier2.deadline",
    "target.tier2.within",
    "target.max_epochs",
}
#: Written by the adapter on the containers of a gang (:mod:`adapters.docker.ranks` parses them).
WRITTEN = ("rank", "generation", "world_size", "master_port", "role", "ps")
#: ``flowplan.servers.*``: a parameter-server job's ``Job.servers`` (whole numbers but the form).
_SERVERS = {
    "servers.min": (1, 1024),
    "servers.max": (1, 1024),
    "servers.cpu_millis": (1, 10**9),
    "servers.memory_mib": (0, 10**9),
}
KNOWN = {
    "job",
    "gpu_type",
    "task",
    "steps_per_epoch",
    "elastic",
    "rendezvous",
    "tensorboard",
    *_INTS,
    *_FLOATS,
    *_BOOLS,
    *_TARGET,
    *WRITTEN,
    *_SERVERS,
    "servers.form",
}

DEFAULTS: dict[str, Any] = {
    "min_cpu_millis": 250,
    "max_cpu_millis": 1000,
    "checkpoint_seconds": 10.0,
    "restart_seconds": 10.0,
}


@dataclass(frozen=True)
class JobLabels:
    """What a container's labels say about its job: ``fields`` go straight into ``planner.snapshot.Job``;
    ``steps_per_epoch`` is for the log reader."""

    job_id: str
    fields: dict[str, Any]
    steps_per_epoch: float | None = None
    #: How a gang's replicas find each other (``flowplan.rendezvous``): one of :data:`RENDEZVOUS_KINDS`.
    rendezvous: str = "torch"
    #: Where in the container it writes TensorBoard event files (``flowplan.tensorboard``); None: nowhere.
    tensorboard: str | None = None


def _number(key: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise LabelError(f"label {PREFIX}{key}: not a number ({text!r})") from None
    if not math.isfinite(v):
        raise LabelError(f"label {PREFIX}{key}: must be finite ({text!r})")
    return v


def _ranged(key: str, text: str, lo: float, hi: float) -> float:
    v = _number(key, text)
    if not lo <= v <= hi:
        raise LabelError(f"label {PREFIX}{key}: must be between {lo:g} and {hi:g} ({text!r})")
    return v


def parse_labels(labels: Mapping[str, str], created: float | None = None) -> JobLabels | None:
    """The job a container's labels describe; ``None`` when it has no ``flowplan.job`` (not a job).

    ``created`` (Unix seconds) anchors ``*.within`` deadlines and becomes ``Job.submitted``.
    Raises :class:`LabelError` naming the first bad label.
    """
    if JOB not in labels:
        return None
    own = {k[len(PREFIX) :]: v for k, v in labels.items() if k.startswith(PREFIX)}
    unknown = sorted(k for k in own if k not in KNOWN)
    if unknown:
        raise LabelError(f"label {PREFIX}{unknown[0]}: unknown FlowPlan label ({own[unknown[0]]!r})")
    job_id = own["job"].strip()
    from planner.snapshot import Job

    fields: dict[str, Any] = dict(DEFAULTS)
    for key, (lo, hi) in _INTS.items():
        if key in own:
            v = _ranged(key, own[key], lo, hi)
            if v != int(v):
                raise LabelError(f"label {PREFIX}{key}: must be a whole number ({own[key]!r})")
            fields[key] = int(v)
    for key, (flo, fhi) in _FLOATS.items():
        if key in own:
            fields[key] = _ranged(key, own[key], flo, fhi)
    for key in _BOOLS:
        if key in own:
            text = own[key].strip().lower()
            if text not in ("true", "false", "1", "0", "yes", "no"):
                raise LabelError(f"label {PREFIX}{key}: expected true or false ({own[key]!r})")
            fields[key] = text in ("true", "1", "yes")
    _check_gang(own, fields)
    _servers(own, fields)
    if "gpu_type" in own:
        models = [m.strip() for m in own["gpu_type"].split("|")]
        if not all(models):
            raise LabelError(f"label {PREFIX}gpu_type: expected a GPU model or models joined by '|' ({own['gpu_type']!r})")
        fields["gpu_type"] = models[0] if len(models) == 1 else models
    if "task" in own:
        fields["task"] = own["task"].strip()
    if created is not None and math.isfinite(created):
        fields["submitted"] = created
    target = _target(own, created)
    if target is not None:
        fields["target"] = target
    try:
        # Validate the id and every bound against the Snapshot contract now, so that a bad label
        # is reported against this container instead of failing the whole snapshot later.
        Job(id=job_id, status="pending", **fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "labels"
        msg = str(err["msg"]).removeprefix("Value error, ")
        field, _, rest = msg.partition(": ")
        if where == "labels" and field in own:  # a rule across fields names the one it is about
            raise LabelError(f"label {PREFIX}{field}: {rest} ({own[field]!r})") from None
        if where == "labels":  # a rule across fields that names them in its message: those labels
            named = [k for k in own if re.search(rf"\b{re.escape(k)}\b", msg)]
            if named:
                said = " and ".join(f"{PREFIX}{k}" for k in named)
                raise LabelError(f"label{'s' if len(named) > 1 else ''} {said}: {msg}") from None
        raise LabelError(f"label {PREFIX}{'job' if where == 'id' else where}: {msg} ({own.get(where, job_id)!r})") from None
    steps = _ranged("steps_per_epoch", own["steps_per_epoch"], 1.0, 1e9) if "steps_per_epoch" in own else None
    rendezvous = own.get("rendezvous", "torch").strip().lower()
    if rendezvous not in RENDEZVOUS_KINDS:
        raise LabelError(f"label {RENDEZVOUS}: expected {' or '.join(RENDEZVOUS_KINDS)} ({own['rendezvous']!r})")
    if "servers" in fields and rendezvous != "tensorflow":
        raise LabelError(
            f"label {PREFIX}servers.max: parameter servers find the workers through TF_CONFIG; set {RENDEZVOUS}=tensorflow "
            f"({own.get('servers.max', '')!r})"
        )
    tensorboard = own.get("tensorboard", "").strip() or None
    if tensorboard is not None and (not tensorboard.startswith("/") or len(tensorboard) > 4096 or "\x00" in tensorboard):
        raise LabelError(f"label {PREFIX}tensorboard: expected an absolute path in the container ({own['tensorboard']!r})")
    return JobLabels(job_id, fields, steps, rendezvous, tensorboard)


def _servers(own: Mapping[str, str], fields: dict[str, Any]) -> None:
    """``flowplan.servers.*`` into ``fields["servers"]`` (a ``Job.servers``), when any is set."""
    keys = [k for k in own if k.startswith("servers.")]
    if not keys:
        return
    if "servers.max" not in own:
        raise LabelError(f"label {PREFIX}servers.max: missing (other {PREFIX}servers.* labels are set)")
    role: dict[str, Any] = {}
    for key, (lo, hi) in _SERVERS.items():
        if key in own:
            v = _ranged(key, own[key], lo, hi)
            if v != int(v):
                raise LabelError(f"label {PREFIX}{key}: must be a whole number ({own[key]!r})")
            role[key.split(".", 1)[1]] = int(v)
    if "servers.form" in own:
        form = own["servers.form"].strip().lower()
        if form not in ("optimus", "coach"):
            raise LabelError(f"label {PREFIX}servers.form: expected optimus or coach ({own['servers.form']!r})")
        role["form"] = form
    if role.get("min", 1) > role["max"]:
        raise LabelError(
            f"label {PREFIX}servers.min: {role['min']} exceeds {PREFIX}servers.max {role['max']} ({own['servers.min']!r})"
        )
    fields["servers"] = role


def _check_gang(own: Mapping[str, str], fields: dict[str, Any]) -> None:
    """The gang bounds together: ``min_replicas`` within ``replicas``; ``elastic`` only false (Docker
    restarts a gang to change its count: a live rescale is not something it can do)."""
    replicas = fields.get("replicas", 1)
    if "min_replicas" in own and fields["min_replicas"] > replicas:
        raise LabelError(
            f"label {PREFIX}min_replicas: {fields['min_replicas']} exceeds {PREFIX}replicas {replicas} ({own['min_replicas']!r})"
        )
    if "elastic" in own:
        text = own["elastic"].strip().lower()
        if text in ("true", "1", "yes"):
            raise LabelError(
                f"label {PREFIX}elastic: a live rescale is not supported on Docker (a new count is a checkpoint-restart) "
                f"({own['elastic']!r})"
            )
        if text not in ("false", "0", "no"):
            raise LabelError(f"label {PREFIX}elastic: expected true or false ({own['elastic']!r})")


def _target(own: Mapping[str, str], created: float | None) -> QoETarget | None:
    if not any(k.startswith("target.") for k in own):
        return None
    if "target.tier1" not in own:
        raise LabelError(f"label {PREFIX}target.tier1: missing (other {PREFIX}target.* labels are set)")
    direction = own.get("target.direction", "lower").strip()
    if direction not in ("higher", "lower"):
        raise LabelError(f"label {PREFIX}target.direction: expected higher or lower ({direction!r})")
    tiers: dict[str, dict[str, float]] = {}
    for tier in ("tier1", "tier2"):
        key = f"target.{tier}"
        if key not in own:
            continue
        t: dict[str, float] = {"value": _number(key, own[key])}
        if f"{key}.deadline" in own and f"{key}.within" in own:
            raise LabelError(f"label {PREFIX}{key}.within: give a deadline or a 'within', not both ({own[key + '.within']!r})")
        if f"{key}.deadline" in own:
            t["deadline"] = _number(f"{key}.deadline", own[f"{key}.deadline"])
        elif f"{key}.within" in own:
            within = _ranged(f"{key}.within", own[f"{key}.within"], 0.0, 10**9)
            if created is None:
                raise LabelError(
                    f"label {PREFIX}{key}.within: the container's creation time is unknown ({own[key + '.within']!r})"
                )
            t["deadline"] = created + within
        tiers[tier] = t
    max_epochs = _ranged("target.max_epochs", own["target.max_epochs"], 1e-9, 1e6) if "target.max_epochs" in own else None
    try:
        return QoETarget.model_validate(
            {
                "metric": own.get("target.metric", "loss").strip() or "loss",
                "direction": direction,
                "tier1": tiers["tier1"],
                "tier2": tiers.get("tier2"),
                "max_epochs": max_epochs,
            }
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        raise LabelError(f"label {PREFIX}target: {err['msg']}") from None


def job_labels(job_id: str, **fields: Any) -> dict[str, str]:
    """The labels that describe a job (the inverse of :func:`parse_labels` for plain fields)."""
    out = {JOB: job_id}
    for key, value in fields.items():
        name = key.replace("__", ".")
        if name not in KNOWN:
            raise ValueError(f"{key}: not a FlowPlan label")
        if isinstance(value, list | tuple):  # a choice of GPU models
            out[PREFIX + name] = "|".join(str(v) for v in value)
        else:
            out[PREFIX + name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out
