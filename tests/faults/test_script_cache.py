"""A restarted or failed-over Redis has no Lua scripts loaded: every write path loads them again
(a NOSCRIPT reply is not a transient error, so a path that let it through lost the message)."""

from __future__ import annotations

import time

import pytest

from tests.faults.test_duplicates import OTHER_SESSION, WRITES
from tests.support.servers import is_cluster_run

pytestmark = [pytest.mark.processes, pytest.mark.skipif(is_cluster_run(), reason="SCRIPT FLUSH of one server")]


@pytest.mark.parametrize("write", sorted(WRITES))
def test_every_write_after_script_flush(write, raw_conn):
    from counters_tasks import uniques

    uniques.forget_expected()
    raw_conn.script_flush()
    WRITES[write](raw_conn, f"after-flush-{write}")
    assert raw_conn.dbsize() > 0


def test_count_unique_on_a_fresh_day_after_script_flush(raw_conn):
    from counters_tasks import uniques

    uniques.forget_expected()
    raw_conn.script_flush()
    assert uniques.count_visit(raw_conn, OTHER_SESSION, time.time(), message_id="m") is True
