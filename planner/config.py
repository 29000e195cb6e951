"""Planner configuration: which solver, how long, how big the model may grow, and the objective weights.

Kept apart from the model builder so weights can be tuned without touching constraints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from models.curve_prior import CurvePrior

SolverName = Literal["cpsat", "pulp", "greedy"]


@dataclass(frozen=True)
class ObjectiveWeights:
    """Weights of the objective terms, in priority order (see docs/planner.md for the integer form):
    serve every active job, then QoE deadlines (tier 1 before tier 2), then makespan, then total
    completion time and churn.

    Every time term is measured in *quanta*: the planning horizon (latest predicted finish over all
    candidate options) split into ``time_resolution`` steps. With ``qoe_dominance >= 2`` one missed
    tier-2 deadline of a priority-1 job costs more than any possible change of the makespan and
    completion terms together, so QoE comes first; a tier-1 miss costs ``tier1_over_tier2`` times a
    tier-2 miss.
    """

    tier1_over_tier2: float = 4.0
    #: Leaving an active job without a node costs this many times its tier-1 miss cost (whether it
    #: has a deadline or not): one placement per active job comes first whenever capacity allows.
    unserved_over_tier1: float = 2.0
    qoe_dominance: float = 2.0
    #: The makespan term is weighted by the sum of the job weights times this factor, so shortening
    #: the makespan by one quantum is worth as much as shortening every job's completion by one.
    makespan_factor: float = 1.0
    #: Completion-time weights lean towards jobs with less work left: job j's completion counts
    #: ``(median remaining / remaining_j) ** completion_tilt`` times its priority weight (clipped to
    #: [1/8, 8]). The planner's model holds each allocation until the job is done, which alone would
    #: favour long jobs; in reality a finished job's resources go to the others at the next interval,
    #: where shortest-remaining-first minimises mean completion time. 0 turns the lean off.
    completion_tilt: float = 1.0
    #: Time to tier 1 counts in the completion term too, this many times the job's completion weight,
    #: for jobs with a tier-1 target not yet reached (TRADL: deliver a usable model soon).
    tier1_time_factor: float = 1.0
    #: Past a tier-1 deadline, every quantum of lateness costs this many times the job's completion
    #: weight (on top of the miss): a job that will be late is still worth finishing soon, so it is
    #: not starved once a miss is predicted (a prediction from a short history can be wrong).
    lateness_factor: float = 4.0
    #: Extra cost of changing a job's allocation, in quanta per action, on top of the seconds it loses:
    #: keeps the plan from flapping between near-equal options.
    resize_quanta: int = 1
    migration_quanta: int = 2
    #: Hysteresis: a restart (migration, restart in place, pause) must also clear this many times
    #: what it loses (checkpoint + restart + work since the last checkpoint), as extra churn cost,
    #: so a move is made only when its predicted gain beats its cost by a margin. The gain is
    #: priced as if the new allocation were held to the end, while arrivals take GPUs back: on the
    #: Pollux workload 0.5 gave 325 restarts a run (GPU counts 2-4-3-2-4 within minutes), 4 gave
    #: 287 and a 4 % shorter mean JCT.
    migration_margin: float = 4.0
    #: CPU-only jobs restart (migrate, pause) only when they must: their node's CPU is split among
    #: its jobs work-conservingly after the solve, so the levels' "held until done" finish times
    #: overstate what a CPU move gains (measured on specon-4nodes: 31 migrations a run, one job
    #: moved four times in 70 s, and a longer mean JCT than Docker's; with moves only when forced,
    #: 4.5 % shorter). Such a restart costs the whole horizon in churn, so only a plan with no
    #: other way (an overfull node, a more valuable job that cannot start otherwise) makes it.
    #: Gangs whose count or spread the planner chooses are exempt: their restart may add replicas,
    #: which the split cannot give (a 2-of-3 CPU gang grows to 3 when a host frees up).
    cpu_jobs_move_when_forced: bool = True
    #: GPU jobs in a contended cluster (their largest asks add up to more GPUs than the cluster
    #: has): an allocation is priced as held for this many seconds, after which the job is assumed
    #: to run at its fastest level, and leaving a GPU job without a node costs its time only (no
    #: "serve every job" penalty). A short job may then take the GPUs of a long one for a while,
    #: as shortest-remaining-first would, where "held until done" would price the long job's dip as
    #: lasting to its end. Uncontended, or 0: held until done. Measured on the Pollux workloads
    #: (docs/results.md): 1,800-7,200 s gave the best mean JCT, 600-1,200 s undervalue growing
    #: a running job (restart cost) and leave GPUs idle.
    gpu_phase_seconds: float = 3600.0
    #: With the phase model, shortest-remaining-first would starve a long GPU job (on the Pollux
    #: workload 5, one imagenet job was restarted 32 times and ended the run hours late): each such
    #: job's completion weight is aged by ``slowdown ** gpu_age_exponent`` (at most 64: enough to
    #: undo the shortest-first lean, 1/8), where the slowdown is ``(time in the system + work left)
    #: / (work done + work left)`` in seconds at the job's best rate: for a job that has only waited,
    #: the response ratio of highest-response-ratio-next; 1 for one served at its best all along
    #: (session 15: ``1 + time in the system / work left`` aged long jobs for having run long, and
    #: with curve priors on Pollux workload 4 cost 23 %). With the lean ``1 / work left`` (tilt 1) the
    #: weight is, within the clips, what minimising the sum of response ratios to the power
    #: ``exponent + 1`` gives each job (its derivative in the job's finish): 0 is mean completion
    #: alone, a large exponent approaches the worst slowdown. 4 measured better than 2 on mean JCT
    #: *and* p95 on Pollux workloads 1, 5, 6 and 7 and level on 2 (docs/results.md). 0: off.
    gpu_age_exponent: float = 4.0
    time_resolution: int = 1000
    #: Priorities (0.01-100) become integer weights ``max(1, round(priority * priority_scale))``.
    priority_scale: float = 10.0


@dataclass(frozen=True)
class PlannerConfig:
    """How to plan.

    ``time_limit`` is in seconds of search. CP-SAT runs on *deterministic* time (its own work counter,
    converted from seconds as measured on the reference machine) so the same snapshot always gives
    the same plan; a wall-clock guard of ``wall_clock_factor * time_limit + 1`` seconds of search
    stops a run that drifts far from it (and the plan says so). A decomposed problem shares the
    limit among its parts in proportion to their size.
    """

    solver: SolverName = "cpsat"
    time_limit: float = 1.0
    #: Nodes considered per movable job besides its current node and the greedy's choice.
    candidate_nodes: int = 3
    #: CPU levels per job (including its min, max and current share).
    cpu_levels: int = 4
    #: GPU counts per job: every whole number from its min to its max (or to the most a node
    #: holds) when there are at most this many, else this many spread between them.
    gpu_levels: int = 8
    #: Replica counts per gang that may run with fewer (``min_replicas``): its min, its max, the
    #: current count and counts spread geometrically between them, this many in all at most.
    replica_levels: int = 4
    #: A pending gang that cannot be placed whole and has waited this long reserves the nodes it
    #: needs (the oldest such gang only): they take no other job's start or move until it starts.
    gang_reserve_seconds: float = 600.0
    #: CPU shares are rounded to this many millicores.
    cpu_step_millis: int = 100
    #: Rule applications (rollout events, about 50 us each) one plan's CPU split may spend searching
    #: what an epoch of each job is worth (``planner.share``, "the values searched"), over all its
    #: nodes; 0: the marginal-value rule alone. Counted, not timed, so plans stay deterministic.
    split_search: int = 2000
    #: Problems with more active jobs than this are split into node-disjoint sub-problems.
    max_jobs_per_subproblem: int = 1500
    weights: ObjectiveWeights = field(default_factory=ObjectiveWeights)
    wall_clock_factor: float = 3.0
    #: CP-SAT search workers (more than one run interleaved in one thread, still deterministic).
    cpsat_workers: int = 1
    #: Processes that fit the jobs' models when many jobs need a fit (``planner.fanout``, forked
    #: children): 0 uses every CPU this process may run on, 1 (the default) fits in this process only.
    #: The plan does not depend on it. The default is 1 because forking is safe only from a process
    #: with no other threads (the daemon has its adapter's thread pool; the service already runs one
    #: plan per core); ``flowplan plan``, single-threaded, uses 0.
    fit_processes: int = 1
    #: Assumed remaining epochs for a job whose curve cannot be fitted yet and has no max_epochs.
    unknown_remaining_epochs: float = 30.0
    #: Curves of earlier runs per task (``Job.task``): a job naming a task found here is fitted with
    #: that prior (``models.curve_prior``); it competes with the parametric families by
    #: cross-validation and predicts from the first one or two points. Empty: no priors.
    curve_priors: Mapping[str, CurvePrior] = field(default_factory=dict)
