"""FlowPlan's training-side SDK: a few lines in a training loop report progress and hear FlowPlan.

Standard library only (no numpy, no pydantic, nothing of the planner): a training image needs this
package and nothing else of FlowPlan. ::

    import flowplan.sdk

    run = flowplan.sdk.init(max_epochs=30, schedule={"kind": "step", "milestones": [10, 20], "gamma": 0.1})
    for epoch in range(start, 30):
        for batch in loader:
            ...
            if run.should_checkpoint():           # SIGTERM, an annotation, a flag file
                run.checkpoint_done(save(model))  # exits with 75 when asked to stop
        run.log(epoch + 1, loss=train_loss, metric=val_acc)
        if run.should_deliver():                  # tier 1 reached: SIGUSR1, an annotation, a flag file
            run.delivered(save_copy(model))
    run.finish()

``docs/sdk.md`` has the mechanisms and the JSON lines format.
"""

from flowplan.sdk.control import CHECKPOINT_ANNOTATION, DELIVER_ANNOTATION, Control, Request, read_annotations
from flowplan.sdk.report import HttpReporter, StdoutReporter, json_line
from flowplan.sdk.run import EX_CHECKPOINTED, Run, init
from flowplan.sdk.schedule import KINDS as SCHEDULE_KINDS
from flowplan.sdk.schedule import ScheduleError, check_schedule

__all__ = [
    "CHECKPOINT_ANNOTATION",
    "DELIVER_ANNOTATION",
    "EX_CHECKPOINTED",
    "SCHEDULE_KINDS",
    "Control",
    "HttpReporter",
    "Request",
    "Run",
    "ScheduleError",
    "StdoutReporter",
    "check_schedule",
    "init",
    "json_line",
    "read_annotations",
]
