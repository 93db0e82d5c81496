"""``python -m counters_tasks.ops.cli``: the ``counters-tasks`` command, as the console script runs it."""

import sys

from . import main

sys.exit(main())
