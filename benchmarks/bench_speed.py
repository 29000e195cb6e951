"""Speed-model accuracy on measured step times: FlowPlan's data-parallel model vs. two naive baselines.

Prints tables; asserts nothing; a few seconds. Data: ``traces/<model>/scalability.csv``
(``num_nodes,num_replicas,local_bsz,step_time,sync_time``; 6-16 nodes, 6-64 replicas) and
``traces/<model>/placements.csv`` (``placement,local_bsz,step_time,sync_time``; a placement's digits are
the replicas on each node, e.g. ``22`` = 2 nodes x 2 GPUs; 1-4 nodes, 1-16 replicas) of the Pollux /
AdaptDL OSDI 2021 artifact (see ``/work/shared/data/README.md``; Apache-2.0), all six models.

Replicas are treated as FlowPlan's ``gpus``; the CPU share is not measured and held at 8 cores
(``cpu_millis=8000``). A *series* is the set of measured points that belong to one job configuration:

``weak``    (the default; fixed *local* batch ``b``, the tables' own rows): one series per model and
            ``local_bsz``; the global batch grows with the replicas ``g``.
``strong``  (fixed *global* batch ``B``): one series per model and ``B`` = a measured ``local_bsz``,
            holding the rows whose ``g * local_bsz`` is within 3 % of ``B`` (the tables' batch sizes are
            on a ~sqrt(2) grid, so ``B/2``, ``B/4`` ... are there to within 1 %).

Step times are converted to seconds per epoch over a fixed data set of ``N`` samples:
``t_epoch = step_time * N / (g * local_bsz)`` (steps per epoch = ``N / global batch``). ``N`` cancels
from every relative error, and the relative error of a predicted epoch time equals that of the step
time it implies, so the figures below are *relative errors of predicted step time*.

Each series is fitted on the packed single-node placements of ``--fit`` (default: the 1, 2 and 4
replica points ``1``, ``2``, ``4``; and, as a second split, ``1``, ``2`` only) and predicts every other
point of the series. Methods:

``flowplan``   ``models.fit_speed_model(obs, uses_gpu=True)`` on the fit points
               (serial + cpu/cores + gpu/g + sync*log2(g), NNLS with prior rows).
``no-sync``    the same with ``with_sync=False`` (serial + cpu/cores + gpu/g): what the sync term buys.
``prior-1``    ``fit_speed_model`` on the 1-replica point alone: the prior's shape scaled through it.
``linear``     perfect linear scaling ``t_epoch(g) = t_epoch(1) / g`` (constant step time under weak
               scaling, step time ``t1 / g`` under strong scaling).

Reported per model: the number of series and of held-out points, median and p90 relative error over
all held-out points, and the median split by where the held-out point runs: on one node (FlowPlan's
``gpus`` live on one node: this is the column that matters to the planner) or across several nodes
(inter-node all-reduce the model has never seen; an extrapolation).

``--ps`` adds a stand-in check of the parameter-server forms: these tables have no parameter servers,
so ``servers := nodes`` (each node's network link plays the server's role); each form is fitted on the
points with at most 8 replicas and predicts the rest (weak scaling). It shows that the fits converge on
real, noisy data; it does not validate the forms for PS training.

    python benchmarks/bench_speed.py
    python benchmarks/bench_speed.py --markdown --ps
    python benchmarks/bench_speed.py --scaling weak --fit 1,2,4 --out /tmp/speed.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from models.speed import PSSpeedObservation, SpeedObservation, fit_ps_speed_model, fit_speed_model
from models.step_tables import read_model_steps

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
TRACES = Path("adaptdl-osdi21") / "traces"
MODELS = ("cifar10", "imagenet", "bert", "deepspeech2", "yolov3", "ncf")
METHODS = ("flowplan", "no-sync", "prior-1", "linear")
CPU_MILLIS = 8000
#: Samples per epoch (cancels from every relative error).
EPOCH_SAMPLES = 1_000_000.0
#: Strong scaling: a row belongs to global batch B when |ln(g * local_bsz / B)| <= this.
STRONG_TOLERANCE = 0.03
DEFAULT_FITS = ("1,2,4", "1,2")


@dataclass(frozen=True)
class Point:
    """One measured configuration."""

    local_bsz: int
    replicas: int
    nodes: int
    placement: str | None  # None for scalability.csv rows
    step_time: float

    @property
    def epoch_seconds(self) -> float:
        return self.step_time * EPOCH_SAMPLES / (self.replicas * self.local_bsz)


def load_points(data: Path, model: str) -> list[Point]:
    pts = [
        Point(s.local_batch, s.replicas, s.nodes, None if s.placement is None else "".join(map(str, s.placement)), s.step_seconds)
        for s in read_model_steps(data, model)
    ]
    return [p for p in pts if math.isfinite(p.step_time) and p.step_time > 0]


def series_of(points: list[Point], scaling: str) -> dict[int, list[Point]]:
    """Series keyed by local batch (weak) or global batch (strong)."""
    sizes = sorted({p.local_bsz for p in points})
    if scaling == "weak":
        return {b: [p for p in points if p.local_bsz == b] for b in sizes}
    out = {}
    for big in sizes:
        out[big] = [p for p in points if abs(math.log(p.replicas * p.local_bsz / big)) <= STRONG_TOLERANCE]
    return out


def predict(method: str, fit_pts: list[Point], test: list[Point]) -> np.ndarray:
    g = np.array([p.replicas for p in test])
    one = next(p for p in fit_pts if p.replicas == 1)
    if method == "linear":
        return one.epoch_seconds / g
    use = [one] if method == "prior-1" else fit_pts
    obs = [SpeedObservation(CPU_MILLIS, p.replicas, p.epoch_seconds) for p in use]
    model = fit_speed_model(obs, uses_gpu=True, with_sync=method != "no-sync")
    return model.seconds_per_epoch_many(np.full(len(test), CPU_MILLIS), g)


def bench(data: Path, scaling: str, fit: Sequence[str]) -> list[dict[str, Any]]:
    """One record per held-out point and method."""
    rows: list[dict[str, Any]] = []
    for model in MODELS:
        for key, pts in series_of(load_points(data, model), scaling).items():
            by_place = {p.placement: p for p in pts if p.placement is not None}
            if not all(f in by_place for f in fit):
                continue
            fit_pts = [by_place[f] for f in fit]
            test = [p for p in pts if p.placement not in fit]
            if not test:
                continue
            seen = np.array([p.epoch_seconds for p in test])
            for method in METHODS:
                pred = predict(method, fit_pts, test)
                for p, e in zip(test, np.abs(pred - seen) / seen, strict=True):
                    rows.append(
                        {
                            "model": model,
                            "series": key,
                            "method": method,
                            "replicas": p.replicas,
                            "nodes": p.nodes,
                            "placement": p.placement,
                            "error": float(e),
                        }
                    )
    return rows


def _q(errs: list[float], q: float) -> float | None:
    return float(np.percentile(errs, q)) if errs else None


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for model in MODELS:
        for method in METHODS:
            sel = [r for r in rows if r["model"] == model and r["method"] == method]
            if not sel:
                continue
            errs = [r["error"] for r in sel]
            one = [r["error"] for r in sel if r["nodes"] == 1]
            multi = [r["error"] for r in sel if r["nodes"] > 1]
            out.append(
                {
                    "model": model,
                    "method": method,
                    "series": len({r["series"] for r in sel}),
                    "points": len(sel),
                    "median": _q(errs, 50),
                    "p90": _q(errs, 90),
                    "one_node_points": len(one),
                    "one_node_median": _q(one, 50),
                    "multi_node_median": _q(multi, 50),
                }
            )
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def table(summary: list[dict[str, Any]], markdown: bool) -> str:
    head = ["model", "method", "series", "held-out", "median", "p90", "1-node n", "1-node median", "multi-node median"]
    body = [
        [
            s["model"],
            s["method"],
            str(s["series"]),
            str(s["points"]),
            _pct(s["median"]),
            _pct(s["p90"]),
            str(s["one_node_points"]),
            _pct(s["one_node_median"]),
            _pct(s["multi_node_median"]),
        ]
        for s in summary
    ]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 2 else "--:" for i in range(len(head))) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        return "\n".join(lines)
    width = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if i < 2 else '>'}{w}}}" for i, w in enumerate(width))
    return "\n".join(fmt.format(*r) for r in [head, *body])


def bench_ps(data: Path) -> list[dict[str, Any]]:
    """Stand-in: PS forms on (workers := replicas, servers := nodes), weak scaling, fit on <= 8 replicas."""
    out = []
    for model in MODELS:
        for form in ("optimus", "coach"):
            errs: list[float] = []
            fit_rmse: list[float] = []
            for bsz, pts in series_of(load_points(data, model), "weak").items():
                train = [p for p in pts if p.replicas <= 8]
                test = [p for p in pts if p.replicas > 8]
                if len(train) < 3 or not test:
                    continue
                obs = [PSSpeedObservation(p.replicas, p.nodes, p.epoch_seconds) for p in train]
                m = fit_ps_speed_model(obs, form, batch_size=float(bsz))
                pred = m.seconds_per_epoch_many(np.array([p.replicas for p in test]), np.array([p.nodes for p in test]))
                seen = np.array([p.epoch_seconds for p in test])
                errs.extend((np.abs(pred - seen) / seen).tolist())
                if m.relative_rmse is not None:
                    fit_rmse.append(m.relative_rmse)
            out.append(
                {
                    "model": model,
                    "form": form,
                    "points": len(errs),
                    "fit_rmse_median": _q(fit_rmse, 50),
                    "median": _q(errs, 50),
                    "p90": _q(errs, 90),
                }
            )
    return out


def ps_table(rows: list[dict[str, Any]], markdown: bool) -> str:
    head = ["model", "form", "held-out", "fit rel. RMSE (median)", "median", "p90"]
    body = [
        [r["model"], r["form"], str(r["points"]), _pct(r["fit_rmse_median"]), _pct(r["median"]), _pct(r["p90"])] for r in rows
    ]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 2 else "--:" for i in range(len(head))) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])
    width = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if i < 2 else '>'}{w}}}" for i, w in enumerate(width))
    return "\n".join(fmt.format(*r) for r in [head, *body])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder (default: ../shared/data)")
    ap.add_argument("--scaling", default="weak,strong", help="comma list of weak, strong (default: both)")
    ap.add_argument("--fit", action="append", help="placements to fit on, comma list; repeatable (default: 1,2,4 and 1,2)")
    ap.add_argument("--ps", action="store_true", help="also the parameter-server forms on (replicas, nodes) as a stand-in")
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables")
    ap.add_argument("--out", type=Path, help="write every per-point error and the summaries as JSON")
    args = ap.parse_args(argv)
    if not (args.data / TRACES).is_dir():
        print(f"data not found: {args.data / TRACES}", file=sys.stderr)
        return 2
    fits = args.fit or list(DEFAULT_FITS)
    started = time.perf_counter()
    result: dict[str, Any] = {"python": platform.python_version(), "runs": []}
    for scaling in [s.strip() for s in args.scaling.split(",") if s.strip()]:
        if scaling not in ("weak", "strong"):
            ap.error(f"unknown scaling {scaling!r}")
        for fit in fits:
            fit_set = [f.strip() for f in fit.split(",") if f.strip()]
            rows = bench(args.data, scaling, fit_set)
            summary = summarize(rows)
            title = f"{scaling} scaling, fit on placements {','.join(fit_set)}; relative error of predicted step time"
            print(f"\n### {title}\n" if args.markdown else f"\n== {title}")
            print(table(summary, args.markdown))
            result["runs"].append({"scaling": scaling, "fit": fit_set, "summary": summary, "points": rows})
    if args.ps:
        ps = bench_ps(args.data)
        title = "parameter-server forms, stand-in (servers := nodes), weak scaling, fit on <= 8 replicas"
        print(f"\n### {title}\n" if args.markdown else f"\n== {title}")
        print(ps_table(ps, args.markdown))
        result["ps"] = ps
    elapsed = time.perf_counter() - started
    print(f"\n({elapsed:.1f} s)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
