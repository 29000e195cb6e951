"""The ``flowplan`` command line, run as a real subprocess.

Bad-input matrix (each: exit code 2, exactly one line on stderr naming the file and the field, no
traceback, nothing written to --out):

    not JSON · truncated JSON · JSON but not an object · wrong apiVersion · unknown field ·
    missing required field · NaN · Infinity · negative capacity · unknown node name ·
    duplicate node · duplicate job · min > max · running job without a node · tier 2 worse than
    tier 1 · missing file · directory instead of file · bad --time-limit · unknown --solver

Good paths: table and JSON output, --out written atomically, schemas are valid JSON Schema
documents, ``flowplan check`` accepts a plan it produced and rejects a tampered one.

Ctrl-C (SIGINT) during the imports, after the parser is built and mid-run: exit code 130, one line, no
traceback.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, benchmark_module, random_snapshot

GOOD: dict[str, Any] = {
    "apiVersion": "flowplan/v1",
    "time": 1000.0,
    "nodes": [{"name": "a", "cpu_millis": 8000, "memory_mib": 16000}, {"name": "b", "cpu_millis": 4000}],
    "jobs": [
        {
            "id": "j1",
            "status": "running",
            "node": "a",
            "allocation": {"cpu_millis": 2000},
            "min_cpu_millis": 1000,
            "max_cpu_millis": 8000,
        },
        {"id": "j2", "status": "pending", "min_cpu_millis": 1000, "max_cpu_millis": 4000},
    ],
}


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flowplan", *args], input=stdin, capture_output=True, text=True, timeout=120)


def _mut(path: list[Any], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(GOOD))
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()

BAD_SNAPSHOTS: dict[str, tuple[str, str]] = {
    # case: (file content, text the error must contain)
    "not json": ("this is not json", "not valid JSON"),
    "truncated json": ('{"time": 1, "nodes": [', "not valid JSON"),
    "not an object": ("[1, 2, 3]", "a snapshot is a JSON object"),
    "wrong apiVersion": (json.dumps(_mut(["apiVersion"], "flowplan/v9")), "apiVersion"),
    "unknown field": (json.dumps(_mut(["nodes", 0, "cpus"], 4)), "nodes[0].cpus"),
    "missing time": (json.dumps(_mut(["time"], _DELETE)), "time"),
    "nan": (json.dumps(GOOD).replace('"time": 1000.0', '"time": NaN'), "time"),
    "infinity": (
        json.dumps(_mut(["jobs", 0, "checkpoint_seconds"], 1)).replace(
            '"checkpoint_seconds": 1', '"checkpoint_seconds": Infinity'
        ),
        "jobs[0].checkpoint_seconds",
    ),
    "negative capacity": (json.dumps(_mut(["nodes", 1, "cpu_millis"], -4000)), "nodes[1].cpu_millis"),
    "unknown node": (json.dumps(_mut(["jobs", 0, "node"], "zzz")), "jobs[0].node"),
    "duplicate node": (json.dumps(_mut(["nodes", 1, "name"], "a")), "nodes[1].name"),
    "duplicate job": (json.dumps(_mut(["jobs", 1, "id"], "j1")), "jobs[1].id"),
    "min above max": (json.dumps(_mut(["jobs", 1, "min_cpu_millis"], 9000)), "jobs[1]"),
    "running without node": (json.dumps(_mut(["jobs", 0, "node"], None)), "jobs[0]"),
    "tier2 worse than tier1": (
        json.dumps(_mut(["jobs", 1, "target"], {"direction": "higher", "tier1": {"value": 0.9}, "tier2": {"value": 0.8}})),
        "jobs[1].target.tier2.value: 0.8 must be at least as good",
    ),
    "negative priority": (json.dumps(_mut(["jobs", 1, "priority"], -1)), "jobs[1].priority"),
    "empty file": ("", "empty (no JSON at all)"),  # was "not valid JSON at line 1 column 1: Expecting value"
    "only blanks": (" \n\t\n", "empty (no JSON at all)"),
    # A target's metric name was any string at all: empty, 100,000 characters, control characters.
    "empty metric name": (json.dumps(_mut(["jobs", 1, "target"], {"metric": "", "tier1": {"value": 1}})), "target.metric"),
    "control characters in a metric name": (
        json.dumps(_mut(["jobs", 1, "target"], {"metric": "acc\u0007", "tier1": {"value": 1}})),
        "jobs[1].target.metric: must be printable",
    ),
    # Python converts at most 4300 digits: was a ValueError traceback (exit 1).
    "5000-digit integer": ('{"time": 1' + "0" * 5000 + "}", "not valid JSON: an integer of 5001 digits"),
}


@pytest.mark.parametrize("case", sorted(BAD_SNAPSHOTS))
def test_bad_snapshot_one_line_exit_2(case: str, tmp_path: Path) -> None:
    content, must = BAD_SNAPSHOTS[case]
    f = tmp_path / "snap.json"
    f.write_text(content)
    out = tmp_path / "plan.json"
    r = run("plan", str(f), "--out", str(out))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert str(f) in lines[0] and must in lines[0], lines[0]
    assert r.stdout == ""
    assert not out.exists()


@pytest.mark.parametrize(
    "args,must",
    [
        (["plan", "/no/such/file.json"], "no such file"),
        (["plan", "."], "directory"),
        (["plan", "-", "--time-limit", "-3"], "--time-limit"),
        (["plan", "-", "--time-limit", "abc"], "--time-limit"),
        (["plan", "-", "--solver", "gurobi"], "--solver"),
        (["simulate", "--time-limit", "-1"], "--time-limit"),
        (["simulate", "--time-limit", "0"], "--time-limit"),
        (["schema", "nothing"], "which"),
        (["serve", "--keep-plans", "0"], "--keep-plans"),
        (["daemon", "--keep-snapshots", "-1"], "--keep-snapshots"),
        (["daemon", "--keep-plans", "many"], "--keep-plans"),
    ],
)
def test_bad_arguments(args: list[str], must: str) -> None:
    r = run(*args, stdin=json.dumps(GOOD))
    assert r.returncode == 2
    assert must in r.stderr and "Traceback" not in r.stderr


def test_table_output() -> None:
    r = run("plan", "-", stdin=json.dumps(GOOD))
    assert r.returncode == 0, r.stderr
    assert "JOB" in r.stdout and "j1" in r.stdout and "j2" in r.stdout
    assert "solver: cpsat" in r.stdout and "Why:" in r.stdout


@pytest.mark.parametrize("solver", ["cpsat", "pulp", "greedy"])
def test_json_output_and_check_roundtrip(solver: str, tmp_path: Path) -> None:
    snap = random_snapshot(11, n_nodes=3, n_jobs=9)
    sf = tmp_path / "snap.json"
    sf.write_text(snap.model_dump_json())
    pf = tmp_path / "plan.json"
    r = run("plan", str(sf), "--solver", solver, "--format", "json", "--out", str(pf), "--time-limit", "2")
    assert r.returncode == 0, r.stderr
    plan = json.loads(pf.read_text())
    assert plan["apiVersion"] == "flowplan/v1" and plan["kind"] == "Plan"
    assert {a["job"] for a in plan["assignments"]} == {j.id for j in snap.jobs if j.status != "finished"}
    assert set(plan["solver"]) >= {"status", "seconds", "gap"}
    ok = run("check", str(sf), str(pf))
    assert ok.returncode == 0 and "plan is valid" in ok.stdout
    # Tamper: push one placed job far over its node's capacity.
    placed = [a for a in plan["assignments"] if a["node"]]
    assert placed
    placed[0]["cpu_millis"] = 10**8
    pf.write_text(json.dumps(plan))
    bad = run("check", str(sf), str(pf))
    assert bad.returncode == 1 and "violation" in bad.stdout


@pytest.mark.parametrize("which", ["snapshot", "plan"])
def test_schema_is_json_schema(which: str) -> None:
    r = run("schema", which)
    assert r.returncode == 0
    schema = json.loads(r.stdout)
    assert schema["type"] == "object" and "properties" in schema
    assert schema["additionalProperties"] is False


def _readme_commands() -> dict[str, set[str]]:
    """Subcommand -> options, from every ``flowplan <cmd> ...`` line of the README's code blocks."""
    import re

    text = (REPO / "README.md").read_text()
    out: dict[str, set[str]] = {}
    for lang, block in re.findall(r"```([a-z]*)\n(.*?)```", text, re.S):
        if lang not in ("", "bash", "sh"):
            continue  # a Python example is not a command line
        for line in block.splitlines():
            line = line.split("#", 1)[0]
            for m in re.finditer(r"(?:^|&& |\s)flowplan ([a-z]+)([^&|]*)", line):  # a command ends at && or a pipe
                out.setdefault(m.group(1), set()).update(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-z])\b", m.group(2)))
    return out


def test_readme_command_list_matches_the_cli() -> None:
    """Issue 16: the README's commands are the CLI's, and every option a README line shows is in
    that command's --help (and the other way round for the commands: none undocumented)."""
    import re

    top = run("--help")
    assert top.returncode == 0
    listed = set(re.findall(r"^    ([a-z]+)\s", top.stdout, re.M))
    readme = _readme_commands()
    assert set(readme) == listed, (sorted(set(readme) - listed), sorted(listed - set(readme)))
    for cmd, options in sorted(readme.items()):
        if cmd == "sandbox":
            helps = "".join(run("sandbox", sub, "--help").stdout for sub in ("up", "train", "down"))
        else:
            helps = run(cmd, "--help").stdout
        for opt in sorted(options):
            assert re.search(rf"(?<![\w-]){re.escape(opt)}\b", helps), f"README shows 'flowplan {cmd} {opt}', --help does not"


# -- objective profiles: flowplan plan/simulate --objective ------------------------------------------


@pytest.mark.parametrize(
    "given,profile",
    [
        ("deadlines>makespan>mean-jct", "deadlines>makespan>mean-jct"),
        ("deadlines>mean-jct>makespan", "deadlines>mean-jct>makespan"),
        ("mean-jct", "deadlines>mean-jct>makespan"),
        ("makespan", "deadlines>makespan>mean-jct"),
    ],
)
def test_plan_objective_sets_the_snapshots_profile(given: str, profile: str, tmp_path: Path) -> None:
    from planner import Snapshot, snapshot_digest

    out = tmp_path / "plan.json"
    r = run("plan", "-", "--objective", given, "--format", "json", "--out", str(out), stdin=json.dumps(GOOD))
    assert r.returncode == 0, r.stderr
    snap = Snapshot.model_validate(GOOD)
    planned = snap.model_copy(update={"settings": snap.settings.model_copy(update={"objective": profile})})
    assert json.loads(out.read_text())["snapshot_digest"] == snapshot_digest(planned)
    table = run("plan", "-", "--objective", given, stdin=json.dumps(GOOD))
    assert table.returncode == 0 and f"objective: {profile.replace('>', ' > ')}" in table.stdout


def test_plan_without_objective_keeps_the_snapshots_own(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(GOOD))
    doc["settings"] = {"objective": "deadlines>makespan>mean-jct"}
    r = run("plan", "-", stdin=json.dumps(doc))
    assert r.returncode == 0 and "objective: deadlines > makespan > mean-jct" in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "-", "--objective", "fastest"],
        ["plan", "-", "--objective", "makespan>deadlines"],
        ["simulate", "--objective", "fastest", "--quiet"],
        ["simulate", "--objective", "", "--quiet"],
    ],
)
def test_bad_objective_is_one_line_naming_flag_and_value(args: list[str], tmp_path: Path) -> None:
    r = run(*args, stdin=json.dumps(GOOD))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "--objective" in lines[0] and repr(args[args.index("--objective") + 1]) in lines[0], lines[0]
    assert "deadlines>mean-jct>makespan" in lines[0]  # says what is known
    assert r.stdout == ""


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_help_lists_the_objective_profiles_and_what_they_optimise(command: str) -> None:
    import os

    env = {**os.environ, "COLUMNS": "2000"}  # argparse wraps lines (and breaks words at hyphens)
    r = subprocess.run([sys.executable, "-m", "flowplan", command, "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    for profile in ("deadlines>mean-jct>makespan", "deadlines>makespan>mean-jct"):
        assert f"'{profile}': meet QoE deadlines" in text, text
    assert "lowest mean job completion time" in text and "shortest makespan" in text


def test_simulate_objective_reaches_flowplan(tmp_path: Path) -> None:
    r = run("simulate", "--policy", "flowplan", "--objective", "makespan", "--quiet", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "objective of flowplan and oracle: deadlines>makespan>mean-jct" in r.stdout
    assert json.loads((tmp_path / "summary.json").read_text())["objective"] == "deadlines>makespan>mean-jct"


def test_simulate_makespan_slack_reaches_flowplan_and_shortens_the_demos_makespan(tmp_path: Path) -> None:
    """``--makespan-slack 0`` (mean completion first within the reachable makespan) ends the demo's
    batch sooner than the default (which only holds it to the equal split's makespan): the long
    yolov3 job is given more than its equal share early on."""
    free = run("simulate", "--policy", "flowplan", "--quiet", "--out", str(tmp_path / "free"))
    held = run("simulate", "--policy", "flowplan", "--makespan-slack", "0", "--quiet", "--out", str(tmp_path / "held"))
    assert free.returncode == 0 and held.returncode == 0, (free.stderr, held.stderr)
    assert "makespan slack of flowplan and oracle: 0" in held.stdout
    summary = json.loads((tmp_path / "held" / "summary.json").read_text())
    assert summary["makespan_slack"] == 0
    span = {
        k: json.loads((tmp_path / k / "summary.json").read_text())["policies"]["flowplan"]["makespan"]["mean"]
        for k in ("free", "held")
    }
    assert span["held"] < span["free"], span


@pytest.mark.parametrize("value", ["-0.1", "11", "nan", "inf", "five"])
def test_bad_makespan_slack_is_one_line_naming_flag_and_value(value: str) -> None:
    r = run("simulate", "--makespan-slack", value, "--quiet")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and "--makespan-slack" in lines[-1] and value in lines[-1], r.stderr


# -- the closing table of flowplan simulate -----------------------------------------------------------


@pytest.mark.parametrize(
    "value,unit,sd,text",
    [
        (14.1, "% shorter", None, "14.1 % shorter"),
        (-14.1, "% shorter", None, "14.1 % longer"),
        (-14.1, "% shorter", 2.5, "14.1 ± 2.5 % longer"),
        (0.02, "% shorter", None, "0.0 % (the same)"),
        (-0.04, "% shorter", None, "0.0 % (the same)"),
        (3.0, "% shorter for one job", None, "3.0 % shorter for one job"),
        (-3.0, "% shorter for one job", None, "3.0 % longer even for the job it shortens most"),
        (1.5, "x jobs meeting tier-1 deadlines", None, "1.50x jobs meeting tier-1 deadlines"),
        (0.5, "x jobs meeting tier-1 deadlines", None, "0.50x jobs meeting tier-1 deadlines (fewer)"),
    ],
)
def test_gain_words_follow_the_sign(value: float, unit: str, sd: float | None, text: str) -> None:
    from flowplan.simulate import gain_text

    assert gain_text(value, unit, sd) == text


@pytest.mark.parametrize("change,text", [(3.3, "makespan 3.3 % longer"), (-2.9, "makespan 2.9 % shorter")])
def test_makespan_change_words_follow_the_sign(change: float, text: str) -> None:
    from flowplan.simulate import change_text

    assert change_text("makespan", change) == text


def _job_result(jid: str, arrival: float, finish: float, tier1: float | None, deadline: float | None, **kw: Any) -> Any:
    from adapters.sim.run import JobResult

    met = None if deadline is None else (tier1 is not None and arrival + tier1 <= deadline)
    fields: dict[str, Any] = dict(
        id=jid, model="cifar10", arrival=arrival, start=arrival, finish=finish, jct=finish - arrival, tier1_time=tier1,
        tier1_deadline=deadline, met_deadline=met, epochs=10.0, migrations=0, resizes=0, pauses=0, lost_epochs=0.0, tag=False,
    )  # fmt: skip
    fields.update(kw)
    fields.setdefault("restarts", fields["migrations"] + fields["pauses"])
    job = JobResult(**{k: v for k, v in fields.items() if k in JobResult.__dataclass_fields__})
    job.restarts = fields["restarts"]  # type: ignore[attr-defined]  # (a field once the simulator counts them)
    return job


def _run_result(policy: str, jobs: list[Any], **kw: Any) -> Any:
    from adapters.sim.run import RunResult

    jcts = [j.jct for j in jobs]
    with_deadline = [j for j in jobs if j.met_deadline is not None]
    fields: dict[str, Any] = dict(
        scenario="t", policy=policy, seed=0, finished=True, makespan=max(j.finish for j in jobs), mean_jct=sum(jcts) / len(jcts),
        p95_jct=max(jcts), mean_tier1_time=None, qoe_met=sum(bool(j.met_deadline) for j in with_deadline),
        qoe_total=len(with_deadline), qoe_share=None, cpu_utilisation=0.8, gpu_utilisation=None,
        migrations=sum(j.migrations for j in jobs), resizes=3, pauses=sum(j.pauses for j in jobs), intervals=10,
        plan_seconds_mean=0.02, plan_seconds_p95=0.03, plan_seconds_max=0.04, checker_failures=0, makespan_lower_bound=500.0,
        jobs=jobs, idle_waits=None,
    )  # fmt: skip
    fields.update(kw)
    r = RunResult(**{k: v for k, v in fields.items() if k in RunResult.__dataclass_fields__})
    for k, v in fields.items():  # a field the simulator may not have yet (idle_waits)
        if k not in RunResult.__dataclass_fields__:
            setattr(r, k, v)
    return r


def _summary_table(runs: list[Any], metric: str = "mean_jct") -> str:
    from adapters.sim.scenario import parse_scenario
    from flowplan.simulate import _summary, render_summary

    sc = parse_scenario(
        {"name": "t", "metric": metric, "nodes": [{"name": "h", "cpu_millis": 8000}],
         "jobs": [{"id": "j", "model": "cifar10", "batch_size": 128, "kind": "cpu"}]}
    )  # fmt: skip
    return render_summary(sc, _summary(sc, runs))


def _columns(table: str) -> tuple[list[str], dict[str, list[str]]]:
    """Header and rows of the rendered table, split on runs of two or more spaces."""
    import re

    lines = table.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("POLICY"))
    header = re.split(r"\s{2,}", lines[i].strip())
    rows = {}
    for line in lines[i + 2 :]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = cells
    return header, rows


def test_simulate_table_tells_deadlines_tier1_idle_and_restarts() -> None:
    # flowplan: 3 of 4 deadlines met, two jobs reach tier 1 (mean 150 s), 2 migrations + 1 pause, 0 idle waits;
    # docker: no job has a deadline, no job reaches tier 1, 5 idle waits, 12 minutes longer mean JCT.
    fp_jobs = [
        _job_result("a", 0, 600, 100.0, 200.0, migrations=2),
        _job_result("b", 0, 700, 200.0, 300.0, pauses=1),
        _job_result("c", 0, 800, None, 900.0),
        _job_result("d", 0, 900, None, None),
    ]
    for j, deadline in zip(fp_jobs, (200.0, 300.0, 900.0, 1000.0), strict=True):
        j.tier1_deadline, j.met_deadline = deadline, j.id != "c"
    dk_jobs = [_job_result(x, 0, 1320 + k, None, None) for k, x in enumerate("abcd")]
    runs = [_run_result("flowplan", fp_jobs, idle_waits=0), _run_result("docker", dk_jobs, idle_waits=5)]
    runs[0].qoe_met, runs[0].qoe_total = 3, 4
    table = _summary_table(runs)
    header, rows = _columns(table)
    assert header == ["POLICY", "MAKESPAN", "/BOUND", "MEAN JCT", "P95 JCT", "TIER1", "DEADLINES", "UTIL", "MIGR", "RESIZE",
                      "RESTARTS", "IDLE", "PLAN"]  # fmt: skip
    assert all(len(cells) == len(header) for cells in rows.values()), table  # no two cells run together
    col = {name: k for k, name in enumerate(header)}
    fp, dk = rows["flowplan"], rows["docker"]
    assert (fp[col["DEADLINES"]], dk[col["DEADLINES"]]) == ("3/4", "-")
    assert (fp[col["TIER1"]], dk[col["TIER1"]]) == ("2:30", "-")
    assert (fp[col["RESTARTS"]], fp[col["IDLE"]], dk[col["IDLE"]]) == ("3", "0", "5")
    assert "(reached by 2/4 jobs under flowplan, 0/4 jobs under docker)" in table
    # docker's mean JCT 1321.5 s against flowplan's 750 s: flowplan is 43.2 % shorter; the reverse reads "longer".
    assert "flowplan vs docker: 43.2 % shorter" in table
    slower = [_run_result("flowplan", dk_jobs), _run_result("docker", fp_jobs)]
    assert "flowplan vs docker: 76.2 % longer" in _summary_table(slower)
    assert "% shorter" not in _summary_table(slower).split("flowplan vs docker")[1]


def test_simulate_table_without_idle_measure_shows_a_dash() -> None:
    runs = [_run_result("flowplan", [_job_result("a", 0, 600, 100.0, None)])]
    header, rows = _columns(_summary_table(runs))
    idle = rows["flowplan"][header.index("IDLE")]
    assert idle == "-" if getattr(runs[0], "idle_waits", None) is None else idle.isdigit()
    assert rows["flowplan"][header.index("TIER1")] == "1:40"


# -- benchmarks/results.py: the split, the goals, and a run end to end ------------------------------------


def _results_module() -> Any:
    return benchmark_module("results.py")


def _scenario(metric: str, n_nodes: int = 1, name: str = "t", policies: tuple[str, ...] = ("flowplan", "docker")) -> Any:
    from adapters.sim.scenario import parse_scenario

    return parse_scenario(
        {"name": name, "metric": metric, "baseline": "docker", "policies": list(policies),
         "nodes": [{"name": "h", "cpu_millis": 8000, "count": n_nodes}],
         "jobs": [{"id": "j", "model": "cifar10", "batch_size": 128, "kind": "cpu"}]}
    )  # fmt: skip


def _runs(finishes: dict[str, list[float]], **per_policy: dict[str, Any]) -> list[Any]:
    """One run per policy; its jobs (arriving at 0) finish at the given times."""
    return [
        _run_result(p, [_job_result(f"j{k}", 0, f, None, None) for k, f in enumerate(fs)], **per_policy.get(p, {}))
        for p, fs in finishes.items()
    ]


@pytest.mark.parametrize(
    "metric,values,best,gap,prediction,formulation",
    [
        # mean JCT (lower is better): flowplan 110, oracle 105, best docker 100: +10 % = +5 % + +5 %
        ("mean_jct", {"flowplan": 110, "oracle": 105, "docker": 100}, "docker", 10.0, 5.0, 5.0),
        # the oracle better than the best baseline: a negative formulation error; flowplan is the best
        ("mean_jct", {"flowplan": 100, "oracle": 90, "docker": 120}, "flowplan", 0.0, 10.0, -10.0),
        # deadlines met (higher is better), in jobs: flowplan 2, oracle 3, docker 4
        ("qoe_met", {"flowplan": 2, "oracle": 3, "docker": 4}, "docker", 2.0, 1.0, 1.0),
    ],
)
def test_results_split_gap_into_prediction_and_formulation(
    metric: str, values: dict[str, float], best: str, gap: float, prediction: float, formulation: float
) -> None:
    res = _results_module()
    runs = _runs({p: [v] for p, v in values.items()})
    if metric == "qoe_met":
        for r in runs:
            r.qoe_met, r.qoe_total = int(values[r.policy]), 4
    sp = res.split(_scenario(metric), runs)
    assert sp["best"] == best
    assert (sp["gap"], sp["prediction"], sp["formulation"]) == pytest.approx((gap, prediction, formulation))
    assert sp["gap"] == pytest.approx(sp["prediction"] + sp["formulation"])


def test_results_job_jct_counts_a_one_job_gain_only_without_a_longer_makespan() -> None:
    res = _results_module()
    # docker (the baseline): jobs finish at 100 s and 200 s. flowplan: one job 50 % shorter but the
    # makespan 5 % longer: nothing to claim. oracle: one job 40 % shorter, makespan shorter: 40.
    runs = _runs({"flowplan": [50, 210], "oracle": [60, 190], "docker": [100, 200]})
    sp = res.split(_scenario("job_jct"), runs)
    assert sp["values"] == {"flowplan": 0.0, "oracle": pytest.approx(40.0), "docker": 0.0}
    assert (sp["gap"], sp["prediction"], sp["formulation"]) == pytest.approx((0.0, 40.0, -40.0))


def test_results_headline_without_a_longer_makespan_is_not_reached_when_the_makespan_is_longer() -> None:
    """FlowCon's headline is a one-job gain *without a longer makespan*: a 49 % gain with the
    makespan 4.4 % longer is not the headline (it printed "reached" before)."""
    from types import SimpleNamespace

    res = _results_module()
    sc = SimpleNamespace(
        metric="job_jct", baseline="docker", headline=42.06, paper="FlowCon",
        headline_text="up to 42.06% shorter completion time for a specific job without a longer makespan",
    )  # fmt: skip
    longer = {"docker": {"mean": 49.0, "unit": "% shorter for one job", "makespan_change": 4.4}}
    shorter = {"docker": {"mean": 49.0, "unit": "% shorter for one job", "makespan_change": -0.5}}
    assert res.verdict(sc, longer)[-1].endswith("makespan 4.4 % longer — **not reached**.")
    assert res.verdict(sc, shorter)[-1].endswith("makespan 0.5 % shorter — **reached**.")


def test_results_goals_are_computed_met_and_not_met() -> None:
    res = _results_module()
    # One host, bound 500 s. flowplan: mean JCT 550, makespan 600 (1.20 x bound), p95 600, idle 0.
    # docker: mean JCT 500, makespan 590, p95 590; flowplan[makespan]: 560 / 580 (1.16) / 580.
    runs = _runs(
        {"flowplan": [500, 600], "oracle": [480, 590], "flowplan[makespan]": [540, 580], "docker": [410, 590]},
        flowplan={"idle_waits": 0},
        oracle={"idle_waits": 0},
        **{"flowplan[makespan]": {"idle_waits": 2}, "docker": {"idle_waits": 0}},
    )
    got = {g.goal: g for g in res.goals(_scenario("mean_jct"), runs)}
    assert set(got) == {
        "best or within 1% of the best on mean_jct",
        "mean JCT no worse than docker",
        "makespan within 5% of the best",
        "p95 JCT within 10% of the best",
        "makespan / lower bound <= 1.15 (one host)",
        "idle waits = 0",
    }
    assert (got["best or within 1% of the best on mean_jct"].met, got["mean JCT no worse than docker"].met) == (False, False)
    assert got["mean JCT no worse than docker"].reference == "docker 8m20s"
    assert got["makespan within 5% of the best"].met is True and "(+1.7%)" in got["makespan within 5% of the best"].flowplan
    assert got["makespan / lower bound <= 1.15 (one host)"].flowplan == "1.20"
    assert got["makespan / lower bound <= 1.15 (one host)"].met is False
    assert (got["idle waits = 0"].met, got["idle waits = 0"].makespan_profile) == (True, False)
    # Several nodes: no single-host goal; pollux-160 adds the Tiresias goal.
    many = res.goals(_scenario("mean_jct", n_nodes=2, name="pollux-160"), [*runs, *_runs({"tiresias": [520, 600]})])
    names = [g.goal for g in many]
    assert "makespan / lower bound <= 1.15 (one host)" not in names
    tiresias = next(g for g in many if g.goal == "mean JCT below tiresias")
    assert (tiresias.met, tiresias.makespan_profile) == (True, False)


def test_results_rows_add_the_oracle_and_the_makespan_profile() -> None:
    res = _results_module()
    sc = _scenario("makespan", policies=("flowplan", "docker", "tiresias"))
    assert res.policy_rows(sc) == ["flowplan", "oracle", "flowplan[makespan]", "docker", "tiresias"]
    assert res.build_policy("flowplan[makespan]", None).objective == "deadlines>makespan>mean-jct"
    assert res.build_policy("oracle", None).reads_ground_truth is True


def test_results_script_runs_end_to_end_and_keeps_the_analysis(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "results.py"
    res = _results_module()
    (tmp_path / "results.md").write_text(f"old tables\n{res.ANALYSIS_MARKER}\n## Hand-written analysis\nkept.\n")
    r = subprocess.run(
        [sys.executable, str(script), "--seeds", "1", "--scenarios", "demo", "--jobs", "2", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "results.md").read_text()
    assert "old tables" not in md and md.endswith(f"{res.ANALYSIS_MARKER}\n## Hand-written analysis\nkept.\n")
    for needle in ("## Goals, checked per scenario", "| **flowplan** |", "| **oracle** |", "| flowplan[makespan] |",
                   "prediction error (flowplan − oracle)", "| demo | idle waits = 0 |", "restarts / job"):  # fmt: skip
        assert needle in md, needle
    data = json.loads((tmp_path / "results.json").read_text())
    assert {r["policy"] for r in data["demo"]["runs"]} >= {"flowplan", "oracle", "flowplan[makespan]", "docker"}
    assert data["demo"]["checker_failures"] == 0
    bad = subprocess.run([sys.executable, str(script), "--scenarios", "nope"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "unknown scenario 'nope'" in bad.stderr


def test_out_keeps_an_existing_files_mode(tmp_path: Path) -> None:
    """--out replaces the file atomically (a temporary file renamed over it) and keeps its mode;
    a new file gets the usual default, not the temporary file's 0600."""
    shared = tmp_path / "shared.json"
    shared.write_text("old")
    shared.chmod(0o644)
    assert run("plan", "-", "--format", "json", "--out", str(shared), stdin=json.dumps(GOOD)).returncode == 0
    assert shared.stat().st_mode & 0o777 == 0o644 and json.loads(shared.read_text())["kind"] == "Plan"
    fresh = tmp_path / "fresh.json"
    assert run("plan", "-", "--format", "json", "--out", str(fresh), stdin=json.dumps(GOOD)).returncode == 0
    assert fresh.stat().st_mode & 0o777 != 0o600 and fresh.stat().st_mode & 0o444 == 0o444


def test_out_to_a_pipe_writes_to_it_and_leaves_it_a_pipe(tmp_path: Path) -> None:
    """--out /dev/null or a named pipe: the rename over it put a regular file in its place (as root even
    /dev/null; a FIFO stands in for it here)."""
    import stat
    import threading

    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    r = run("plan", "-", "--format", "json", "--out", str(fifo), stdin=json.dumps(GOOD))
    assert r.returncode == 0, r.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    reader.join(timeout=30)
    assert got and json.loads(got[0])["kind"] == "Plan"


def test_out_through_a_symlink_replaces_the_file_it_points_to_and_keeps_the_link(tmp_path: Path) -> None:
    """--out LINK: the file the link points to gets the plan and the link stays a link (the rename
    replaced the link itself); an empty --out and a --out under a file are one line naming them."""
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert run("plan", "-", "--format", "json", "--out", str(link), stdin=json.dumps(GOOD)).returncode == 0
    assert link.is_symlink() and json.loads(real.read_text())["kind"] == "Plan"
    r = run("plan", "-", "--out", "", stdin=json.dumps(GOOD))
    assert r.returncode == 2 and "--out: an empty path" in r.stderr
    r = run("plan", "-", "--out", str(real / "x.json"), stdin=json.dumps(GOOD))
    assert r.returncode == 2 and f"directory {real} is a file, not a directory" in r.stderr, r.stderr


def test_schema_states_the_running_job_rule() -> None:
    """The cross-field rule a JSON Schema can express (a running job has node and allocation) is in
    the published schema, so a validator other than ours refuses what the planner refuses."""
    import jsonschema_rs  # schemathesis's validator, installed with the test extras

    r = run("schema", "snapshot")
    validator = jsonschema_rs.validator_for(json.loads(r.stdout))
    good = json.loads((REPO / "examples" / "snapshots" / "qoe-deadlines.json").read_text())
    assert validator.is_valid(good)
    running = next(j for j in good["jobs"] if j["status"] == "running")
    del running["node"]
    assert not validator.is_valid(good)
    assert "node" in next(iter(validator.iter_errors(good))).message


def test_check_says_when_the_plan_answers_another_snapshot_or_is_no_plan(tmp_path: Path) -> None:
    """Issue 16: a plan checked against another snapshot listed 18 violations; an empty plan file
    printed pydantic's raw text. Both are now one line, exit 2."""
    a, b = random_snapshot(3, n_nodes=2, n_jobs=4), random_snapshot(4, n_nodes=2, n_jobs=4)
    sa, sb = tmp_path / "a.json", tmp_path / "b.json"
    sa.write_text(a.model_dump_json())
    sb.write_text(b.model_dump_json())
    pf = tmp_path / "plan.json"
    assert run("plan", str(sa), "--objective", "makespan", "--format", "json", "--out", str(pf)).returncode == 0
    assert run("check", str(sa), str(pf)).returncode == 0  # made with --objective: still its snapshot
    other = run("check", str(sb), str(pf))
    assert other.returncode == 2 and other.stdout == ""
    assert "answers another snapshot" in other.stderr and len(other.stderr.strip().splitlines()) == 1
    empty = tmp_path / "empty.json"
    empty.write_text("")
    r = run("check", str(sa), str(empty))
    assert r.returncode == 2 and r.stderr.strip().endswith("not a valid plan: empty file"), r.stderr


def test_readme_plan_example_is_what_the_command_prints() -> None:
    """The README's example output of `flowplan plan examples/snapshots/qoe-deadlines.json` (issue 16:
    it had gone stale): every line it shows, but the solver's timing, is in today's output."""
    text = (REPO / "README.md").read_text()
    start = text.index("$ flowplan plan examples/snapshots/qoe-deadlines.json\n")
    shown = text[start : text.index("```", start)].splitlines()[1:]
    r = subprocess.run(
        [sys.executable, "-m", "flowplan", "plan", "examples/snapshots/qoe-deadlines.json"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    printed = set(r.stdout.splitlines())
    for line in shown:
        if line in ("...", "") or line.startswith("solver: "):
            continue
        assert line in printed, f"README shows a line the command no longer prints: {line!r}"


# -- Ctrl-C ----------------------------------------------------------------------------------------------

# Where SIGINT lands, each found by a line the process prints, not by a sleep: ``-X importtime`` writes a
# line to stderr as each module finishes importing, so a signal sent on pydantic's line lands while the
# CLI's own imports (the planner, numpy, ortools) still run; on the simulator's "policies:" line it
# lands mid-run (20 seeds keep it running long after that line).
SIGINT_POINTS = {
    "during the CLI's imports": r"\| +pydantic$",
    "after the parser is built": r"\| +flowplan\.simulate$",
    "mid-run": r"^policies: ",
}


@pytest.mark.parametrize("marker", SIGINT_POINTS.values(), ids=SIGINT_POINTS.keys())
def test_ctrl_c_prints_one_line_and_exits_130(marker: str) -> None:
    """A Ctrl-C (SIGINT to a real `python -m flowplan simulate` process) at any of these points ends it with
    exit code 130 and the one line ``flowplan: interrupted`` on stderr — never a traceback."""
    cmd = [sys.executable, "-X", "importtime", "-m", "flowplan", "simulate", "--seeds", "20"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = ""
    for line in proc.stderr:
        seen += line
        if re.search(marker, line.rstrip("\n")):
            break
    else:
        proc.wait(timeout=60)
        pytest.fail(f"the process ended before printing {marker!r}: {seen[-2000:]}")
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=60)[1]
    err = "\n".join(ln for ln in (seen + rest).splitlines() if not ln.startswith("import time:"))
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "flowplan: interrupted", err
    # 130 from the handler; -SIGINT if Python re-raised the signal on its way out (a shell shows 130 too)
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)


#: Packages the light CLI paths must not import: the planner and models (NumPy, SciPy, OR-Tools behind
#: them), the service (FastAPI) and pydantic, each of which costs a good part of a second at start-up.
HEAVY = ("planner", "models", "ortools", "fastapi", "numpy", "scipy", "pydantic", "api", "store")
LIGHT_PATHS = {
    "import flowplan.cli": "import flowplan.cli",
    "the whole parser (what --help builds)": "import flowplan.cli; flowplan.cli._parser()",
    "flowplan --version": "import flowplan.cli\ntry:\n    flowplan.cli.main(['--version'])\nexcept SystemExit:\n    pass",
    "flowplan --help": "import flowplan.cli\ntry:\n    flowplan.cli.main(['--help'])\nexcept SystemExit:\n    pass",
}


@pytest.mark.parametrize("code", LIGHT_PATHS.values(), ids=list(LIGHT_PATHS))
def test_light_paths_import_no_planner_models_or_service(code: str) -> None:
    """In a fresh interpreter (a subprocess: this one has imported everything already), the light paths
    leave none of the heavy packages in ``sys.modules``."""
    probe = f"{code}\nimport sys\nprint('LOADED:', *sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    loaded = [line for line in done.stdout.splitlines() if line.startswith("LOADED:")]
    assert loaded == ["LOADED:"], loaded


#: Every subcommand's ``--help``, nested ones too (``sandbox start``), prints and leaves no heavy package
#: in ``sys.modules``: only the planner package itself and ``planner.profiles`` (the ``--objective`` help
#: of ``plan`` and ``simulate``), which import none of the planner's models or solvers. Each command's help
#: runs in the same fresh interpreter, and each reports what it added.
EVERY_HELP = """import argparse, contextlib, io, sys
import flowplan.cli

def paths(parser, prefix):
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from paths(child, [*prefix, name])

for path in list(paths(flowplan.cli._parser(), [])):
    before = set(sys.modules)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            flowplan.cli.main([*path, "--help"])
        except SystemExit as exc:
            assert exc.code == 0, (path, exc.code)
    assert "usage: flowplan" in out.getvalue() and "(see --help)" not in out.getvalue(), path
    added = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in HEAVY)
    print("HELP", "/".join(path) or "-", *added)
"""


def test_every_help_imports_no_models_solvers_or_service() -> None:
    heavy = ("planner", "models", "ortools", "fastapi", "numpy", "scipy", "pandas", "pulp", "pydantic", "api", "store")
    done = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {heavy!r}\n{EVERY_HELP}"], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    shown = {line.split()[1]: line.split()[2:] for line in done.stdout.splitlines() if line.startswith("HELP ")}
    assert {"-", "plan", "simulate", "serve", "daemon", "sandbox", "sandbox/up"} <= set(shown), shown
    for path, added in shown.items():
        assert set(added) <= {"planner", "planner.profiles"}, (path, added)
    assert shown["plan"] == ["planner", "planner.profiles"]  # the deferred --objective help was built


def test_plan_help_still_lists_the_profiles_after_the_lazy_import() -> None:
    """The deferred ``--objective`` help is filled in when help is printed (the planner is imported then)."""
    done = run("plan", "--help")
    assert done.returncode == 0
    assert "deadlines>makespan>mean-jct" in done.stdout and "(see --help)" not in done.stdout
