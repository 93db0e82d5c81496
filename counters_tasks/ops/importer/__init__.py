"""``counters-tasks import``: the page views of an access log (or of JSON lines) counted at their
original times, through the batch function of ``VisitRecorder``'s batches (``visits.apply_visits``);
importing the same lines again counts nothing twice (docs/cli.md, docs/keys.md "Imports").

- ``reading``: opening the input (``open_input``: a file or stdin, gzip recognised by its magic
  bytes, the bytes read counted for a progress bar) and reading its lines (``read_lines``: a line
  longer than ``MAX_LINE`` bytes is read past and reported as malformed, never held whole);
- ``formats``: the input formats and one line's parsing, pure functions (``detect_format``,
  ``parse_log_line``, ``log_line_visit``, ``vhost_line_visit``, ``json_line_visit``,
  ``line_visit``): a visit dict or the reason the line is skipped (``SKIP_REASONS``), by the page
  view rule of ``core.pageviews`` and the page name of ``core.paths``, as the middleware applies them;
- ``ledger``: the import ledger's view of a page view (``canonical``, ``content_digest``,
  ``visit_fields``): which chunks and visits were imported before;
- ``rules``: the event rules of ``--event PATH=NAME`` (``parse_rule``, ``events_of``): the page
  views of a path counted as an event too, matched by ``core.conversions.Match.hits_view``;
- ``run``: the import itself (``import_lines``, ``Importer``, ``Summary``, ``require_secret``):
  chunks of ``CHUNK`` page views through ``visits.apply_visits``, their events through the event
  kind's payload, each chunk noted in the ledger.

This ``__init__`` only re-exports their names (``__all__``), so ``from counters_tasks.ops import
importer`` then ``importer.import_lines(...)`` is the way in. What they may import: ``reading``,
``formats``, ``ledger`` and ``rules`` none of each other, only the standard library and the
layers below ``ops`` (``core``, ``errors``); ``run`` imports those four and ``visits``,
``payloads``, ``events`` (the event kind), ``skips``, ``store`` and ``core``. Nothing here imports the rest of ``ops``; ``ops.cli`` imports this package.
"""

from .formats import (
    ALREADY_IMPORTED,
    BLANK,
    EVERY_PAGE,
    FORMATS,
    MALFORMED,
    SKIP_REASONS,
    LogLine,
    detect_format,
    first_line_format,
    json_line_visit,
    json_time,
    line_visit,
    log_line_visit,
    page_path,
    parse_log_line,
    parse_log_time,
    session_id_for,
    unescape,
    vhost_line_visit,
)
from .ledger import SOURCE_FIELDS, canonical, content_digest, visit_fields
from .reading import MAX_LINE, CountingReader, Input, chain_lines, open_input, read_lines
from .rules import EventRule, events_of, parse_rule, parse_rules
from .run import CHUNK, MALFORMED_LINES_SHOWN, PROGRESS_EVERY, Importer, Summary, import_lines, require_secret

__all__ = [
    # reading
    "MAX_LINE",
    "CountingReader",
    "Input",
    "open_input",
    "read_lines",
    "chain_lines",
    # formats
    "FORMATS",
    "SKIP_REASONS",
    "MALFORMED",
    "BLANK",
    "ALREADY_IMPORTED",
    "EVERY_PAGE",
    "LogLine",
    "detect_format",
    "parse_log_time",
    "unescape",
    "parse_log_line",
    "page_path",
    "session_id_for",
    "log_line_visit",
    "json_time",
    "json_line_visit",
    "line_visit",
    "vhost_line_visit",
    "first_line_format",
    # ledger
    "SOURCE_FIELDS",
    "canonical",
    "content_digest",
    "visit_fields",
    # rules
    "EventRule",
    "parse_rule",
    "parse_rules",
    "events_of",
    # run
    "CHUNK",
    "PROGRESS_EVERY",
    "MALFORMED_LINES_SHOWN",
    "Summary",
    "Importer",
    "require_secret",
    "import_lines",
]
