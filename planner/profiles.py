"""The objective profiles a snapshot may ask for (``Settings.objective``): their names, short names and
what each optimises.

Pure data and the standard library only: ``flowplan plan --help`` reads it without importing the
planner's models or solvers (``planner/__init__`` imports its submodules lazily, and this one imports
none of them). :mod:`planner.snapshot` and :mod:`planner.policies.flowplan` take the profiles from here.
"""

from __future__ import annotations

from typing import Literal, cast

ObjectiveProfile = Literal["deadlines>mean-jct>makespan", "deadlines>makespan>mean-jct"]
OBJECTIVE_PROFILES: tuple[str, ...] = ("deadlines>mean-jct>makespan", "deadlines>makespan>mean-jct")

#: Each objective profile and what it optimises, in priority order (for ``--help`` and the docs).
OBJECTIVE_MEANINGS: dict[str, str] = {
    "deadlines>mean-jct>makespan": "meet QoE deadlines (tier 1, then tier 2), then the lowest mean job completion "
    "time, then the shortest makespan (the default)",
    "deadlines>makespan>mean-jct": "meet QoE deadlines (tier 1, then tier 2), then the shortest makespan "
    "(finish the whole batch soonest), then the lowest mean job completion time",
}
#: Short names accepted for the profiles: the term that comes right after the deadlines.
OBJECTIVE_ALIASES: dict[str, str] = {"mean-jct": "deadlines>mean-jct>makespan", "makespan": "deadlines>makespan>mean-jct"}


def resolve_objective(name: str) -> ObjectiveProfile:
    """The profile ``name`` stands for (a full profile or a short name); a ``ValueError`` names the bad value."""
    full = OBJECTIVE_ALIASES.get(name, name)
    if full not in OBJECTIVE_PROFILES:
        known = ", ".join([*OBJECTIVE_PROFILES, *OBJECTIVE_ALIASES])
        raise ValueError(f"unknown objective profile {name!r} (known: {known})")
    return cast(ObjectiveProfile, full)
