"""Read-only tokens of the dashboard's JSON API (``counters-tasks tokens``, ``web.TokenAuth``): made
with the CLI, presented as ``Authorization: Bearer`` to a real ``counters-tasks serve`` that has
basic auth configured; only their SHA-256 is stored; revoked ones are refused at once; the rest of
the dashboard still needs the password; a Redis that cannot say answers 503."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from counters_tasks import visits
from counters_tasks.core.days import local_day
from counters_tasks.ops import views
from counters_tasks.ops.cli import cli
from counters_tasks.ops.web import create_app
from counters_tasks.store import keys
from tests.support.dashboard import TestClient
from tests.support.procs import celery_env, serving
from tests.support.servers import dead_client, use_settings

USER, PASSWORD = "ops", "s3cret"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def fake_health(_conn):
    return {"ok": True}


def fetch(
    url: str,
    token: str | None = None,
    method: str = "GET",
    authorization: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lower-case names, body) of one request; 4xx/5xx are answers too."""
    headers = {"Authorization": authorization or f"Bearer {token}"} if (token or authorization) else {}
    request = urllib.request.Request(
        url, method=method, headers=headers, data=b"{}" if method in ("POST", "PUT") else None
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def tokens(*args: str) -> tuple[int, str, str]:
    """``counters-tasks tokens ARGS`` in-process: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(cli, ["tokens", *args])
    return result.exit_code, result.stdout, result.stderr


def create(name: str) -> str:
    code, out, err = tokens("create", name)
    assert code == 0, err
    token = out.strip()
    assert token.startswith("ctk_") and len(token) == 4 + 43 and "shown only now" in err
    return token


@pytest.fixture(scope="module")
def dashboard(redis_url, tmp_path_factory) -> Iterator[str]:
    """A real ``counters-tasks serve`` with basic auth configured: its base URL once it answers."""
    env = celery_env(redis_url, COUNTERS_DASHBOARD_AUTH=f"{USER}:{PASSWORD}")
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with serving(env, log, lambda base: fetch(base + "/api/config", authorization=BASIC)[0] == 200, auth=True) as base:
        yield base


@pytest.mark.processes
def test_a_token_reads_the_api_without_the_password(dashboard, raw_conn):
    now = time.time()
    for ip, path in (("203.0.113.1", "/"), ("203.0.113.1", "/pricing"), ("203.0.113.2", "/pricing")):
        visits.apply_visit(raw_conn, ip, path, ts=now)
    day = local_day(now).isoformat()
    token = create("grafana")

    status, headers, body = fetch(f"{dashboard}/api/stats?day={day}", token)
    assert status == 200, body
    stats = json.loads(body)
    assert (stats["pv"], stats["uv"]) == (3, 2) and stats["days"] == [
        {"day": day, "pv": 3, **views.uv_view(2, False, 0.0), "skipped": 0}
    ]
    assert headers["cache-control"] == "no-store" and headers["x-frame-options"] == "DENY"
    status, _, body = fetch(f"{dashboard}/api/top-pages?from={day}&to={day}", token)
    assert status == 200 and json.loads(body)["pages"] == [["/pricing", 2], ["/", 1]]
    status, _, body = fetch(f"{dashboard}/metrics", token)  # Prometheus' bearer authorization
    assert status == 200 and b"counters_" in body
    assert fetch(f"{dashboard}/api/stats?day={day}", token, method="HEAD")[0] == 200

    # without credentials: the password's 401, as before
    status, headers, _ = fetch(f"{dashboard}/api/stats?day={day}")
    assert status == 401 and headers["www-authenticate"].startswith("Basic")
    assert fetch(f"{dashboard}/metrics")[0] == 401
    # basic auth works as before
    status, _, body = fetch(f"{dashboard}/api/stats?day={day}", authorization=BASIC)
    assert status == 200 and json.loads(body) == stats


@pytest.mark.processes
def test_wrong_and_revoked_tokens_are_refused(dashboard, raw_conn):
    token = create("exporter")
    url = f"{dashboard}/api/counters"
    assert fetch(url, token)[0] == 200
    for wrong in ("ctk_" + secrets.token_urlsafe(32), token[:-1], token + "x", "not-a-token", token.upper()):
        status, headers, body = fetch(url, wrong)
        assert status == 401, wrong
        assert (
            headers["www-authenticate"].startswith("Bearer") and 'error="invalid_token"' in headers["www-authenticate"]
        )
        assert json.loads(body) == {"error": "invalid or revoked token"}
    assert fetch(url, authorization="Bearer")[0] == 401  # no token at all after the scheme

    assert tokens("revoke", "exporter")[0] == 0
    status, headers, _ = fetch(url, token)  # no cache: refused from the very next request
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    assert fetch(f"{dashboard}/metrics", token)[0] == 401
    code, out, _ = tokens("revoke", "exporter")
    assert code == 1 and "no token named 'exporter'" in out
    # a new token of the same name is another token: the old one stays refused
    again = create("exporter")
    assert again != token and fetch(url, again)[0] == 200 and fetch(url, token)[0] == 401


@pytest.mark.processes
def test_a_token_opens_nothing_but_the_apis_get_routes(dashboard, raw_conn):
    token = create("reader")
    assert fetch(f"{dashboard}/api/boards", token)[0] == 200
    for path, method in (
        ("/", "GET"),
        ("/static/chart.js", "GET"),
        ("/api/stats", "POST"),
        ("/api/counters", "PUT"),
        ("/api/boards", "DELETE"),
        ("/metrics", "POST"),
    ):
        status, headers, _ = fetch(dashboard + path, token, method=method)
        assert status == 401, (method, path)  # the password's rule, as without a token
        assert headers["www-authenticate"].startswith("Basic"), (method, path)
    assert fetch(dashboard + "/", authorization=BASIC)[0] == 200  # the page itself is there


def test_without_basic_auth_the_api_stays_open_but_a_bad_token_is_refused(conn):
    token = views.create_token(conn, "anyone")["token"]
    client = TestClient(create_app(conn, auth=None, health=fake_health))
    assert client.get("/api/counters").status_code == 200
    assert client.get("/api/counters", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    refused = client.get("/api/counters", headers={"Authorization": "Bearer ctk_nope"})
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    assert refused.headers["x-frame-options"] == "DENY"
    views.revoke_token(conn, "anyone")
    assert client.get("/api/counters", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert client.get("/").status_code == 200  # the page needs nothing here, as before


def test_redis_errors_while_checking_a_token_are_503(conn):
    dead = dead_client()
    for auth in (None, (USER, PASSWORD)):
        response = TestClient(create_app(dead, auth=auth, health=fake_health)).get(
            "/api/counters", headers={"Authorization": "Bearer ctk_" + "a" * 43}
        )
        assert response.status_code == 503 and "Redis" in response.json()["error"], auth
    conn.set(keys.api_tokens(), "clobbered")  # the key of another type: WRONGTYPE, not "allowed"
    response = TestClient(create_app(conn, auth=(USER, PASSWORD), health=fake_health)).get(
        "/api/counters", headers={"Authorization": "Bearer ctk_" + "a" * 43}
    )
    assert response.status_code == 503 and "WRONGTYPE" in response.json()["error"]


def test_only_hashes_of_tokens_are_stored(raw_conn):
    made = [create(f"t{n}") for n in range(3)]
    code, out, _ = tokens("create", "as-json", "--json")
    assert code == 0
    data = json.loads(out)
    made.append(data["token"])
    assert {k: data[k] for k in ("name", "scope", "site")} == {"name": "as-json", "scope": "read", "site": None}
    assert raw_conn.keys("*") == [keys.api_tokens().encode()]  # the one key, nothing else written
    stored = raw_conn.hgetall(keys.api_tokens())
    assert set(stored) == {hashlib.sha256(t.encode()).hexdigest().encode() for t in made}
    blob = b" ".join([*stored, *stored.values()])
    for token in made:
        secret = token.removeprefix("ctk_").encode()
        assert secret not in blob and secret[:16] not in blob and secret[-16:] not in blob
    for value in stored.values():
        record = json.loads(value)
        assert set(record) == {"name", "created", "scope", "site"} and record["site"] is None
        assert abs(record["created"] - time.time()) < 60


def test_tokens_list_never_shows_a_token(raw_conn):
    made = {name: create(name) for name in ("grafana", "exporter")}
    code, text, _ = tokens("list")
    assert code == 0 and "grafana" in text and "exporter" in text and "2 tokens" in text
    code, out, _ = tokens("list", "--json")
    listed = json.loads(out)
    assert code == 0 and sorted(t["name"] for t in listed["tokens"]) == ["exporter", "grafana"]
    assert all(set(t) == {"name", "created", "scope", "site"} for t in listed["tokens"])
    code, table, _ = tokens("list", "--format", "csv")
    assert code == 0 and table.splitlines()[0] == "name,created_epoch,created_iso,scope,site" and "grafana" in table
    for token in made.values():
        digest = hashlib.sha256(token.encode()).hexdigest()
        for shown in (text, out, table):
            assert token not in shown and token[4:20] not in shown and digest[:16] not in shown


def test_names_are_unique_and_the_number_of_tokens_is_capped(raw_conn):
    create("dup")
    code, _, err = tokens("create", "dup")
    assert code == 2 and "exists already" in err
    filler = {
        hashlib.sha256(f"filler-{n}".encode()).hexdigest(): json.dumps(
            {"name": f"filler-{n}", "created": 0, "scope": "read", "site": None}
        )
        for n in range(views.MAX_TOKENS - 2)
    }
    raw_conn.hset(keys.api_tokens(), mapping=filler)
    last = create("last")  # the 1000th
    code, out, err = tokens("create", "one-too-many")
    assert code == 1 and f"{views.MAX_TOKENS} tokens exist already" in err and out == ""
    assert raw_conn.hlen(keys.api_tokens()) == views.MAX_TOKENS
    assert views.token_allows_read(raw_conn, last)
    assert tokens("revoke", "filler-7")[0] == 0
    create("one-too-many")  # a revoked token makes room
    assert raw_conn.hlen(keys.api_tokens()) == views.MAX_TOKENS


def test_a_token_of_another_scope_reads_nothing(raw_conn):
    """A record changed by hand to another scope is refused, never read as a read token."""
    token = views.create_token(raw_conn, "scope")["token"]
    field = hashlib.sha256(token.encode()).hexdigest()
    record = json.loads(raw_conn.hget(keys.api_tokens(), field))
    assert views.token_allows_read(raw_conn, token)
    raw_conn.hset(keys.api_tokens(), field, json.dumps({**record, "scope": "write"}))
    assert not views.token_allows_read(raw_conn, token) and views.token_sites(raw_conn, token) is None


def test_a_token_for_one_site_reads_that_site_only(raw_conn, monkeypatch):
    """``tokens create NAME --site blog``: the API's reads of the blog (``?site=blog``) and nothing
    else: another site, the default one, ``/metrics`` and ``/api/health`` answer 403."""
    use_settings(monkeypatch, COUNTERS_SITES='{"blog": {}, "shop": {}}')
    visits.apply_visit(raw_conn, "203.0.113.1", "/", site="blog")
    code, out, err = tokens("create", "blog-reader", "--site", "blog")
    assert code == 0, err
    blog = out.strip()
    assert tokens("create", "nope-reader", "--site", "nope")[0] == 2  # an unknown site: refused
    client = TestClient(create_app(raw_conn, auth=(USER, PASSWORD)))
    bearer = {"Authorization": f"Bearer {blog}"}
    answer = client.get("/api/stats", params={"site": "blog"}, headers=bearer)
    assert answer.status_code == 200 and answer.json()["pv"] == 1
    for path, params in (
        ("/api/stats", {"site": "shop"}),
        ("/api/stats", {}),
        ("/api/stats", {"site": "default"}),
        ("/metrics", {}),
        ("/api/health", {}),
    ):
        refused = client.get(path, params=params, headers=bearer)
        assert refused.status_code == 403 and "insufficient_scope" in refused.headers["www-authenticate"], path
    every = create("every-site")
    assert (
        client.get("/api/stats", params={"site": "shop"}, headers={"Authorization": f"Bearer {every}"}).status_code
        == 200
    )
    listed = json.loads(tokens("list", "--json")[1])["tokens"]
    assert {t["name"]: t["site"] for t in listed} == {"blog-reader": "blog", "every-site": None}
