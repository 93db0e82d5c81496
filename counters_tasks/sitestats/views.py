"""A page view validated: ``SiteView`` (who, what, which day and site, its source, who visits)
and ``view_on``, which makes one from a visit's fields (raising InvalidInput, writing nothing):
what every table of a visit is written from (``site_day.queue_views``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any, NamedTuple

from ..core.clients import Who, check_headers, who_of
from ..core.settings import get_settings
from ..core.sites import hosts_of
from ..core.sources import DIRECT, check_campaign, referrer_domain
from ..core.validation import check_ip, check_path
from ..core.visitors import visitor_id
from .sources import SOURCE_KINDS


class SiteView(NamedTuple):
    """One validated page view: who (HMAC visitor id), what (normalized path), which local day.
    (A NamedTuple, not a frozen dataclass: one is made per view a worker applies, at a third
    of the cost.)"""

    visitor: str
    path: str
    day: date
    site: str = ""  # the scope of the view's site (core.sites): "" for the default site
    referrer: str = DIRECT  # its referring domain, reduced (core.sources)
    campaign: tuple[tuple[str, str], ...] = ()  # (kind letter, tag) of its UTM tags: sources.SOURCE_KINDS
    who: Who | None = None  # browser, system, device, country, language (core.clients); None: no such tables
    headers: tuple[Any, Any] = (
        None,
        None,
    )  # the view's user agent (or reduced client) and language as sent: what cuts calls


VIEW_FIELDS = ("site", "referrer", "utm", "user_agent", "language")
"""The fields of a visit a page view takes besides its ``ip``, ``path`` and time, in the visit's
declared order (``visits.VISIT.fields`` is made with them): what ``record_visit`` takes by name."""

normalize_ip = check_ip
normalize_path = check_path


def view_on(fields: Mapping[str, Any], day: date, site: str) -> SiteView:
    """One page view on ``day`` of site ``site`` (a checked scope; ``day`` the site's local day of
    a time already checked: a caller that also needs the day computes it once), from a visit's
    ``fields`` (the dict ``core.kind.Kind.bind`` returns: ``ip``, ``path``, ``referrer``, ``utm``,
    ``user_agent``, ``language``, ``client``; others ignored, a missing one None): its path and IP
    validated, its source reduced (``core.sources``: ``referrer`` a URL or a domain, ``utm`` the
    campaign's tags), who visits derived (``core.clients``: from the IP, ``user_agent`` (or its
    reduced ``client``) and the Accept-Language header ``language``; not when
    COUNTERS_CLIENT_TABLES is off) (raises InvalidInput)."""
    get = fields.get
    clean_path = check_path(get("path"))
    clean_ip = check_ip(get("ip"))
    referrer, utm = get("referrer"), get("utm")
    source = DIRECT if referrer is None else referrer_domain(referrer, hosts_of(site))
    campaign = () if utm is None else tuple((SOURCE_KINDS[f"utm_{k}"], tag) for k, tag in check_campaign(utm).items())
    if get_settings().client_tables:
        who: Who | None = who_of(clean_ip, get("user_agent"), get("language"), get("client"))
    else:  # nothing kept, but bad input refused as with the tables on
        check_headers(get("user_agent"), get("language"), get("client"))
        who = None
    agent, client = get("user_agent"), get("client")
    if agent is None and client is not None:
        agent = tuple(client)  # (a list in JSON)
    return SiteView(visitor_id(clean_ip, day), clean_path, day, site, source, campaign, who, (agent, get("language")))
