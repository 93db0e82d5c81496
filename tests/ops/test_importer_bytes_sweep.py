"""Any bytes in the fields of an access log's line (the request target, the Referer, the User-Agent,
as a server logs what a client sent: uWSGI raw, gunicorn as latin-1 text, nginx escaped), beside good
lines, through ``counters-tasks import``: every line is counted or skipped with a reason in the
summary (lines = counted + skipped), the good lines are counted whatever their neighbour held, and
the figures in Redis are the summary's (the user's cases one by one: test_importer.py,
tests/core/test_sources.py)."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from counters_tasks import sitestats
from tests.ops.test_importer import run_import, write

field_bytes = st.one_of(
    st.binary(max_size=60),
    st.text(max_size=30).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"\xff\xfe", b"\xed\xa0\x80", b"\\x00", b'\\"', b"\xc3", "é".encode() * 2000, b"x" * 5000]),
)
AGENT = b"Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"


def line(when: str, target: bytes, referer: bytes, agent: bytes) -> bytes:
    return (
        b"203.0.113.7 - - ["
        + when.encode()
        + b'] "GET '
        + target
        + b' HTTP/1.1" 200 512 "'
        + referer
        + b'" "'
        + agent
        + b'"'
    )


def test_any_bytes_in_a_log_line_are_counted_or_skipped_with_a_reason(raw_conn, tmp_path):
    when = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(time.time() - 60))
    good = line(when, b"/good", b"https://news.example/", AGENT)

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(target=field_bytes, referer=field_bytes, agent=field_bytes)
    def check(target, referer, agent):
        raw_conn.flushdb()
        odd = line(
            when,
            b"/" + target.replace(b"\n", b"").replace(b"\r", b""),
            referer.replace(b"\n", b""),
            agent.replace(b"\n", b""),
        )
        log = write(tmp_path / "access.log", [good, odd, good.replace(b"203.0.113.7", b"203.0.113.8")])
        summary = run_import("--json", "--all", str(log))
        assert summary["lines"] == 3 == summary["counted"] + summary["skipped_total"], summary
        assert summary["skipped_total"] == sum(summary["skipped"].values())
        assert sitestats.site_visit_info(raw_conn, None, "/good").pv == 2, summary  # the good ones, whatever
        assert sitestats.site_visit_info(raw_conn).pv == summary["counted"], summary

    check()
