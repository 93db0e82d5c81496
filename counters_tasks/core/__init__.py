"""The foundation: settings from the environment, input checks, what "a day" is, and how task
arguments are shown without raw visitor IPs.

- ``settings``: every setting, read from the environment once and checked;
- ``validation``: input checks and bounds (names, IPs, times, message ids);
- ``paths``: a page's one canonical name, whatever route its view came by;
- ``pageviews``: the page view rule (what a page view is, and the crawler list) every route applies;
- ``sites``: which site a visit, counter or board belongs to, its time zone and Host names;
- ``sources``: where a page view came from: its referrer reduced to a domain, its campaign tags;
- ``clients``: who visits: browser, operating system and device type from the User-Agent
  (ua-parser), country from the IP (iptocc), language from Accept-Language;
- ``days``: local days (in a site's zone), their boundaries and retention;
- ``privacy``: the text form of task arguments (Flower, task events) with IP addresses masked;
- ``kind``: what a kind of thing counted declares (``Kind``: its tasks, fields, checks, journal
  form and write) and the registry every table of kinds is derived from;
- ``table``: what a stored table declares (``Table``: its keys, writers, readers, retention and
  how one visitor is erased from it) and the registry ``counters-tasks tables`` and every kind's
  write read;
- ``visitors``: visitor identity: the ids every table holds of a visitor, made from what a visit
  carries (``visitor_id``, an HMAC of the IP; ``pair_visitor``; ``session_number``);
- ``events``: what an analytics event is (its name and properties) and its caps, every route's one rule;
- ``conversions``: goals and funnels as defined, and what a page view or an event must be to match one.

Modules here import nothing of the package but ``counters_tasks.errors`` (and each other:
``days`` uses ``settings`` and ``validation``, ``validation`` uses ``paths``, ``sites`` uses
``settings``, ``clients`` uses ``pageviews`` and ``settings``, ``visitors`` uses ``settings`` and
``validation``, ``table`` uses ``settings``, ``events`` and ``conversions`` use ``validation`` and ``paths``). Every other layer builds on them (the layers: docs/architecture.md).
"""
