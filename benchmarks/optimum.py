"""The offline optimum of a one-host CPU scenario: the least mean JCT at each makespan budget.

A reference no policy can beat by much: a mixed-integer program that knows everything the
simulator's ground truth knows for one seed (each job's arrival, start-up delay, the epoch it stops
at and its tier-1 epoch, its measured Amdahl speed-up, its CPU bounds) and chooses every job's CPU
share over time. It answers "is this pair of figures reachable at all?" for the goals that pit mean
JCT against makespan (``docs/results.md``, "The offline optimum").

The program, over steps of ``--step`` seconds (default 15) up to a horizon:

- ``x[j, t]`` cores for job ``j`` in step ``t``: 0 before it can train (arrival plus its start-up
  seconds), between its minimum and maximum while it has work left (every policy here keeps a
  started job at its minimum at least), at most the host's cores together;
- ``p[j, t]`` epochs done in the step, at most the measured speed at ``x`` times the part of the
  step the job can train; the speed is concave in the share, so it is read on its chords (a dozen,
  never above it: the replay ends each job no later than the program thinks);
- ``z[j, t]`` (binary) the job is done by the end of step ``t``: the epochs done so far reach its
  stop epoch; done stays done; a tier-1 deadline requires the tier-1 epoch by its step;
- the objective: the sum over jobs of the steps they are not done (mean JCT in steps); a makespan
  budget requires every job done by its step.

The program's schedule is then **replayed exactly** (the shares held over each step, progress
integrated in continuous time, no step rounding, each step's shares as the guarantees the kernel
shares the host by, so what a job that ends mid-step leaves goes to the others): the figures
printed are that replay's, a schedule that really runs. The equal split
(Docker's default, the kernel's weighted max-min share) is replayed the same way, event by event,
as a check that the inputs are the simulator's: its figures should match the simulator's Docker run
of the same seed.

Usage::

    python benchmarks/optimum.py --scenario demo --seeds 0,1,2 --budgets none,docker,0.98
    # budgets: none, docker (its makespan), a fraction of docker's makespan, or seconds (e.g. 1480s)

Requires PuLP's bundled CBC (a dependency of the planner's second backend).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pulp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from adapters.sim.cluster import SimCluster  # noqa: E402
from adapters.sim.scenario import Scenario, load_scenario  # noqa: E402
from adapters.sim.truth import GroundTruth, TraceLibrary  # noqa: E402

DEMO = REPO / "adapters" / "sim" / "data" / "demo.toml"
SCENARIOS = REPO / "examples" / "scenarios"
#: Chords of the concave speed between 0 and a job's maximum share (plus its minimum and 1 core).
CHORDS = 12


@dataclass(frozen=True)
class Known:
    """What the optimum knows of one job (seconds from the scenario's start, cores)."""

    id: str
    arrival: float
    ready: float  # arrival + start-up seconds: it trains from here
    epochs: int  # the epoch it stops at
    tier1_epoch: int | None
    deadline: float | None  # tier-1 deadline, absolute
    lo: float
    hi: float
    truth: GroundTruth

    def rate(self, cores: float) -> float:
        """Epochs per second at ``cores`` (0 at 0)."""
        return 0.0 if cores <= 0 else 1.0 / self.truth.epoch_seconds(int(round(cores * 1000)), 0)


def known_jobs(scenario: Scenario, seed: int, library: TraceLibrary) -> tuple[list[Known], float]:
    """The jobs of one seed as the simulator draws them, and the host's cores."""
    if len(scenario.nodes) != 1:
        raise SystemExit(f"optimum.py: error: --scenario: {scenario.name} has {len(scenario.nodes)} nodes; one host only")
    specs = scenario.draw(seed, library)
    if any(s.kind != "cpu" or s.replicas != 1 for s in specs):
        raise SystemExit(f"optimum.py: error: --scenario: {scenario.name} has GPU jobs or gangs; CPU jobs only")
    cluster = SimCluster(scenario, specs, library, seed)
    out = []
    for s in specs:
        j = cluster.jobs[s.id]
        t1 = j.first_reaching(s.tier1) if s.tier1 is not None else None
        out.append(
            Known(
                id=s.id,
                arrival=s.arrival,
                ready=s.arrival + s.restart_seconds,
                epochs=j.stop_epoch,
                tier1_epoch=t1,
                deadline=s.tier1_deadline if t1 is not None else None,
                lo=s.min_cpu_millis / 1000.0,
                hi=s.max_cpu_millis / 1000.0,
                truth=j.truth,
            )
        )
    return out, scenario.nodes[0].cpu_millis / 1000.0


def _water_fill(capacity: float, weights: list[float], caps: list[float]) -> list[float]:
    """The kernel's share of ``capacity``: in proportion to ``weights``, each at most its cap, what a
    capped job leaves going to the others (weighted max-min, as the simulator's ``share_cpu``)."""
    share = [0.0] * len(caps)
    left, open_ = capacity, [i for i, (w, c) in enumerate(zip(weights, caps, strict=True)) if w > 0 and c > 0]
    while open_ and left > 1e-12:
        total = sum(weights[i] for i in open_)
        full = [i for i in open_ if caps[i] - share[i] <= left * weights[i] / total]
        if not full:
            for i in open_:
                share[i] += left * weights[i] / total
            break
        for i in full:
            left -= caps[i] - share[i]
            share[i] = caps[i]
        open_ = [i for i in open_ if i not in full]
    return share


def replay(jobs: list[Known], capacity: float, shares: np.ndarray | None, step: float) -> tuple[list[float], list[float]]:
    """Finish and tier-1 times (absolute; inf: no tier 1) of ``shares`` (cores per job and step,
    held over each step; ``None``: the equal split, re-shared at every arrival and finish),
    integrated exactly."""
    done = [0.0] * len(jobs)
    finish = [math.inf] * len(jobs)
    tier1 = [math.inf] * len(jobs)
    t = 0.0
    events = sorted({j.ready for j in jobs})
    while any(math.isinf(f) for f in finish):
        live = [i for i, j in enumerate(jobs) if math.isinf(finish[i]) and j.ready <= t + 1e-9]
        caps = [jobs[i].hi if i in live else 0.0 for i in range(len(jobs))]
        if shares is None:
            cores = _water_fill(capacity, [1.0] * len(jobs), caps)
            nxt = min([e for e in events if e > t + 1e-9], default=math.inf)
        else:
            k = int(t // step + 1e-9)
            if k >= shares.shape[1]:
                raise RuntimeError("the schedule ends before every job does")
            # The program's shares as guarantees (weights): what a job that ends mid-step leaves
            # goes to the others, as the kernel does.
            cores = _water_fill(capacity, [max(float(shares[i, k]), 1e-6) for i in range(len(jobs))], caps)
            nxt = min((k + 1) * step, min([e for e in events if e > t + 1e-9], default=math.inf))
        rates = [jobs[i].rate(cores[i]) for i in range(len(jobs))]
        ends = [t + (jobs[i].epochs - done[i]) / rates[i] if i in live and rates[i] > 0 else math.inf for i in range(len(jobs))]
        t_next = min(nxt, *ends)
        if not math.isfinite(t_next):
            raise RuntimeError("no job can progress")
        for i in live:
            e1 = jobs[i].tier1_epoch
            if e1 is not None and math.isinf(tier1[i]) and rates[i] > 0 and done[i] + rates[i] * (t_next - t) >= e1 - 1e-9:
                tier1[i] = t + max(e1 - done[i], 0.0) / rates[i]
            done[i] += rates[i] * (t_next - t)
            if ends[i] <= t_next + 1e-9:
                finish[i], done[i] = ends[i], float(jobs[i].epochs)
        t = t_next
    return finish, tier1


def optimum(
    jobs: list[Known], capacity: float, step: float, horizon: float, makespan: float | None, time_limit: float
) -> tuple[np.ndarray, str]:
    """The program's shares (jobs x steps, cores) and CBC's status ("Optimal"; "Feasible": stopped
    by the time limit with a schedule not proven optimal; "Infeasible": no schedule meets the budget
    in whole steps)."""
    T = int(math.ceil(horizon / step))
    J = len(jobs)
    m = pulp.LpProblem("optimum", pulp.LpMinimize)
    x = {(j, t): m.add_variable(f"x_{j}_{t}", lowBound=0, upBound=jobs[j].hi) for j in range(J) for t in range(T)}
    p = {(j, t): m.add_variable(f"p_{j}_{t}", lowBound=0) for j in range(J) for t in range(T)}
    z = {(j, t): m.add_variable(f"z_{j}_{t}", cat=pulp.LpBinary) for j in range(J) for t in range(T)}
    m += pulp.lpSum(1 - z[j, t] for j in range(J) for t in range(T))
    for t in range(T):
        m += pulp.lpSum(x[j, t] for j in range(J)) <= capacity
    for j, job in enumerate(jobs):
        # The speed's chords (its piecewise-linear interpolation, the least of the chords' lines
        # since the speed is concave): never above the real speed, so the replay ends every job
        # no later than the program thinks.
        grid = np.unique(
            np.concatenate([[0.0, job.lo, job.hi], np.linspace(0.0, job.hi, CHORDS + 1)[1:], [1.0] if job.hi > 1 else []])
        )
        speed = [job.rate(float(c)) for c in grid]
        lines = [(speed[k], (speed[k + 1] - speed[k]) / (grid[k + 1] - grid[k]), float(grid[k])) for k in range(len(grid) - 1)]
        total = 0
        for t in range(T):
            part = min(max(((t + 1) * step - job.ready) / step, 0.0), 1.0)  # the part of the step it can train
            if part <= 0:
                m += x[j, t] == 0
                m += p[j, t] == 0
                m += z[j, t] == 0
                continue
            for r, s, c in lines:
                m += p[j, t] <= part * step * (r + s * (x[j, t] - c))
            m += x[j, t] >= job.lo * (1 - z[j, t])  # a started job keeps its minimum until done
            total = total + p[j, t]
            m += total >= job.epochs * z[j, t]
            if t > 0:
                m += z[j, t] >= z[j, t - 1]
        if job.deadline is not None and job.tier1_epoch is not None:
            last = int(math.floor(job.deadline / step)) - 1
            if last < 0:
                raise SystemExit(f"optimum.py: {job.id}: its deadline falls in the first step")
            m += pulp.lpSum(p[j, t] for t in range(min(last + 1, T))) >= job.tier1_epoch
        if makespan is not None:
            m += z[j, min(int(math.floor(makespan / step)) - 1, T - 1)] == 1
    with warnings.catch_warnings():
        # PuLP 3.x flags its bundled CBC for removal in 4.0; pyproject pins pulp < 4 (as the planner's backend).
        warnings.simplefilter("ignore", DeprecationWarning)
        options = ["randomSeed 1", "randomCbcSeed 1"]  # the same answer every run (the backend's seeds)
        m.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit, threads=1, options=options))
    # A time limit can stop CBC with a schedule it did not prove optimal: the solution status says which.
    status = {pulp.LpSolutionOptimal: "Optimal", pulp.LpSolutionIntegerFeasible: "Feasible"}.get(
        m.sol_status, pulp.LpStatus[m.status]
    )
    shares = np.array([[x[j, t].value() or 0.0 for t in range(T)] for j in range(J)])
    return shares, status


def figures(jobs: list[Known], times: tuple[list[float], list[float]]) -> tuple[float, float, str]:
    """(mean JCT, makespan from the first arrival, tier-1 deadlines met / with one)."""
    finish, tier1 = times
    t0 = min(j.arrival for j in jobs)
    mean = float(np.mean([f - j.arrival for f, j in zip(finish, jobs, strict=True)]))
    due = [(j, t) for j, t in zip(jobs, tier1, strict=True) if j.deadline is not None]
    met = sum(1 for j, t in due if j.deadline is not None and t <= j.deadline + 1e-6)
    return mean, max(finish) - t0, f"{met}/{len(due)}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--scenario", default="demo", help="demo, a one-host scenario of examples/scenarios, or a scenario file (default demo)"
    )
    ap.add_argument("--seeds", default="0", help="comma-separated simulator seeds (default 0)")
    ap.add_argument("--budgets", default="none,docker", help="none, docker, a fraction of docker's makespan, or Ns")
    ap.add_argument("--step", type=float, default=15.0, help="step of the program, seconds (default 15)")
    ap.add_argument("--time-limit", type=float, default=120.0, help="CBC's limit per program, seconds (default 120)")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args(argv)
    given = Path(args.scenario)
    path = DEMO if args.scenario == "demo" else given if given.suffix == ".toml" else SCENARIOS / f"{args.scenario}.toml"
    if not path.is_file():
        raise SystemExit(f"optimum.py: error: --scenario: no scenario {args.scenario!r}")
    scenario = load_scenario(path)
    library = TraceLibrary.from_dir(args.data) if args.data.is_dir() else TraceLibrary.bundled()
    print(f"{scenario.name}: the offline optimum (step {args.step:g} s, CBC limit {args.time_limit:g} s), replayed exactly")
    print(f"{'seed':>4}  {'budget':>14}  {'status':>10}  {'mean JCT':>9}  {'makespan':>9}  {'deadlines':>9}  {'solve':>6}")
    for seed in (int(s) for s in args.seeds.split(",")):
        jobs, capacity = known_jobs(scenario, seed, library)
        fair = replay(jobs, capacity, None, args.step)
        f_mean, f_span, f_met = figures(jobs, fair)
        print(f"{seed:>4}  {'equal split':>14}  {'replay':>10}  {f_mean:9.1f}  {f_span:9.1f}  {f_met:>9}  {'':>6}")
        t0 = min(j.arrival for j in jobs)
        for b in args.budgets.split(","):
            b = b.strip()
            if b == "none":
                budget = None
            elif b == "docker":
                budget = f_span + t0
            elif b.endswith("s"):
                budget = float(b[:-1]) + t0
            else:
                budget = float(b) * f_span + t0
            horizon = (budget if budget is not None else 1.3 * (f_span + t0)) + args.step
            started = time.perf_counter()
            shares, status = optimum(jobs, capacity, args.step, horizon, budget, args.time_limit)
            took = time.perf_counter() - started
            if status not in ("Optimal", "Feasible") or not np.isfinite(shares).all():
                print(f"{seed:>4}  {b:>14}  {status:>10}")
                continue
            try:
                fin = replay(jobs, capacity, shares, args.step)
            except RuntimeError as exc:
                print(f"{seed:>4}  {b:>14}  {status:>10}  ({exc})")
                continue
            mean, span, met = figures(jobs, fin)
            label = b if budget is None else f"{b} ({budget - t0:.0f} s)"
            print(f"{seed:>4}  {label:>14}  {status:>10}  {mean:9.1f}  {span:9.1f}  {met:>9}  {took:5.0f}s")


if __name__ == "__main__":
    main()
