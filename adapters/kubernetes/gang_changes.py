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

from adapters.base import MOOT_WHEN_ENDED, Shares, finished_before
from adapters.kubernetes.annotations import CHECKPOINT_REQUESTED, DELIVER_REQUESTED, GANG_LABEL
from adapters.kubernetes.errors import KubernetesAdapterError
from adapters.kubernetes.gangs import Gang, gang_status, is_server, ranked_servers, split_superseded
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
        superseded and its parameter servers; ``conflict`` when their number is not ``count``
        (default: as observed)."""
        members = [p for p in self._gang_pods(gang) if not is_server(p)]
        want = gang.size if count is None else count
        if len(members) != want:
            why = f"job {ch.job}: the gang has {len(members)} pods now, the plan {want} replicas"
            raise KubernetesAdapterError("conflict", why)
        try:
            return ranked(ch.job, members)
        except ValueError as exc:  # a rank annotation changed since observe
            raise KubernetesAdapterError("invalid", str(exc)) from exc

    def _servers_now(self, ch: Change, gang: Gang, count: int | None = None) -> list[PodView]:
        """The gang's parameter servers now (one list call), in order; ``conflict`` when their number
        is not ``count`` (default: as observed)."""
        servers = ranked_servers([p for p in self._gang_pods(gang) if is_server(p)])
        want = len(gang.servers) if count is None else count
        if len(servers) != want:
            why = f"job {ch.job}: the gang has {len(servers)} parameter servers now, the plan {want}"
            raise KubernetesAdapterError("conflict", why)
        return servers

    def _gang_pods(self, gang: Gang) -> list[PodView]:
        """Every pod of the gang now (one list call), less those being deleted or superseded."""
        if gang.by_owner:  # no selector for an owner: the labels its pods share, then the owner's job id
            every = gang.members + gang.servers
            shared = set.intersection(*(set(p.labels.items()) for p in every)) if every else set()
            selector = ",".join(f"{k}={v}" for k, v in sorted(shared))
            data = self._json(self.api.list_namespaced_pod, gang.namespace, label_selector=selector)
            raws = [r for r in data["items"] if is_flowplan_pod(r) and job_id_of(r) == gang.job]
        else:
            data = self._json(self.api.list_namespaced_pod, gang.namespace, label_selector=f"{GANG_LABEL}={gang.job}")
            raws = data["items"]
        pods = [v for v in (pod_view(raw) for raw in raws) if not v.deleting]
        members, _ = split_superseded(pods)
        return members

    def _placed(self, gang: Gang, pod: PodView) -> Placed:
        from adapters.kubernetes.adapter import Placed

        return Placed(pod, gang.labels)

    def _apply_gang(self, ch: Change, gang: Gang) -> str:
        for node, _ in planned(ch):
            if node not in self.last.nodes:
                raise KubernetesAdapterError("invalid", f"job {ch.job}: unknown node {node!r}")
        placing = ch.kind in ("start", "migrate", "resize")
        if placing and (ch.servers is not None) != bool(gang.servers):
            have = f"{len(gang.servers)} parameter server pod(s)" if gang.servers else "no parameter server pods"
            why = f"job {ch.job}: the plan gives {ch.servers} server(s) on each node, the gang has {have}"
            raise KubernetesAdapterError("invalid", why)
        if placing and (ch.replicas != gang.size or (gang.servers and server_total(ch) != len(gang.servers))):
            return self._gang_rescale(ch, gang, self._gang_now(ch, gang))
        pods = self._gang_now(ch, gang)
        moot = ended_since(ch, pods)
        if moot is not None:
            return moot
        servers = self._servers_now(ch, gang) if gang.servers else []
        if ch.kind == "start":
            return self._gang_start(ch, gang, pods, servers)
        if ch.kind == "resize":
            if not servers_placed(ch, servers):
                why = f"job {ch.job}: resize, but its parameter servers are not where planned; a move is a migration"
                raise KubernetesAdapterError("invalid", why)
            return self._gang_resize(ch, gang, pods)
        if ch.kind == "migrate":
            if any(p.node is None for p in pods):
                raise KubernetesAdapterError("conflict", f"job {ch.job}: the gang is not running: it is started, not migrated")
            where, astray = assign(planned(ch), pods)
            if (
                not astray
                and all(where[p.name] == p.node and self._in_effect(ch, self._placed(gang, p), p) for p in pods)
                and servers_placed(ch, servers)
            ):
                return f"already at {placement_text(planned(ch))} at {ch.cpu_millis}m/{ch.gpus}g"
            return self._gang_replace(ch, gang, pods + [p for p in servers if p.node is not None], place=True)
        if ch.kind == "pause":
            bound = [p for p in pods + servers if p.node is not None]
            if not bound:
                return f"already pending ({len(pods) + len(servers)} pods)"
            return self._gang_replace(ch, gang, bound, place=False)
        if ch.kind == "deliver":
            missing = [p for p in pods if DELIVER_REQUESTED not in p.annotations]
            if not missing:
                return "already asked to deliver"
            failed = [p.name for p in pods if p.phase == "Failed"]
            if failed:  # as for one pod: a failed job has no model to deliver
                raise KubernetesAdapterError("conflict", f"job {ch.job}: {', '.join(failed)} Failed: nothing to deliver")
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
        total = server_total(ch) if gang.servers else None
        if ch.replicas != gang.size and (gang.owner is None or gang.fixed is not None):  # its snapshot said so
            why = gang.fixed or "no owner"
            raise KubernetesAdapterError(
                "conflict", f"job {ch.job}: the plan asks {ch.replicas} replicas, the gang has {gang.size} pods; {why}"
            )
        if total is not None and total != len(gang.servers) and (gang.owner is None or gang.servers_fixed is not None):
            why = gang.servers_fixed or "no owner"
            raise KubernetesAdapterError(
                "conflict", f"job {ch.job}: the plan asks {total} servers, the gang has {len(gang.servers)}; {why}"
            )
        assert gang.owner is not None
        said = []
        servers = self._servers_now(ch, gang) if gang.servers else []
        bound = [p for p in pods + servers if p.node is not None]
        new_servers = total is not None and total != len(servers)
        if bound and (ch.kind != "resize" or not gang.elastic or new_servers):  # a restart: the checkpoint first
            said.append(self._gang_replace(ch, gang, bound, place=False))
        to = f"{ch.replicas}" + (f" and {total} servers" if total is not None else "")
        try:
            said.append("scaled " + scale(gang.owner, ch.replicas, self._json, self.owner_apis, total))
        except KubernetesAdapterError as exc:
            why = f"job {ch.job}: {gang.owner} not scaled to {to} ({exc.message})"
            if said:  # the restart happened: say so, and what the gang is now
                why += f"; {'; '.join(said)}; the gang waits unbound at its {len(pods)} pods, started again by the next plan"
            raise KubernetesAdapterError(exc.kind, why) from exc
        verb = "make" if ch.replicas > len(pods) else "remove"
        made = f"{ch.replicas} pods ({verb} {abs(ch.replicas - len(pods))})"
        if total is not None:
            made += f" and {total} parameter servers (now {len(servers)})"
        raise KubernetesAdapterError(
            "transient",
            f"job {ch.job}: {'; '.join(said)}; in progress: once its controller has made the gang {made}, a start "
            f"binds them at {placement_text(planned(ch))}",
        )

    def _gang_start(self, ch: Change, gang: Gang, pods: list[PodView], servers: list[PodView]) -> str:
        """Bind every pod where the plan places it (:func:`~adapters.kubernetes.spread.assign`), and its
        parameter servers, ``ch.servers`` on each of those nodes; all or none: a Binding that fails
        undoes every Binding of the gang (module docstring)."""
        shares = planned(ch)
        where, astray = assign(shares, pods)
        placed = not astray and all(p.node is not None and self._in_effect(ch, self._placed(gang, p), p) for p in pods)
        if placed and servers_placed(ch, servers):
            return f"already bound at {placement_text(shares)} ({len(pods)} pods{servers_text(ch, servers)})"
        if placed:  # the workers run as planned; their servers are gathered
            return self._servers_start(ch, gang, servers, [])
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
            return self._gang_replace(ch, gang, pods + [p for p in servers if p.node is not None], place=True)
        bound = [p for p in pods if p.node is not None]  # by an earlier, interrupted start: undone with the rest
        at_cpu = all(self._in_effect(ch, self._placed(gang, p), p) for p in pods)  # a Binding changes no resources
        self._bind_all(ch, gang, pods, where, bound)
        said.append(f"bound the {len(bound)} pods of gang {gang.namespace}/{ch.job} at {placement_text(shares)}")
        if servers:
            said.append(self._servers_start(ch, gang, servers, bound))
        resized = []
        for p in [] if at_cpu else self._gang_now(ch, gang, ch.replicas):
            placed_pod = self._placed(gang, p)
            if not self._in_effect(ch, placed_pod, p):
                try:
                    self._set_cpu(ch, placed_pod, p)
                except KubernetesAdapterError as exc:
                    text = "; ".join(said)
                    raise KubernetesAdapterError(exc.kind, f"{text}, but the CPU of {p.name} was not set: {exc.message}") from exc
                resized.append(p.name)
        if resized:
            said.append(f"CPU set in place to {ch.cpu_millis}m on {len(resized)} pods")
        return "; ".join(said)

    def _bind_all(
        self, ch: Change, gang: Gang, pods: list[PodView], where: dict[str, str], bound: list[PodView], what: str = ""
    ) -> None:
        """Bind each unbound pod of ``pods`` to ``where`` it goes, adding it to ``bound``; if a Binding
        fails, every pod in ``bound`` is re-created unbound (all or none) and the error says so."""
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
                    f"job {ch.job}: gang not placed: binding {what}{p.name} to {where[p.name]} failed ({exc.message}); {undo}",
                ) from exc
            bound.append(p)

    def _servers_start(self, ch: Change, gang: Gang, servers: list[PodView], workers: list[PodView]) -> str:
        """Bind the gang's parameter servers ``ch.servers`` on each planned node (those bound elsewhere
        re-created unbound first); if one cannot be, every pod of the gang bound so far (``workers``,
        and the servers) is re-created unbound, so the gang is pending again."""
        shares = server_shares(ch)
        said: list[str] = []
        _, astray = assign(shares, servers)
        if astray:
            done, failed = self._unbind(ch, gang, astray)
            if failed:
                raise KubernetesAdapterError("conflict", f"job {ch.job}: parameter servers not gathered: {failed}")
            said.append(done)
            servers = self._servers_now(ch, gang, len(servers))
        where, _ = assign(shares, servers)
        bound = workers + [p for p in servers if p.node is not None]
        self._bind_all(ch, gang, servers, where, bound, "parameter server ")
        said.append(f"bound its {len(servers)} parameter servers, {ch.servers} on each of {', '.join(n for n, _ in shares)}")
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
                if is_server(p):  # a parameter server keeps its own resources
                    request, limit, gpus = p.cpu_request or gang.servers[0].cpu_request or 1, p.cpu_limit, p.gpus
                else:
                    (request, limit), gpus = self._wanted(ch, self._placed(gang, p), p), ch.gpus
                # Unbound (``schedulerName: flowplan``): it cannot start before it is bound below.
                body = replacement(p, ch.job, None, request, limit, gpus)
                same_gang(body, p)
                created.append(self._json(self.api.create_namespaced_pod, p.namespace, body))
        except KubernetesAdapterError as exc:
            raise KubernetesAdapterError(exc.kind, f"job {ch.job}: gang not re-created ({exc.message}); {undo()}") from exc
        news = [pod_view(c) for c in created]
        gone = {o.name for o in olds}
        kept = [p for p in gang.members + gang.servers if p.name not in gone]
        workers = ranked(ch.job, [p for p in kept + news if not is_server(p)])
        servers = ranked_servers([p for p in kept + news if is_server(p)])
        # The gang is the new pods now: a repeat of this change before the next observe sees them.
        self.last.gangs[ch.job] = replace(gang, members=workers, servers=servers, duplicates=[])
        left = []
        for p in olds:
            try:
                self._json(self.api.delete_namespaced_pod, p.name, p.namespace)
            except KubernetesAdapterError as exc:
                if exc.kind != "not_found":
                    left.append(f"{p.name} ({exc.kind}: {exc.message})")
        deleted = f"old pods not deleted: {', '.join(left)}; reconcile deletes them" if left else f"deleted {len(olds)} old pods"
        made = f"re-created {len(news)} pods of gang {gang.namespace}/{ch.job} at {ch.cpu_millis}m/{ch.gpus}g; {deleted}"
        if not place:
            return f"{made}; pending (paused)"
        if left:
            raise KubernetesAdapterError("transient", f"job {ch.job}: {made}; the replacements wait unbound")
        return self._gang_bind_after(ch, olds, workers, made, servers)

    def _gang_bind_after(
        self, ch: Change, olds: list[PodView], pods: list[PodView], made: str, servers: list[PodView] | None = None
    ) -> str:
        """Bind the unbound ``pods`` (the gang, in rank order) and ``servers`` (its parameter servers) where
        the change places them once every one of ``olds`` is gone (within the checkpoint timeout,
        shared by the gang); past it, the replacements wait unbound and a later ``start`` binds them."""
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
        if servers:
            where.update(assign(server_shares(ch), servers)[0])
        news = [p for p in pods + (servers or []) if p.node is None]
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


def ended_since(ch: Change, pods: list[PodView]) -> str | None:
    """Whether the job's pods (as read now) ended since the observe the change was planned from: a
    resize, move or pause of a job one of whose pods ``Succeeded`` is moot (the plan was made while
    it printed its last epoch; the next observe sees it finished): the message saying so, for an
    ``ok`` outcome. A pod that ``Failed`` is a ``conflict``. Neither is re-created or patched: a
    replacement would run the job again from its checkpoint. ``None``: none has ended."""
    if ch.kind not in MOOT_WHEN_ENDED:
        return None
    failed = [p.name for p in pods if p.phase == "Failed"]
    if failed:
        noun = MOOT_WHEN_ENDED[ch.kind][0]
        why = f"job {ch.job}: {', '.join(failed)} Failed since it was observed: no {noun} (a failed job is not run again)"
        raise KubernetesAdapterError("conflict", why)
    return finished_before(ch.kind) if any(p.phase == "Succeeded" for p in pods) else None


def planned(ch: Change) -> Shares:
    """Where ``ch`` places the job's pods, ``(node, replicas)`` per node, rank 0's first."""
    if ch.node is None:
        return ()
    return ch.placement if ch.placement is not None else ((ch.node, ch.replicas),)


def server_shares(ch: Change) -> Shares:
    """Where ``ch`` places the job's parameter servers: ``ch.servers`` on each of its nodes."""
    return tuple((node, ch.servers or 0) for node, _ in planned(ch))


def server_total(ch: Change) -> int:
    """The parameter servers ``ch`` gives the job in all."""
    return (ch.servers or 0) * len(planned(ch))


def servers_placed(ch: Change, servers: list[PodView]) -> bool:
    """Are ``servers`` all bound where ``ch`` places them (none for a job without)?"""
    if not servers:
        return True
    return all(p.node is not None for p in servers) and dict(shares_of(servers)) == dict(server_shares(ch))


def servers_text(ch: Change, servers: list[PodView]) -> str:
    return f", {len(servers)} parameter servers, {ch.servers} on each node" if servers else ""


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
