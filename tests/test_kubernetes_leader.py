"""Leader election and least-privilege RBAC for the Kubernetes daemon, against the sandbox's real API server.

Nothing is mocked: the Lease, the RBAC objects of ``deploy/kubernetes/rbac.yaml``, the ServiceAccount
token (TokenRequest API) and the daemons (real ``flowplan daemon`` processes) are all real; only the
candidates' monotonic clocks are stepped by hand in the in-process cases, to make "the holder has
not renewed for a lease duration" happen without waiting for it.

Case matrix:

- election, one candidate at a time (in process): two candidates creating the Lease at once → one
  wins, the other gets 409 Conflict; two standbys taking over a stale Lease with the same
  resourceVersion → one wins (optimistic concurrency), ``leaseTransitions`` counts it; a Lease not
  yet stale by the candidate's own clock is left alone; a released Lease is taken at once; a leader
  past its renew deadline is fenced (the adapter's write is refused as ``conflict``, nothing
  changes) and writes again once renewed, its identity on the pod it binds; fatal in one line
  (:class:`LeaderElectionError`): a token RBAC allows nothing (naming the verb and the resource),
  a namespace that does not exist, a Lease name the server refuses; not fatal: no server (standby,
  one "unreachable" line however many rounds fail);
- RBAC: a ServiceAccount bound to exactly ``deploy/kubernetes/rbac.yaml`` (token from the
  TokenRequest API) can do everything the adapter and the election do (bind, resize in place,
  migrate, deliver, read the owners of gangs and raise their counts: a Job, a StatefulSet, a ReplicaSet, the Lease); for
  each of its verbs, without that one verb something fails as
  forbidden with the server naming that verb (none granted for nothing); a daemon process without
  ``pods/binding create`` says so on the interval's line, without ``leases update`` it stops with
  exit code 2 and one line; ``deploy/kubernetes/deployment.yaml`` passes the server's validation;
- two daemons (processes, the ServiceAccount's token, 1 s intervals), audited on the server (the
  Lease's ``holderIdentity`` and ``leaseTransitions``, each pod's ``flowplan.io/bound-by``, which the
  API server copies from the Binding): only the holder binds, the other says standby and writes
  nothing; a leader frozen with SIGSTOP is replaced, and once thawed says it lost the Lease and
  writes nothing; a leader killed with SIGKILL is replaced within a few intervals and its successor
  binds a new pod; SIGTERM releases the Lease (``holderIdentity`` empty) and exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from k8s_env import (
    apply_rbac,
    core,
    create_owner,
    create_pod,
    get_pod,
    owned_pod,
    pod_body,
    rbac_rules,
    service_account_kubeconfig,
    wait_for,
)

from adapters.base import Change

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("k8s_no_pods")]
BOUND_BY = "flowplan.io/bound-by"
#: The in-process candidates' lease (s) and renewal period: a 2 s request timeout, kind to a loaded machine.
DURATION, RENEW = 6, 2


class Clock:
    """A monotonic clock the test steps by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(
    info: Any,
    identity: str,
    lease: str,
    *,
    clock: Callable[[], float] = time.monotonic,
    token: str | None = None,
    reports: list[tuple[str, str]] | None = None,
    client: Any = None,
) -> Any:
    from adapters.kubernetes.leader import LeaseElector
    from adapters.kubernetes.sandbox import api_client

    return LeaseElector(
        client or api_client(info, token),
        name=lease,
        namespace="default",
        identity=identity,
        duration=DURATION,
        renew_every=RENEW,
        monotonic=clock,
        report=lambda role, line: (reports if reports is not None else []).append((role, line)),
    )


def lease_spec(info: Any, name: str, namespace: str = "default") -> dict[str, Any]:
    from kubernetes import client

    from adapters.kubernetes.sandbox import api_client

    api = client.CoordinationV1Api(api_client(info))
    return dict(json.loads(api.read_namespaced_lease(name, namespace, _preload_content=False).data)["spec"])


# -- election, in process ---------------------------------------------------------------------------


def test_two_candidates_creating_the_lease_one_wins(k8s_sandbox: Any) -> None:
    a, b = elector(k8s_sandbox, "a", "race-create"), elector(k8s_sandbox, "b", "race-create")
    seen_a, seen_b = a.read(), b.read()
    assert seen_a is None and seen_b is None  # both would create it
    assert a.write(seen_a, 0.0) is True
    assert b.write(seen_b, 0.0) is False  # 409 AlreadyExists: the server kept a's
    assert lease_spec(k8s_sandbox, "race-create")["holderIdentity"] == "a"


def test_two_standbys_taking_over_a_stale_lease_one_wins(k8s_sandbox: Any) -> None:
    assert elector(k8s_sandbox, "ghost", "race-take").round()  # a holder that then stops renewing
    clock = Clock()
    reports: list[tuple[str, str]] = []
    a = elector(k8s_sandbox, "a", "race-take", clock=clock, reports=reports)
    b = elector(k8s_sandbox, "b", "race-take", clock=clock)
    assert not a.round() and not b.round()
    assert reports and reports[0][0] == "standby" and "held by ghost" in reports[0][1]
    clock.t += DURATION - 0.5  # less than the lease's duration since a and b first saw this version: still ghost's
    assert not a.round()
    clock.t += 1
    seen_a, seen_b = a.read(), b.read()
    assert seen_a["metadata"]["resourceVersion"] == seen_b["metadata"]["resourceVersion"]
    assert a.write(seen_a, clock.t) is True
    assert b.write(seen_b, clock.t) is False  # 409 Conflict: a stale resourceVersion
    spec = lease_spec(k8s_sandbox, "race-take")
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("a", 1)
    assert not b.round() and b.holder == "a"  # b saw a's version now: a fresh lease duration to wait


def test_a_released_lease_is_taken_at_once(k8s_sandbox: Any) -> None:
    clock = Clock()
    a = elector(k8s_sandbox, "a", "release", clock=clock)
    b = elector(k8s_sandbox, "b", "release", clock=clock)
    assert a.round() and not b.round()
    a.stop(release=True)
    assert lease_spec(k8s_sandbox, "release")["holderIdentity"] in ("", None)
    assert b.round() and b.leading()  # no lease duration to wait: nobody holds it


def test_a_leader_past_its_renew_deadline_writes_nothing(k8s_sandbox: Any) -> None:
    from adapters.kubernetes import KubernetesAdapter
    from adapters.kubernetes.leader import LeaderGuard
    from adapters.kubernetes.sandbox import api_client

    api = core(k8s_sandbox)
    node = k8s_sandbox.nodes[0]
    create_pod(api, pod_body("fenced"))
    clock = Clock()
    a = elector(k8s_sandbox, "leader-a", "fence", clock=clock)
    guard = LeaderGuard(a, stopped=lambda: False)
    adapter = KubernetesAdapter(api_client(k8s_sandbox), namespaces=["default"], identity="leader-a", fence=guard.fence)
    assert a.round() and a.leading()
    adapter.observe()
    start = Change(job="fenced", kind="start", node=node, cpu_millis=500, gpus=0)

    clock.t += DURATION * 2 / 3 + 0.1  # past 2/3 of the lease without a renewal: a standby may take over soon
    assert not a.leading()
    [refused] = adapter.apply([start])
    assert (refused.ok, refused.error) == (False, "conflict") and "no longer holds lease" in refused.message
    assert get_pod(api, "fenced")["spec"].get("nodeName") is None

    assert a.round() and a.leading()  # nobody took it meanwhile: renewed
    guard()  # returns at once: leader
    [done] = adapter.apply([start])
    assert done.ok, done
    pod = get_pod(api, "fenced")
    assert pod["spec"]["nodeName"] == node and pod["metadata"]["annotations"][BOUND_BY] == "leader-a"


def test_fatal_errors_and_server_down(k8s_sandbox: Any) -> None:
    """Fatal (no later round could succeed): Forbidden, no such namespace, a name the server refuses.
    Not fatal: the server down (standby, one line however many rounds fail)."""
    from kubernetes import client

    from adapters.kubernetes.leader import LeaderElectionError
    from adapters.kubernetes.sandbox import free_port

    viewer = elector(k8s_sandbox, "viewer", "forbidden", token=k8s_sandbox.viewer_token)
    with pytest.raises(LeaderElectionError) as err:
        viewer.round()
    text = str(err.value)
    assert "RBAC forbids get on leases.coordination.k8s.io default/forbidden" in text and "\n" not in text
    nowhere = elector(k8s_sandbox, "a", "nowhere")
    nowhere.namespace = "no-such-namespace"
    with pytest.raises(LeaderElectionError, match="namespace 'no-such-namespace' does not exist"):
        nowhere.round()
    with pytest.raises(LeaderElectionError, match="the API server refuses lease default/Not_A_Name"):
        elector(k8s_sandbox, "a", "Not_A_Name").round()

    cfg = client.Configuration()
    cfg.host = f"https://127.0.0.1:{free_port()}"
    cfg.verify_ssl = False
    cfg.retries = False
    reports: list[tuple[str, str]] = []
    down = elector(k8s_sandbox, "down", "down", client=client.ApiClient(cfg), reports=reports)
    assert not down.round() and not down.round()
    assert [r for r, _ in reports] == ["unreachable"] and "API server unreachable" in reports[0][1]


# -- RBAC -------------------------------------------------------------------------------------------


ALL_RULES = rbac_rules("flowplan")


@pytest.mark.parametrize("drop", [None, *ALL_RULES], ids=["all", *("-".join(r[1:]).replace("/", "-") for r in ALL_RULES)])
def test_the_service_account_needs_every_verb_and_no_other(
    k8s_sandbox: Any, tmp_path: Path, drop: tuple[str, str, str] | None
) -> None:
    """With ``deploy/kubernetes/rbac.yaml`` the adapter binds, resizes, migrates, delivers, reads the
    owners of gangs and changes their counts, and holds the Lease; without any one of its verbs, something it does is forbidden
    (so none is granted for nothing)."""
    from adapters.kubernetes import KubernetesAdapter, KubernetesAdapterError
    from adapters.kubernetes.leader import LeaderElectionError

    namespace = "fp-rbac-" + ("all" if drop is None else f"{drop[1]}-{drop[2]}".replace("/", "-"))
    apply_rbac(k8s_sandbox, namespace, drop=drop)
    kubeconfig = service_account_kubeconfig(k8s_sandbox, namespace, tmp_path / "kubeconfig")
    api = core(k8s_sandbox)
    n0, n1 = k8s_sandbox.nodes[0], k8s_sandbox.nodes[1]
    create_pod(api, pod_body("sa-start"))
    for name in ("sa-resize", "sa-move", "sa-deliver"):
        create_pod(api, pod_body(name, node=n0, labels={"flowplan.io/job": name}))
    for name in ("sa-resize", "sa-move", "sa-deliver"):
        wait_for(lambda n=name: (get_pod(api, n) or {}).get("status", {}).get("phase") == "Running", 30, f"{name} Running")
    for kind in ("Job", "StatefulSet", "ReplicaSet"):  # gangs by owner: each owner's count is read (get)
        owner = create_owner(k8s_sandbox, kind, f"sa-{kind.lower()}", 2, pod_body("template"))
        for i in range(2):
            create_pod(api, owned_pod(owner, f"sa-{kind.lower()}-{i}"))

    refused: list[str] = []
    adapter = KubernetesAdapter.from_kubeconfig(kubeconfig, identity="sa")  # every namespace: list across them
    try:
        snap = adapter.observe()
    except KubernetesAdapterError as exc:
        refused.append(f"observe: {exc.kind}: {exc.message}")
    else:
        owners = {"job/sa-job", "statefulset/sa-statefulset", "replicaset/sa-replicaset"}
        assert {j.id for j in snap.jobs} == {"sa-start", "sa-resize", "sa-move", "sa-deliver", *owners}
        assert {j.id: j.replicas for j in snap.jobs if j.id in owners} == dict.fromkeys(owners, 2)
        refused += [f"owner: {why}" for why in adapter.last.owner_fallback.values() if "forbidden" in why]
        outcomes = adapter.apply(
            [
                Change(job="sa-start", kind="start", node=n1, cpu_millis=500, gpus=0),  # a Binding
                Change(job="sa-resize", kind="resize", node=n0, cpu_millis=1500, gpus=0, from_node=n0),
                Change(job="sa-move", kind="migrate", node=n1, cpu_millis=500, gpus=0, from_node=n0),  # patch, create, delete
                Change(job="sa-deliver", kind="deliver", node=n0, cpu_millis=500, gpus=0, from_node=n0),
            ]
        )
        refused += [f"{o.change.kind}: {o.error}: {o.message}" for o in outcomes if not o.ok or "forbidden" in o.message]
        # each owner's count raised 2 -> 3 (a patch): in progress (transient) until its controller makes the pod
        grow = [Change(job=j, kind="start", node=n1, cpu_millis=500, gpus=0, replicas=3) for j in sorted(owners)]
        scaled = adapter.apply(grow)
        refused += [f"scale: {o.error}: {o.message}" for o in scaled if o.error != "transient" or "-> 3" not in o.message]
        refused += [f"log: {why}" for why in adapter.last.log_failed.values() if why.startswith("forbidden")]
    from adapters.kubernetes.watch import PodWatch

    watch = PodWatch(adapter.api.api_client, None, lambda ev: None, retry=0.5).start()
    if not watch.wait_connected(10):
        refused.append(f"watch: {watch.last_error}")
    watch.close()
    lease = elector(k8s_sandbox, "sa", "flowplan-daemon", client=adapter.api.api_client)
    lease.namespace = namespace
    try:
        assert lease.round() and lease.round()  # create, then get + update
    except LeaderElectionError as exc:
        refused.append(f"lease: {exc}")
    adapter.close()

    if drop is None:
        assert refused == []
        assert get_pod(api, "sa-start")["metadata"]["annotations"][BOUND_BY] == "sa"
    else:
        _, resource, verb = drop
        assert refused, f"nothing needed {verb} {resource}"
        assert all("forbid" in r for r in refused), refused
        assert any(f'cannot {verb} resource "{resource}"' in r for r in refused), refused


def test_the_deployment_is_accepted_by_the_api_server(k8s_sandbox: Any) -> None:
    """Validated by the real server (a server-side dry run: no controller-manager here to run it)."""
    import yaml
    from kubernetes import client

    from adapters.kubernetes.sandbox import api_client

    apply_rbac(k8s_sandbox, "fp-deploy")
    path = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "deployment.yaml"
    [body] = [d for d in yaml.safe_load_all(path.read_text()) if d]
    apps = client.AppsV1Api(api_client(k8s_sandbox))
    resp = apps.create_namespaced_deployment("fp-deploy", body, dry_run="All", _preload_content=False)
    created = json.loads(resp.data)
    assert created["spec"]["template"]["spec"]["serviceAccountName"] == "flowplan"


def flowplan_daemon(kubeconfig: str, namespace: str, identity: str, tmp_path: Path, *more: str) -> tuple[Any, Path]:
    """A ``flowplan daemon --adapter kubernetes`` process; its output goes to a file (no pipe to fill)."""
    out = tmp_path / f"{identity}.log"
    argv = [sys.executable, "-m", "flowplan", "daemon", "--adapter", "kubernetes", "--kubeconfig", kubeconfig]
    argv += ["--namespace", "default", "--lease-namespace", namespace, "--identity", identity, "--interval", "1"]
    argv += ["--lease-duration", "4"]  # 4 intervals, not 3: a loaded 2-core machine can delay a renewal by a second or two
    argv += ["--state", str(tmp_path / f"{identity}.db"), *more]
    with open(out, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return proc, out


@pytest.mark.parametrize(
    ("drop", "exit_code", "says"),
    [
        pytest.param(
            ("ClusterRole/flowplan-pods", "pods/binding", "create"),
            0,
            'FAILED (forbidden: 403 pods "rbac-pending" is forbidden: User "system:serviceaccount:fp-drop-pods-binding-create:'
            'flowplan" cannot create resource "pods/binding"',
            id="pods-binding-create",
        ),
        pytest.param(("Role/flowplan-leader", "leases", "update"), 2, "RBAC forbids update on leases", id="leases-update"),
    ],
)
def test_without_one_verb_the_daemon_says_which_in_one_line(
    k8s_sandbox: Any, tmp_path: Path, drop: tuple[str, str, str], exit_code: int, says: str
) -> None:
    namespace = "fp-drop-" + f"{drop[1]}-{drop[2]}".replace("/", "-")
    apply_rbac(k8s_sandbox, namespace, drop=drop)
    kubeconfig = service_account_kubeconfig(k8s_sandbox, namespace, tmp_path / "kubeconfig")
    create_pod(core(k8s_sandbox), pod_body("rbac-pending"))
    ticks = ["--max-ticks", "2"] if exit_code == 0 else []  # a Lease verb missing: it stops by itself
    proc, out = flowplan_daemon(kubeconfig, namespace, "dropped", tmp_path, *ticks)
    try:
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.read_text()
    assert code == exit_code, text
    lines = [line for line in text.splitlines() if says in line]
    assert len(lines) >= 1 and "Traceback" not in text, text
    if exit_code == 2:
        assert text.rstrip().splitlines()[-1].startswith("flowplan daemon: RBAC forbids"), text


# -- two daemons ------------------------------------------------------------------------------------


def test_only_the_leader_binds_a_frozen_leader_stands_down_and_a_killed_one_is_replaced(k8s_sandbox: Any, tmp_path: Path) -> None:
    """Two daemons, one Lease, audited on the server after every step:

    1. a leads and binds; b says standby and writes nothing;
    2. a is frozen (SIGSTOP: a long pause, a stalled node; its monotonic clock runs on): b takes over
       and binds; a, thawed, finds itself past its deadline, says it lost the Lease, writes nothing;
    3. b is killed (SIGKILL: no release): a takes over within a few intervals and binds;
    4. a is stopped (SIGTERM): it releases the Lease and exits 0.
    """
    namespace = "fp-pair"
    apply_rbac(k8s_sandbox, namespace)
    kubeconfig = service_account_kubeconfig(k8s_sandbox, namespace, tmp_path / "kubeconfig")
    api = core(k8s_sandbox)

    def bound_by(name: str) -> str | None:
        pod = get_pod(api, name) or {}
        return ((pod.get("metadata") or {}).get("annotations") or {}).get(BOUND_BY)

    def holder() -> str | None:
        try:
            return lease_spec(k8s_sandbox, "flowplan-daemon", namespace).get("holderIdentity")
        except Exception:
            return None

    def place(name: str, by: str) -> None:
        create_pod(api, pod_body(name))
        wait_for(lambda: bound_by(name) == by, 60, f"{by} binds {name}")

    a, a_out = flowplan_daemon(kubeconfig, namespace, "daemon-a", tmp_path)
    b = None
    try:
        # 1. one leader, one standby
        wait_for(lambda: holder() == "daemon-a", 60, "daemon-a holds the Lease")
        place("pair-0", "daemon-a")
        b, b_out = flowplan_daemon(kubeconfig, namespace, "daemon-b", tmp_path)
        wait_for(lambda: "standby: lease fp-pair/flowplan-daemon is held by daemon-a" in b_out.read_text(), 60, "b standby")
        place("pair-1", "daemon-a")
        assert holder() == "daemon-a"
        assert "start pair" not in b_out.read_text() and "LEADER" not in b_out.read_text(), b_out.read_text()

        # 2. the leader frozen past its lease
        a.send_signal(signal.SIGSTOP)
        wait_for(lambda: holder() == "daemon-b", 60, "daemon-b takes the Lease over from the frozen daemon-a")
        place("pair-2", "daemon-b")
        a.send_signal(signal.SIGCONT)
        wait_for(lambda: "LOST lease fp-pair/flowplan-daemon" in a_out.read_text(), 60, "daemon-a says it lost the Lease")
        place("pair-3", "daemon-b")
        after = a_out.read_text().split("LOST lease", 1)[1]
        assert " ok" not in after and "start pair" not in after, a_out.read_text()  # nothing applied since

        # 3. the leader killed: no release, the standby waits out the lease
        b.send_signal(signal.SIGKILL)
        b.wait(timeout=30)
        killed = time.monotonic()
        wait_for(lambda: holder() == "daemon-a", 60, "daemon-a takes the Lease over from the killed daemon-b")
        took = time.monotonic() - killed
        place("pair-4", "daemon-a")
        assert [bound_by(f"pair-{i}") for i in range(5)] == ["daemon-a", "daemon-a", "daemon-b", "daemon-b", "daemon-a"]
        assert lease_spec(k8s_sandbox, "flowplan-daemon", namespace)["leaseTransitions"] >= 2
        print(f"handover after SIGKILL: {took:.1f} s (lease 4 s, interval 1 s)")

        # 4. a clean stop gives the Lease up
        a.send_signal(signal.SIGTERM)
        assert a.wait(timeout=60) == 0, a_out.read_text()
        assert holder() in ("", None), a_out.read_text()
        assert "released lease fp-pair/flowplan-daemon" in a_out.read_text()
        assert "Traceback" not in a_out.read_text() + b_out.read_text()
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
