"""``flowplan predict`` as a real subprocess, on real measured curves.

Bad-file matrix (exit 2, one line naming the file, row and column, no traceback): missing file ·
empty file · no epoch column · no metric or loss column · text in a metric or loss cell · infinite
epoch · negative epoch · ``flowplan logs`` JSON without points, with text in a field, an epoch out
of bounds, cut short. Good paths: a loss column or a named one; a training log piped through
``flowplan logs --format json`` (the loss or the metric, whichever the log has more of); JSON has
the documented fields (incl. ``convergence_epoch`` inside its ``convergence_interval``); a real
curve's prediction lands near the measured epoch; too few points says "cannot predict" (with null
convergence fields); NaN rows are skipped and counted; --plot writes a PNG.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import real_curve


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flowplan", "predict", *args], capture_output=True, text=True, timeout=120)


def _csv(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "h.csv"
    f.write_text(text)
    return f


BAD = {
    "empty file": ("", "empty file"),
    "no epoch column": ("step,metric\n1,0.5\n", "no 'epoch' column"),
    "no metric or loss column": ("epoch,acc\n1,0.5\n", "no 'metric' or 'loss' column (found: epoch, acc)"),
    "text in a loss cell": ("epoch,loss\n1,0.5\n2,low\n", "row 3, column 'loss'"),
    "logs JSON without points": ('{"events": []}', "JSON without a 'points' list"),
    "logs JSON, text in a loss": ('{"points": [{"epoch": 1, "loss": "low"}]}', "point 0, field 'loss': not a number"),
    "logs JSON, an epoch out of bounds": ('{"points": [{"epoch": -2, "loss": 0.5}]}', "point 0, field 'epoch': must be 0"),
    "logs JSON cut short": ('{"points": [{"epoch": 1', "not valid JSON"),
    "logs JSON, a 5000-digit epoch": ('{"points": [{"epoch": 1' + "0" * 5000 + ', "loss": 1}]}', "an integer of more than"),
    "text in metric": ("epoch,metric\n1,0.5\n2,high\n", "row 3, column 'metric'"),
    "infinite epoch": ("epoch,metric\ninf,0.5\n", "row 2, column 'epoch'"),
    "negative epoch": ("epoch,metric\n-1,0.5\n", "row 2, column 'epoch'"),
    "epoch 1e308 (overflowed the fit)": ("epoch,metric\n1,0.5\n1e308,0.4\n", "row 3, column 'epoch': must be 0 to 1e+09"),
    "epochs near 1e300 (overflowed the grid)": ("epoch,metric\n1e300,0.5\n2e300,0.4\n3e300,0.3\n", "row 2, column 'epoch'"),
    "a cell over the csv limit": ("epoch,metric\n1," + "9" * 140_000 + "\n", "row 2: not valid CSV"),
    # Beyond the contracts' ±1e12 the fit's band overflowed: "inf" in the table, Infinity in the JSON.
    "a metric of 1e300": ("epoch,metric\n1,0.5\n2,0.6\n3,1e300\n4,0.68\n", "row 4, column 'metric': must be within ±1e+12"),
    "logs JSON, a loss of -1e300": (
        '{"points": [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": -1e300}]}',
        "point 1, field 'loss': must be within ±1e+12",
    ),
    "a header cell over the csv limit": ("epoch," + "m" * 140_000 + "\n1,2\n", "row 1: not valid CSV"),  # was a traceback
    "too many rows": ("epoch,metric\n" + "".join(f"{i},{1 / i}\n" for i in range(1, 100_002)), "more than 100,000 rows"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_history(case: str, tmp_path: Path) -> None:
    content, must = BAD[case]
    f = _csv(tmp_path, content)
    r = run(str(f), "--target", "0.9", "--direction", "higher")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and must in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_standard_input_is_read_as_a_file_is() -> None:
    """Binary on standard input was a csv.Error traceback; a byte-order mark (a spreadsheet's export)
    hid the 'epoch' column, and old-Mac line ends were a traceback too. A file read fine either way."""

    def piped(data: bytes) -> subprocess.CompletedProcess[bytes]:
        cmd = [sys.executable, "-m", "flowplan", "predict", "-", "--target", "0.9", "--direction", "higher"]
        return subprocess.run(cmd, input=data, capture_output=True, timeout=120)

    binary = piped(bytes(range(256)) * 4)
    assert binary.returncode == 2 and b"<stdin>: cannot read" in binary.stderr and b"Traceback" not in binary.stderr
    for ending in (b"\n", b"\r\n", b"\r"):
        rows = ending.join([b"epoch,metric", b"1,0.5", b"2,0.6", b"3,0.65", b"4,0.68"]) + ending
        for data in (rows, b"\xef\xbb\xbf" + rows):
            r = piped(data)
            assert r.returncode == 0 and b"4 point(s) of metric up to epoch 4" in r.stdout, (data, r.stderr)


def test_a_plot_file_type_matplotlib_cannot_write_is_one_line(tmp_path: Path) -> None:
    """``--plot out.json`` was matplotlib's ValueError traceback."""
    pytest.importorskip("matplotlib")
    f = _csv(tmp_path, "epoch,metric\n1,0.5\n2,0.6\n3,0.65\n4,0.68\n")
    r = run(str(f), "--target", "0.9", "--direction", "higher", "--plot", str(tmp_path / "out.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"flowplan: error: --plot {tmp_path / 'out.json'}: " + r.stderr.split(": ", 3)[-1].strip()
    assert "Format 'json' is not supported" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_missing_file() -> None:
    r = run("/no/such.csv", "--target", "1", "--direction", "lower")
    assert r.returncode == 2 and "no such file" in r.stderr


def test_real_curve_json(tmp_path: Path) -> None:
    curve = real_curve("deepspeech2", 40)  # word error rate, lower is better
    n = len(curve) // 2
    f = _csv(tmp_path, "epoch,metric,time\n" + "".join(f"{e},{v},{e * 60}\n" for e, v in enumerate(curve[:n], start=1)))
    target = float(curve[0] + 0.9 * (curve[-1] - curve[0]))
    r = run(str(f), "--target", str(target), "--direction", "lower", "--format", "json", "--horizon", "80")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"family", "epochs_to_target", "interval", "plateau", "predicted"} <= set(out)
    assert len(out["predicted"]) == 80
    true_epoch = int(np.argmax(curve <= target)) + 1
    if true_epoch > n:  # a real prediction of the future
        assert out["epochs_to_target"] is not None
        assert abs(out["epochs_to_target"] - true_epoch) / true_epoch < 0.5
    lo, hi = out["interval"]
    assert lo is None or hi is None or lo <= hi
    # 40 points: cross-validated, so the convergence epoch has an interval from the refits.
    clo, chi = out["convergence_interval"]
    assert clo is not None and chi is not None and clo <= out["convergence_epoch"] <= chi
    assert out["drops"] == []


def test_cannot_predict_with_two_points(tmp_path: Path) -> None:
    f = _csv(tmp_path, "epoch,metric\n1,0.5\n2,0.6\n")
    r = run(str(f), "--target", "0.9", "--direction", "higher", "--format", "json")
    assert r.returncode == 0
    out = json.loads(r.stdout)
    assert out["family"] is None and out["epochs_to_target"] is None and "point" in out["cannot_predict"]
    assert out["convergence_epoch"] is None and out["convergence_interval"] == [None, None]
    table = run(str(f), "--target", "0.9", "--direction", "higher")
    assert "cannot predict yet" in table.stdout


def test_nan_rows_skipped_and_plot_written(tmp_path: Path) -> None:
    curve = real_curve("cifar10", 128)[:25]
    rows = [f"{e},{'nan' if e % 7 == 0 else v}\n" for e, v in enumerate(curve, start=1)]
    f = _csv(tmp_path, "epoch,metric\n" + "".join(rows))
    png = tmp_path / "fit.png"
    r = run(str(f), "--target", "0.9", "--direction", "higher", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert "3 row(s) without a metric skipped" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_far_last_epoch_is_bounded_work(tmp_path: Path) -> None:
    """Reproducer: a last epoch of 1e7 built a 2e7-point grid (over 60 s); the curve is now drawn on
    at most 2,000 epochs spread to the horizon."""
    f = _csv(tmp_path, "epoch,metric\n1,0.5\n2,0.33\n3,0.25\n4,0.2\n10000000,0.01\n")
    r = run(str(f), "--target", "0.001", "--direction", "lower", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    grid = [p["epoch"] for p in out["predicted"]]
    assert 0 < len(grid) <= 2000 and grid[-1] == pytest.approx(2e7)


# -- --schedule and --max-epochs ---------------------------------------------------------------------
BAD_SCHEDULE = {
    "not JSON": (["--schedule", '{"kind": "step", '], "--schedule: schedule: not valid JSON"),
    "unknown kind": (["--schedule", '{"kind": "cosin"}', "--max-epochs", "60"], "unknown kind 'cosin'; did you mean 'cosine'?"),
    "misspelt field": (
        ["--schedule", '{"kind": "step", "milestone": [30]}'],
        "schedule.milestone: unknown field 'milestone'; did you mean 'milestones'?",
    ),
    "out of range": (["--schedule", '{"kind": "exp", "gamma": 2}'], "schedule.gamma: Input should be less than or equal to 1"),
    "NaN": (["--schedule", '{"kind": "exp", "gamma": NaN}'], "schedule.gamma: Input should be a finite number"),
    "5000-digit integer": (
        ["--schedule", '{"kind": "step", "milestones": [1' + "0" * 5000 + "]}"],
        "--schedule: schedule: not valid JSON: an integer of 5001 digits",
    ),
    "cosine without --max-epochs": (["--schedule", '{"kind": "cosine"}'], "anneals over the planned epochs: it needs max_epochs"),
    "warm-up longer than the run": (
        ["--schedule", '{"kind": "warmup_linear", "warmup": 80}', "--max-epochs", "60"],
        "must be shorter",
    ),
    "bad --max-epochs": (["--schedule", '{"kind": "cosine"}', "--max-epochs", "-3"], "--max-epochs"),
    "--max-epochs below the history": (["--max-epochs", "3"], "--max-epochs 3: "),
}


@pytest.mark.parametrize("case", sorted(BAD_SCHEDULE))
def test_bad_schedule_flag(case: str, tmp_path: Path) -> None:
    args, must = BAD_SCHEDULE[case]
    f = _csv(tmp_path, "epoch,metric\n1,1.0\n2,0.8\n3,0.7\n4,0.65\n")
    r = run(str(f), "--target", "0.3", "--direction", "lower", *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert must in lines[-1] and "Traceback" not in r.stderr, r.stderr
    if case != "bad --max-epochs":  # argparse's own errors print the usage line first
        assert len(lines) == 1


def test_declared_step_schedule_predicts_the_drop(tmp_path: Path) -> None:
    """A loss seen for 25 epochs at a constant rate, with drops declared at 30 and 45 of 60: the
    prediction drops at 30 and the target below the pre-drop plateau is reachable only with the
    schedule."""
    k = np.arange(1, 26)
    loss = 0.4 + 1.5 / (k + 1) ** 0.9
    f = _csv(tmp_path, "epoch,metric\n" + "".join(f"{e},{v}\n" for e, v in zip(k, loss, strict=True)))
    sched = '{"kind": "step", "milestones": [30, 45], "gamma": 0.1}'
    r = run(str(f), "--target", "0.38", "--direction", "lower", "--schedule", sched, "--max-epochs", "60", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["schedule"] == "step" and out["max_epochs"] == 60 and out["drops"] == [30.0, 45.0]
    assert len(out["predicted"]) == 60  # drawn up to the planned epochs
    by_epoch = {p["epoch"]: p["metric"] for p in out["predicted"]}
    assert by_epoch[30] - by_epoch[32] > 5 * (by_epoch[28] - by_epoch[30])
    assert out["epochs_to_target"] is not None and 30 <= out["epochs_to_target"] <= 46 and out["within_max_epochs"]
    plain = json.loads(run(str(f), "--target", "0.38", "--direction", "lower", "--format", "json").stdout)
    assert plain["schedule"] is None and (plain["epochs_to_target"] is None or plain["epochs_to_target"] > 60)
    table = run(str(f), "--target", "0.38", "--direction", "lower", "--schedule", sched, "--max-epochs", "60")
    assert "step learning-rate schedule, drops at epoch 30, 45; 60 planned epochs" in table.stdout


@pytest.mark.parametrize("points", [8, 12, 30])
def test_plot_marks_target_predicted_epoch_with_its_band_and_plateau(points: int, tmp_path: Path) -> None:
    """Issue 16: the plot marks the target, the predicted epoch and its 80% band (open-ended when
    the pessimistic refit never gets there) and the plateau, with the same numbers as the text;
    on real prefixes of a measured curve."""
    from flowplan.predict import parse_history, plot, predict

    curve = real_curve("cifar10", 128)[:points]
    history = parse_history("epoch,metric\n" + "".join(f"{e},{v}\n" for e, v in enumerate(curve, start=1)))
    result = predict(history, 0.9, "higher", None)
    labels = plot(result, history, str(tmp_path / "fit.png"))
    assert "observed" in labels and f"target {result['target']:g}" in labels
    if result["plateau"] is not None:
        assert f"plateau {result['plateau']:.4g}" in labels
    at = result["epochs_to_target"]
    if at is not None and not result["reached"]:
        assert f"reaches target at epoch {at:.1f}" in labels
        lo, hi = result["interval"]
        if lo is not None:
            span = f"{lo:.1f} – " + (f"{hi:.1f}" if hi is not None else "never")
            assert f"80% band of that epoch: {span}" in labels


def _loss_points(curve: np.ndarray) -> list[dict[str, float | None]]:
    return [{"epoch": float(e), "loss": float(v), "metric": None, "time": None} for e, v in enumerate(curve, start=1)]


def test_a_loss_column_or_a_named_one_is_read(tmp_path: Path) -> None:
    """Without a ``metric`` column the ``loss`` column is predicted; ``--column`` reads any other (and
    names it when it is missing); the output says which it read."""
    curve = real_curve("deepspeech2", 40)[:20]  # word error rate: a falling value, as a loss
    f = _csv(tmp_path, "epoch,loss,wer\n" + "".join(f"{e},{v},{v}\n" for e, v in enumerate(curve, start=1)))
    target = str(float(curve[-1]) * 0.95)
    loss = run(str(f), "--target", target, "--direction", "lower", "--format", "json")
    wer = run(str(f), "--target", target, "--direction", "lower", "--format", "json", "--column", "wer")
    assert loss.returncode == 0 and wer.returncode == 0, loss.stderr + wer.stderr
    a, b = json.loads(loss.stdout), json.loads(wer.stdout)
    assert (a["column"], b["column"], a["points"]) == ("loss", "wer", 20)
    assert a["epochs_to_target"] == b["epochs_to_target"] is not None  # the same numbers, the same fit
    assert "20 point(s) of loss up to epoch 20" in run(str(f), "--target", target, "--direction", "lower").stdout
    missing = run(str(f), "--target", target, "--direction", "lower", "--column", "acc")
    assert missing.returncode == 2 and "no 'acc' column (--column; found: epoch, loss, wer)" in missing.stderr


def test_a_training_log_piped_through_flowplan_logs(tmp_path: Path) -> None:
    """A real Keras log (``model.fit`` piped: the loss every few steps, the validation accuracy at
    each epoch's end) through ``flowplan logs --format json`` into ``flowplan predict -``: the loss by
    default (more points have it), the metric with ``--column metric``; the same points as a CSV of
    what ``flowplan logs`` printed give the same prediction."""
    log = Path(__file__).parent / "fixtures" / "logs" / "keras" / "keras-fit-pipe.log"
    logs = subprocess.run(
        [sys.executable, "-m", "flowplan", "logs", str(log), "--format", "json"], capture_output=True, text=True, timeout=120
    )
    assert logs.returncode == 0, logs.stderr
    points = json.loads(logs.stdout)["points"]
    with_loss = [p for p in points if p["loss"] is not None]
    with_metric = [p for p in points if p["metric"] is not None]
    assert len(with_loss) > len(with_metric) >= 3

    def piped(*extra: str) -> dict[str, object]:
        r = subprocess.run(
            [sys.executable, "-m", "flowplan", "predict", "-", "--format", "json", *extra],
            input=logs.stdout,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        out: dict[str, object] = json.loads(r.stdout)
        return out

    loss = piped("--target", "0.2", "--direction", "lower")
    assert (loss["column"], loss["points"], loss["skipped_rows"]) == ("loss", len(with_loss), len(points) - len(with_loss))
    metric = piped("--target", "0.99", "--direction", "higher", "--column", "metric")
    assert (metric["column"], metric["points"]) == ("metric", len(with_metric))
    f = _csv(tmp_path, "epoch,loss\n" + "".join(f"{p['epoch']!r},{p['loss']!r}\n" for p in with_loss))
    by_csv = run(str(f), "--target", "0.2", "--direction", "lower", "--format", "json")
    assert json.loads(by_csv.stdout)["epochs_to_target"] == loss["epochs_to_target"]
    missing = subprocess.run(
        [sys.executable, "-m", "flowplan", "predict", "-", "--target", "1", "--direction", "lower", "--column", "acc"],
        input=json.dumps({"points": _loss_points(np.array([0.9, 0.8, 0.7]))}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "no point has a 'acc' field" in missing.stderr


def test_earlier_runs_of_the_task_are_the_prior(tmp_path: Path) -> None:
    """yolov3 at batch 16, 5 of its 50 epochs seen, target its final loss (first reached at epoch 40):
    alone the curve says epoch ~18; with the six other batch sizes' measured runs as ``--like`` the
    prior's curve says ~40, within 15 % of the measured epoch. A run that cannot be read, or ``-``,
    is one line naming it, exit 2."""
    values = real_curve("yolov3", 16)
    truth = int(np.argmax(values <= values[-1])) + 1
    head = _csv(tmp_path, "epoch,loss\n" + "".join(f"{i + 1},{v}\n" for i, v in enumerate(values[:5])))
    like = []
    for b in (8, 32, 64, 128, 256, 512):
        f = tmp_path / f"yolov3-{b}.csv"
        f.write_text("epoch,loss\n" + "".join(f"{i + 1},{v}\n" for i, v in enumerate(real_curve("yolov3", b))))
        like += ["--like", str(f)]
    args = [str(head), "--target", str(values[-1]), "--direction", "lower", "--max-epochs", "50", "--format", "json"]
    alone, with_runs = run(*args), run(*args, *like)
    assert alone.returncode == 0 and with_runs.returncode == 0, with_runs.stderr
    a, w = json.loads(alone.stdout), json.loads(with_runs.stdout)
    assert (a["prior_runs"], w["prior_runs"], w["family"]) == (0, 6, "prior")
    assert abs(w["epochs_to_target"] - truth) <= 0.15 * truth < abs(a["epochs_to_target"] - truth)
    text = run(*args[:-2], *like).stdout
    assert "prior: 6 earlier run(s)" in text
    for bad, must in (
        (["--like", "-"], "--like -: an earlier run must be a file"),
        (["--like", str(tmp_path / "no.csv")], "no such file"),
    ):
        r = run(*args, *bad)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and must in r.stderr, r.stderr


def test_earlier_runs_under_the_declared_schedule(tmp_path: Path) -> None:
    """A recorded digits_mlp run under a step schedule (drops at epochs 30 and 45 of 60), 15 epochs
    seen, target 90 % of its range (first reached at epoch 31): with its two sibling seeds as
    ``--like`` and the schedule declared, the runs' curve is the prior and lands within 10 %."""
    import csv

    runs: dict[str, list[tuple[float, float]]] = {}
    with open(Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "schedules" / "runs.csv") as fh:
        for row in csv.DictReader(fh):
            if row["run"].startswith("digits_mlp/step/"):
                runs.setdefault(row["run"], []).append((float(row["epoch"]), float(row["train_loss"])))
    own = runs["digits_mlp/step/s0"]
    values = [v for _, v in own]
    target = values[0] + 0.9 * (values[-1] - values[0])
    truth = next(e for e, v in own if v <= target)
    head = _csv(tmp_path, "epoch,loss\n" + "".join(f"{e:g},{v}\n" for e, v in own[:15]))
    like = []
    for seed in (1, 2):
        f = tmp_path / f"s{seed}.csv"
        f.write_text("epoch,loss\n" + "".join(f"{e:g},{v}\n" for e, v in runs[f"digits_mlp/step/s{seed}"]))
        like += ["--like", str(f)]
    schedule = '{"kind": "step", "milestones": [30, 45], "gamma": 0.1}'
    r = run(
        str(head),
        "--target",
        str(target),
        "--direction",
        "lower",
        "--max-epochs",
        "60",
        "--schedule",
        schedule,
        *like,
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["prior_runs"], got["schedule"]) == (2, "step")
    assert abs(got["epochs_to_target"] - truth) <= 0.1 * truth, (got["epochs_to_target"], truth)
