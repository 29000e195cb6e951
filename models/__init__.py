"""Prediction models: learning curves (when will a job reach its target?) and speed (how fast on an
allocation, or on a placement across nodes?).

The lowest layer: imports nothing from the rest of FlowPlan and no I/O framework.
"""

from models.changepoint import detect_drops
from models.curve_prior import CurvePrior, ReferenceCurve
from models.curves import FAMILIES, CannotPredict, CurveFit, Direction, fit_learning_curve
from models.growth import growth_efficiency
from models.placement import (
    PlacementError,
    PlacementObservation,
    PlacementParams,
    PlacementSpeedModel,
    fit_placement_model,
    table_prior,
)
from models.schedule import SCHEDULE_KINDS, LRSchedule
from models.speed import PSSpeedModel, PSSpeedObservation, SpeedModel, SpeedObservation, fit_ps_speed_model, fit_speed_model

__all__ = [
    "CannotPredict",
    "CurveFit",
    "CurvePrior",
    "Direction",
    "FAMILIES",
    "LRSchedule",
    "PlacementError",
    "PlacementObservation",
    "PlacementParams",
    "PlacementSpeedModel",
    "PSSpeedModel",
    "PSSpeedObservation",
    "ReferenceCurve",
    "SCHEDULE_KINDS",
    "SpeedModel",
    "SpeedObservation",
    "detect_drops",
    "fit_learning_curve",
    "fit_placement_model",
    "fit_ps_speed_model",
    "fit_speed_model",
    "growth_efficiency",
    "table_prior",
]
