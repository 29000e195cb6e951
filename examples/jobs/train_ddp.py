"""The gang job of ``train_gang.py`` with PyTorch DDP: softmax regression on digits, gloo on CPU.

Used only by ``benchmarks/e2e_gang.py --torch-site DIR`` when torch imports; torch is no dependency
of the project, and no test or CI step runs this file.

The replicas find each other with torchrun's variables, which the Docker adapter sets
(``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``; unset: one process, no process group),
through ``torch.distributed.init_process_group("gloo", init_method="env://")``. The model and the
arithmetic are ``train_gang.py``'s, in float64: a bias-free ``Linear(65, 10)`` on the digits with a
bias column, one full-batch step per epoch, SGD with momentum. Each rank's loss is the cross-entropy
*summed* over its shard (rows ``rank, rank + W, ...``) times ``W / n``: DDP averages the gradients
over the ``W`` ranks, so every rank steps on the gradient of the mean loss over the whole training
set, whatever ``WORLD_SIZE`` (torch's momentum ``v = m v + g; w -= lr v`` is ``train_gang.py``'s
``v = m v - lr g; w += v`` with ``v`` scaled by ``-lr``). ``--work`` repeats the forward pass.

Rank 0 reads the checkpoint and broadcasts the state, reports through ``flowplan.sdk``, and hears
``SIGTERM``: at the start of each epoch it broadcasts whether to stop; when it does, it writes
``<checkpoint dir>/<job>.ddp.pt`` (epoch, weights, momentum) and every rank exits 75. On ``SIGUSR1`` it
writes the weights to ``<job>.delivered.pt`` and prints ``{"event": "delivered"}``; training goes on.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from train_gang import load_data  # noqa: E402  (next to this file: the same data, split and shards)

import flowplan.sdk  # noqa: E402

EX_CHECKPOINTED = 75


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default=os.environ.get("FLOWPLAN_JOB", "ddp"))
    ap.add_argument("--checkpoint-dir", default=os.environ.get("FLOWPLAN_CHECKPOINT_DIR", "/ckpt"))
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--work", type=int, default=100, help="forward passes per shard and epoch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rendezvous-timeout", type=float, default=120.0)
    args = ap.parse_args(argv)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if not 0 <= rank < world:
        print(f"RANK {rank} is outside WORLD_SIZE {world}", file=sys.stderr)
        return 2
    torch.set_default_dtype(torch.float64)
    x_tr, y_tr, x_va, y_va = load_data(args.seed)
    n_total = len(x_tr)
    x = torch.from_numpy(x_tr[rank::world].copy())
    y = torch.from_numpy(y_tr[rank::world].copy())
    xv, yv = torch.from_numpy(x_va), torch.from_numpy(y_va)
    ckpt = Path(args.checkpoint_dir) / f"{args.job}.ddp.pt"

    model = nn.Linear(x.shape[1], 10, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    epoch = 0
    run = None
    if rank == 0:
        Path(args.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        resumed = None
        if ckpt.exists():
            saved = torch.load(ckpt, weights_only=True)
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["opt"])
            epoch = resumed = int(saved["epoch"])
        run = flowplan.sdk.init(
            args.job,
            max_epochs=args.epochs,
            schedule={"kind": "constant"},
            control_dir=os.environ.get("FLOWPLAN_CONTROL_DIR") or args.checkpoint_dir,
            resumed_from=resumed,
        )
        run.event("rendezvous", world_size=world, master=f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}")
    # A zero momentum buffer is what SGD starts from (its first step sets it to the gradient).
    state = opt.state[model.weight]
    if state.get("momentum_buffer") is None:
        state["momentum_buffer"] = torch.zeros_like(model.weight)
    if world > 1:
        dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=args.rendezvous_timeout))
        # Rank 0's state to every rank: the epoch, the weights and the momentum buffer.
        size = model.weight.numel()
        packed = torch.cat([torch.tensor([float(epoch)]), model.weight.detach().ravel(), state["momentum_buffer"].ravel()])
        dist.broadcast(packed, 0)
        with torch.no_grad():
            epoch = int(packed[0])
            model.weight.copy_(packed[1 : 1 + size].view_as(model.weight))
            state["momentum_buffer"] = packed[1 + size :].view_as(model.weight).clone()
        ddp: nn.Module = nn.parallel.DistributedDataParallel(model)
        print(f"rank {rank} of {world}: joined at epoch {epoch}", file=sys.stderr, flush=True)
    else:
        ddp = model
    try:
        return train(args, ddp, model, opt, run, epoch, (x, y), (xv, yv), n_total, world, ckpt)
    finally:
        if world > 1:
            dist.destroy_process_group()


def train(
    args: argparse.Namespace,
    ddp: nn.Module,
    model: nn.Linear,
    opt: torch.optim.Optimizer,
    run: flowplan.sdk.Run | None,
    epoch: int,
    shard: tuple[torch.Tensor, torch.Tensor],
    val: tuple[torch.Tensor, torch.Tensor],
    n_total: int,
    world: int,
    ckpt: Path,
) -> int:
    x, y = shard
    while epoch < args.epochs:
        stop = torch.tensor([1.0 if run is not None and run.should_checkpoint() else 0.0])
        if world > 1:
            dist.broadcast(stop, 0)
        if stop.item():
            if run is None:
                return EX_CHECKPOINTED
            tmp = ckpt.with_name(ckpt.name + ".tmp")
            torch.save({"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict()}, tmp)
            os.replace(tmp, ckpt)
            run.checkpoint_done(ckpt, epoch=epoch)  # exits 75
        with torch.no_grad():
            for _ in range(max(1, args.work) - 1):
                model(x)
        z = ddp(x)
        loss_sum = nn.functional.cross_entropy(z, y, reduction="sum")
        opt.zero_grad()
        (loss_sum * world / n_total).backward()  # DDP averages over the ranks: the mean over the whole set
        opt.step()
        totals = torch.stack([loss_sum.detach(), (z.argmax(dim=1) == y).sum().to(torch.float64)])
        if world > 1:
            dist.all_reduce(totals)
        epoch += 1
        if run is not None:
            with torch.no_grad():
                acc = float((model(val[0]).argmax(dim=1) == val[1]).double().mean())
            loss, correct = float(totals[0]) / n_total, float(totals[1]) / n_total
            run.log(epoch, loss=loss, metric=acc)
            print(f"epoch {epoch} world {world} loss {loss:.12f} train_acc {correct:.4f}", file=sys.stderr, flush=True)
            if run.should_deliver():  # SIGUSR1: rank 0 holds the whole model; training goes on
                delivered = ckpt.with_name(f"{args.job}.delivered.pt")
                torch.save(model.state_dict(), delivered)
                run.delivered(delivered, metric=acc)
    if run is not None:
        run.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
