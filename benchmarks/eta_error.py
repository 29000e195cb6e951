"""How far each plan's predicted finish of a job was from when it really finished.

Reads the per-run JSON files ``flowplan simulate --out DIR`` writes (``POLICY-seedN.json``): each
holds, per job, the finish the plan predicted at every plan (``eta``: pairs of the plan's time and
its predicted finish) and the job's actual finish. Every prediction made before the job finished
counts once. Printed per directory (and policy): how many predictions; the median and mean of the
error as a share of the time that was left (``|predicted - actual| / (actual - time of the
prediction)``); the median error in seconds; and the signed error's quantiles (predicted minus
actual: above 0, the plan expected the job later than it ended).

Usage::

    python benchmarks/eta_error.py DIR [DIR ...] [--policy flowplan]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EtaErrors:
    """Every prediction's error over some runs (seconds; ``relative``: over the time then left)."""

    signed: list[float]
    relative: list[float]

    def summary(self) -> dict[str, float | int]:
        if not self.signed:
            return {"predictions": 0}
        signed = sorted(self.signed)

        def q(p: float) -> float:
            return signed[round(p * (len(signed) - 1))]

        return {
            "predictions": len(signed),
            "median_relative": statistics.median(self.relative),
            "mean_relative": statistics.fmean(self.relative),
            "median_abs_s": statistics.median(abs(x) for x in signed),
            "signed_p10_s": q(0.1),
            "signed_median_s": q(0.5),
            "signed_p90_s": q(0.9),
        }


def run_errors(run: dict) -> EtaErrors:
    """The prediction errors of one run (a ``simulate --out`` JSON): jobs that did not finish, and
    predictions made at or after a job's finish, do not count."""
    finish = {job["id"]: job.get("finish") for job in run.get("jobs", [])}
    signed: list[float] = []
    relative: list[float] = []
    for job_id, rows in (run.get("eta") or {}).items():
        end = finish.get(job_id)
        if end is None:
            continue
        for at, predicted in rows:
            if predicted is None or not at < end:
                continue
            signed.append(predicted - end)
            relative.append(abs(predicted - end) / (end - at))
    return EtaErrors(signed, relative)


def directory_errors(folder: Path, policy: str) -> EtaErrors:
    """All of ``policy``'s runs in ``folder`` together."""
    signed: list[float] = []
    relative: list[float] = []
    for path in sorted(folder.glob(f"{policy}-seed*.json")):
        got = run_errors(json.loads(path.read_text()))
        signed += got.signed
        relative += got.relative
    return EtaErrors(signed, relative)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="a `flowplan simulate --out` directory")
    ap.add_argument("--policy", default="flowplan", help="whose predictions (default flowplan)")
    args = ap.parse_args(argv)
    for folder in args.dirs:
        if not folder.is_dir():
            print(f"eta_error: {folder}: not a directory", file=sys.stderr)
            return 2
        s = directory_errors(folder, args.policy).summary()
        if not s["predictions"]:
            print(f"{folder}: no {args.policy} predictions (no {args.policy}-seed*.json with an eta series)")
            continue
        print(
            f"{folder} ({args.policy}): {s['predictions']} predictions; error over the time left: median "
            f"{100 * s['median_relative']:.1f} %, mean {100 * s['mean_relative']:.1f} %; median {s['median_abs_s']:.0f} s; "
            f"predicted - actual: p10 {s['signed_p10_s']:+.0f} s, median {s['signed_median_s']:+.0f} s, "
            f"p90 {s['signed_p90_s']:+.0f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
