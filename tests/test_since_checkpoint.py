"""A restart is priced at the work since the job's last checkpoint, as its reports place it
(``planner.progress.since_checkpoint``, read by ``planner.menu.build_menu``).

Jobs checkpoint at every epoch end and every ``checkpoint_every_seconds`` of training; a restart
resumes from the newest checkpoint. The planner used to price the work a restart redoes as half of
an epoch (or of the checkpoint period) whenever it happened, so a move that pays right after an
epoch end and not just before the next one was priced the same at both, and refused at both. Found
on a held-out workload (``benchmarks/heldout.py --generator-seed 9``, workload 1: two hosts, 12 CPU
jobs): a host sat idle for 1,500 s beside four jobs sharing the other, the move of one of them
priced at half a 210-s epoch, four times over.

Case matrix:

- ``since_checkpoint`` on reports at whole epochs, on reports inside epochs (the epoch end between
  two reports, by their rate), with periodic checkpoints, after a restart (``Job.started`` later
  than the newest epoch end), and where nothing places the checkpoint: a job not running; no start
  and no whole epoch reported; the newest epoch end older than an epoch at the job's speed (an
  epoch end passed unreported).
- The menu's price of a move: the checkpoint and restart, plus the work since the last checkpoint
  where the reports place it, else half an epoch as before; a GPU job keeps the half epoch (under
  the phase model a job just restarted looked cheap to pause, and on Pollux's workload 6 one was
  left paused beside a free GPU).
- Moves to idle CPU (``planner.split.moves_to_room``): two deepspeech2 jobs (three epochs left)
  share a node while the other is empty; the move is made right after an epoch end and not halfway
  through an epoch or near its end.

Speeds are the simulator's ground truth for measured models (AdaptDL's throughput tables, bundled),
histories a prefix of a measured cifar10 curve; nothing is faked.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import real_curve
from test_move_check import NOW, _problem, _room, _snapshot, _staying

from adapters.sim.truth import GroundTruth, TraceLibrary
from planner.menu import MOVE
from planner.progress import since_checkpoint
from planner.snapshot import Job, Snapshot

LEVELS = (500, 1000, 2000, 4000, 8000)


def _running(points: list[tuple[float, float]], **extra: Any) -> Job:
    """A running job whose history is ``(time, epoch)`` points."""
    doc: dict[str, Any] = {
        "id": "j",
        "status": "running",
        "node": "n0",
        "allocation": {"cpu_millis": 2000},
        "history": [{"time": t, "epoch": e, "loss": 1.0 / (1.0 + e)} for t, e in points],
    }
    doc.update(extra)
    return Job.model_validate(doc)


def test_reports_at_epoch_ends() -> None:
    job = _running([(100.0, 1.0), (200.0, 2.0), (300.0, 3.0)])
    assert since_checkpoint(job, 350.0, epoch_seconds=100.0) == pytest.approx(50.0)


def test_the_epoch_end_between_two_reports() -> None:
    """Reports inside epochs: epoch 3 ended between the reports at 2.6 and 3.4, at 300 s by their rate."""
    job = _running([(180.0, 1.8), (260.0, 2.6), (340.0, 3.4)])
    assert since_checkpoint(job, 390.0, epoch_seconds=100.0) == pytest.approx(90.0)


def test_periodic_checkpoints() -> None:
    """Every 40 s of training after the epoch end at 300 s: the newest at 380 s."""
    job = _running([(200.0, 2.0), (300.0, 3.0)], checkpoint_every_seconds=40.0)
    assert since_checkpoint(job, 395.0, epoch_seconds=100.0) == pytest.approx(15.0)


def test_a_restart_resumes_from_its_checkpoint() -> None:
    """Restarted at 330 s (after the epoch end at 300 s): training since then is what is lost."""
    job = _running([(200.0, 2.0), (300.0, 3.0)], started=330.0)
    assert since_checkpoint(job, 380.0, epoch_seconds=100.0) == pytest.approx(50.0)
    assert since_checkpoint(_running([], started=330.0), 380.0, epoch_seconds=100.0) == pytest.approx(50.0)


@pytest.mark.parametrize(
    ("job", "now"),
    [
        (_running([(100.0, 1.0)]).model_copy(update={"status": "paused", "node": None, "allocation": None}), 150.0),
        (_running([(100.0, 0.4), (150.0, 0.6)]), 160.0),  # no whole epoch yet, no start
        (_running([(100.0, 1.0), (200.0, 2.0)]), 350.0),  # 150 s since epoch 2 ended: epoch 3 passed unreported
        (_running([(100.0, 2.5)]), 150.0),  # epoch 2 ended before the only report
    ],
    ids=["paused", "no-epoch-end", "stale-reports", "one-report-inside-an-epoch"],
)
def test_nothing_places_the_checkpoint(job: Job, now: float) -> None:
    assert since_checkpoint(job, now, epoch_seconds=100.0) is None


TRUTH = GroundTruth(TraceLibrary.bundled(), "deepspeech2", 320, "cpu")
EPOCH = TRUTH.epoch_seconds(4000, 0)  # about 60 s at 4 cores


def _job(name: str, done: int, into: float, max_epochs: int = 20) -> dict[str, Any]:
    """A running deepspeech2 (batch 320) job at 4 cores that finished epoch ``done`` ``into`` of an
    epoch ago; it runs to ``max_epochs``."""
    curve = real_curve("cifar10", 128)
    history = [
        {"time": NOW - (done - e + into) * EPOCH, "epoch": e, "metric": round(float(curve[e - 1]), 4)} for e in range(1, done + 1)
    ]
    return {
        "id": name,
        "status": "running",
        "node": "n0",
        "allocation": {"cpu_millis": 4000},
        "min_cpu_millis": 500,
        "max_cpu_millis": 8000,
        "checkpoint_seconds": 10.0,
        "restart_seconds": 10.0,
        "history": history,
        "speed": [{"cpu_millis": c, "gpus": 0, "seconds_per_epoch": TRUTH.epoch_seconds(c, 0)} for c in LEVELS],
        "target": {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.9999}, "max_epochs": max_epochs},
    }


@pytest.mark.parametrize("into", [0.02, 0.5, 0.95])
def test_a_move_is_priced_at_the_work_since_the_checkpoint(into: float) -> None:
    problem = _problem(_snapshot([_job("a", 10, into)]))
    assert float(problem.menus[0].lost[MOVE]) == pytest.approx(10.0 + 10.0 + into * EPOCH, rel=1e-6)


def test_without_reports_that_place_it_half_an_epoch() -> None:
    """Stale reports (the newest epoch end two epochs ago): the average, half an epoch, as before."""
    problem = _problem(_snapshot([_job("a", 10, 2.0)]))
    # The half epoch at the fitted speed, within 1 % of the measured one.
    assert float(problem.menus[0].lost[MOVE]) == pytest.approx(10.0 + 10.0 + 0.5 * EPOCH, rel=1e-2)


def test_a_gpu_job_keeps_half_an_epoch() -> None:
    job = _job("g", 10, 0.02) | {"max_gpus": 1, "min_gpus": 1, "allocation": {"cpu_millis": 4000, "gpus": 1}}
    job["speed"] = [dict(p, gpus=1) for p in job["speed"]]
    nodes = [{"name": "n0", "cpu_millis": 8000, "gpus": 1}]
    snapshot = Snapshot.model_validate({"time": NOW, "nodes": nodes, "jobs": [job], "settings": {"migration_budget": 4}})
    menu = _problem(snapshot).menus[0]
    period = float(menu.seconds_per_epoch[menu.current_level])
    assert float(menu.lost[MOVE]) == pytest.approx(10.0 + 10.0 + 0.5 * period, rel=1e-6)


@pytest.mark.parametrize(("into", "moves"), [(0.02, True), (0.5, False), (0.95, False)])
def test_a_move_to_idle_cpu_right_after_an_epoch_end(into: float, moves: bool) -> None:
    """Three epochs left each, sharing n0 while n1 is empty: moving one pays for a checkpoint and a
    restart, not for half an epoch done again (the old price at any time, so it never moved)."""
    problem = _problem(_snapshot([_job("a", 17, into), _job("b", 17, into)]))
    choice = _staying(problem)
    out, notes = _room(problem, choice)
    assert bool(notes) is moves
    assert (out != choice).sum() == (1 if moves else 0)
