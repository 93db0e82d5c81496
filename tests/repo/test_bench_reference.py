"""``bench.ingest --reference check`` (make bench): each process's CPU a visit of the recorder,
as a ratio to the seeds' task in the same run, may not grow past the recorded one by more than
20%; the recorded file names every process for the shapes make bench runs."""

from __future__ import annotations

import json
import re

import pytest

from bench import ingest
from tests.support.procs import REPO


def recorded(tmp_path, ratios):
    path = tmp_path / "reference.json"
    path.write_text(json.dumps({"ratios": ratios}))
    return path


def test_a_process_dearer_by_more_than_the_margin_is_named(tmp_path):
    path = recorded(
        tmp_path, {"zipf": {"counters_redis": 0.25, "broker_redis": 0.02, "worker": 0.07, "producer": 0.05}}
    )
    same = {"zipf": {"counters_redis": 0.25, "broker_redis": 0.02, "worker": 0.07, "producer": 0.05}}
    assert ingest.check_reference(same, path) == []
    within = {"zipf": {**same["zipf"], "worker": 0.07 * 1.19}}
    assert ingest.check_reference(within, path) == []
    dearer = {"zipf": {**same["zipf"], "worker": 0.07 * 1.25, "producer": 0.04}}
    [line] = ingest.check_reference(dearer, path)
    assert line.startswith("zipf worker:") and "+25%" in line


def test_a_shape_not_recorded_is_an_error_not_a_pass(tmp_path):
    path = recorded(tmp_path, {"zipf": dict.fromkeys(ingest.PROCESSES, 0.1)})
    with pytest.raises(SystemExit, match="log2015"):
        ingest.check_reference({"log2015": dict.fromkeys(ingest.PROCESSES, 0.1)}, path)


def test_figures_of_another_server_are_not_compared(tmp_path):
    """Debian's Redis 7.0 and the embedded Valkey 8 give the same code's figures up to a third
    apart: a reference recorded on one refuses a run on the other, by name, rather than fail or
    pass it on the server's account."""
    path = tmp_path / "reference.json"
    path.write_text(json.dumps({"server": "valkey 8", "ratios": {"zipf": dict.fromkeys(ingest.PROCESSES, 0.1)}}))
    same = {"zipf": dict.fromkeys(ingest.PROCESSES, 0.1)}
    assert ingest.check_reference(same, path, server="valkey 8") == []
    with pytest.raises(SystemExit, match="recorded on valkey 8, this run is on redis 7"):
        ingest.check_reference(same, path, server="redis 7")


def test_make_bench_checks_on_the_server_the_reference_was_recorded_on():
    """make bench runs the gate on the embedded Valkey, whatever else the machine has installed,
    and that is the server the reference names."""
    line = next(line for line in (REPO / "Makefile").read_text().splitlines() if "bench.ingest" in line)
    assert line.strip().startswith("COUNTERS_REDIS_SERVER=embedded ")
    assert json.loads(ingest.REFERENCE.read_text())["server"].startswith("valkey ")


def test_the_recorded_reference_covers_what_make_bench_checks():
    line = next(line for line in (REPO / "Makefile").read_text().splitlines() if "bench.ingest" in line)
    assert "--reference check" in line
    shapes = re.findall(r"--shape (\w+)", line)
    ratios = json.loads(ingest.REFERENCE.read_text())["ratios"]
    assert shapes and all(set(ratios[shape]) == set(ingest.PROCESSES) | set(ingest.WORK) for shape in shapes)
    assert all(0 < r for mine in ratios.values() for r in mine.values())
