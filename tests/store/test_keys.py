"""Hash tags keyed per deployment: a visitor who picks URLs cannot aim them at one cluster slot,
every process of a deployment agrees on the key, and rotating COUNTERS_SECRET moves nothing."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections import Counter

import pytest

from counters_tasks import sitestats, visits
from counters_tasks.core.days import local_day
from counters_tasks.errors import DeploymentNotBound
from counters_tasks.sitestats import page_all
from counters_tasks.store import keys
from tests.support.procs import REPO
from tests.support.servers import is_cluster_run, make_client, use_settings


def unkeyed_group(path: str) -> int:
    """The path's group as the tags were made before (a hash anyone can compute)."""
    digest = hashlib.blake2b(path.encode(), digest_size=4, person=b"path").digest()
    return int.from_bytes(digest, "big") % keys.TAG_GROUPS


@pytest.fixture
def generated_key(raw_conn, monkeypatch):
    """The default: no pinned key, so the deployment's key is made in (and read from) Redis."""
    monkeypatch.delenv("COUNTERS_TAG_KEY", raising=False)
    use_settings(monkeypatch)
    return raw_conn


def test_paths_aimed_at_one_group_still_spread(generated_key):
    conn = generated_key
    aimed = []
    n = 0
    while len(aimed) < 300:  # what an attacker computes offline with the public hash
        path = f"/x/{n}"
        n += 1
        if unkeyed_group(path) == 0:
            aimed.append(path)
    now = time.time()
    visits.apply_visits(conn, [{"ip": "192.0.2.1", "path": p, "ts": now} for p in aimed])
    with keys.bound(conn):
        groups = Counter(page_all.path_tag(p) for p in aimed)
    assert len(groups) > 150  # 300 paths over 256 groups: ~177 distinct expected, not 1
    assert max(groups.values()) < 10
    key = conn.get(keys.tag_key_name())
    assert key is not None and len(key) == 32 and conn.ttl(keys.tag_key_name()) == -1
    assert sitestats.site_visit_info(conn, local_day(now), aimed[0]).pv == 1


def test_the_key_is_made_once_and_kept(generated_key):
    conn = generated_key
    with keys.bound(conn, write=True) as first:
        assert keys.tag_key() == first
    assert conn.get(keys.tag_key_name()) == first
    with keys.bound(conn, write=True):
        assert keys.tag_key() == first
    other = make_client(os.environ["COUNTERS_REDIS_URL"])
    with keys.bound(other, write=True):  # a new client reads the same key, it does not make another
        assert keys.tag_key() == first


def test_a_key_made_with_no_deployment_bound_is_refused_not_guessed(generated_key, monkeypatch):
    """Unpinned, a key is made within ``keys.bound`` only; the binding ends with its block, the
    one around it back, so a function that forgot its own raises instead of using the keys of
    the deployment a caller bound before (or of COUNTERS_REDIS_URL's)."""
    conn = generated_key
    with pytest.raises(DeploymentNotBound, match="keys.bound"):
        page_all.path_tag("/p")
    with keys.bound(conn, write=True) as first:
        tag = page_all.path_tag("/p")
        use_settings(monkeypatch, COUNTERS_KEY_PREFIX="other:")
        with keys.bound(conn, write=True) as second:
            assert second != first and page_all.path_tag("/p") != tag
        use_settings(monkeypatch, COUNTERS_KEY_PREFIX="ct:")
        assert page_all.path_tag("/p") == tag  # the outer binding is back
    with pytest.raises(DeploymentNotBound):
        page_all.path_tag("/p")
    use_settings(monkeypatch, COUNTERS_TAG_KEY=first.decode())  # a pin names the key itself
    assert page_all.path_tag("/p") == tag


def test_rotating_the_secret_moves_no_key(generated_key, monkeypatch):
    conn = generated_key
    now = time.time()
    sitestats.record_visit(conn, "192.0.2.1", "/kept", now)
    before = {k for k in conn.scan_iter(count=1000) if b"/kept" in k}
    use_settings(monkeypatch, COUNTERS_SECRET="a-new-secret")
    sitestats.record_visit(conn, "192.0.2.1", "/kept", now)
    after = {k for k in conn.scan_iter(count=1000) if b"/kept" in k}
    assert after == before and before
    # the same IP is a new visitor under the new secret (by design), in the same keys
    assert sitestats.site_visit_info(conn, None, "/kept") == (None, 2, 2)


def test_each_deployment_has_its_own_key(generated_key, monkeypatch):
    conn = generated_key
    with keys.bound(conn, write=True) as one:
        pass
    use_settings(monkeypatch, COUNTERS_KEY_PREFIX="other:")
    with keys.bound(conn, write=True) as two:
        tags = [page_all.path_tag(f"/p{i}") for i in range(50)]
    assert two != one and conn.get("other:tagkey") == two
    use_settings(monkeypatch, COUNTERS_KEY_PREFIX="ct:")
    with keys.bound(conn):
        assert [page_all.path_tag(f"/p{i}") for i in range(50)] != tags


@pytest.mark.processes
@pytest.mark.skipif(is_cluster_run(), reason="one server is enough to show processes agree")
def test_another_process_makes_the_same_keys(generated_key):
    with keys.bound(generated_key, write=True):  # what every entry point given a client does
        expected = page_all.path_tag("/same")
    env = {k: v for k, v in os.environ.items() if k != "COUNTERS_TAG_KEY"}
    code = (
        "from counters_tasks.store import keys; from counters_tasks.store.client import get_redis\n"
        "from counters_tasks.sitestats import page_all\n"
        "with keys.bound(get_redis()): print(page_all.path_tag('/same'))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected


def test_a_pinned_key_must_be_hex(monkeypatch):
    from counters_tasks.core.settings import get_settings
    from counters_tasks.errors import ConfigurationError

    monkeypatch.setenv("COUNTERS_TAG_KEY", "not hex")
    with pytest.raises(ConfigurationError, match="COUNTERS_TAG_KEY"):
        use_settings(monkeypatch)
        get_settings()
