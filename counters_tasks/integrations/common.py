"""What every request integration shares: which requests are page views, who the client is,
the session cookie for the daily uniques, ranking bumps, events (``track_event``), and the one
recorder per process.

The WSGI, ASGI and Django middleware only translate their framework's request and response into
``RequestInfo`` and a status with headers, and call ``Counting``: so the rules (the page view
rule of ``core.pageviews``, the page's name of ``core.paths``, which the importer applies too;
the trusted-proxy rule of ``integrations.client_ip``, the cookie) are written once and tested
once. Nothing here talks to Redis or the broker: a counted request costs
``VisitRecorder.record()``'s in-memory append, and a skipped one a count by reason (sent with
the recorder's batches, shown in ``/metrics``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, cast

from ..core import pageviews
from ..core.events import check_event_name, check_props
from ..core.paths import encode_decoded_path, encode_target_bytes
from ..core.sites import check_site, hosts_of, site_for_host
from ..core.sources import source_fields
from ..core.validation import check_session_id, page_name
from ..errors import InvalidInput
from ..recorder import VisitRecorder, call_shared, shared_recorder
from ..skips import MIDDLEWARE
from .client_ip import client_ip

log = logging.getLogger(__name__)

REQUEST_KEY = "counters_tasks"
"""The WSGI environ key and ASGI scope key under which a request's ``RequestCounters`` is found."""

DEFAULT_SKIP_PREFIXES = pageviews.SKIP_PREFIXES
DEFAULT_SKIP_EXTENSIONS = pageviews.SKIP_EXTENSIONS
DEFAULT_CONTENT_TYPES = pageviews.PAGE_MEDIA_TYPES

SKIPPED_BY_APP = pageviews.APP
HOST = pageviews.HOST
REFUSED = pageviews.REFUSED

COOKIE_MAX_AGE = 365 * 24 * 3600


Headers = list[tuple[str, str]]
"""Response headers as (name, value) pairs of str, as WSGI's ``start_response`` takes them."""


@dataclass(frozen=True)
class RequestInfo:
    """One request as the counting rules see it, whatever the framework.

    ``path``: the page's canonical name (``request_path``), what the visit is counted under.
    ``headers``: lower-case names; a header sent several times is joined with ``", "`` (as WSGI
    servers do). ``remote_addr``: the peer of the socket (None on a Unix socket). ``raw``: the
    WSGI environ, ASGI scope or Django request, for an app's own ``session_id`` or
    ``should_count`` callables. ``query``: the query string as sent (for the campaign's UTM tags).
    """

    method: str
    path: str
    remote_addr: str | None
    headers: Mapping[str, str]
    raw: Any = None
    query: str = ""

    def cookie(self, name: str) -> str | None:
        """The value of cookie ``name`` in the request's Cookie header (first one wins), or None."""
        for part in self.headers.get("cookie", "").split(";"):
            key, sep, value = part.partition("=")
            if sep and key.strip() == name:
                return value.strip().strip('"')
        return None


def request_path(raw_target: bytes | None, decoded_path: str) -> str:
    """The page's canonical name (``core.validation.page_name``, the function the importer names
    a logged target with): from the target as the client sent it when the server gives it
    (``raw_target``: ASGI's ``raw_path``, a WSGI server's ``REQUEST_URI``), else from the path
    the server decoded (a byte that was not UTF-8 given as its ``surrogateescape`` character:
    ``wire_text``). Never raises: a target of any length has a name, cut to 512 bytes, so a
    long path counts under its cut name; one the recorder still refuses (a name that is not
    text) is a skip of reason ``refused``."""
    text = encode_target_bytes(raw_target) if raw_target else encode_decoded_path(decoded_path or "/")
    return page_name(text) or decoded_path or "/"


def wire_bytes(value: str | bytes) -> bytes | None:
    """A request's header or path as its bytes on the wire: bytes (ASGI) as given; a PEP 3333
    string (WSGI's environ, Django's ``request.META`` under WSGI and ASGI: each byte one
    character, latin-1) taken back to them; None for a str that is not one (a character past
    U+00FF: a framework or test transport that decoded it already)."""
    if isinstance(value, bytes):
        return value
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return None


def wire_text(value: str | bytes, errors: str = "replace") -> str:
    """The text of a request's header (Referer, User-Agent, Accept-Language, Host, Cookie) or
    path: its bytes (``wire_bytes``) read as UTF-8, never as latin-1 (``http://bücher.example/``
    sent as UTF-8 is that, not ``bã¼cher``). Bytes that are not UTF-8 become U+FFFD
    (``errors="replace"``: a Referer's host of such bytes is ``(unknown)``, ``core.sources``) or,
    for a path, their ``surrogateescape`` characters, which ``core.paths`` writes as ``%XX``
    escapes. A str that is not a PEP 3333 string is its own text."""
    raw = wire_bytes(value)
    if raw is None:
        return cast(str, value)
    if raw.isascii():
        return raw.decode("ascii")
    return raw.decode("utf-8", errors)


def new_session_id() -> str:
    """A fresh session id for the cookie: a random UUID's 32 hex digits."""
    return uuid.uuid4().hex


def valid_session_id(value: Any) -> str | None:
    """``value`` when the recorder would accept it as a session id (``check_session_id``), else None."""
    if value is None:
        return None
    try:
        check_session_id(value)
    except InvalidInput:
        return None
    return value


@dataclass(frozen=True)
class Options:
    """How the middleware decides what to count; every field has a safe default.

    See docs/integrations.md for the table. ``should_count(info, status, headers)`` replaces the
    page view rule (method, path, status, content type, crawlers) entirely (``Counting.default_should_count`` is
    there to call from it). ``session_id(info)`` replaces the cookie: it returns the session id
    (a UUID or 15+ hex digits) or None for a visit without one. ``site(info)`` replaces the Host
    allowlist of ``COUNTERS_SITES`` (``core.sites.site_for_host``): it returns the name of the site
    the request counts for (one of ``COUNTERS_SITES``, or ``default``), or None to count it for none.
    ``recorder``: a ``VisitRecorder`` (the middleware calls its ``record``, ``incr_ranking``,
    ``track_event`` and ``skipped``), or a callable returning one; a stand-in in an app's tests need only take what its
    requests send (``site=`` comes only for a site other than the default one, ``referrer=``,
    ``utm=``, ``user_agent=`` and ``language=`` only when the request has them).
    """

    recorder: VisitRecorder | Callable[[], VisitRecorder] | None = None
    methods: Collection[str] = pageviews.METHODS
    skip_prefixes: Collection[str] = DEFAULT_SKIP_PREFIXES
    skip_extensions: Collection[str] = DEFAULT_SKIP_EXTENSIONS
    statuses: Collection[int] = pageviews.STATUSES
    content_types: Collection[str] | None = DEFAULT_CONTENT_TYPES
    skip_crawlers: bool = True
    should_count: Callable[[RequestInfo, int, Headers], bool] | None = None
    trusted_proxies: int = 0
    proxy_header: str = "X-Forwarded-For"
    session_id: Callable[[RequestInfo], str | None] | None = None
    cookie_name: str = "ct_sid"
    cookie_max_age: int = COOKIE_MAX_AGE
    cookie_secure: bool = False
    cookie_domain: str | None = None
    cookie_path: str = "/"
    site: Callable[[RequestInfo], str | None] | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.trusted_proxies, bool)
            or not isinstance(self.trusted_proxies, int)
            or self.trusted_proxies < 0
        ):
            raise ValueError("trusted_proxies must be an int >= 0")
        if self.proxy_header.lower() not in ("x-forwarded-for", "forwarded"):
            raise ValueError("proxy_header must be 'X-Forwarded-For' or 'Forwarded'")
        if not self.cookie_name or any(c in self.cookie_name for c in ' =;,"\t\r\n'):
            raise ValueError(f"cookie_name {self.cookie_name!r} is not a valid cookie name")

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> Options:
        """Options from a dict (Django's ``COUNTERS_MIDDLEWARE`` setting); an unknown key raises."""
        known = {f.name for f in fields(cls)}
        unknown = set(settings) - known
        if unknown:
            raise ValueError(f"unknown counters middleware options: {', '.join(sorted(unknown))}")
        return cls(**settings)


class RequestCounters:
    """What a view reaches during its request (``request.counters`` in Django, the
    ``REQUEST_KEY`` entry of the WSGI environ / ASGI scope): ranking bumps, applied through the
    process's recorder once the response is done, events (``track_event``, sent at once: the
    app's way in is ``integrations.track_event``), and ``skip()`` to leave this page view out."""

    def __init__(
        self, session_id: str | None = None, send_event: Callable[[str, Any, float], None] | None = None
    ) -> None:
        self.session_id = session_id
        """The session id this visit is counted with (None: none, or not decided yet)."""
        self.skipped = False
        self.bumps: list[tuple[str, str, int, float, int, int]] = []
        self.send_event = send_event
        """Where ``track_event`` hands an event (the middleware's ``Counting.send_event`` for this
        request; None on one made by hand, whose events have no request to come from)."""

    def track_event(self, name: str, props: dict[str, Any] | None = None) -> None:
        """Record the event ``name`` (with ``props``) of this request's visitor, timed now: handed
        to the process's recorder at once, with the client address, session id and site the
        request's page view has (``Counting.send_event``), whether or not the request is a page
        view (a form's POST). A name or properties the caps refuse (``core.events``) raise
        InvalidInput here, in the view, and nothing is sent; anything else the recorder does
        is counted in the middleware's ``stats``, never raised into the view."""
        check_event_name(name)
        check_props(props)
        if self.send_event is None:
            raise LookupError("these RequestCounters belong to no request of a counters_tasks middleware")
        self.send_event(name, props, time.time())

    def bump(
        self, board: str, member: str, amount: int = 1, *, period_hours: int = 24, interval_hours: int = 1
    ) -> None:
        """Add ``amount`` to ``member`` on ranking ``board`` (as ``VisitRecorder.incr_ranking``),
        timed now, sent after the response. Bad input is logged and counted then, never raised
        into the view (a member often comes from the request)."""
        self.bumps.append((board, member, amount, time.time(), period_hours, interval_hours))

    def skip(self) -> None:
        """Do not count this request as a page view (its bumps still apply)."""
        self.skipped = True


def request_counters(environ_or_scope: Mapping[str, Any]) -> RequestCounters:
    """The request's ``RequestCounters`` from a WSGI environ or ASGI scope (``flask.request.environ``,
    ``starlette``'s ``request.scope``). Raises LookupError when no counters middleware wraps the
    app, rather than dropping the app's bumps silently."""
    try:
        return environ_or_scope[REQUEST_KEY]
    except KeyError:
        raise LookupError("no counters_tasks middleware wraps this app (see docs/integrations.md)") from None


@dataclass
class Stats:
    """What a middleware did, per process: page views handed to the recorder, requests skipped
    (in all, and by reason in ``skipped_by``: the page view rule's reasons, ``app``, ``host``
    and ``refused``), visits the recorder refused (InvalidInput; each also skipped as
    ``refused``), visits lost to an error of the recorder (closed while
    shutting down), requests without a client address, cookies set, bumps sent and refused,
    events sent, refused by the recorder, and of requests of no site (a Host no site lists)."""

    counted: int = 0
    skipped: int = 0
    refused: int = 0
    failed: int = 0
    no_client_ip: int = 0
    cookies_set: int = 0
    bumps: int = 0
    bumps_refused: int = 0
    events: int = 0
    events_refused: int = 0
    events_no_site: int = 0
    skipped_by: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def skip(self, reason: str) -> None:
        with self._lock:
            self.skipped += 1
            self.skipped_by[reason] += 1

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {
                f.name: getattr(self, f.name)
                for f in fields(self)
                if not f.name.startswith("_") and f.name != "skipped_by"
            }


@dataclass
class InFlight:
    """One request in flight: what is known before the response, and what it decided after."""

    info: RequestInfo
    counters: RequestCounters
    ts: float
    new_cookie: str | None = None
    site: str = ""
    """The scope of the site it counts for (``core.sites``: "" for the default site)."""
    counted: bool = False
    reason: str | None = None
    """Why it is not a page view (``core.pageviews.REASONS`` or ``app``): the method or the path
    from ``begin``, the answer's rules from ``response``."""


class Counting:
    """The shared rules, applied by each middleware at three points: ``begin`` (before the app),
    ``response`` (status and headers known: count or not, and the Set-Cookie header to add) and
    ``finish`` (after the response: the visit and the bumps go to the recorder)."""

    def __init__(self, options: Options | None = None, **kwargs: Any) -> None:
        if options is not None and kwargs:
            raise TypeError("give either options or keyword options, not both")
        self.options = options if options is not None else Options(**kwargs)
        self.stats = Stats()
        options = self.options
        self.rule = pageviews.PageViewRule(
            options.methods,
            options.skip_prefixes,
            options.skip_extensions,
            options.statuses,
            options.content_types,
            options.skip_crawlers,
        )
        """The page view rule (``core.pageviews``) with this middleware's parameters."""
        self._recorder: VisitRecorder | None = None
        self._recorder_lock = threading.Lock()

    @property
    def recorder(self) -> VisitRecorder:
        """The recorder visits go to: the one given (or made by the callable given, once), else
        ``shared_recorder()``; resolved at the first counted request, so after a server's fork."""
        if self._recorder is None:
            with self._recorder_lock:
                given = self.options.recorder
                if self._recorder is not None:
                    pass
                elif given is None:
                    self._recorder = shared_recorder()
                elif callable(given) and not hasattr(given, "record"):
                    self._recorder = given()
                else:
                    self._recorder = given  # type: ignore[assignment]
        return self._recorder  # type: ignore[return-value]

    def flush(self, timeout: float = 5.0) -> bool:
        """Send what the recorder holds (when one was made and can flush); True when all went."""
        recorder = self._recorder
        flush = getattr(recorder, "flush", None)
        if flush is None:
            return True
        try:
            return bool(flush(timeout))
        except Exception:
            log.warning("counters middleware: flushing the recorder failed", exc_info=True)
            return False

    # -- the rules ---------------------------------------------------------------------------

    def path_is_skipped(self, path: str) -> bool:
        """True for static files and probes: ``skip_prefixes`` and ``skip_extensions``."""
        return self.rule.is_static(path)

    def request_may_count(self, info: RequestInfo) -> bool:
        """False when the request cannot be a page view whatever its response (a method not
        counted, a skipped path, and no ``should_count`` callable): the middleware then leaves the
        response alone (a static file keeps the server's ``sendfile``)."""
        return self.options.should_count is not None or self.rule.request_reason(info.method, info.path) is None

    def skip_reason(self, info: RequestInfo, status: int, headers: Iterable[tuple[str, str]]) -> str | None:
        """None when the page view rule counts this answer, else its reason (``core.pageviews``)."""
        content_type = next((value for name, value in headers if name.lower() == "content-type"), None)
        return self.rule.skip_reason(
            info.method,
            info.path,
            status,
            content_type=content_type,
            request_headers=info.headers,
            user_agent=info.headers.get("user-agent", ""),
        )

    def default_should_count(self, info: RequestInfo, status: int, headers: Iterable[tuple[str, str]]) -> bool:
        """The page view rule with this middleware's parameters (``core.pageviews``)."""
        return self.skip_reason(info, status, headers) is None

    def client_ip(self, info: RequestInfo) -> str | None:
        """``client_ip`` with this middleware's ``trusted_proxies`` and ``proxy_header``."""
        return client_ip(info.remote_addr, info.headers, self.options.trusted_proxies, self.options.proxy_header)

    def set_cookie_header(self, session_id: str) -> str:
        """The Set-Cookie value that gives the browser ``session_id`` (HttpOnly, SameSite=Lax)."""
        parts = [
            f"{self.options.cookie_name}={session_id}",
            f"Path={self.options.cookie_path}",
            f"Max-Age={self.options.cookie_max_age}",
            "HttpOnly",
            "SameSite=Lax",
        ]
        if self.options.cookie_domain:
            parts.append(f"Domain={self.options.cookie_domain}")
        if self.options.cookie_secure:
            parts.append("Secure")
        return "; ".join(parts)

    # -- the three points --------------------------------------------------------------------

    def begin(self, info: RequestInfo) -> InFlight:
        """Before the app runs: the request's ``RequestCounters``, its session id (from the app's
        callable, or the cookie; a new id when the cookie is absent or not a valid id), and the
        reason it cannot be a page view whatever its answer, when there is one (``request_may_count``)."""
        visit = InFlight(info, RequestCounters(), time.time())
        visit.counters.send_event = lambda name, props, ts: self.send_event(visit, name, props, ts)
        site = self.site_of(info)
        if site is None:
            visit.reason = HOST
        else:
            visit.site = site
        if visit.reason is None and self.options.should_count is None:
            visit.reason = self.rule.request_reason(info.method, info.path)
        if self.options.session_id is not None:
            try:
                visit.counters.session_id = valid_session_id(self.options.session_id(info))
            except Exception:  # the app's callable: its failure must not fail the request
                log.exception("counters middleware: the session_id callable failed")
        else:
            visit.counters.session_id = valid_session_id(info.cookie(self.options.cookie_name))
            if visit.counters.session_id is None:
                visit.new_cookie = new_session_id()
                visit.counters.session_id = visit.new_cookie
        return visit

    def site_of(self, info: RequestInfo) -> str | None:
        """The scope of the site a request counts for, or None for none: the app's ``site``
        callable when given (a name it returns is checked: an unknown one counts for none), else
        the Host header through the allowlist of ``COUNTERS_SITES``, never a client-chosen name."""
        if self.options.site is None:
            return site_for_host(info.headers.get("host"))
        try:
            name = self.options.site(info)
            return None if name is None else check_site(name)
        except InvalidInput as exc:
            log.debug("counters middleware: the site callable named no known site: %s", exc)
        except Exception:  # the app's callable: its failure must not fail the request
            log.exception("counters middleware: the site callable failed")
        return None

    def response(self, visit: InFlight, status: int, headers: Headers) -> str | None:
        """Status and headers known: decide whether the request is a page view; the Set-Cookie
        header value to add (a page view of a browser without the cookie), or None."""
        try:
            if visit.reason == HOST:
                pass
            elif visit.counters.skipped:
                visit.reason = SKIPPED_BY_APP
            elif self.options.should_count is not None:
                visit.reason = None if self.options.should_count(visit.info, status, headers) else SKIPPED_BY_APP
            else:
                visit.reason = self.skip_reason(visit.info, status, headers)
        except Exception:
            log.exception("counters middleware: the should_count callable failed")
            visit.reason = SKIPPED_BY_APP
        visit.counted = visit.reason is None
        if not visit.counted or visit.new_cookie is None:
            return None
        prefix = f"{self.options.cookie_name}=".lower()
        if any(name.lower() == "set-cookie" and value.lower().startswith(prefix) for name, value in headers):
            return None  # the app set it itself
        self.stats.add("cookies_set")
        return self.set_cookie_header(visit.new_cookie)

    def finish(self, visit: InFlight) -> None:
        """After the response: the page view (when counted) and the bumps go to the recorder.
        Never raises: a refused visit is logged at debug and counted, as is any recorder error."""
        if visit.counted and not visit.counters.skipped:
            self._record(visit)
        else:
            self.skipped(visit)
        if visit.reason == HOST:
            return  # no site: its bumps are no site's either
        site = {"site": visit.site} if visit.site else {}  # a stand-in recorder of a one-site app need not take it
        for board, member, amount, ts, period_hours, interval_hours in visit.counters.bumps:
            self._hand_over(
                "ranking bump",
                ("bumps", "bumps_refused"),
                "incr_ranking",
                board,
                member,
                amount,
                ts=ts,
                period_hours=period_hours,
                interval_hours=interval_hours,
                **site,
            )

    def send_event(self, visit: InFlight, name: str, props: Any, ts: float) -> None:
        """An event a view tracked during ``visit`` (``RequestCounters.track_event``), handed to the
        recorder's ``track_event`` at once with what the request's page view is counted with: the
        client address (``client_ip``: the trusted-proxy rule; None without one: the event's
        visitor is then its session's, ``core.visitors.session_visitor_id``), the session id
        ``begin`` found, the site ``site_of`` found.
        A request of no site (``host``) sends none (``stats.events_no_site``). Never raises: the
        recorder's refusal or error is counted (``events_refused``, ``failed``)."""
        if visit.reason == HOST:
            self.stats.add("events_no_site")
            log.debug("counters middleware: event %r of a request of no site not sent", name)
            return
        site = {"site": visit.site} if visit.site else {}
        self._hand_over(
            "event",
            ("events", "events_refused"),
            "track_event",
            name,
            props,
            ts=ts,
            ip=self.client_ip(visit.info),
            session_id=visit.counters.session_id,
            **site,
        )

    def skipped(self, visit: InFlight) -> None:
        """Count a request that is not a page view, by its reason: here (``stats``) and, through
        the recorder's batches, in Redis for ``/metrics``. Never raises."""
        reason = visit.reason or SKIPPED_BY_APP  # none: a page view the app left out after its answer
        self.stats.skip(reason)
        try:
            count_skip = getattr(self.recorder, "skipped", None)  # a stand-in recorder may not count them
            if count_skip is not None:
                # the site it was for (none for a Host no site lists); a stand-in recorder need not take it
                site = {"site": visit.site} if visit.site and visit.reason != HOST else {}
                count_skip(MIDDLEWARE, reason, **site)
        except Exception:
            log.debug("counters middleware: a skip was not counted", exc_info=True)

    def _record(self, visit: InFlight) -> None:
        ip = self.client_ip(visit.info)
        if ip is None:
            self.stats.add("no_client_ip")
            log.debug("counters middleware: no client address for %s", visit.info.path)
            return
        extra: dict[str, Any] = {"site": visit.site} if visit.site else {}  # what a one-site stand-in need not take
        extra.update(self.source_of(visit))
        extra.update(self.client_of(visit))
        refused = self._hand_over(
            "visit",
            ("counted", "refused"),
            "record",
            ip,
            visit.info.path,
            session_id=visit.counters.session_id,
            ts=visit.ts,
            **extra,
        )
        if refused:  # never silent: a skip of its own reason, shown with the others (health, /metrics)
            visit.reason = REFUSED
            self.skipped(visit)

    def source_of(self, visit: InFlight) -> dict[str, Any]:
        """The view's source as the recorder takes it (``core.sources``): ``referrer``, reduced to
        its domain (``(internal)`` on the request's own Host or one of its site's), and ``utm``,
        the campaign tags of the page's query string; each left out when there is none."""
        info = visit.info
        own = {(info.headers.get("host") or "").strip().lower(), *hosts_of(visit.site)}  # a port is ignored there
        return source_fields(info.headers.get("referer"), info.query, own)

    def client_of(self, visit: InFlight) -> dict[str, Any]:
        """Who visits as the recorder takes it (``core.clients``): the request's ``user_agent``
        and Accept-Language (``language``) headers as sent, each left out when absent (the worker
        parses them, and finds the country from the IP)."""
        headers = visit.info.headers
        found = {"user_agent": headers.get("user-agent"), "language": headers.get("accept-language")}
        return {name: value for name, value in found.items() if value}

    def _hand_over(self, what: str, outcomes: tuple[str, str], method: str, *args: Any, **kwargs: Any) -> bool:
        """One call of the recorder, counted in ``stats`` under ``outcomes`` (taken, refused) or
        ``failed``; True when the recorder refused it (InvalidInput). Never raises (a refusal is
        logged at debug, a recorder error as a warning)."""
        taken, refused = outcomes
        try:
            self._call_recorder(method, *args, **kwargs)
            self.stats.add(taken)
        except InvalidInput as exc:
            self.stats.add(refused)
            log.debug("counters middleware: %s refused: %s", what, exc)
            return True
        except Exception:
            self.stats.add("failed")
            log.warning("counters middleware: %s not recorded", what, exc_info=True)
        return False

    def _call_recorder(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Call the recorder; the shared one through ``recorder.call_shared`` (once more on a
        renewed one when a SIGTERM closed it while this request ran)."""
        recorder = self.recorder
        if self.options.recorder is not None:  # the app's own: a closed one is the app's to renew
            getattr(recorder, method)(*args, **kwargs)
            return
        taken = call_shared(recorder, lambda shared: getattr(shared, method)(*args, **kwargs))
        if taken is not recorder:
            with self._recorder_lock:
                self._recorder = taken
