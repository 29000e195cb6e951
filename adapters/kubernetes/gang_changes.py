"""Changes to gangs on Kubernetes: start, resize, migrate, pause, deliver, and a new count.

What each does is in :mod:`adapters.kubernetes.gangs` (the module docstring, "How each change is
carried out"); where each pod goes is :mod:`adapters.kubernetes.spread`; an owner's count,
:mod:`adapters.kubernetes.owners`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from adapters.base import Shares
from adapters.kubernetes.annotations import CHECKPOINT_REQUESTED, DELIVER_REQUESTED, GANG_LABEL
from adapters.kubernetes.errors import KubernetesAdapterError
from adapters.kubernetes.gangs import Gang, gang_status, split_superseded
from adapters.kubernetes.owners import scale
from adapters.kubernetes.pods import PodView, is_flowplan_pod, job_id_of, pod_view
from adapters.kubernetes.spread import assign, placement_text, ranked, shares_of

if TYPE_CHECKING:
    from adapters.base import Change
    from adapters.kubernetes.adapter import Observation, Placed

log = logging.getLogger("flowplan.kubernetes")


class GangChanges:
    """The gang changes of :class:`~adapters.kubernetes.adapter.KubernetesAdapter` (a mixin). Uses
    the adapter's calls (``_json``, ``_wanted``, ``_bind``, ...)."""

    if TYPE_CHECKING:
        api: Any
        last: Observation

        def _json(self, call: Any, *args: Any, **kwargs: Any) -> Any: ...
        def _wanted(self, ch: Change, placed: Placed, pod: PodView) -> tuple[int, int | None]: ...
        def _in_effect(self, ch: Change, placed: Placed, pod: PodView) -> bool: ...
        def _set_cpu(self, ch: Change, placed: Placed, pod: PodView, *, pending: bool = False) -> str: ...
        def _annotate(self, pod: PodView, annotations: dict[str, str | None]) -> None: ...
        def _bind(self, pod: PodView, node: str) -> PodView | None: ...
        def _wait_gone(self, pod: PodView, timeout: float | None = None) -> float | None: ...

        fence: Callable[[], None] | None
        checkpoint_timeout: float
        owner_apis: dict[str, Any]

    # -- apply -----------------------------------------------------------------------------------

    def _gang_now(self, ch: Change, gang: Gang, count: int | None = None) -> list[PodView]:
        """The gang's pods now (one list call), in rank order, less those being deleted or
        superseded; ``conflict`` when their number is not ``count`` (default: as observed)."""
        if gang.by_owner:  # no selector for an owner: the labels its pods share, then the owner's job id
            shared = set.intersection(*(set(p.labels.items()) for p in gang.members)) if gang.members else set()
            selector = ",".join(f"{k}={v}" for k, v in sorted(shared))
            data = self._json(self.api.list_namespaced_pod, gang.namespace, label_selector=selector)
            raws = [r for r in data["items"] if is_flowplan_pod(r) and job_id_of(r) == gang.job]
        else:
            data = self._json(self.api.list_namespaced_pod, gang.namespace, label_selector=f"{GANG_LABEL}={gang.job}")
            raws = data["items"]
        pods = [v for v in (pod_view(raw) for raw in raws) if not v.deleting]
        members, _ = split_superseded(pods)
        want = gang.size if count is None else count
        if len(members) != want:
            why = f"job {ch.job}: the gang has {len(members)} pods now, the plan {want} replicas"
            raise KubernetesAdapterError("conflict", why)
        try:
            return ranked(ch.job, members)
        except ValueError as exc:  # a rank annotation changed since observe
            raise KubernetesAdapterError("invalid", str(exc)) from exc

    def _placed(self, gang: Gang, pod: PodView) -> Placed:
        from adapters.kubernetes.adapter import Placed

        return Placed(pod, gang.labels)

    def _apply_gang(self, ch: Change, gang: Gang) -> str:
        for node, _ in planned(ch):
            if node not in self.last.nodes:
                raise KubernetesAdapterError("invalid", f"job {ch.job}: unknown node {node!r}")
        if ch.kind in ("start", "migrate", "resize") and ch.replicas != gang.size:
            return self._gang_rescale(ch, gang, self._gang_now(ch, gang))
        pods = self._gang_now(ch, gang)
        if ch.kind == "start":
            return self._gang_start(ch, gang, pods)
        if ch.kind == "resize":
            return self._gang_resize(ch, gang, pods)
        if ch.kind == "migrate":
            if any(p.node is None for p in pods):
                raise KubernetesAdapterError("conflict", f"job {ch.job}: the gang is not running: it is started, not migrated")
            where, astray = assign(planned(ch), pods)
            if not astray and all(where[p.name] == p.node and self._in_effect(ch, self._placed(gang, p), p) for p in pods):
                return f"already at {placement_text(planned(ch))} at {ch.cpu_millis}m/{ch.gpus}g"
            return self._gang_replace(ch, gang, pods, place=True)
        if ch.kind == "pause":
            bound = [p for p in pods if p.node is not None]
            if not bound:
                return f"already pending ({len(pods)} pods)"
            return self._gang_replace(ch, gang, bound, place=False)
        if ch.kind == "deliver":
            missing = [p for p in pods if DELIVER_REQUESTED not in p.annotations]
            if not missing:
                return "already asked to deliver"
            for p in missing:
                self._annotate(p, {DELIVER_REQUESTED: _now_text()})
            return f"asked to deliver (annotation flowplan.io/deliver-requested on {len(missing)} pods)"
        raise KubernetesAdapterError("invalid", f"job {ch.job}: unknown change kind {ch.kind!r}")

    def _gang_rescale(self, ch: Change, gang: Gang, pods: list[PodView]) -> str:
        """A new count: through the owner (module docstring). A running gang that is not elastic is
        asked to checkpoint and re-created unbound first (a restart, as a migration); then the owner's
        count is patched. The pods the plan places exist only once the owner's controller has made
        (or removed) the difference: until then the outcome is ``transient`` and says so, and the
        next ``start`` binds the new set as planned."""
        if gang.owner is None or gang.fixed is not None:  # its snapshot said so: a plan for another state
            why = gang.fixed or "no owner"
            raise KubernetesAdapterError(
                "conflict", f"job {ch.job}: the plan asks {ch.replicas} replicas, the gang has {gang.size} pods; {why}"
            )
        said = []
        bound = [p for p in pods if p.node is not None]
        if bound and (ch.kind != "resize" or not gang.elastic):  # a restart: the checkpoint first
            said.append(self._gang_replace(ch, gang, bound, place=False))
        try:
            said.append("scaled " + scale(gang.owner, ch.replicas, self._json, self.owner_apis))
        except KubernetesAdapterError as exc:
            why = f"job {ch.job}: {gang.owner} not scaled to {ch.replicas} ({exc.message})"
            if said:  # the restart happened: say so, and what the gang is now
                why += f"; {'; '.join(said)}; the gang waits unbound at its {len(pods)} pods, started again by the next plan"
            raise KubernetesAdapterError(exc.kind, why) from exc
        verb = "make" if ch.replicas > len(pods) else "remove"
        raise KubernetesAdapterError(
            "transient",
            f"job {ch.job}: {'; '.join(said)}; in progress: once its controller has made the gang {ch.replicas} pods "
            f"({verb} {abs(ch.replicas - len(pods))}), a start binds them at {placement_text(planned(ch))}",
        )

    def _gang_start(self, ch: Change, gang: Gang, pods: list[PodView]) -> str:
        """Bind every pod where the plan places it (:func:`~adapters.kubernetes.spread.assign`), all or
        none: a Binding that fails undoes every Binding of the gang (module docstring)."""
        shares = planned(ch)
        where, astray = assign(shares, pods)
        if all(p.node is not None for p in pods):
            if not astray and all(self._in_effect(ch, self._placed(gang, p), p) for p in pods):
                return f"already bound at {placement_text(shares)} ({len(pods)} pods)"
        if gang_status(pods, gang.max_nodes)[0] == "running":
            text = placement_text(shares_of(pods))
            raise KubernetesAdapterError("conflict", f"job {ch.job}: the gang runs at {text}; a start is for a pending job")
        said: list[str] = []
        if astray:  # a split gang: gather it (a bound pod cannot be unbound, only re-created)
            done, failed = self._unbind(ch, gang, astray)
            if failed:
                raise KubernetesAdapterError("conflict", f"job {ch.job}: split gang not gathered: {failed}")
            said.append(done)
            pods = self._gang_now(ch, gang, ch.replicas)
            where, _ = assign(shares, pods)
        if any(p.gpus != ch.gpus for p in pods):
            return self._gang_replace(ch, gang, pods, place=True)
        bound = [p for p in pods if p.node is not None]  # by an earlier, interrupted start: undone with the rest
        at_cpu = all(self._in_effect(ch, self._placed(gang, p), p) for p in pods)  # a Binding changes no resources
        for p in pods:
            if p.node is not None:
                continue
            try:
                self._bind(p, where[p.name])
            except KubernetesAdapterError as exc:
                done, failed = self._unbind(ch, gang, bound)
                undo = (done or "nothing to undo") + (f"; NOT undone: {failed}" if failed else "")
                raise KubernetesAdapterError(
                    exc.kind,
                    f"job {ch.job}: gang not placed: binding {p.name} to {where[p.name]} failed ({exc.message}); {undo}",
                ) from exc
            bound.append(p)
        said.append(f"bound the {len(bound)} pods of gang {gang.namespace}/{ch.job} at {placement_text(shares)}")
        resized = []
        for p in [] if at_cpu else self._gang_now(ch, gang, ch.replicas):
            placed = self._placed(gang, p)
            if not self._in_effect(ch, placed, p):
                try:
                    self._set_cpu(ch, placed, p)
                except KubernetesAdapterError as exc:
                    text = "; ".join(said)
                    raise KubernetesAdapterError(exc.kind, f"{text}, but the CPU of {p.name} was not set: {exc.message}") from exc
                resized.append(p.name)
        if resized:
            said.append(f"CPU set in place to {ch.cpu_millis}m on {len(resized)} pods")
        return "; ".join(said)

    def _unbind(self, ch: Change, gang: Gang, pods: list[PodView]) -> tuple[str, str]:
        """Re-create ``pods`` unbound (deleting each once its copy exists): ``(done, failed)`` lines."""
        from adapters.kubernetes.adapter import replacement

        done, failed = [], []
        for p in pods:
            request = p.cpu_request if p.cpu_request is not None else int(gang.labels.fields["min_cpu_millis"])
            body = replacement(p, ch.job, None, request, p.cpu_limit, p.gpus)
            same_gang(body, p)
            try:
                created = self._json(self.api.create_namespaced_pod, p.namespace, body)
                self._json(self.api.delete_namespaced_pod, p.name, p.namespace)
                done.append(f"{p.name} as {created['metadata']['name']}")
            except KubernetesAdapterError as exc:
                failed.append(f"{p.name} ({exc.kind}: {exc.message})")
        text = f"re-created unbound (a bound pod cannot be unbound): {', '.join(done)}" if done else ""
        return text, ", ".join(failed)

    def _gang_resize(self, ch: Change, gang: Gang, pods: list[PodView]) -> str:
        if any(p.node is None for p in pods):
            why = f"job {ch.job}: the gang has unbound pods: a pending job is started, not resized"
            raise KubernetesAdapterError("conflict", why)
        shares = planned(ch)
        if shares_of(pods) != shares:
            now = placement_text(shares_of(pods))
            raise KubernetesAdapterError(
                "invalid", f"job {ch.job}: resize at {placement_text(shares)} but the gang runs at {now}; a move is a migration"
            )
        todo = [p for p in pods if not self._in_effect(ch, self._placed(gang, p), p)]
        if not todo:
            return f"already at {ch.cpu_millis}m ({len(pods)} pods)"
        infeasible = [p.name for p in pods if p.resize is not None and p.resize.startswith("Infeasible")]
        if any(p.gpus != ch.gpus for p in pods) or not gang.labels.fields.get("resizable", True) or infeasible:
            if infeasible:
                log.info("job %s: the node found the last resize of %s infeasible: re-creating", ch.job, infeasible)
            return self._gang_replace(ch, gang, pods, place=True)
        done: list[str] = []
        for p in todo:
            try:
                done.append(self._set_cpu(ch, self._placed(gang, p), p))
            except KubernetesAdapterError as exc:
                so_far = f"resized {len(done)} of {len(todo)} pods; " if done else ""
                raise KubernetesAdapterError(exc.kind, f"job {ch.job}: {so_far}{p.name}: {exc.message}") from exc
        return f"resized {len(done)} pods of gang {gang.namespace}/{ch.job} in place to {ch.cpu_millis}m"

    def _gang_replace(self, ch: Change, gang: Gang, olds: list[PodView], *, place: bool) -> str:
        """Checkpoint requests → every replacement, unbound → old pods deleted → once every old pod is
        gone (its checkpoint written), with ``place``, the replacements bound where the change places
        them (none for a pause), as a single pod's migration does; all replacements or none (those
        made are deleted again if one cannot be). Bound at creation, a replacement could start before
        its old pod had written its checkpoint: two copies of the gang training at once."""
        from adapters.kubernetes.adapter import replacement

        asked: list[PodView] = []
        created: list[dict[str, Any]] = []

        def undo() -> str:
            lost = []
            for c in created:
                try:
                    self._json(self.api.delete_namespaced_pod, c["metadata"]["name"], gang.namespace, grace_period_seconds=0)
                except KubernetesAdapterError as exc:
                    lost.append(f"{c['metadata']['name']} ({exc.kind})")
            for p in asked:
                try:
                    self._annotate(p, {CHECKPOINT_REQUESTED: None})
                except KubernetesAdapterError:
                    pass
            made = f"deleted the {len(created)} replacements made" if created else "no replacement made"
            if lost:
                made += f" (NOT deleted: {', '.join(lost)}; reconcile deletes them)"
            return made + "; old pods left as they were"

        try:
            for p in olds:
                self._annotate(p, {CHECKPOINT_REQUESTED: _now_text()})
                asked.append(p)
            for p in olds:
                request, limit = self._wanted(ch, self._placed(gang, p), p)
                # Unbound (``schedulerName: flowplan``): it cannot start before it is bound below.
                body = replacement(p, ch.job, None, request, limit, ch.gpus)
                same_gang(body, p)
                created.append(self._json(self.api.create_namespaced_pod, p.namespace, body))
        except KubernetesAdapterError as exc:
            raise KubernetesAdapterError(exc.kind, f"job {ch.job}: gang not re-created ({exc.message}); {undo()}") from exc
        news = [pod_view(c) for c in created]
        kept = [p for p in gang.members if p.name not in {o.name for o in olds}]
        # The gang is the new pods now: a repeat of this change before the next observe sees them.
        self.last.gangs[ch.job] = replace(gang, members=ranked(ch.job, kept + news), duplicates=[])
        left = []
        for p in olds:
            try:
                self._json(self.api.delete_namespaced_pod, p.name, p.namespace)
            except KubernetesAdapterError as exc:
                if exc.kind != "not_found":
                    left.append(f"{p.name} ({exc.kind}: {exc.message})")
        gone = f"old pods not deleted: {', '.join(left)}; reconcile deletes them" if left else f"deleted {len(olds)} old pods"
        made = f"re-created {len(news)} pods of gang {gang.namespace}/{ch.job} at {ch.cpu_millis}m/{ch.gpus}g; {gone}"
        if not place:
            return f"{made}; pending (paused)"
        if left:
            raise KubernetesAdapterError("transient", f"job {ch.job}: {made}; the replacements wait unbound")
        return self._gang_bind_after(ch, olds, ranked(ch.job, kept + news), made)

    def _gang_bind_after(self, ch: Change, olds: list[PodView], pods: list[PodView], made: str) -> str:
        """Bind the unbound ``pods`` (the gang, in rank order) where the change places them once every
        one of ``olds`` is gone (within the checkpoint timeout, shared by the gang); past it, the
        replacements wait unbound and a later ``start`` binds them."""
        began = time.monotonic()
        for p in olds:
            left = self.checkpoint_timeout - (time.monotonic() - began)  # one timeout for the whole gang
            if self._wait_gone(p, max(left, 0.0)) is None:
                raise KubernetesAdapterError(
                    "transient",
                    f"job {ch.job}: {made}; {p.name} still terminating after {self.checkpoint_timeout:g} s (its "
                    "checkpoint): the replacements wait unbound and are started once the old pods have ended",
                )
        waited = time.monotonic() - began
        where, _ = assign(planned(ch), pods)
        news = [p for p in pods if p.node is None]
        bound: list[str] = []
        try:
            if self.fence is not None:  # the wait may have outlasted this daemon's Lease
                self.fence()
            for p in news:
                self._bind(p, where[p.name])
                bound.append(p.name)
        except KubernetesAdapterError as exc:
            some = f"{len(bound)} of {len(news)} bound" if bound else "none bound"
            raise KubernetesAdapterError(
                exc.kind,
                f"job {ch.job}: {made}; old pods gone, but binding at {placement_text(planned(ch))} failed ({exc.message}); "
                f"{some}, the next start gathers the gang",
            ) from exc
        at = placement_text(planned(ch))
        return f"{made}; the old pods ended within {waited:.1f} s (checkpoint), then the {len(news)} were bound at {at}"


def planned(ch: Change) -> Shares:
    """Where ``ch`` places the job's pods, ``(node, replicas)`` per node, rank 0's first."""
    if ch.node is None:
        return ()
    return ch.placement if ch.placement is not None else ((ch.node, ch.replicas),)


def same_gang(body: dict[str, Any], old: PodView) -> None:
    """A replacement stays in its gang: the old pod's labels (the gang label with them) and owners
    (less ``blockOwnerDeletion``: setting it takes a right on the owner that FlowPlan is not given)."""
    body["metadata"]["labels"] = dict(old.labels)
    owners = (old.raw.get("metadata") or {}).get("ownerReferences")
    if owners:
        body["metadata"]["ownerReferences"] = [{k: v for k, v in o.items() if k != "blockOwnerDeletion"} for o in owners]


def _now_text() -> str:
    from adapters.kubernetes.adapter import _now_text as now_text

    return now_text()
