"""Record real training runs under the seven learning-rate schedules of the snapshot contract.

This is the evaluation set of ``benchmarks/schedule_curves.py``: small PyTorch models trained on this
CPU on data that needs no download (scikit-learn's bundled *digits* and its generators
``make_classification`` / ``make_friedman1``), each under ``constant``, ``step``, ``exp``,
``cosine``, ``warmup_cosine``, ``warmup_linear`` and ``plateau``, a few seeds each. Nothing from
``../shared/data`` is used. Output (``benchmarks/data/schedules/``):

- ``runs.csv``: one row per run and epoch: ``run,epoch,train_loss,val_loss,val_metric,lr``;
  ``epoch`` counts completed epochs (1 = after the first); ``train_loss`` is the mean of the
  mini-batch losses during that epoch (what a training log prints); ``val_loss`` and
  ``val_metric`` (accuracy for classifiers, R² for the regressor) are measured on the held-out split
  after the epoch; ``lr`` is the mean learning-rate multiplier (rate / base rate) over the epoch's
  mini-batches, as torch's scheduler set it.
- ``runs.json``: per run, the dataset, model, seed, base LR, epochs and the declared schedule in
  the snapshot contract's form (``{"kind": "step", "milestones": [..], "gamma": ..}`` ...).

Schedulers are torch's own, stepped as their users step them: ``MultiStepLR``, ``ExponentialLR``,
``CosineAnnealingLR(T_max=epochs)`` and ``ReduceLROnPlateau`` (on the epoch's training loss,
torch's defaults otherwise) once per epoch; the two warm-up schedules as Hugging Face's
``get_cosine_schedule_with_warmup`` / ``get_linear_schedule_with_warmup`` define them, once per
mini-batch (a ``LambdaLR``: linear rise over ``warmup`` epochs, then half a cosine / a straight line
to zero at the last epoch).

Usage (in a separate, git-ignored environment; torch is no dependency of FlowPlan)::

    python3 -m venv .venv-record && .venv-record/bin/pip install torch scikit-learn
    OMP_NUM_THREADS=1 nice .venv-record/bin/python benchmarks/record_schedules.py [--out DIR] [--seeds 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import sklearn
import torch
from sklearn.datasets import load_digits, make_classification, make_friedman1
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn

OUT = Path(__file__).resolve().parent / "data" / "schedules"


def datasets() -> dict[str, dict[str, Any]]:
    """Every task: data (split 70/30 with seed 0, standardised on the training part), model, optimiser."""

    def split(x: np.ndarray, y: np.ndarray, classify: bool) -> tuple[np.ndarray, ...]:
        xtr, xva, ytr, yva = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y if classify else None)
        sc = StandardScaler().fit(xtr)
        return sc.transform(xtr), sc.transform(xva), ytr, yva

    d = load_digits()
    x, y = d.data.astype(np.float32), d.target
    rng = np.random.default_rng(0)
    noisy = y.copy()
    flip = rng.random(y.size) < 0.15  # label noise: the training loss has a floor that the LR sets
    noisy[flip] = rng.integers(0, 10, int(flip.sum()))
    digits = split(x, noisy, True)
    xc, yc = make_classification(
        n_samples=4000,
        n_features=30,
        n_informative=12,
        n_redundant=6,
        n_classes=4,
        flip_y=0.08,
        class_sep=0.9,
        random_state=0,
    )
    synth = split(xc.astype(np.float32), yc, True)
    xf, yf = make_friedman1(n_samples=3000, n_features=10, noise=1.0, random_state=0)
    fried = split(xf.astype(np.float32), ((yf - yf.mean()) / yf.std()).astype(np.float32), False)

    def mlp(n_in: int, hidden: int, n_out: int) -> nn.Module:
        return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_out))

    class DigitsConv(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(1, 12, 3, padding=1),
                nn.ReLU(),
                nn.Conv2d(12, 24, 3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Flatten(),
                nn.Linear(24 * 16, 64),
                nn.ReLU(),
                nn.Linear(64, 10),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x.view(-1, 1, 8, 8))

    return {
        # Tuning set: the only task whose runs the schedule-aware model's constants were chosen on.
        "digits_mlp": dict(data=digits, model=lambda: mlp(64, 64, 10), lr=0.05, wd=5e-3, batch=32, epochs=60, classify=True),
        # Held out: never looked at while choosing the model's constants.
        "digits_conv": dict(data=digits, model=DigitsConv, lr=0.03, wd=5e-3, batch=32, epochs=40, classify=True),
        "synth_mlp": dict(data=synth, model=lambda: mlp(30, 128, 4), lr=0.05, wd=5e-3, batch=64, epochs=80, classify=True),
        "friedman_mlp": dict(data=fried, model=lambda: mlp(10, 64, 1), lr=0.02, wd=1e-3, batch=32, epochs=60, classify=False),
    }


def schedules(epochs: int) -> dict[str, dict[str, Any]]:
    """The declared schedule of each kind for a run of ``epochs`` epochs (the contract's form)."""
    return {
        "constant": {"kind": "constant"},
        "step": {"kind": "step", "milestones": [epochs // 2, (3 * epochs) // 4], "gamma": 0.1},
        "exp": {"kind": "exp", "gamma": round(0.02 ** (1.0 / epochs), 3)},
        "cosine": {"kind": "cosine"},
        "warmup_cosine": {"kind": "warmup_cosine", "warmup": max(2, epochs // 8)},
        "warmup_linear": {"kind": "warmup_linear", "warmup": max(2, epochs // 12)},
        "plateau": {"kind": "plateau", "factor": 0.5, "patience": 4, "min_lr": 1e-06},
    }


def train(task: dict[str, Any], sched: dict[str, Any], seed: int) -> list[dict[str, float]]:
    torch.manual_seed(seed)
    xtr, xva, ytr, yva = task["data"]
    classify = task["classify"]
    xtr_t, xva_t = torch.tensor(xtr), torch.tensor(xva)
    ytr_t = torch.tensor(ytr, dtype=torch.long) if classify else torch.tensor(ytr).view(-1, 1)
    yva_t = torch.tensor(yva, dtype=torch.long) if classify else torch.tensor(yva).view(-1, 1)
    model = task["model"]()
    base = task["lr"]
    opt = torch.optim.SGD(model.parameters(), lr=base, momentum=0.9, weight_decay=task["wd"])
    loss_fn: nn.Module = nn.CrossEntropyLoss() if classify else nn.MSELoss()
    epochs, batch = task["epochs"], task["batch"]
    steps = math.ceil(len(xtr_t) / batch)
    kind = sched["kind"]
    per_step = None
    per_epoch: Any = None
    if kind == "step":
        per_epoch = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=sched["milestones"], gamma=sched["gamma"])
    elif kind == "exp":
        per_epoch = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=sched["gamma"])
    elif kind == "cosine":
        per_epoch = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    elif kind == "plateau":
        per_epoch = torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, factor=sched["factor"], patience=sched["patience"], min_lr=sched["min_lr"] * base
        )
    elif kind in ("warmup_cosine", "warmup_linear"):
        w, total = sched["warmup"] * steps, epochs * steps

        def lam(s: int) -> float:  # Hugging Face's definitions, per mini-batch
            if s < w:
                return s / max(1, w)
            p = (s - w) / max(1, total - w)
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * p))) if kind == "warmup_cosine" else max(0.0, 1.0 - p)

        per_step = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for epoch in range(1, epochs + 1):
        model.train()
        perm = torch.randperm(len(xtr_t), generator=gen)
        total_loss, lrs = 0.0, []
        for i in range(steps):
            idx = perm[i * batch : (i + 1) * batch]
            lrs.append(opt.param_groups[0]["lr"] / base)
            opt.zero_grad()
            loss = loss_fn(model(xtr_t[idx]), ytr_t[idx])
            loss.backward()
            opt.step()
            total_loss += loss.item() * len(idx)
            if per_step is not None:
                per_step.step()
        train_loss = total_loss / len(xtr_t)
        model.eval()
        with torch.no_grad():
            out = model(xva_t)
            val_loss = float(loss_fn(out, yva_t))
            if classify:
                val_metric = float((out.argmax(1) == yva_t).float().mean())
            else:
                val_metric = 1.0 - float(((out - yva_t) ** 2).mean() / ((yva_t - yva_t.mean()) ** 2).mean())
        if kind == "plateau":
            per_epoch.step(train_loss)
        elif per_epoch is not None:
            per_epoch.step()
        rows.append(dict(epoch=epoch, train_loss=train_loss, val_loss=val_loss, val_metric=val_metric, lr=float(np.mean(lrs))))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="task names to record (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tasks = datasets()
    args.out.mkdir(parents=True, exist_ok=True)
    index: dict[str, Any] = {}
    started = time.process_time()
    with open(args.out / "runs.csv", "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["run", "epoch", "train_loss", "val_loss", "val_metric", "lr"])
        for tname, task in tasks.items():
            if args.only and tname not in args.only:
                continue
            for kind, sched in schedules(task["epochs"]).items():
                for seed in range(args.seeds):
                    run = f"{tname}/{kind}/s{seed}"
                    t0 = time.process_time()
                    rows = train(task, sched, seed)
                    for r in rows:
                        out.writerow(
                            [
                                run,
                                r["epoch"],
                                f"{r['train_loss']:.6g}",
                                f"{r['val_loss']:.6g}",
                                f"{r['val_metric']:.6g}",
                                f"{r['lr']:.6g}",
                            ]
                        )
                    index[run] = {
                        "task": tname,
                        "split": "tune" if tname == "digits_mlp" else "holdout",
                        "seed": seed,
                        "base_lr": task["lr"],
                        "weight_decay": task["wd"],
                        "batch": task["batch"],
                        "epochs": task["epochs"],
                        "schedule": sched,
                        "val_metric": "accuracy" if task["classify"] else "r2",
                        "cpu_seconds": round(time.process_time() - t0, 2),
                    }
                    print(f"{run}: {len(rows)} epochs, {index[run]['cpu_seconds']:.1f} CPU s", flush=True)
    meta = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "scikit-learn": sklearn.__version__,
        "numpy": np.__version__,
        "platform": platform.platform(),
        "threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "total_cpu_seconds": round(time.process_time() - started, 1),
    }
    (args.out / "runs.json").write_text(json.dumps({"versions": meta, "runs": index}, indent=1) + "\n")
    print(json.dumps(meta), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
