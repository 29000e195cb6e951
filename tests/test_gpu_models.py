"""A job's GPU model as a choice (``gpu_type`` as a list: the Alibaba trace's ``gpu_spec``
``V100M16|V100M32``), through the contract, the planner, a baseline, the checker, the reasons and
the simulator's scenario format.

Case matrix:

- the contract: one model, a list (duplicates and order do not matter), bad shapes refused with one
  line naming the field;
- FlowPlan's plan and the Kubernetes default policy place a job only on nodes of one of its models,
  and use the second model when the first's nodes are full;
- the checker refuses a plan that starts the job on another model, naming the choice;
- a job none of whose models the cluster has waits, and the plan says so;
- a scenario job may name a choice; the simulator's snapshot carries it;
- a Docker container's ``flowplan.gpu_type`` label names a choice as ``V100M16|V100M32`` (parsed and
  written back; a blank member is refused).

Nothing is faked: the real planner, policy, checker and simulator.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.sim.scenario import ScenarioError, parse_scenario
from adapters.sim.truth import TraceLibrary
from planner import PlannerConfig, check_plan, plan
from planner.plan import Plan
from planner.policies import make_policy
from planner.snapshot import Job, Snapshot

NODES = [
    {"name": "t4", "cpu_millis": 8000, "gpus": 4, "memory_mib": 32000, "gpu_type": "T4"},
    {"name": "v16", "cpu_millis": 8000, "gpus": 1, "memory_mib": 32000, "gpu_type": "V100M16"},
    {"name": "v32", "cpu_millis": 8000, "gpus": 1, "memory_mib": 32000, "gpu_type": "V100M32"},
]


def _pending(job_id: str, gpu_type: Any) -> dict[str, Any]:
    return {"id": job_id, "status": "pending", "min_cpu_millis": 1000, "max_cpu_millis": 2000, "min_gpus": 1,
            "max_gpus": 1, "gpu_type": gpu_type}  # fmt: skip


def _snap(jobs: list[dict[str, Any]], nodes: list[dict[str, Any]] = NODES) -> Snapshot:
    return Snapshot.model_validate({"time": 0.0, "nodes": nodes, "jobs": jobs})


def test_the_contract_takes_one_model_or_a_choice() -> None:
    one = Job.model_validate(_pending("a", "T4"))
    assert one.takes_gpu_type("T4") and not one.takes_gpu_type("V100M16") and one.gpu_type_text() == "T4"
    choice = Job.model_validate(_pending("b", ["V100M32", "V100M16", "V100M32"]))
    assert choice.gpu_type_key == ("V100M16", "V100M32") and choice.gpu_type_text() == "V100M16 or V100M32"
    assert choice.takes_gpu_type("V100M32") and not choice.takes_gpu_type("T4") and not choice.takes_gpu_type(None)
    assert Job.model_validate(_pending("c", None)).takes_gpu_type(None)


@pytest.mark.parametrize("bad", [[], [""], 5, ["T4", 3], ["x"] * 65])
def test_a_bad_choice_is_refused_naming_the_field(bad: Any) -> None:
    with pytest.raises(ValueError, match="expected a GPU model name or a list of 1-64 of them") as e:
        Job.model_validate(_pending("a", bad))
    assert "gpu_type" in str(e.value)


def test_plans_use_either_model_and_never_another() -> None:
    # Two jobs that take a V100 of either size, one that takes a V100M16 only: the 1-GPU V100 nodes
    # hold one each, so the choice jobs must use both sizes and one waits; none goes to the T4 node.
    snap = _snap([_pending("either-1", ["V100M16", "V100M32"]), _pending("either-2", ["V100M32", "V100M16"]),
                  _pending("t4-only", "T4")])  # fmt: skip
    for name, got in (
        ("flowplan", plan(snap, PlannerConfig(time_limit=2)).plan),
        ("kubernetes", make_policy("kubernetes")(snap)),
    ):
        assert check_plan(snap, got) == [], name
        where = {a.job: a.node for a in got.assignments}
        assert {where["either-1"], where["either-2"]} == {"v16", "v32"}, (name, where)
        assert where["t4-only"] == "t4", (name, where)


def test_the_checker_refuses_another_model_naming_the_choice() -> None:
    snap = _snap([_pending("either", ["V100M16", "V100M32"])])
    got = plan(snap, PlannerConfig(time_limit=1)).plan
    d = got.model_dump()
    d["assignments"][0].update(node="t4")
    problems = check_plan(snap, Plan.model_validate(d))
    assert any("either: needs GPU type V100M16 or V100M32, node t4 has T4" in p for p in problems), problems


def test_a_choice_nobody_has_waits_and_says_so() -> None:
    snap = _snap([_pending("a100", ["A100", "H100"])], nodes=NODES[:1])
    got = plan(snap, PlannerConfig(time_limit=1)).plan
    a = got.assignments[0]
    assert a.node is None and "GPU type A100 or H100" in a.explanation, a.explanation


def test_a_scenario_job_may_name_a_choice_and_the_simulator_shows_it() -> None:
    from adapters.sim.cluster import SimCluster

    library = TraceLibrary.bundled()
    doc = {
        "name": "t",
        "nodes": [{"name": "v16", "cpu_millis": 8000, "gpus": 1, "gpu_type": "V100M16"}],
        "jobs": [{"id": "j", "model": "cifar10", "batch_size": 128, "epochs": 2, "gpu_type": ["V100M16", "V100M32"]}],
    }
    sc = parse_scenario(doc)
    jobs = sc.draw(0, library)
    cluster = SimCluster(sc, jobs, library, 0)
    assert cluster.observe().jobs[0].gpu_type == ["V100M16", "V100M32"]
    for bad, needle in ((["V100M16", ""], "jobs[0].gpu_type"), (5, "jobs[0].gpu_type")):
        with pytest.raises(ScenarioError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            parse_scenario({**doc, "jobs": [{**doc["jobs"][0], "gpu_type": bad}]})


def test_a_docker_label_names_a_choice() -> None:
    from adapters.docker.labels import LabelError, job_labels, parse_labels

    labels = job_labels("a", gpu_type=["V100M16", "V100M32"], min_gpus=1, max_gpus=1)
    assert labels["flowplan.gpu_type"] == "V100M16|V100M32"
    parsed = parse_labels(labels)
    assert parsed is not None and parsed.fields["gpu_type"] == ["V100M16", "V100M32"]
    one = parse_labels(job_labels("b", gpu_type="T4"))
    assert one is not None and one.fields["gpu_type"] == "T4"
    with pytest.raises(LabelError, match="flowplan.gpu_type"):
        parse_labels({**labels, "flowplan.gpu_type": "V100M16||"})
