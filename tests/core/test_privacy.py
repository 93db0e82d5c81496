"""``core.privacy`` for what is kept where no raw IP may be (the dead letters in the counters'
Redis): a call's arguments masked whole, nothing cut, and the IPs written in an error's text.
(Its display form, for task events and Flower: tests/worker/test_batch_consumer.py.)"""

from __future__ import annotations

import json

import pytest

from counters_tasks.core.privacy import ITEMS_SHOWN, MAX_DEPTH, masked, masked_text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("WRONGTYPE at 198.51.100.23", "WRONGTYPE at 198.51.100.x"),
        ("from 198.51.100.23:6379.", "from 198.51.100.x:6379."),
        ("refused 198.51.100.23.", "refused 198.51.100.x."),
        ("x [2001:db8:5:6::7]:80 y", "x [2001:db8:5::/48]:80 y"),
        ("addr 2001:db8:5:6::7.", "addr 2001:db8:5::/48."),
        ("mapped ::ffff:192.0.2.44 here", "mapped 192.0.2.x here"),
        ("zone fe80::1%eth0, then", "zone fe80::/48, then"),
        ("'2001:DB8:5:6:0:0:0:7'", "'2001:db8:5::/48'"),
        ("at 12:30:45, version 1.2.3, 10.0.0.999, ab:cd", "at 12:30:45, version 1.2.3, 10.0.0.999, ab:cd"),
    ],
)
def test_masked_text_masks_every_ip_written_in_it(text, shown):
    assert masked_text(text) == shown


def test_masked_whole_keeps_all_of_the_data():
    visits = [
        {"ip": f"198.51.100.{n}", "path": f"/p{n}", "ts": 1.5, "tags": ["2001:db8:5:6::7"]}
        for n in range(ITEMS_SHOWN * 3)
    ]
    deep: object = "192.0.2.44"
    for _ in range(MAX_DEPTH + 3):
        deep = [deep]
    kept = masked([visits, deep, None, True, 3], whole=True)
    assert len(kept[0]) == len(visits) and kept[0][-1] == {
        "ip": "198.51.100.x",
        "path": f"/p{len(visits) - 1}",
        "ts": 1.5,
        "tags": ["2001:db8:5::/48"],
    }
    assert json.dumps(kept[1]) == json.dumps(deep).replace("192.0.2.44", "192.0.2.x")
    assert kept[2:] == [None, True, 3] and masked({"198.51.100.7": 1}, whole=True) == {"198.51.100.x": 1}
