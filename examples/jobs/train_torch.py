"""A plain PyTorch loop reporting through ``flowplan.sdk``: an MLP on scikit-learn's digits, on the CPU.

    python examples/jobs/train_torch.py [--job digits-torch] [--epochs 30] [--checkpoint-dir /ckpt]

Needs ``torch`` and ``scikit-learn`` (bundled data, no download). Not run by the tests: CI has no
torch. ``examples/jobs/train_digits.py`` is the same contract with numpy only, and the Docker tests
run that one. What the SDK adds to the loop is marked ``# FlowPlan``; ``docs/sdk.md`` explains it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import flowplan.sdk  # noqa: E402


def digits(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    xtr, xva, ytr, yva = train_test_split(x / 16.0, y, test_size=0.2, random_state=seed)
    f, i = (lambda a: torch.tensor(a, dtype=torch.float32)), (lambda a: torch.tensor(a, dtype=torch.long))
    return f(xtr), i(ytr), f(xva), i(yva)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default=os.environ.get("FLOWPLAN_JOB", "digits-torch"))
    ap.add_argument("--checkpoint-dir", default=os.environ.get("FLOWPLAN_CHECKPOINT_DIR", "/ckpt"))
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    ckpt_dir = Path(args.checkpoint_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    ckpt = ckpt_dir / f"{args.job}.pt"

    xtr, ytr, xva, yva = digits(args.seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    milestones = [args.epochs // 2, args.epochs * 3 // 4]
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)
    start = 0
    if ckpt.exists():
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        start = int(state["epoch"])

    # FlowPlan: declare the plan (epochs and LR schedule), report, and hear checkpoint / deliver requests.
    run = flowplan.sdk.init(
        args.job,
        max_epochs=args.epochs,
        schedule={"kind": "step", "milestones": milestones, "gamma": 0.1},
        resumed_from=start or None,
    )
    batches = (len(xtr) + args.batch - 1) // args.batch
    for epoch in range(start, args.epochs):
        model.train()
        order = torch.randperm(len(xtr))
        total = 0.0
        for i in range(batches):
            idx = order[i * args.batch : (i + 1) * args.batch]
            opt.zero_grad()
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            if i % 10 == 0:
                run.log(epoch + i / batches, loss=loss.item())  # FlowPlan: progress inside the epoch
            if run.should_checkpoint():  # FlowPlan: a pause or a migration is coming
                # The epoch in progress starts over after the resume (the weights keep its updates so far).
                state = {"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "epoch": epoch}
                torch.save(state, ckpt)
                run.checkpoint_done(ckpt, epoch=epoch)  # exits with 75 when asked to stop
        sched.step()
        model.eval()
        with torch.no_grad():
            acc = (model(xva).argmax(1) == yva).float().mean().item()
        run.log(epoch + 1, loss=total / len(xtr), metric=acc)  # FlowPlan: the epoch's end
        if run.should_deliver():  # FlowPlan: tier 1 reached, hand the model over
            delivered = ckpt_dir / f"{args.job}.delivered.pt"
            torch.save(model.state_dict(), delivered)
            run.delivered(delivered, metric=acc)
    run.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
