import sys

from flowplan.cli import main

sys.exit(main())
