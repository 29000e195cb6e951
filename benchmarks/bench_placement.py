"""Step time across placements (models/placement.py) on the measured tables; where extra workers stop paying.

The placement model is Pollux's form; the second table is Coach-style.

Prints tables; asserts nothing; under a minute. Data: ``traces/<model>/placements.csv`` (1-4 nodes,
1-16 replicas, every placement) and ``scalability.csv`` (6-16 nodes, 6-64 replicas, spread not
recorded) of the Pollux / AdaptDL OSDI'21 artifact (``/work/shared/data/README.md``; Apache-2.0),
every model found there.

1. **Held-out error.** Per model, the placement model is fitted (no prior) on the rows of the
   placements in ``--fit`` at every measured local batch, and predicts every other row of both
   tables. Reported: median and p90 relative error of the step time over the held-out
   ``placements.csv`` rows, the median by node count, the same over ``scalability.csv`` (more nodes
   and replicas than any fitted row: extrapolation), and the *noise floor*: the median deviation of a
   row from the median of the rows with the same nodes, replicas and local batch (what no model in
   those three alone can beat). Default splits: the one-node placements with, for each node count
   2-4, one replica and four replicas per node (``1,2,3,4,11,44,111,444,1111,4444``); the one-node
   placements with two two-node ones (``1,2,3,4,22,44``); the one-node placements alone
   (``1,2,3,4``: the inter-node link is then assumed as slow as the intra-node one). Last columns
   per model: the table prior (fitted on all of ``placements.csv``) predicting ``scalability.csv``.
1b. **Online, with the prior** (semi-synthetic): the job runs on a cluster whose links are
   ``SHIFT_LINK`` x slower and whose compute takes ``SHIFT_COMPUTE`` x the time; its truth is the
   table prior (fitted on both tables) so changed. It reports 3 placements (``1``, ``4``, ``22``, at
   the median local batch, with sync times); the error over every measured placement and 8 or 16 full nodes and 12
   nodes of 2 at that batch and half of it, for the prior alone, the prior + 3 observations, and the 3
   observations without a prior.
2. **Where extra workers pay** (weak scaling: the local batch is held, so the global batch grows
   with the replicas). Per model, at the median local batch measured in both tables, with ``F`` free
   GPUs on ``F/4`` empty 4-GPU nodes: for each replica count ``K <= F`` the fastest placement (ties:
   fewer nodes), its throughput ``X(K) = K * b / step`` [samples/s]. The chosen ``K*`` starts at 1 and
   moves to a larger ``K`` whenever ``(X(K) - X(K*)) / (K - K*) >= --pay * X(1)``: the extra GPUs, taken
   together (so a move across a node boundary can pay even when its first GPU alone does not), each
   add at least ``--pay`` of one GPU's throughput. Shown: ``K*``, its placement, the speed-up
   ``X(K*)/X(1)``, the throughput per GPU ``X(K*)/(K* X(1))``, and the first larger ``K`` the rule
   refused (where workers stop paying). *modelled*: the table prior of the model (fitted on both
   tables); *measured*: the same rule on the measured rows at that batch (placements up to 4 nodes;
   beyond, ``scalability.csv`` rows, whose spread is not recorded); ``-`` where nothing was measured.
3. **Parameter-server jobs** (``models/speed.py``'s ``PSSpeedModel``). *Modelled only*: the shared
   data hold no parameter-server measurement, so each form's documented prior
   (``fit_ps_speed_model([], form)``) stands for the job. For a budget ``B`` (a worker costs 1, a
   server ``--ps-cost``), from (1 worker, 1 server): Coach's greedy rule adds the worker or server
   that buys the most speed while the budget allows; Optimus's adds the one with the most speed per
   unit cost; ``best`` is the fastest allocation within the budget (enumerated); *FlowPlan* gives
   each worker count the servers the planner would (``models.gang_speed.PSScaling``: the fewest within
   3 % of the fastest) and takes the fastest of those. With a server as
   dear as a worker the two rules are the same rule; ``--ps-cost`` defaults to 0.5, 1 and 2.

    python benchmarks/bench_placement.py
    python benchmarks/bench_placement.py --markdown --out /tmp/placement.json
    python benchmarks/bench_placement.py --fit 1,2,3,4,22,44 --pay 0.5 --ps-cost 0.25 --ps-cost 2
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from bench_curves import md_table, text_table

from models.gang_speed import PSScaling
from models.placement import (
    PlacementObservation,
    PlacementSpeedModel,
    fit_placement_model,
    noise_floor,
    table_observations,
    table_prior,
)
from models.speed import PSForm, PSSpeedModel, fit_ps_speed_model
from models.step_tables import TRACES, MeasuredStep, parse_placement, read_model_steps, table_models

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
DEFAULT_FITS = ("1,2,3,4,11,44,111,444,1111,4444", "1,2,3,4,22,44", "1,2,3,4")
LOADS = (4, 8, 16, 32)
GPUS_PER_NODE = 4
BUDGETS = (4, 8, 16, 32)
PS_COSTS = (0.5, 1.0, 2.0)
#: Section 1b: the other cluster's link and compute times as multiples of the measured ones, and
#: the placements the job is seen on there.
SHIFT_LINK = 2.0
SHIFT_COMPUTE = 0.7
ONLINE_SEEN = ((1,), (4,), (2, 2))


def _q(xs: Sequence[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if len(xs) else None


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:.0f}%"


def _errors(model: PlacementSpeedModel, rows: Sequence[MeasuredStep]) -> list[tuple[MeasuredStep, float]]:
    out = []
    for s, o in zip(rows, table_observations(rows), strict=True):
        out.append((s, abs(model.step_seconds(o.placement, o.local_batch) - s.step_seconds) / s.step_seconds))
    return out


def _usable(steps: Sequence[MeasuredStep]) -> list[MeasuredStep]:
    return [s for s in steps if math.isfinite(s.step_seconds) and s.step_seconds > 0 and s.local_batch > 0]


def held_out(data: Path, models: Sequence[str], fit: Sequence[tuple[int, ...]]) -> list[dict[str, Any]]:
    """Section 1: one record per model and split."""
    out = []
    for name in models:
        steps = _usable(read_model_steps(data, name))
        train = [s for s in steps if s.placement in fit]
        test = [s for s in steps if s.placement not in fit]
        model = fit_placement_model(table_observations(train))
        errs = _errors(model, test)
        plc = [e for s, e in errs if s.table == "placements"]
        scal = [e for s, e in errs if s.table == "scalability"]
        by_nodes = {n: _q([e for s, e in errs if s.table == "placements" and s.nodes == n], 50) for n in (1, 2, 3, 4)}
        prior = table_prior([s for s in steps if s.table == "placements"])
        prior_scal = [e for _, e in _errors(prior, [s for s in steps if s.table == "scalability"])]
        out.append(
            {
                "model": name,
                "fit": ["".join(map(str, p)) for p in fit],
                "fit_rows": len(train),
                "held_out_rows": len(plc),
                "median": _q(plc, 50),
                "p90": _q(plc, 90),
                "median_by_nodes": by_nodes,
                "scalability_rows": len(scal),
                "scalability_median": _q(scal, 50),
                "scalability_p90": _q(scal, 90),
                "prior_to_scalability_median": _q(prior_scal, 50),
                "prior_to_scalability_p90": _q(prior_scal, 90),
                "noise_floor": noise_floor(steps),
                "fit_rmse": model.relative_rmse,
                "held": list(model.held),
            }
        )
    return out


def held_out_table(rows: list[dict[str, Any]], markdown: bool) -> str:
    head = ["model", "fit rows", "held-out", "median", "p90", "2 nodes", "3 nodes", "4 nodes", "noise floor"]
    head += ["6-16 nodes median", "p90", "table prior -> 6-16 nodes median", "p90"]
    body = [
        [
            r["model"],
            str(r["fit_rows"]),
            str(r["held_out_rows"]),
            _pct(r["median"]),
            _pct(r["p90"]),
            *(_pct(r["median_by_nodes"][n]) for n in (2, 3, 4)),
            _pct(r["noise_floor"]),
            _pct(r["scalability_median"]),
            _pct(r["scalability_p90"]),
            _pct(r["prior_to_scalability_median"]),
            _pct(r["prior_to_scalability_p90"]),
        ]
        for r in rows
    ]
    return md_table(head, body) if markdown else text_table(head, body)


def online_rows(data: Path, models: Sequence[str]) -> list[dict[str, Any]]:
    """Section 1b: the table prior on a cluster with 2x slower links and 0.7x the compute time."""
    out = []
    for name in models:
        steps = _usable(read_model_steps(data, name))
        prior = table_prior(steps)
        p = prior.params
        moved = PlacementSpeedModel(
            replace(
                p,
                compute_base=SHIFT_COMPUTE * p.compute_base,
                compute_per_sample=SHIFT_COMPUTE * p.compute_per_sample,
                intra_base=SHIFT_LINK * p.intra_base,
                inter_base=SHIFT_LINK * p.inter_base,
            ),
            0,
            "prior",
        )
        batch = float(_batch(steps))
        seen = [
            PlacementObservation(q, batch, moved.step_seconds(q, batch), moved.sync_seconds(q, batch) if sum(q) > 1 else None)
            for q in ONLINE_SEEN
        ]
        places = sorted({s.placement for s in steps if s.placement is not None} | {(4,) * 8, (4,) * 16, (2,) * 12})
        truth = [(q, b, moved.step_seconds(q, b)) for q in places for b in (batch / 2, batch)]
        row: dict[str, Any] = {"model": name, "observed": ["".join(map(str, q)) for q in ONLINE_SEEN], "batch": batch}
        for label, m in (
            ("prior", prior),
            ("prior+3", fit_placement_model(seen, prior=prior)),
            ("3 alone", fit_placement_model(seen)),
        ):
            errs = [abs(m.step_seconds(q, b) - t) / t for q, b, t in truth]
            row[label] = {"median": _q(errs, 50), "p90": _q(errs, 90)}
        out.append(row)
    return out


def online_table(rows: list[dict[str, Any]], markdown: bool) -> str:
    head = ["model", "prior alone median", "p90", "prior + 3 obs median", "p90", "3 obs, no prior median", "p90"]
    body = [[r["model"], *(_pct(r[k][q]) for k in ("prior", "prior+3", "3 alone") for q in ("median", "p90"))] for r in rows]
    return md_table(head, body) if markdown else text_table(head, body)


# --------------------------------------------------------------------------------------------------
# Section 2: where extra workers pay
# --------------------------------------------------------------------------------------------------


def spreads(replicas: int, nodes: int, per_node: int = GPUS_PER_NODE) -> Iterator[tuple[int, ...]]:
    """Every way (as a non-increasing tuple) to put ``replicas`` on at most ``nodes`` nodes of ``per_node`` GPUs."""

    def rec(left: int, cap: int, room: int) -> Iterator[tuple[int, ...]]:
        if left == 0:
            yield ()
            return
        if room == 0:
            return
        for first in range(min(cap, left), 0, -1):
            for rest in rec(left - first, first, room - 1):
                yield (first, *rest)

    yield from rec(replicas, per_node, nodes)


def _choose(throughput: dict[int, float], pay: float) -> tuple[int, int | None]:
    """(K*, the first larger K refused) of the pay rule in the module docstring."""
    base = throughput[1]
    best = 1
    refused: int | None = None
    for k in sorted(throughput):
        if k <= best:
            continue
        if (throughput[k] - throughput[best]) / (k - best) >= pay * base:
            best = k
            refused = None
        elif refused is None:
            refused = k
    return best, refused


def _batch(steps: Sequence[MeasuredStep]) -> int:
    both = sorted(
        {s.local_batch for s in steps if s.table == "placements"} & {s.local_batch for s in steps if s.table == "scalability"}
    )
    pool = both or sorted({s.local_batch for s in steps})
    return pool[len(pool) // 2]


def _measured_best(steps: Sequence[MeasuredStep], batch: int, free: int) -> dict[int, tuple[float, str]]:
    """Replicas -> (fastest measured throughput, its placement) on at most ``free / 4`` nodes."""
    nodes = free // GPUS_PER_NODE
    best: dict[int, tuple[float, str]] = {}
    for s in steps:
        if s.local_batch != batch or s.nodes > nodes or s.replicas > free:
            continue
        if s.placement is not None and max(s.placement) > GPUS_PER_NODE:
            continue
        x = s.replicas * batch / s.step_seconds
        label = "".join(map(str, s.placement)) if s.placement else f"{s.nodes} nodes"
        if s.replicas not in best or x > best[s.replicas][0]:
            best[s.replicas] = (x, label)
    return best


def _modelled_best(model: PlacementSpeedModel, batch: int, free: int) -> dict[int, tuple[float, str]]:
    out: dict[int, tuple[float, str]] = {}
    for k in range(1, free + 1):
        cands = [(model.throughput(p, batch), -len(p), p) for p in spreads(k, free // GPUS_PER_NODE)]
        x, _, p = max(cands)
        out[k] = (x, "".join(map(str, p)))
    return out


def _row(best: dict[int, tuple[float, str]], pay: float) -> dict[str, Any] | None:
    if 1 not in best:
        return None
    k, refused = _choose({n: x for n, (x, _) in best.items()}, pay)
    x1 = best[1][0]
    return {
        "replicas": k,
        "placement": best[k][1],
        "speedup": best[k][0] / x1,
        "per_gpu": best[k][0] / (k * x1),
        "stops_paying_at": refused,
    }


def pay_table_rows(data: Path, models: Sequence[str], pay: float) -> list[dict[str, Any]]:
    out = []
    for name in models:
        steps = _usable(read_model_steps(data, name))
        model = table_prior(steps)
        batch = _batch(steps)
        for free in LOADS:
            out.append(
                {
                    "model": name,
                    "local_batch": batch,
                    "free_gpus": free,
                    "modelled": _row(_modelled_best(model, batch, free), pay),
                    "measured": _row(_measured_best(steps, batch, free), pay),
                }
            )
    return out


def pay_table(rows: list[dict[str, Any]], markdown: bool) -> str:
    head = ["model", "batch", "free GPUs", "K* model", "spread", "speed-up", "per GPU", "stops at"]
    head += ["K* measured", "spread", "speed-up", "per GPU", "stops at"]

    def cells(r: dict[str, Any] | None) -> list[str]:
        if r is None:
            return ["-"] * 5
        stop = "-" if r["stops_paying_at"] is None else str(r["stops_paying_at"])
        return [str(r["replicas"]), r["placement"], f"{r['speedup']:.2f}x", f"{r['per_gpu']:.2f}", stop]

    body = [[r["model"], str(r["local_batch"]), str(r["free_gpus"]), *cells(r["modelled"]), *cells(r["measured"])] for r in rows]
    return md_table(head, body) if markdown else text_table(head, body)


# --------------------------------------------------------------------------------------------------
# Section 3: parameter-server jobs (modelled only)
# --------------------------------------------------------------------------------------------------


def _greedy(model: PSSpeedModel, budget: float, ps_cost: float, per_cost: bool) -> tuple[int, int]:
    w, s = 1, 1
    while True:
        here = model.epochs_per_second(w, s)
        moves = []
        for dw, ds, cost in ((1, 0, 1.0), (0, 1, ps_cost)):
            if w + dw + (s + ds) * ps_cost <= budget + 1e-9:
                gain = model.epochs_per_second(w + dw, s + ds) - here
                moves.append((gain / cost if per_cost else gain, -dw, dw, ds))
        if not moves:
            return w, s
        score, _, dw, ds = max(moves)
        if score <= 0:
            return w, s
        w, s = w + dw, s + ds


def _best(model: PSSpeedModel, budget: float, ps_cost: float) -> tuple[int, int]:
    cands = [
        (model.epochs_per_second(w, s), -w - s, w, s)
        for w in range(1, int(budget) + 1)
        for s in range(1, int(budget / ps_cost) + 1)
        if w + s * ps_cost <= budget + 1e-9
    ]
    _, _, w, s = max(cands)
    return w, s


def _flowplan(model: PSSpeedModel, budget: float, ps_cost: float) -> tuple[int, int]:
    """FlowPlan's choice within the budget: for each worker count, the servers the planner gives it on
    one node (:meth:`models.gang_speed.PSScaling.servers_per_node`: the fewest within 3 % of the
    fastest the budget leaves room for); the fastest of those (ties: fewer workers)."""
    cands = []
    for w in range(1, int(budget) + 1):
        room = int((budget - w) / ps_cost + 1e-9)
        if room < 1:
            break
        scaling = PSScaling(model, 1.0, model.source, 1, room)
        s = int(scaling.servers_per_node(np.array([w]), np.array([1]))[0])
        cands.append((model.epochs_per_second(w, s), -w, w, s))
    _, _, w, s = max(cands)
    return w, s


def ps_rows(ps_costs: Sequence[float]) -> list[dict[str, Any]]:
    out = []
    forms: tuple[PSForm, ...] = ("optimus", "coach")
    for form in forms:
        model = fit_ps_speed_model([], form)
        base = model.epochs_per_second(1, 1)
        for cost in ps_costs:
            for budget in BUDGETS:
                if budget < 1 + cost:
                    continue  # not even one worker and one server
                row: dict[str, Any] = {"form": form, "ps_cost": cost, "budget": budget}
                for rule, (w, s) in (
                    ("coach", _greedy(model, budget, cost, per_cost=False)),
                    ("optimus", _greedy(model, budget, cost, per_cost=True)),
                    ("best", _best(model, budget, cost)),
                    ("flowplan", _flowplan(model, budget, cost)),
                ):
                    row[rule] = {"workers": w, "servers": s, "speedup": model.epochs_per_second(w, s) / base}
                out.append(row)
    return out


def ps_table(rows: list[dict[str, Any]], markdown: bool) -> str:
    head = [
        "prior form",
        "server cost",
        "budget",
        "Coach greedy (w,s)",
        "speed-up",
        "Optimus marginal (w,s)",
        "speed-up",
        "best (w,s)",
        "speed-up",
        "FlowPlan (w,s)",
        "speed-up",
    ]
    body = []
    for r in rows:
        cells = [r["form"], f"{r['ps_cost']:g}", str(r["budget"])]
        for rule in ("coach", "optimus", "best", "flowplan"):
            a = r[rule]
            cells += [f"({a['workers']},{a['servers']})", f"{a['speedup']:.2f}x"]
        body.append(cells)
    return md_table(head, body) if markdown else text_table(head, body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder (default: ../shared/data)")
    ap.add_argument(
        "--fit", action="append", help="placements to fit on, comma list; repeatable (default: the three splits above)"
    )
    ap.add_argument(
        "--pay",
        type=float,
        default=0.5,
        help="extra GPUs pay while each adds this fraction of one GPU's throughput (default 0.5)",
    )
    ap.add_argument(
        "--ps-cost",
        type=float,
        action="append",
        help="cost of a parameter server, a worker costing 1; repeatable (default 0.5, 1, 2)",
    )
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables")
    ap.add_argument("--out", type=Path, help="write every figure as JSON")
    args = ap.parse_args(argv)
    if not (args.data / TRACES).is_dir():
        print(f"--data: no folder {args.data / TRACES}", file=sys.stderr)
        return 2
    if not (math.isfinite(args.pay) and 0 < args.pay <= 1):
        print(f"--pay: must be in (0, 1], got {args.pay}", file=sys.stderr)
        return 2
    ps_costs = args.ps_cost or list(PS_COSTS)
    for cost in ps_costs:
        if not (math.isfinite(cost) and 0 < cost <= 8):
            print(f"--ps-cost: must be in (0, 8], got {cost}", file=sys.stderr)
            return 2
    fits = []
    for text in args.fit or DEFAULT_FITS:
        try:
            fits.append([parse_placement(p.strip()) for p in text.split(",") if p.strip()])
        except ValueError as exc:
            print(f"--fit: {exc}", file=sys.stderr)
            return 2
    models = table_models(args.data)
    started = time.perf_counter()
    result: dict[str, Any] = {"held_out": [], "models": models}

    def title(text: str) -> None:
        print(f"\n### {text}\n" if args.markdown else f"\n== {text}")

    for fit in fits:
        rows = held_out(args.data, models, fit)
        title(f"Held-out relative error of step time, fitted on placements {','.join(''.join(map(str, p)) for p in fit)}")
        print(held_out_table(rows, args.markdown))
        result["held_out"].append(rows)
    online = online_rows(args.data, models)
    title(
        f"Online: the table prior on a cluster with {SHIFT_LINK:g}x slower links and {SHIFT_COMPUTE:g}x compute, "
        f"3 observations ({', '.join(''.join(map(str, q)) for q in ONLINE_SEEN)}); error on every placement"
    )
    print(online_table(online, args.markdown))
    result["online"] = online
    pay = pay_table_rows(args.data, models, args.pay)
    title(f"Where extra workers pay (weak scaling; each extra GPU must add >= {args.pay:g} of one GPU's throughput)")
    print(pay_table(pay, args.markdown))
    result["pay"] = pay
    ps = ps_rows(ps_costs)
    title("Parameter-server jobs: Coach's greedy rule vs Optimus's marginal gain (MODELLED: the priors of models/speed.py)")
    print(ps_table(ps, args.markdown))
    result["ps"] = ps
    print(f"\n({time.perf_counter() - started:.1f} s)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
