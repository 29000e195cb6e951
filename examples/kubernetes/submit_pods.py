"""Submit FlowPlan training pods to a Kubernetes cluster (the sandbox of ``flowplan sandbox up``).

    python examples/kubernetes/submit_pods.py [--count 12] [--gang N] [--namespace default] [--kubeconfig PATH]

Each pod asks for FlowPlan as its scheduler (``schedulerName: flowplan``), declares its bounds and
a tier-1 target in ``flowplan.io/*`` annotations (docs/kubernetes.md), and starts small (250m
requested, a 4-core limit): the daemon binds it to a node and sizes its CPU in place. The sandbox's
fake kubelets run no container: each pod names the measured run it plays
(``sandbox.flowplan.io/model``) and ``flowplan sandbox train`` makes up its progress from it.

Each pod also projects its own annotations into ``/etc/flowplan/annotations`` (a downward-API
volume) and names that directory in ``FLOWPLAN_CONTROL_DIR``: that is how a job using
``flowplan.sdk`` hears the adapter's ``flowplan.io/checkpoint-requested`` and
``flowplan.io/deliver-requested`` without any exec (docs/sdk.md).

With ``--gang N`` the pods come in gangs of N: each N pods share the label ``flowplan.io/gang:
PREFIX-gK`` and declare ``flowplan.io/gang-size: N`` and the same bounds and target, so FlowPlan
places each gang as one job with N replicas, on one node, all or nothing. ``flowplan sandbox train``
plays single pods only (those with the ``flowplan.io/job`` label): a gang's pods are placed and
resized but make no progress in the sandbox.
"""

from __future__ import annotations

import argparse
import sys

#: What each pod plays in the sandbox (``flowplan sandbox train``): a measured model, 20 epochs of it
#: (ncf has 10), and a tier-1 target at what the measured run reached at 60 % of them.
MODEL_ANNOTATION = "sandbox.flowplan.io/model"
PLAYS = (("cifar10", 128, 20), ("deepspeech2", 20, 20), ("yolov3", 8, 20), ("ncf", 256, 10))


def _targets() -> list[tuple[str, dict[str, str]]]:
    from adapters.kubernetes.sandbox_train import target_for

    return [(f"{m}/{b}", target_for(m, b, e)) for m, b, e in PLAYS]


TARGETS = _targets()


def pod(name: str, namespace: str, index: int, gang: tuple[str, int] | None = None) -> dict[str, object]:
    """Pod ``name``; ``index`` picks its model, target and priority; ``gang``: (gang name, size) it belongs to."""
    labels = {"flowplan.io/job": name} if gang is None else {"flowplan.io/gang": gang[0]}
    extra = {} if gang is None else {"flowplan.io/gang-size": str(gang[1])}
    job = name if gang is None else gang[0]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {
                **extra,
                "flowplan.io/min_cpu_millis": "250",
                "flowplan.io/max_cpu_millis": "4000",
                "flowplan.io/priority": "2" if index % 4 == 0 else "1",
                **TARGETS[index % len(TARGETS)][1],
                "flowplan.io/target.tier1.within": str(300 + 120 * (index % 5)),
                MODEL_ANNOTATION: TARGETS[index % len(TARGETS)][0],
            },
        },
        "spec": {
            "schedulerName": "flowplan",
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "train",
                    "image": "flowplan/train:example",
                    "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "2Gi"}},
                    "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                    "env": [
                        {"name": "FLOWPLAN_JOB", "value": job},
                        {"name": "FLOWPLAN_CONTROL_DIR", "value": "/etc/flowplan"},
                    ],
                    "volumeMounts": [{"name": "flowplan", "mountPath": "/etc/flowplan", "readOnly": True}],
                }
            ],
            "volumes": [
                {
                    "name": "flowplan",
                    "downwardAPI": {"items": [{"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]},
                }
            ],
        },
    }


def main() -> int:
    p = argparse.ArgumentParser(description="Submit FlowPlan training pods (schedulerName: flowplan).")
    p.add_argument("--count", type=int, default=12, help="how many pods (1-1000, default 12)")
    p.add_argument("--namespace", default="default")
    p.add_argument("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")
    p.add_argument("--prefix", default="train", help="pod names: PREFIX-0, PREFIX-1, ... (default train)")
    p.add_argument(
        "--gang",
        type=int,
        default=1,
        metavar="N",
        help="gangs of N pods (label flowplan.io/gang: PREFIX-gK), each one job placed whole on one node (default 1: none)",
    )
    args = p.parse_args()
    if not 1 <= args.count <= 1000:
        p.error(f"--count: must be 1-1000, got {args.count}")
    if not 1 <= args.gang <= 64 or args.count % args.gang:
        p.error(f"--gang: must be 1-64 and divide --count ({args.count}), got {args.gang}")
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    try:
        api = client.CoreV1Api(config.new_client_from_config(config_file=args.kubeconfig))
    except (config.ConfigException, OSError) as exc:
        print(f"submit_pods: kubeconfig: {exc} (run 'flowplan sandbox up' and the export it prints)", file=sys.stderr)
        return 2
    for i in range(args.count):
        name = f"{args.prefix}-{i}"
        try:
            if args.gang > 1:  # a gang's pods declare alike: the model, target, priority of gang k
                k = i // args.gang
                body = pod(name, args.namespace, k, (f"{args.prefix}-g{k}", args.gang))
            else:
                body = pod(name, args.namespace, i)
            api.create_namespaced_pod(args.namespace, body, _preload_content=False)  # type: ignore[arg-type]
        except ApiException as exc:
            print(f"submit_pods: {name}: {exc.status} {exc.reason}", file=sys.stderr)
            return 1
        except Exception as exc:  # the server is not there
            print(f"submit_pods: {name}: cannot reach the API server ({type(exc).__name__})", file=sys.stderr)
            return 1
    gangs = f" in {args.count // args.gang} gang(s) of {args.gang}" if args.gang > 1 else ""
    print(f"submitted {args.count} pod(s){gangs} to namespace {args.namespace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
