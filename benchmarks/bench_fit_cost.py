"""CPU cost of the planner's curve fits: every job of the 1,000-job workload of ``bench_planner.py``
(1000x100, seed 0) fitted with ``fit_learning_curve`` as the planner does (no prior, no schedule).

Prints the best CPU seconds over ``--repeat`` rounds of the 1,000 fits and the families chosen;
asserts nothing. Run it from two checkouts in turn (``PYTHONPATH`` at each) to compare versions:
this machine is shared and single runs vary by tens of percent.

    python benchmarks/bench_fit_cost.py --repeat 5
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from workload import make_snapshot

from models import CurveFit, fit_learning_curve
from planner.outlook import _series


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="rounds of the 1,000 fits (default 5); the best is printed")
    args = ap.parse_args(argv)
    snapshot = make_snapshot(1000, 100, seed=0)
    series = [(e, v, d) for e, v, _, d in (_series(job) for job in snapshot.jobs)]
    best = float("inf")
    families: Counter[str] = Counter()
    for _ in range(max(1, args.repeat)):
        families.clear()
        t0 = time.process_time()
        for epochs, values, direction in series:
            fit = fit_learning_curve(epochs, values, direction)
            if isinstance(fit, CurveFit):
                families[fit.family] += 1
        best = min(best, time.process_time() - t0)
    enough = sum(1 for e, _, _ in series if len(e) >= 3)
    print(f"{len(series)} jobs, {enough} with >= 3 points; best CPU s for the {len(series)} fits: {best:.3f}")
    print("families: " + ", ".join(f"{name} {n}" for name, n in families.most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
