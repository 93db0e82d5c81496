"""A table declared in the test tree alone (``tests.support.toy_table``: one module, fed by the toy
kind with no edit to it) is written with every write of that kind, in the same plan as the kind's
own keys and at most once per call id, read in the CLI (``counters-tasks table``) and listed by
``counters-tasks tables``: docs/architecture.md "Adding a table". (Through a real worker's claimed
batches: tests/faults/test_toy_kind.py.)"""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import timedelta

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from counters_tasks.core import days, table
from counters_tasks.core.settings import get_settings
from counters_tasks.ops.cli import cli
from tests.support import toy_kind, toy_table

HOUR = 3600


def test_the_toy_table_is_fed_by_every_write_of_its_kind(eager_app, raw_conn):
    """Likes of three hours, by ``.delay()`` and by the batch task (twice under one id): the hours
    counted by hand, 2 + 1 + 3, the redelivered batch once."""
    toy_kind.like.delay("p1", ts=10 * HOUR + 5)
    toy_kind.like.delay("p2", ts=10 * HOUR + 3599)
    batch = [{"post": "p1", "ts": 11 * HOUR}, {"post": "p3", "ts": 12 * HOUR + 1}, {"post": "p3", "ts": 12 * HOUR + 2}]
    batch.append({"post": "p3", "ts": 12 * HOUR + 3})
    batch_id = str(uuid.uuid4())
    assert toy_kind.likes.apply(args=[batch], task_id=batch_id).get() == 4
    assert toy_kind.likes.apply(args=[batch], task_id=batch_id).get() == 4  # redelivered: fed once
    assert toy_table.read_hours(raw_conn) == [
        {"hour": 10 * HOUR, "likes": 2},
        {"hour": 11 * HOUR, "likes": 1},
        {"hour": 12 * HOUR, "likes": 3},
    ]
    assert toy_kind.totals(raw_conn) == {"p1": 2, "p2": 1, "p3": 3}  # the kind's own table, unchanged


def test_a_refused_like_feeds_nothing(eager_app, raw_conn):
    assert toy_kind.likes.apply(args=[[{"post": ""}, {"post": "p1", "ts": 5 * HOUR}]]).get() == 1
    assert toy_table.read_hours(raw_conn) == [{"hour": 5 * HOUR, "likes": 1}]


def test_the_cli_lists_and_reads_the_toy_table(eager_app, raw_conn, redis_url, monkeypatch):
    monkeypatch.setenv("COUNTERS_REDIS_URL", redis_url)
    toy_kind.likes.apply(args=[[{"post": "p1", "ts": 7 * HOUR}, {"post": "p1", "ts": 7 * HOUR + 9}]]).get()
    listed = CliRunner().invoke(cli, ["tables", "--import", "tests.support.toy_table", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    entry = {e["name"]: e for e in json.loads(listed.output)["tables"]}["toy_hours"]
    assert entry["fed_by"] == ["toy_like"] and entry["keys"] == [{"key": toy_table.HOURS, "type": "HASH"}]
    assert entry["readable_here"] is True
    read = CliRunner().invoke(cli, ["table", "toy_hours", "--import", "tests.support.toy_table", "--format", "csv"])
    assert read.exit_code == 0, read.output
    assert read.output.splitlines() == ["hour,likes", f"{7 * HOUR},2"]
    refused = CliRunner().invoke(cli, ["table", "counters"])
    assert refused.exit_code == 2 and "counters-tasks counters" in refused.output


def test_a_feeder_for_a_kind_the_table_is_not_fed_by_is_refused():
    with pytest.raises(ValueError, match="does not say it is fed by"):
        table.Table(
            name="bad",
            what="",
            module=__name__,
            keys=(table.StoredKey("x", "HASH"),),
            tag="",
            fed_by=(),
            writers=(),
            readers=(),
            retention=table.Retention(""),
            erasure=table.Erasure("", False, ""),
            feeds={"visit": toy_table.feed_likes},
        )
    assert table.register(toy_table.TOY_HOURS) is toy_table.TOY_HOURS
    assert [declared for declared, _feeder in table.fed_by("toy_like")] == [toy_table.TOY_HOURS]


@settings(max_examples=300, deadline=None)
@given(
    now=st.floats(min_value=1.5e9, max_value=2.2e9, allow_nan=False),
    horizon=st.integers(min_value=0, max_value=800),
    back=st.integers(min_value=-3, max_value=3),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Pacific/Kiritimati", "Pacific/Pago_Pago"]),
)
def test_the_first_day_kept_is_the_day_after_the_last_whose_keys_expired(now, horizon, back, zone):
    """The rule the retention pass and the reads' notes share (``first_day_kept``) agrees with
    when a day's keys expire by TTL (``core.days.kept_until``), across a zone's DST changes: a
    day is gone exactly when its end plus the horizon is past."""
    config = dataclasses.replace(get_settings(), visitor_days=horizon)
    kept = table.first_day_kept(table.VISITOR_LEVEL, config, zone, now)
    for day in (kept + timedelta(days=back + offset) for offset in (-1, 0)):
        assert (day < kept) == (days.kept_until(day, horizon, zone) <= now)
