"""Scheduling policies: FlowPlan's integer program, the baselines it is compared with, and the oracle.

Every policy is an object with a ``name`` and ``__call__(snapshot) -> Plan`` (:class:`Policy`); it sees
only the snapshot, may keep state between the calls of one run, and every plan it returns passes
:func:`planner.check_plan`. :data:`POLICIES` maps each name to a factory (fresh state per run);
:func:`make_policy` builds one with options::

    from planner.policies import make_policy
    policy = make_policy("flowcon", alpha=0.03)
    plan = policy(snapshot)

The *oracle* (:class:`OraclePolicy`) is FlowPlan fed the simulator's ground truth: it alone has
``reads_ground_truth = True``, and it plans only after ``observe_truth(truth)`` (the simulator's
job). It measures how much of FlowPlan's gap to the best policy comes from prediction errors;
``oracle-speed`` and ``oracle-epochs``, given only the true speeds or only the true epochs left,
split that into the two predictions' parts.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from planner.policies.common import Decision, Policy
from planner.policies.docker import DockerPolicy
from planner.policies.fifo import FifoPolicy
from planner.policies.flowcon import FlowConPolicy
from planner.policies.flowplan import FlowPlanPolicy
from planner.policies.kubernetes import KubernetesPolicy
from planner.policies.optimus import OptimusPolicy
from planner.policies.oracle import OracleError, OraclePolicy
from planner.policies.specon import SpeConPolicy
from planner.policies.tiresias import TiresiasPolicy

_FACTORIES: dict[str, Callable[..., Policy]] = {
    "flowplan": FlowPlanPolicy,
    "docker": DockerPolicy,
    "kubernetes": KubernetesPolicy,
    "fifo": FifoPolicy,
    "flowcon": FlowConPolicy,
    "specon": SpeConPolicy,
    "optimus": OptimusPolicy,
    "tiresias": TiresiasPolicy,
    "oracle": OraclePolicy,
    "oracle-speed": partial(OraclePolicy, knows="speed"),
    "oracle-epochs": partial(OraclePolicy, knows="epochs"),
}

#: Policy name -> factory of a fresh policy (default options).
POLICIES: dict[str, Callable[[], Policy]] = dict(_FACTORIES)


def make_policy(name: str, **options: Any) -> Policy:
    """A fresh policy ``name`` with ``options`` (e.g. ``solver``/``time_limit``/``objective`` for flowplan
    and oracle, ``alpha`` for flowcon); a ``ValueError`` names an unknown policy, option or value."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"policy: unknown policy {name!r} (known: {', '.join(sorted(_FACTORIES))})")
    try:
        return factory(**options)
    except TypeError as exc:
        raise ValueError(f"policy {name}: unknown option(s) {', '.join(sorted(options))} ({exc})") from exc


def reads_ground_truth(policy: object) -> bool:
    """Does ``policy`` read the simulator's ground truth? Only the oracle (and its two variants) does."""
    return getattr(policy, "reads_ground_truth", False) is True


__all__ = [
    "POLICIES",
    "Decision",
    "DockerPolicy",
    "FifoPolicy",
    "FlowConPolicy",
    "FlowPlanPolicy",
    "KubernetesPolicy",
    "OptimusPolicy",
    "OracleError",
    "OraclePolicy",
    "Policy",
    "SpeConPolicy",
    "TiresiasPolicy",
    "make_policy",
    "reads_ground_truth",
]
