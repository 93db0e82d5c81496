"""Drop-in request integrations: middleware that record each page view through one
``VisitRecorder`` per process (docs/integrations.md, docs/guides/).

- ``common``: the rules every middleware shares: skipped paths and responses, the session
  cookie, ranking bumps (the process's recorder is ``recorder.shared_recorder()``);
- ``client_ip``: the client address rule ``common`` applies: the socket peer, or the address
  ``trusted_proxies`` hops from the right of ``X-Forwarded-For`` / ``Forwarded``;
- ``wsgi``: ``CountersMiddleware`` for any WSGI app (Flask, ...);
- ``asgi``: ``CountersASGIMiddleware`` for any ASGI app (Starlette, FastAPI, ...);
- ``django``: ``CountersMiddleware`` for Django's ``MIDDLEWARE`` setting (imports Django only
  when Django makes it);
- ``events``: ``track_event(request, name, props)``, an app's event from a view, of the visitor
  and site the middleware counts the request's page view with (re-exported here).

The layer above ``app``, ``tasks`` and ``recorder``: it may import them and every lower layer
(``core``, ``errors``, ...); nothing else in the package imports it. No web framework is a
dependency: each is imported only by the app that uses it.
"""

from .events import track_event

__all__ = ["track_event"]
