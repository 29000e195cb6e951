"""Solver backends behind one interface (:class:`Backend`): CP-SAT (default) and PuLP (CBC or HiGHS)."""

from planner.backends.base import Backend, SolveResult
from planner.backends.cpsat import CpSatBackend
from planner.backends.pulp_backend import PulpBackend, highs_available

__all__ = ["Backend", "CpSatBackend", "PulpBackend", "SolveResult", "highs_available"]
