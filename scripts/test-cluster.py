"""Start a local 3-master Redis Cluster, run the data-module tests against it unchanged, tear it down."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from counters_tasks.localcluster import RedisClusterProcesses  # noqa: E402

MODULES = [
    "tests/test_counters.py", "tests/test_sitestats.py", "tests/test_uniques.py", "tests/test_ranking.py",
    "tests/test_series.py", "tests/test_ranges.py", "tests/test_hll.py", "tests/test_visits.py",
    "tests/test_scaleout.py", "tests/test_cluster.py",
]


def main() -> int:
    modules = [m for m in MODULES if (REPO / m).exists()]
    with tempfile.TemporaryDirectory() as tmp, RedisClusterProcesses(tmp, masters=3) as cluster:
        env = dict(os.environ, COUNTERS_TEST_REDIS_URL=cluster.url, COUNTERS_REDIS_CLUSTER="1")
        print(f"test-cluster: 3 masters from {cluster.url}; running {' '.join(modules)}", flush=True)
        return subprocess.run([sys.executable, "-m", "pytest", *modules, *sys.argv[1:]], cwd=REPO, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
