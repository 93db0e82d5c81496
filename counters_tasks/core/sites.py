"""Sites: which site a visit, counter or board belongs to, its time zone, and its Host names.

A deployment counts the default site (``default``: what every call counts when it names none,
kept under the keys of a one-site deployment) and the sites ``COUNTERS_SITES`` names, at most
``MAX_SITES`` (docs/sites.md). A site name given to any call is checked here: a name the
configuration does not list is refused with ``InvalidInput`` before anything is written, so no
client can make a site (or keys) by sending a new name.

Inside the package a site is carried as its **scope**: ``""`` for the default site, else its
name. ``store.keys.scoped`` puts the scope in front of the user strings a key is made of, so the
default site's keys are those of a one-site deployment and every other site's keys are its own.
"""

from __future__ import annotations

import functools
from typing import Any

from ..errors import InvalidInput
from .settings import DEFAULT_SITE, MAX_SITES, Settings, get_settings

__all__ = ["DEFAULT_SITE", "MAX_SITES", "check_site", "hosts_of", "site_for_host", "site_name", "site_names", "zone_of"]


def check_site(site: Any) -> str:
    """The scope of ``site`` (a name from ``COUNTERS_SITES``, ``default`` or None: the default
    site); raises InvalidInput for anything else."""
    if site is None or site == DEFAULT_SITE or site == "":
        return ""
    if not isinstance(site, str):
        raise InvalidInput(f"site must be a str, got {type(site).__name__}")
    if site not in _zones(get_settings()):
        raise InvalidInput(f"unknown site {site[:64]!r}: not in COUNTERS_SITES")
    return site


def site_name(scope: str) -> str:
    """The name of the site of ``scope`` (``default`` for the default site)."""
    return scope or DEFAULT_SITE


def site_names() -> list[str]:
    """Every site of the deployment, the default one first."""
    return [DEFAULT_SITE, *(site for site in _zones(get_settings()) if site)]


def zone_of(scope: str) -> str:
    """The IANA time zone whose days a site's figures are counted in."""
    return _zones(get_settings())[scope]


def hosts_of(scope: str) -> frozenset[str]:
    """The Host names ``COUNTERS_SITES`` lists for a site (a referrer on one of them is internal)."""
    return _site_hosts(get_settings()).get(scope, frozenset())


def site_for_host(host: Any) -> str | None:
    """The scope of the site a request's Host header names, through the allowlist of
    ``COUNTERS_SITES``: None when the host is listed nowhere (the request is not counted). With
    no hosts configured at all, every request counts for the default site (a one-site
    deployment). A port is ignored unless the allowlist names the host with that port."""
    hosts = _hosts(get_settings())
    if not hosts:
        return ""
    if not isinstance(host, str) or len(host) > 300:
        return None
    host = host.strip().lower()
    if host in hosts:
        return hosts[host]
    bare = host.rstrip(".") if not host.endswith("]") and ":" not in host else _without_port(host)
    return hosts.get(bare.rstrip("."))


def _without_port(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1]
    name, _, port = host.rpartition(":")
    return name if port.isdigit() else host


@functools.lru_cache(maxsize=4)
def _zones(settings: Settings) -> dict[str, str]:
    zones = {"": settings.timezone}
    for site in settings.sites[:MAX_SITES]:
        zones["" if site.name == DEFAULT_SITE else site.name] = site.timezone
    return zones


@functools.lru_cache(maxsize=4)
def _site_hosts(settings: Settings) -> dict[str, frozenset[str]]:
    return {("" if site.name == DEFAULT_SITE else site.name): frozenset(site.hosts) for site in settings.sites}


@functools.lru_cache(maxsize=4)
def _hosts(settings: Settings) -> dict[str, str]:
    return {host: ("" if site.name == DEFAULT_SITE else site.name) for site in settings.sites for host in site.hosts}
