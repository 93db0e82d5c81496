"""Start a local 3-master Redis Cluster, run the tests marked ``cluster`` against it, tear it down."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the test cluster is a test helper (tests/support), not part of the package

from tests.support.cluster import RedisClusterProcesses  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp, RedisClusterProcesses(tmp, masters=3) as cluster:
        env = dict(os.environ, COUNTERS_TEST_REDIS_URL=cluster.url, COUNTERS_REDIS_CLUSTER="1")
        print(f"test-cluster: 3 masters from {cluster.url}; running the tests marked cluster", flush=True)
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-m", "cluster", *sys.argv[1:]], cwd=REPO, env=env
        ).returncode


if __name__ == "__main__":
    sys.exit(main())
