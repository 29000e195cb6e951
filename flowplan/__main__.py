"""``python -m flowplan`` and the ``flowplan`` console script.

``flowplan.cli`` is imported inside :func:`run`, not at the top: its imports (pydantic, numpy, the
planner) take a second or more, and a Ctrl-C that lands during them must end like one that lands later
— one line on stderr and exit code 130, never a traceback.
"""

import signal
import sys

EXIT_INTERRUPTED = 130


def run() -> int:
    try:
        from flowplan.cli import main

        return main()
    except KeyboardInterrupt:
        # A second Ctrl-C while we exit ends the process at once, by the signal, with no traceback.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        print("flowplan: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(run())
