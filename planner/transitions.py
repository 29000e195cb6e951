"""The one table of what each plan action is: which transition it names, what it costs the job, how
an adapter carries it out, and in which order.

A job's *transition* is fixed by where it is and where the plan puts it:

==========================================  =========================================
the job now, and the plan for it            action
==========================================  =========================================
pending, no node                            ``wait``
running, no node                            ``pause`` (checkpoint, stop; restart later)
pending, a node                             ``start``
running, another node                       ``migrate`` (checkpoint, restart there)
running, its node, the same allocation      ``keep`` (or ``deliver``: keep, and hand over
                                            the tier-1 model)
running, its node, another allocation       ``resize`` when it can change live, else
                                            ``migrate`` (a restart in place); a live-
                                            resizable job may still be restarted
running, its node, another replica count    ``resize`` when the job is ``elastic`` (and
or placement (a gang's rank 0 stays)        its per-replica share can change live or
                                            stays), else ``migrate``
==========================================  =========================================

For a gang, ``node`` is rank 0's node; "the same allocation" means the same per-replica share, and
"the same shares" the same replicas on the same nodes (:meth:`Job.shares`).

:data:`TABLE` says, per action, whether the job is placed afterwards, whether it is a checkpoint-
restart (it spends the migration budget), which seconds it loses, the adapter change it becomes
(``None``: nothing to do), and its apply order (resources are freed before they are used).

The planner's decoder, the baseline policies, the plan checker, the control loop's diff and the
daemon's crash recovery all read this module, so they cannot disagree on a transition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.plan import Action, Placement
from planner.snapshot import Job

ChangeKind = Literal["start", "resize", "migrate", "pause", "deliver"]


@dataclass(frozen=True)
class Transition:
    placed: bool  # on a node afterwards
    restart: bool  # a checkpoint-restart: counts against the migration budget
    lost: Literal["", "restart", "checkpoint", "checkpoint+restart"]  # seconds of work it costs
    change: ChangeKind | None  # what an adapter does (None: nothing)
    order: int  # apply order within an interval (a shrinking resize goes earlier: see diff_order)


TABLE: dict[Action, Transition] = {
    "pause": Transition(placed=False, restart=True, lost="checkpoint", change="pause", order=0),
    "resize": Transition(placed=True, restart=False, lost="", change="resize", order=3),
    "migrate": Transition(placed=True, restart=True, lost="checkpoint+restart", change="migrate", order=2),
    "start": Transition(placed=True, restart=False, lost="restart", change="start", order=4),
    "deliver": Transition(placed=True, restart=False, lost="", change="deliver", order=5),
    "keep": Transition(placed=True, restart=False, lost="", change=None, order=5),
    "wait": Transition(placed=False, restart=False, lost="", change=None, order=5),
}

#: Actions that leave the job on a node.
PLACED: frozenset[Action] = frozenset(a for a, t in TABLE.items() if t.placed)


def action_for(job: Job, node: str | None, same_allocation: bool, same_shares: bool = True) -> Action:
    """The action that takes ``job`` to ``node`` (``None``: no node), given whether its allocation
    there equals the one it holds and whether its replicas stay where they are (both only
    meaningful on its own node)."""
    if node is None:
        return "pause" if job.status == "running" else "wait"
    if job.status != "running":
        return "start"
    if node != job.node:
        return "migrate"
    if not same_shares:
        return "resize" if job.elastic and (same_allocation or job.resizable) else "migrate"
    if same_allocation:
        return "keep"
    return "resize" if job.resizable else "migrate"


def allowed_actions(job: Job, node: str | None, same_allocation: bool, same_shares: bool = True) -> tuple[Action, ...]:
    """Every action a plan may name for this transition (:func:`action_for`'s first)."""
    first = action_for(job, node, same_allocation, same_shares)
    if first == "keep":
        return ("keep", "deliver")
    if first == "resize":
        return ("resize", "migrate")
    return (first,)


def previous_placement(job: Job) -> Placement | None:
    """Where a running job is and what it holds (an assignment's ``previous``); ``None`` for any other job."""
    if job.status == "running" and job.allocation is not None:
        return Placement(
            node=job.node,
            cpu_millis=job.allocation.cpu_millis,
            gpus=job.allocation.gpus,
            gpu_device=job.allocation.gpu_device,
            replicas=sum(k for _, k in job.shares()),
            placement=job.placement,
            servers=job.running_servers or None,
        )
    return None


def lost_seconds(job: Job, action: Action) -> float:
    """Seconds of training the action costs the job (checkpoint and/or restart)."""
    kind = TABLE[action].lost
    return (job.checkpoint_seconds if "checkpoint" in kind else 0.0) + (job.restart_seconds if "restart" in kind else 0.0)


def diff_order(kind: str, shrinks: bool) -> int:
    """Apply order of an adapter change: pauses, shrinking resizes, migrations, growing resizes, starts."""
    if kind == "resize":
        return 1 if shrinks else TABLE["resize"].order
    action: Action = kind  # type: ignore[assignment]
    return TABLE[action].order if action in TABLE else 5
