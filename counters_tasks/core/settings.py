"""Settings read from the environment the first time they are needed, never at import.

This is the one module of the package that reads environment variables: every other module asks
``get_settings()``, so a malformed value fails with a ``ConfigurationError`` that names it.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import overload
from urllib.parse import SplitResult, parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import ConfigurationError

DEFAULT_REDIS_URL = "redis://localhost:6379/0"

MAX_SITES = 1000
"""The most sites ``COUNTERS_SITES`` may name (docs/sites.md): each is a few keys a day and one
beat call an hour, and the dashboard lists them all."""

SITE_NAME = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,30}[a-z0-9])?")
"""A site's name: 1 to 32 lower-case letters, digits, ``-`` and ``_`` (not at either end)."""

DEFAULT_SITE = "default"
"""The name of the site a visit, counter or board belongs to when none is given."""

DEFAULT_DEDUPE_TTL = 900
"""15 minutes: 11 times the longest redelivery window (79 s), and markers cost memory per
message (docs/reliability.md)."""

RETRY_BACKOFF_MAX = 30
"""Longest wait (seconds) before a counting task retries after a Redis error that passes: below
the visibility timeout, so a message waiting for its retry is not handed to another worker."""
COUNTER_PRECISIONS = (1, 5, 60, 300, 3600, 18000, 86400)
"""Seconds per bucket of a multi-precision counter (``counters.PRECISIONS``; here so that
COUNTERS_PATH_HITS_PRECISIONS is checked when the settings are read)."""

PATH_HITS_PRECISIONS = (60, 300, 3600, 18000, 86400)
"""What a page's ``hits:<path>`` counter keeps unless COUNTERS_PATH_HITS_PRECISIONS says
otherwise: not the 1 s and 5 s buckets, which few read of one page and which were two sevenths
of a visit's counter buckets and most of a busy page's hash (the site's ``hits`` keeps all seven)."""

DEFAULT_VISIBILITY_TIMEOUT = 45
"""Seconds before the broker hands an unacknowledged message to another worker: with the
restore sweep (every ``restore_interval``) a message of a dead worker runs again within a minute.
Safe this short because every counting write is deduplicated by its message id."""


@dataclass(frozen=True)
class SiteConfig:
    """One site of ``COUNTERS_SITES``: its name, the Host names the middleware counts for it, and
    the time zone its days are taken in."""

    name: str
    hosts: tuple[str, ...]
    timezone: str


@dataclass(frozen=True)
class Settings:
    """Every setting of the package, checked; ``load_settings`` documents where each comes from."""

    redis_url: str
    redis_cluster: bool
    broker_url: str
    key_prefix: str
    timezone: str
    secret: str | None
    uv_mode: str
    pool_size: int
    socket_timeout: float
    dedupe_ttl: int
    cleaner_batch: int
    worker_batch: int
    worker_batch_ms: int
    delay_buffer: bool
    path_hits_precisions: tuple[int, ...] = PATH_HITS_PRECISIONS
    # site PV/UV and daily uniques: retention in days after a day ends
    day_grace_days: int = 2
    day_totals_days: int = 400
    uniques_shard_days: int = 7
    uniques_count_days: int = 400
    # retention tiers (docs/privacy.md, core.table.Retention.tier): visitor-level data (visitor and
    # pair sets, session ids, funnel states, dead letters) kept at most this many days after its day
    # ends; daily aggregates (page views, unique counts, sources, who visits, events) this many
    # (0: for ever). The older settings above are read from these (load_settings).
    visitor_days: int = 7
    aggregate_days: int = 400
    # privacy mode (core.visitors): "standard" (one keyed hash of the IP for all time) or "daily"
    # (the key rotates each local day: no visitor can be linked across days)
    visitor_key: str = "standard"
    # site PV/UV per path: distinct paths a day tracks (the rest count as "(other)"), and days a
    # path's all-time figures live after its latest view (0: for ever)
    max_day_paths: int = 10_000
    # sources (referrers, campaign tags) a day tracks of each kind; the rest count as "(other)"
    max_day_sources: int = 1_000
    # who visits (core/clients.py): browser, system, device, country and language tables a day,
    # each tracking this many values, the rest as "(other)"; on by default, read by the workers
    # (producers send a visit's headers whatever their own setting: docs/clients.md)
    # events (docs/events.md): event names a site's day tracks, and values a day tracks of each
    # (event, property); the rest count as "(other)"
    max_day_events: int = 100
    max_day_event_values: int = 100
    client_tables: bool = True
    max_day_clients: int = 200
    # pages whose views are counted again in who-visits tables of their own (who reads /pricing)
    client_pages: tuple[str, ...] = ()
    # rankings: days without a write after which a board is deleted (at least its period; 0: never)
    board_idle_days: int = 30
    # the key of every hash tag, pinned (hex); None: generated once and kept in Redis
    tag_key: str | None = None
    # a Redis whose maxmemory-policy evicts keys is accepted with a warning instead of an error
    allow_eviction: bool = False
    path_keep_days: int = 400
    # page names (core.paths): "strip" drops trailing slashes, "lower" lower-cases; None leaves them as sent
    path_trailing_slash: str | None = None
    path_case: str | None = None
    # page views (core.pageviews): a regular expression of user agents counted as crawlers besides the list's
    crawler_pattern: str | None = None
    # reliability: broker redelivery of unacknowledged messages
    visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT
    # clock policy: how far ahead of this process's clock an item may be (seconds)
    future_tolerance: int = 300
    # funnels (events.funnel_steps): how late a step event may arrive and still be judged (seconds past its window)
    funnel_lateness: int = 86400
    # a counting message that fails for a reason that is not Redis being away is tried this often
    max_attempts: int = 5
    # messages: the largest payload a worker decodes, and how many set-aside messages are kept
    max_message_bytes: int = 1 << 20
    dead_letter_max: int = 10_000
    # days a set-aside message is kept (it may hold a visitor's IP); 0 keeps it until dropped
    dead_letter_days: int = 14
    # beat: the cleaner's cadence (None: every minute by crontab) and the highly available beat
    clean_every: float | None = None
    beat_scheduler: str | None = None
    beat_lock_timeout: float = 30.0
    beat_max_interval: float = 5.0
    # Celery: the deployment's configuration module (``celery --config``), None for the package's defaults
    celery_config_module: str | None = None
    # operator tools and the local stack
    redis_url_given: bool = False  # COUNTERS_REDIS_URL was set (else the local stack starts a Redis)
    dashboard_auth: tuple[str, str] | None = None
    dashboard_hosts: tuple[str, ...] = ()  # Host headers the dashboard answers (empty: loopback names only)
    dashboard_request_timeout: float = 10.0  # seconds a connection to `serve` may take to send a whole request
    home: Path = Path(".counters-tasks")
    flower_auth: str | None = None
    flower_port: int = 5555
    redis_port: int = 6379  # the port the local stack's private Redis takes (another one when taken, loudly)
    redis_server: str = ""  # the server binary local Redis processes run: a path, "embedded", or "" (see local/)
    # sites besides the default one (docs/sites.md), and the default site's hosts
    sites: tuple[SiteConfig, ...] = ()

    def __hash__(self) -> int:
        """The fields' hash, computed once: derived tables are cached per settings object
        (``functools.lru_cache``), and hashing every field on each lookup cost a visit ~2 us."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def restore_interval(self) -> int:
        """Seconds between the workers' sweeps that put unacknowledged messages back (1..10)."""
        return min(10, max(1, self.visibility_timeout // 10))

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


REDIS_SCHEMES = ("redis", "rediss", "unix")
"""What ``COUNTERS_REDIS_URL`` may be: the URLs redis-py opens (``unix://``: a unix socket)."""

SOCKET_BROKER_SCHEME = "redis+socket"
"""kombu's name of a Redis reached through a unix socket (redis-py's ``unix://``, which kombu does
not know: "No such transport: unix"); its database is ``?virtual_host=N`` (kombu ignores ``db=``)."""

REDACTED = "***"
"""What ``redact_url`` shows instead of a password."""


def is_redis_url(url: str) -> bool:
    """Whether ``url`` names a Redis server, in redis-py's spelling or kombu's ``redis+socket://``
    (a broker may be RabbitMQ or another: ``amqp://``...; kombu's ``sentinel://`` is not read as
    a Redis here: docs/production.md, "URL forms tested")."""
    return urlsplit(url).scheme in (*REDIS_SCHEMES, SOCKET_BROKER_SCHEME)


def url_with_db(url: str, db: int) -> str:
    """The same Redis server as ``url`` (redis-py's spelling) but database ``db`` (for the default broker)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = dict(parse_qsl(parts.query))
        query["db"] = str(db)
        return f"unix://{parts.netloc}{parts.path}?{urlencode(query)}"
    return urlunsplit(parts._replace(path=f"/{db}"))


def _moved_to_netloc(parts: SplitResult, query: list[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """The user and password of a socket URL in front of its path (``user:password@``), taken
    from the query when they are there: each library reads one place only (kombu the front,
    redis-py both), and a password in the query would be dropped."""
    given = dict(query)
    if parts.netloc or not ("password" in given or "username" in given):
        return parts.netloc, query
    netloc = quote(given.get("username", ""), safe="")
    if given.get("password"):
        netloc += ":" + quote(given["password"], safe="")
    return netloc + "@", [(k, v) for k, v in query if k not in ("username", "password")]


def kombu_url(url: str) -> str:
    """kombu's spelling of a broker URL: redis-py's ``unix:///path?db=N`` is
    ``redis+socket:///path?virtual_host=N`` (a user and password in the query move in front of
    the path, where kombu reads them); any other URL is returned as it is."""
    parts = urlsplit(url)
    if parts.scheme != "unix":
        return url
    netloc, query = _moved_to_netloc(parts, parse_qsl(parts.query, keep_blank_values=True))
    query = [("virtual_host" if k == "db" else k, v) for k, v in query]
    return _socket_url(SOCKET_BROKER_SCHEME, netloc, parts.path, query)


def redis_py_url(url: str) -> str:
    """redis-py's spelling of a Redis URL, for a client of the broker: kombu's
    ``redis+socket:///path?virtual_host=N`` is ``unix:///path?db=N`` (database 0 without
    ``virtual_host``, as kombu does); any other URL is returned as it is."""
    parts = urlsplit(url)
    if parts.scheme != SOCKET_BROKER_SCHEME:
        return url
    query = [
        ("db" if k == "virtual_host" else k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "db"
    ]
    return _socket_url("unix", parts.netloc, parts.path, query)


def _socket_url(scheme: str, netloc: str, path: str, query: list[tuple[str, str]]) -> str:
    """A socket URL with its ``//`` kept when there is no user part (``urlunsplit`` drops it)."""
    return f"{scheme}://{netloc}{path}" + (f"?{urlencode(query)}" if query else "")


FAILOVER_SEPARATOR = re.compile(r";(?=[A-Za-z][A-Za-z0-9+.-]*://)")
"""Between the URLs of a kombu failover list (``redis://a;redis://b``), not a ``;`` of a password."""


def redact_url(url: str) -> str:
    """``url`` with its password shown as ``***``: all between ``user:`` and the last ``@``
    (a ``requirepass`` password or an ACL user's, even one with ``/``, ``#`` or ``@`` left
    unescaped), a lone user part (``redis://secret@host``, which some clients read as a
    password) and any query value whose name says password, secret or token (``?password=``);
    each URL of kombu's ``url;url`` failover lists. What error messages, log lines and pages
    may show of a server's URL; text without ``://`` is returned as it is."""
    urls = FAILOVER_SEPARATOR.split(url)
    if len(urls) > 1:
        return ";".join(redact_url(part) for part in urls)
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    at = rest.rfind("@")
    if at >= 0:
        user, colon, _ = rest[:at].partition(":")
        rest = (f"{user}:{REDACTED}" if colon else REDACTED) + rest[at:]
    before, mark, query = rest.partition("?")
    if mark:
        query = "&".join(_redacted_parameter(pair) for pair in query.split("&"))
    return f"{scheme}://{before}{mark}{query}"


def _redacted_parameter(pair: str) -> str:
    name, eq, _ = pair.partition("=")
    return (
        f"{name}={REDACTED}"
        if eq and any(word in unquote(name).lower() for word in ("pass", "secret", "token"))
        else pair
    )


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigurationError(f"{name} must be >= {minimum}, got {value}")
    return value


@overload
def _float(env: Mapping[str, str], name: str, default: float, minimum: float = 0.0) -> float: ...
@overload
def _float(env: Mapping[str, str], name: str, default: None, minimum: float = 0.0) -> float | None: ...
def _float(env: Mapping[str, str], name: str, default: float | None, minimum: float = 0.0) -> float | None:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not value > minimum or value == float("inf"):
        raise ConfigurationError(f"{name} must be a finite number above {minimum}, got {raw!r}")
    return value


def _user_password(env: Mapping[str, str], name: str) -> tuple[str, str] | None:
    raw = env.get(name) or ""
    if not raw:
        return None
    user, sep, password = raw.partition(":")
    if not sep or not user or not password:
        raise ConfigurationError(f"{name} must be user:password")
    return user, password


def _precisions(env: Mapping[str, str], name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        chosen = {int(part) for part in raw.split(",") if part.strip()}
    except ValueError:
        raise ConfigurationError(f"{name} must be seconds separated by commas, got {raw!r}") from None
    if not chosen or chosen - set(COUNTER_PRECISIONS):
        raise ConfigurationError(f"{name} must name some of {', '.join(map(str, COUNTER_PRECISIONS))}, got {raw!r}")
    return tuple(sorted(chosen))


MAX_CLIENT_PAGES = 20
"""The most pages COUNTERS_CLIENT_PAGES names."""


def _client_pages(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Paths separated by commas (a comma inside a path written ``%2C``), each from ``/``, at
    most MAX_CLIENT_PAGES (their canonical names: ``sitestats.client_pages``)."""
    paths = tuple(dict.fromkeys(part.strip() for part in (env.get(name) or "").split(",") if part.strip()))
    wrong = [path for path in paths if not path.startswith("/") or len(path) > 1024]
    if wrong:
        raise ConfigurationError(f"{name} must list paths from '/', separated by commas, got {wrong[0][:100]!r}")
    if len(paths) > MAX_CLIENT_PAGES:
        raise ConfigurationError(f"{name} names {len(paths)} pages: at most {MAX_CLIENT_PAGES}")
    return paths


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    """An on/off setting whose default is ``default`` when unset: ``on``/``1``/``true``/``yes`` or
    ``off``/``0``/``false``/``no``; anything else raises (a typo never turns a feature off unseen)."""
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name} must be on or off (or unset: {'on' if default else 'off'}), got {raw!r}")


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str | None:
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return None
    if raw not in choices:
        raise ConfigurationError(f"{name} must be one of {', '.join(choices)} (or unset), got {raw!r}")
    return raw


def _pattern(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name) or ""
    if not raw:
        return None
    try:
        re.compile(raw)
    except re.error as exc:
        raise ConfigurationError(f"{name} is not a valid regular expression: {exc}") from None
    return raw


def _tag_key(env: Mapping[str, str]) -> str | None:
    raw = (env.get("COUNTERS_TAG_KEY") or "").strip().lower()
    if not raw:
        return None
    if not re.fullmatch(r"[0-9a-f]{32,64}", raw):
        raise ConfigurationError("COUNTERS_TAG_KEY must be 32 to 64 hex digits")
    return raw


def _zone(name: str, raw: object) -> str:
    if not isinstance(raw, str) or not raw:
        raise ConfigurationError(f"{name} must be an IANA time zone name, got {raw!r}")
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(f"{name} is not a known IANA zone: {raw!r}") from None
    return raw


def _host(name: str, raw: object) -> str:
    host = raw.strip().lower().rstrip(".") if isinstance(raw, str) else ""
    if not re.fullmatch(r"[a-z0-9.-]{1,253}(:[0-9]{1,5})?|\[[0-9a-f:.]+\](:[0-9]{1,5})?", host):
        raise ConfigurationError(
            f"{name}: {raw!r} is not a host name (letters, digits, dots, dashes, an optional port)"
        )
    return host


def _sites(env: Mapping[str, str], timezone: str) -> tuple[SiteConfig, ...]:
    """``COUNTERS_SITES``: JSON ``{"<site>": {"hosts": [...], "timezone": "<zone>"}}``, or
    ``@<file>`` holding it. The default site may be listed for its hosts; its zone is
    ``COUNTERS_TIMEZONE``."""
    raw = (env.get("COUNTERS_SITES") or "").strip()
    if not raw:
        return ()
    if raw.startswith("@"):
        try:
            raw = Path(raw[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"COUNTERS_SITES names a file that cannot be read: {exc}") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigurationError(f"COUNTERS_SITES is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigurationError('COUNTERS_SITES must be a JSON object {"<site>": {"hosts": [...], "timezone": "..."}}')
    if len(data) > MAX_SITES:
        raise ConfigurationError(f"COUNTERS_SITES names {len(data)} sites: at most {MAX_SITES} (docs/sites.md)")
    sites: list[SiteConfig] = []
    owner: dict[str, str] = {}
    for site, spec in data.items():
        where = f"COUNTERS_SITES[{site!r}]"
        if not SITE_NAME.fullmatch(site):
            raise ConfigurationError(f"{where}: a site name is 1 to 32 of a-z, 0-9, '-' and '_'")
        spec = {} if spec is None else spec
        if not isinstance(spec, dict) or set(spec) - {"hosts", "timezone"}:
            raise ConfigurationError(f'{where} must be an object with "hosts" and "timezone" (both optional)')
        hosts = spec.get("hosts", [])
        if not isinstance(hosts, list):
            raise ConfigurationError(f"{where}.hosts must be a list of host names")
        zone = _zone(f"{where}.timezone", spec["timezone"]) if "timezone" in spec else timezone
        if site == DEFAULT_SITE and zone != timezone:
            raise ConfigurationError(f"{where}.timezone: the default site's days are in COUNTERS_TIMEZONE ({timezone})")
        clean = tuple(_host(f"{where}.hosts", host) for host in hosts)
        for host in clean:
            if owner.setdefault(host, site) != site:
                raise ConfigurationError(f"COUNTERS_SITES: host {host} is given to both {owner[host]} and {site}")
        sites.append(SiteConfig(site, clean, zone))
    return tuple(sites)


def _broker_url(env: Mapping[str, str], redis_url: str) -> str:
    """``CELERY_BROKER_URL``, else database 1 of the counters' Redis; in kombu's spelling
    (``kombu_url``: a unix socket is ``redis+socket://``)."""
    url = kombu_url(env.get("CELERY_BROKER_URL") or url_with_db(redis_url, 1))
    parts = urlsplit(url)
    if parts.scheme.startswith("redis+") and parts.scheme != SOCKET_BROKER_SCHEME:
        raise ConfigurationError(
            f"CELERY_BROKER_URL: kombu reads {parts.scheme}:// as a Redis at localhost:6379 "
            f"(of its forms only redis+socket:// names a server; Sentinel is sentinel://), "
            f"got {redact_url(url)!r}"
        )
    if parts.scheme == SOCKET_BROKER_SCHEME and "db" in dict(parse_qsl(parts.query)):
        raise ConfigurationError(
            f"CELERY_BROKER_URL: a redis+socket:// broker's database is ?virtual_host=N "
            f"(kombu ignores db= there and would use database 0), got {redact_url(url)!r}"
        )
    return url


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Build settings from ``env`` (default: ``os.environ``), checking every value."""
    env = os.environ if env is None else env
    redis_url = env.get("COUNTERS_REDIS_URL") or DEFAULT_REDIS_URL
    if urlsplit(redis_url).scheme not in REDIS_SCHEMES:
        raise ConfigurationError(
            f"COUNTERS_REDIS_URL must be redis://, rediss:// or unix://, got {redact_url(redis_url)!r}"
        )
    cluster = _flag(env, "COUNTERS_REDIS_CLUSTER")
    prefix = env.get("COUNTERS_KEY_PREFIX", "ct:")
    if re.search(r"[{}\s\x00-\x1f\x7f]", prefix) or len(prefix) > 64:
        raise ConfigurationError(
            "COUNTERS_KEY_PREFIX must be at most 64 characters without braces, spaces or control characters"
        )
    timezone = env.get("COUNTERS_TIMEZONE") or "UTC"
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(f"COUNTERS_TIMEZONE is not a known IANA zone: {timezone!r}") from None
    uv_mode = (env.get("COUNTERS_UV_MODE") or "exact").lower()
    if uv_mode not in ("exact", "hll"):
        raise ConfigurationError(f"COUNTERS_UV_MODE must be 'exact' or 'hll', got {uv_mode!r}")
    socket_timeout = _float(env, "COUNTERS_REDIS_TIMEOUT", 5.0)
    flower_auth = env.get("FLOWER_BASIC_AUTH") or None
    if flower_auth is not None:
        _user_password(env, "FLOWER_BASIC_AUTH")
    # The retention tiers: COUNTERS_VISITOR_DAYS, read from COUNTERS_UNIQUES_SHARD_DAYS when only that
    # older name is set; COUNTERS_AGGREGATE_DAYS, from COUNTERS_DAY_TOTALS_DAYS (then
    # COUNTERS_UNIQUES_COUNT_DAYS) likewise. 0 aggregate days: kept for ever (TTLs of FOREVER_DAYS).
    visitor_days = _int(env, "COUNTERS_VISITOR_DAYS", _int(env, "COUNTERS_UNIQUES_SHARD_DAYS", 7))
    aggregate_days = _int(
        env,
        "COUNTERS_AGGREGATE_DAYS",
        _int(env, "COUNTERS_DAY_TOTALS_DAYS", _int(env, "COUNTERS_UNIQUES_COUNT_DAYS", 400)),
        minimum=0,
    )
    aggregate_ttl_days = aggregate_days or FOREVER_DAYS
    settings = Settings(
        redis_url=redis_url,
        redis_cluster=cluster,
        broker_url=_broker_url(env, redis_url),
        key_prefix=prefix,
        timezone=timezone,
        secret=env.get("COUNTERS_SECRET") or None,
        uv_mode=uv_mode,
        pool_size=_int(env, "COUNTERS_REDIS_POOL_SIZE", 32),
        socket_timeout=socket_timeout,
        dedupe_ttl=_int(env, "COUNTERS_DEDUPE_TTL", DEFAULT_DEDUPE_TTL, minimum=60),
        cleaner_batch=_int(env, "COUNTERS_CLEANER_BATCH", 200),
        worker_batch=_int(env, "COUNTERS_WORKER_BATCH", 100),
        worker_batch_ms=_int(env, "COUNTERS_WORKER_BATCH_MS", 20),
        delay_buffer=_flag(env, "COUNTERS_DELAY_BUFFER"),
        path_hits_precisions=_precisions(env, "COUNTERS_PATH_HITS_PRECISIONS", PATH_HITS_PRECISIONS),
        day_grace_days=_int(env, "COUNTERS_DAY_GRACE_DAYS", 2, minimum=0),
        day_totals_days=aggregate_ttl_days,
        uniques_shard_days=visitor_days,
        uniques_count_days=aggregate_ttl_days,
        visitor_days=visitor_days,
        aggregate_days=aggregate_days,
        visitor_key=_choice(env, "COUNTERS_VISITOR_KEY", ("standard", "daily")) or "standard",
        max_day_paths=_int(env, "COUNTERS_MAX_DAY_PATHS", 10_000),
        max_day_sources=_int(env, "COUNTERS_MAX_DAY_SOURCES", 1_000),
        max_day_events=_int(env, "COUNTERS_EVENT_NAMES_PER_DAY", 100, minimum=1),
        max_day_event_values=_int(env, "COUNTERS_EVENT_VALUES_PER_DAY", 100, minimum=1),
        client_tables=_switch(env, "COUNTERS_CLIENT_TABLES", default=True),
        max_day_clients=_int(env, "COUNTERS_MAX_DAY_CLIENTS", 200, minimum=1),
        client_pages=_client_pages(env, "COUNTERS_CLIENT_PAGES"),
        tag_key=_tag_key(env),
        allow_eviction=_flag(env, "COUNTERS_ALLOW_EVICTION"),
        board_idle_days=_int(env, "COUNTERS_BOARD_IDLE_DAYS", 30, minimum=0),
        path_keep_days=_int(env, "COUNTERS_PATH_KEEP_DAYS", 400, minimum=0),
        path_trailing_slash=_choice(env, "COUNTERS_PATH_TRAILING_SLASH", ("strip",)),
        path_case=_choice(env, "COUNTERS_PATH_CASE", ("lower",)),
        crawler_pattern=_pattern(env, "COUNTERS_CRAWLER_PATTERN"),
        visibility_timeout=_int(env, "COUNTERS_VISIBILITY_TIMEOUT", DEFAULT_VISIBILITY_TIMEOUT),
        redis_url_given=bool(env.get("COUNTERS_REDIS_URL")),
        future_tolerance=_int(env, "COUNTERS_FUTURE_TOLERANCE", 300, minimum=0),
        funnel_lateness=_int(env, "COUNTERS_FUNNEL_LATENESS", 86400, minimum=0),
        max_attempts=_int(env, "COUNTERS_MAX_ATTEMPTS", 5),
        max_message_bytes=_int(env, "COUNTERS_MAX_MESSAGE_BYTES", 1 << 20, minimum=1024),
        dead_letter_max=_int(env, "COUNTERS_DEAD_LETTER_MAX", 10_000),
        dead_letter_days=_int(env, "COUNTERS_DEAD_LETTER_DAYS", 14, minimum=0),
        clean_every=_float(env, "COUNTERS_CLEAN_EVERY", None),
        beat_scheduler=_choice(env, "COUNTERS_BEAT_SCHEDULER", ("redbeat",)),
        beat_lock_timeout=_float(env, "COUNTERS_BEAT_LOCK_TIMEOUT", 30.0),
        beat_max_interval=_float(env, "COUNTERS_BEAT_MAX_INTERVAL", 5.0),
        celery_config_module=env.get("CELERY_CONFIG_MODULE") or None,
        dashboard_auth=_user_password(env, "COUNTERS_DASHBOARD_AUTH"),
        dashboard_hosts=tuple(h.strip() for h in env.get("COUNTERS_DASHBOARD_HOSTS", "").split(",") if h.strip()),
        dashboard_request_timeout=_float(env, "COUNTERS_DASHBOARD_REQUEST_TIMEOUT", 10.0),
        home=Path(env.get("COUNTERS_HOME") or ".counters-tasks").resolve(),
        flower_auth=flower_auth,
        flower_port=_int(env, "FLOWER_PORT", 5555, minimum=1),
        redis_port=_int(env, "COUNTERS_REDIS_PORT", 6379, minimum=1),
        redis_server=env.get("COUNTERS_REDIS_SERVER", "").strip(),
        sites=_sites(env, timezone),
    )
    check_dedupe_window(settings)
    check_retention(settings)
    return settings


FOREVER_DAYS = 36_525
"""The TTL, in days, of daily aggregates kept for ever (COUNTERS_AGGREGATE_DAYS=0): a hundred years."""


def check_retention(settings: Settings) -> None:
    """A day's visitor sets must outlive the day's grace (a late visit of an open day is judged
    against them), and daily aggregates the visitor-level data they are made from."""
    if settings.day_grace_days > settings.visitor_days:
        raise ConfigurationError(
            f"COUNTERS_DAY_GRACE_DAYS ({settings.day_grace_days}) must be at most COUNTERS_VISITOR_DAYS "
            f"({settings.visitor_days}): a day's visitor sets are kept while the day takes late visits"
        )
    if settings.aggregate_days and settings.aggregate_days < settings.visitor_days:
        raise ConfigurationError(
            f"COUNTERS_AGGREGATE_DAYS ({settings.aggregate_days}) must be 0 (for ever) or at least "
            f"COUNTERS_VISITOR_DAYS ({settings.visitor_days})"
        )


def check_dedupe_window(settings: Settings) -> None:
    """A dedupe marker must outlive every redelivery of its message: a redelivery after the
    visibility timeout (plus one restore sweep) or a retry after the longest backoff."""
    window = settings.visibility_timeout + settings.restore_interval + RETRY_BACKOFF_MAX
    if settings.dedupe_ttl <= window:
        raise ConfigurationError(
            f"COUNTERS_DEDUPE_TTL ({settings.dedupe_ttl}) must be longer than COUNTERS_VISIBILITY_TIMEOUT "
            f"({settings.visibility_timeout}) + the restore sweep ({settings.restore_interval}) + the longest "
            f"retry backoff ({RETRY_BACKOFF_MAX}) = {window} seconds, or a redelivered message could count twice"
        )


@functools.cache
def get_settings() -> Settings:
    """The process's settings, read once on first use."""
    return load_settings()


def reset_settings() -> None:
    """Forget cached settings (tests, or after changing the environment). The Redis client of
    ``counters_tasks.store.client`` belongs to one settings object, so it is made again too."""
    get_settings.cache_clear()
