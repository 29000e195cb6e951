"""Write the compact copy of the measured traces the simulator ships with (``adapters/sim/data/traces.json``).

The simulator's embedded default scenario must run on a fresh machine without ``../shared/data``;
this keeps what it needs in one small JSON file: every measured validation curve with its steps per
epoch, the single-node step-time tables, the multi-node ones by node and worker count, and the
throughput form fitted to each model. Re-running rewrites a byte-identical file;
``tests/test_simulator.py`` checks that it matches the data.

Usage::

    python examples/bundle_traces.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from adapters.sim.truth import BUNDLED, TraceLibrary

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()
    text = TraceLibrary.from_dir(args.data).to_json()
    BUNDLED.write_text(text + "\n")
    print(f"wrote {BUNDLED.relative_to(REPO)} ({len(text) / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
