"""A small real training job for FlowPlan's Docker adapter: a numpy MLP on scikit-learn's digits.

It reports through the training-side SDK (``flowplan.sdk``, ``docs/sdk.md``): JSON lines, one
point per epoch, and events::

    {"event": "declare", "max_epochs": 30, "schedule": {"kind": "constant"}, ...}
    {"event": "started", "epoch": 0, ...}
    Loss: 0.4312
    {"epoch": 3, "loss": 0.4312, "metric": 0.912, "time": 1767000000.1}

(the bare ``Loss:`` line is for FlowCon's own monitor; once JSON is seen FlowPlan reads only JSON),
and hears FlowPlan through the SDK:

- ``SIGTERM`` (the Docker adapter's pause and migration; Kubernetes' pod deletion), the flag file
  ``<control dir>/<job>.checkpoint`` or the pod annotation ``flowplan.io/checkpoint-requested``:
  finish the current batch, write a checkpoint, print ``{"event": "checkpoint", ...}`` and exit with
  code 75 (EX_TEMPFAIL, "stopped, can resume").
- ``SIGUSR1`` (the Docker adapter's deliver), ``<control dir>/<job>.deliver`` or the annotation
  ``flowplan.io/deliver-requested``: deliver (TRADL's tier 1): copy the current model to
  ``<job>.delivered.npz`` and print ``{"event": "delivered", ...}``; training goes on.

The control directory is ``$FLOWPLAN_CONTROL_DIR``, else the checkpoint directory. On start it
resumes from ``<checkpoint dir>/<job>.npz`` when one exists (weights, optimiser state, epoch and the
random generator), so a migrated job carries on where it stopped. It exits 0 with
``{"event": "finished"}`` after ``--epochs`` epochs, or earlier when ``--target`` is reached and
``--stop-at-target`` is set.

Only numpy and scikit-learn's bundled data set: no network, no download. ``flowplan.sdk`` is the
standard library only (the tests bind-mount the repository's ``flowplan/`` package). Single-threaded
on purpose (``OMP_NUM_THREADS=1``), so a CPU limit of ``c`` cores makes an epoch about ``1/c`` times
as long (for ``c <= 1``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import flowplan.sdk  # noqa: E402


def load_data(seed: int, repeat: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    x, y = x[order], y[order]
    n_val = len(x) // 4
    x_tr, y_tr, x_va, y_va = x[n_val:], y[n_val:], x[:n_val], y[:n_val]
    # ``repeat`` copies of the training set with small noise: more work per epoch, same task.
    if repeat > 1:
        noise = rng.normal(0.0, 0.05, size=(repeat - 1, *x_tr.shape))
        x_tr = np.concatenate([x_tr, *(x_tr[None] + noise)])
        y_tr = np.tile(y_tr, repeat)
    return x_tr, y_tr, x_va, y_va


def init_params(rng: np.random.Generator, n_in: int, hidden: int, n_out: int) -> dict[str, np.ndarray]:
    return {
        "w1": rng.normal(0, 1 / np.sqrt(n_in), size=(n_in, hidden)),
        "b1": np.zeros(hidden),
        "w2": rng.normal(0, 1 / np.sqrt(hidden), size=(hidden, n_out)),
        "b2": np.zeros(n_out),
    }


def forward(p: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.maximum(x @ p["w1"] + p["b1"], 0.0)
    z = h @ p["w2"] + p["b2"]
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return h, e / e.sum(axis=1, keepdims=True)


def evaluate(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    _, prob = forward(p, x)
    loss = float(-np.mean(np.log(prob[np.arange(len(y)), y] + 1e-12)))
    return loss, float(np.mean(prob.argmax(axis=1) == y))


def save(path: Path, state: dict[str, np.ndarray]) -> None:
    """Write next to the target and rename: a reader never sees half a checkpoint."""
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **state)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default=os.environ.get("FLOWPLAN_JOB", "digits"))
    ap.add_argument("--checkpoint-dir", default=os.environ.get("FLOWPLAN_CHECKPOINT_DIR", "/ckpt"))
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--hidden", type=int, default=512, help="hidden units")
    ap.add_argument("--repeat", type=int, default=1, help="noisy copies of the training set per epoch")
    ap.add_argument(
        "--work",
        type=int,
        default=200,
        help="compute each batch's gradient this many times: a bigger model's cost, the same curve",
    )
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=None, help="validation accuracy that counts as done")
    ap.add_argument("--stop-at-target", action="store_true")
    args = ap.parse_args(argv)

    ckpt_dir = Path(args.checkpoint_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    ckpt = ckpt_dir / f"{args.job}.npz"

    resumed: dict[str, np.ndarray] | None = None
    if ckpt.exists():
        with np.load(ckpt, allow_pickle=False) as z:
            resumed = {k: z[k] for k in z.files}
    # Heard from here on: SIGTERM / SIGUSR1, and the flag files and annotations of the control directory.
    run = flowplan.sdk.init(
        args.job,
        max_epochs=args.epochs,
        schedule={"kind": "constant"},
        control_dir=os.environ.get("FLOWPLAN_CONTROL_DIR") or ckpt_dir,
        resumed_from=int(resumed["epoch"]) if resumed is not None else None,
    )

    x_tr, y_tr, x_va, y_va = load_data(args.seed, args.repeat)
    rng = np.random.default_rng(args.seed)
    params = init_params(rng, x_tr.shape[1], args.hidden, 10)
    velocity = {k: np.zeros_like(v) for k, v in params.items()}
    epoch = 0
    if resumed is not None:
        params = {k: resumed[k] for k in params}
        velocity = {k: resumed["v_" + k] for k in params}
        epoch = int(resumed["epoch"])
        rng = np.random.default_rng([args.seed, epoch])

    # The state at the end of the last whole epoch: what a checkpoint holds.
    done = {**{k: v.copy() for k, v in params.items()}, **{"v_" + k: v.copy() for k, v in velocity.items()}}

    while epoch < args.epochs:
        order = rng.permutation(len(x_tr))
        for start in range(0, len(order), args.batch):
            if run.should_checkpoint():
                # The epoch in progress is dropped: the checkpoint holds whole epochs only.
                save(ckpt, {**done, "epoch": np.array(epoch)})
                run.checkpoint_done(ckpt, epoch=epoch)  # asked to stop: exits with 75
            idx = order[start : start + args.batch]
            xb, yb = x_tr[idx], y_tr[idx]
            for _ in range(max(1, args.work)):
                h, prob = forward(params, xb)
            grad_z = prob
            grad_z[np.arange(len(yb)), yb] -= 1.0
            grad_z /= len(yb)
            grads = {"w2": h.T @ grad_z, "b2": grad_z.sum(axis=0)}
            grad_h = (grad_z @ params["w2"].T) * (h > 0)
            grads["w1"] = xb.T @ grad_h
            grads["b1"] = grad_h.sum(axis=0)
            for k in params:
                velocity[k] = 0.9 * velocity[k] - args.lr * grads[k]
                params[k] += velocity[k]
        epoch += 1
        done = {**{k: v.copy() for k, v in params.items()}, **{"v_" + k: v.copy() for k, v in velocity.items()}}
        # A fresh generator per epoch: a resumed run draws the same batches as an uninterrupted one.
        rng = np.random.default_rng([args.seed, epoch])
        loss, acc = evaluate(params, x_va, y_va)
        print(f"Loss: {loss:.6f}", flush=True)
        run.log(epoch, loss=loss, metric=acc)
        if run.should_deliver():
            delivered = ckpt_dir / f"{args.job}.delivered.npz"
            save(delivered, dict(params))
            run.delivered(delivered, metric=acc)
        if args.stop_at_target and args.target is not None and acc >= args.target:
            break
    run.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
