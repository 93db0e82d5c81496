"""``python -m counters_tasks``: the ``counters-tasks`` command."""

import sys

from .ops.cli import main

sys.exit(main())
