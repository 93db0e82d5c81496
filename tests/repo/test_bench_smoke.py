"""Every benchmark script of docs/figures.md's performance section runs (small sizes) and prints its figures.

The figures themselves are measured, not asserted; this keeps the scripts working, and each
script checks its own results (exact counts) before printing them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.procs import REPO

pytestmark = [pytest.mark.processes, pytest.mark.long]

SMOKE = {
    "counters.py": (["--updates", "300"], "ratio counters-tasks / seed"),
    "visits.py": (["--visits", "300", "--rtt-ms", "0,0.25"], "ratio"),
    "uniques_memory.py": (["--visitors", "20000"], "B/visitor"),
    "ranking.py": (["--members", "3000", "--filler", "100", "--incr-ops", "300", "--top-calls", "50"], "ours/seed"),
    "ingest.py": (["--visits", "600"], "all counts exact for every path"),
    "commands.py": (["--visits", "100", "--shape", "zipf"], "each call timed (SLOWLOG)"),
    "client_tables.py": (["--visits", "600", "--rounds", "1"], "client tables: every count checked"),
    "markers.py": (["--visits", "500"], "marker"),
    "privacy_modes.py": (["--visitors", "1000", "--rounds", "1"], "visitor-days"),
    "estimates.py": (["--lines", "600"], "every approximate UV within 2%"),
    "cluster.py": (["--visits", "500", "--procs", "1"], "cluster"),
    "cluster_reads.py": (["--days", "3", "--views-per-day", "600", "--visitors", "2000"], "every check passed"),
    "reads.py": (
        ["--days", "3", "--paths", "400", "--views", "900", "--spans", "1,3", "--repeat", "2"],
        "every read equals the count of the visits written",
    ),
    "longhaul.py": (
        ["--days", "3", "--paths", "20000", "--visits-per-day", "2000", "--every", "1", "--probe", "20000"]
        + ["--retention-visitor-days", "2", "--retention-aggregate-days", "2"],
        "longhaul targets met",
    ),
}


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_runs(script, tmp_path):
    args, expected = SMOKE[script]
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("COUNTERS_", "CELERY_"))}
    result = subprocess.run(
        [sys.executable, "-m", f"bench.{script.removesuffix('.py')}", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert expected in result.stdout, result.stdout[-2000:]
