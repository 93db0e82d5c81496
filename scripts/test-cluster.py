"""Start a local 3-master Redis Cluster, run the tests marked ``cluster`` against it, tear it down."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from counters_tasks.local.cluster import RedisClusterProcesses

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp, RedisClusterProcesses(tmp, masters=3) as cluster:
        env = dict(os.environ, COUNTERS_TEST_REDIS_URL=cluster.url, COUNTERS_REDIS_CLUSTER="1")
        print(f"test-cluster: 3 masters from {cluster.url}; running the tests marked cluster", flush=True)
        return subprocess.run([sys.executable, "-m", "pytest", "-m", "cluster", *sys.argv[1:]], cwd=REPO,
                              env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
