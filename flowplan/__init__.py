"""FlowPlan: the command line on top of the planner, models, adapters and API layers."""

__version__ = "0.1.0"

__all__ = ["__version__"]
