"""How the commands show their answers: one renderer and one rows function a command.

A command's table as data is its ``*_rows`` function (``counter_rows``, ...: the CSV columns
``*_COLUMNS`` and one dict a row); its ``render_*`` draws the same rows with rich, and
``write_csv`` writes them for ``--format csv``, so the terminal and the CSV show the same
figures. ``emit`` prints an answer as ``--format`` says: the JSON of the payload, the CSV of its
rows, or the table. Nothing here talks to Redis: a renderer gets the view's JSON-ready dict.
rich is imported only when a table is drawn (a core-only install can still write JSON and CSV).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import click

from ... import sitestats
from ...core.settings import get_settings
from ...store import deployment
from ..views import uv_text


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


OUTPUTS = ("table", "csv", "json")
"""What ``--format`` / ``--output`` choose: the rich table (default), CSV, or the JSON of ``--json``."""

Rows = tuple[tuple[str, ...], list[dict[str, Any]]]
"""A command's table as data: its CSV column names, and one dict a row keyed by them. One function
a command makes them (``counter_rows``, ...); its renderer draws them and ``--format csv`` writes
them, so the terminal and the CSV show the same figures."""


def _csv_cell(value: Any) -> Any:
    """A value as a CSV cell: ``true``/``false`` for a bool, empty for None, else as it is (an
    int is written as plain digits: no thousands separators, no colour, no markup)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else value


def write_csv(columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    """The one CSV writer of the commands: to stdout, a header row of ``columns`` then a row a
    dict, RFC 4180 (``csv``'s excel dialect: CRLF line ends, a field with a comma, a quote or a
    line break quoted, quotes doubled), so any text survives ``csv.reader``."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    writer.writerows([_csv_cell(row[name]) for name in columns] for row in rows)
    click.echo(buffer.getvalue(), nl=False)


def emit(
    payload: dict, output: str | bool, render: Callable[[Any, dict], None], rows: Callable[[dict], Rows] | None = None
) -> None:
    """Print a command's answer as ``output`` says: ``json`` (the payload), ``csv`` (``rows`` of
    it, ``write_csv``) or ``table`` (``render``, which draws the same ``rows``). A bool is the
    ``as_json`` of a command with ``json_option`` only (True: json, False: table)."""
    if isinstance(output, bool):
        output = "json" if output else "table"
    if output == "json":
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False, default=str))
    elif output == "csv" and rows is not None:
        write_csv(*rows(payload))
        more = more_line(payload)
        if more:  # stdout stays one CSV
            click.echo(more, err=True)
        for note in privacy_notes(payload):
            click.echo(note, err=True)
    else:
        console = _console()
        render(console, payload)
        for note in privacy_notes(payload):
            console.print(note, markup=False, style="yellow")


def privacy_notes(data: dict) -> list[str]:
    """What the answer's figures count that a reader would not assume (docs/privacy.md, "Privacy
    modes"): ``uv_note`` (UV over several days counts visitor-days) and ``visitor_note`` (a
    visitor is not followed past midnight), both set only with COUNTERS_VISITOR_KEY=daily
    (``views.counts_view``, ``event_views.followed_view``), and ``retention_note`` (days of the
    range past their retention count 0: ``views.retention_view``). Under the table; stderr beside
    a CSV."""
    keys = ("uv_note", "visitor_note", "retention_note")
    return [data[key] for key in keys if isinstance(data, dict) and data.get(key)]


def more_line(data: dict) -> str | None:
    """Under a list cut at its ``--limit`` (``views.listed_view``: ``more`` of ``total``): "N more
    (--limit to see them)"; None when nothing was cut. The table's caption, stderr beside a CSV."""
    more = data.get("more") or 0
    return f"{more} more (--limit to see them; {data['total']} in all)" if more else None


UV_FIELDS = ("uv_exact", "uv_error")
"""The CSV columns beside every ``uv``: whether it is exact, and its relative standard error (0.0
when exact), as the JSON has them (``views.uv_view``)."""


def uv_fields(figure: dict) -> dict[str, Any]:
    """The ``UV_FIELDS`` of a JSON figure, for its CSV row."""
    return {name: figure[name] for name in UV_FIELDS}


def uv_note(data: dict, rows: list[dict]) -> str | None:
    """The caption of a table whose UV is marked estimated (``≈N ±X%``): over several days, the
    union of the days' sketches; on one day, a value with more than 256 visitors that day; and what
    the bound is."""
    if all(row["uv_exact"] for row in rows):
        return None
    why = (
        "more than 256 visitors of a value that day"
        if data["from"] == data["to"]
        else "UV over several days, a union of the days' sketches"
    )
    return f"≈N ±X%: an estimate ({why}), ±X% its relative standard error; a plain UV is exact"


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[int]) -> str:
    """One character per value, scaled between the smallest and largest."""
    if not values:
        return ""
    low, high = min(min(values), 0), max(values)
    span = (high - low) or 1
    return "".join(SPARKS[min(len(SPARKS) - 1, int((v - low) * (len(SPARKS) - 1) / span + 0.5))] for v in values)


def _time_label(ts: int, precision: int) -> str:
    when = datetime.fromtimestamp(ts, get_settings().zone)
    return when.strftime("%Y-%m-%d" if precision >= 86400 else "%m-%d %H:%M" if precision >= 3600 else "%H:%M:%S")


COUNTER_COLUMNS = ("bucket_start_epoch", "bucket_start_iso", "total")


def counter_rows(data: dict) -> Rows:
    """One row a bucket, oldest first: its start (epoch seconds, and ISO 8601 in COUNTERS_TIMEZONE)
    and its total."""
    zone = get_settings().zone
    return COUNTER_COLUMNS, [
        {
            "bucket_start_epoch": int(bucket),
            "bucket_start_iso": datetime.fromtimestamp(bucket, zone).isoformat(),
            "total": total,
        }
        for bucket, total in data["points"]
    ]


def render_counter(console: Any, data: dict) -> None:
    from rich.table import Table

    _, points = counter_rows(data)
    values = [row["total"] for row in points]
    console.print(
        f"[bold]{data['name']}[/bold]  every {data['precision']}s, last {len(points)} buckets, "
        f"total {data['total']}, max {max(values, default=0)}"
    )
    console.print(sparkline(values))
    table = Table(box=None, show_header=True, pad_edge=False)
    table.add_column("bucket")
    table.add_column("total", justify="right")
    table.add_column("")
    high = max((abs(v) for v in values), default=0) or 1
    for row in points:  # every bucket asked for (--last), oldest first
        total = row["total"]
        table.add_row(
            _time_label(row["bucket_start_epoch"], data["precision"]), str(total), "█" * round(30 * abs(total) / high)
        )
    console.print(table)


IMPORT_COLUMNS = ("day", "counted")


def import_rows(data: dict) -> Rows:
    """One row a day the import counted page views on (its table): the day and how many."""
    return IMPORT_COLUMNS, [{"day": day, "counted": n} for day, n in data["days"].items()]


def render_import(console: Any, data: dict) -> None:
    from rich.text import Text

    console.print(
        Text.assemble(
            (data["file"], "bold"),
            f" ({data['format']}{', --all' if data['all'] else ''}): "
            f"{data['lines']} lines read, {data['counted']} counted, "
            f"{data['skipped_total']} skipped",
        )
    )
    reasons = [f"{reason} {n}" for reason, n in data["skipped"].items() if n]
    if reasons:
        console.print("  skipped: " + ", ".join(reasons), markup=False)
    if data["malformed_lines"]:
        more = " ..." if data["skipped"]["malformed"] > len(data["malformed_lines"]) else ""
        console.print("  unreadable lines: " + ", ".join(map(str, data["malformed_lines"])) + more, markup=False)
    for row in import_rows(data)[1]:
        console.print(f"  {row['day']}  {row['counted']:>9} counted")
    if data.get("events") or data.get("events_refused"):
        counted = ", ".join(f"{name} {n}" for name, n in data["events"].items())
        refused = ", ".join(f"{reason} {n}" for reason, n in data["events_refused"].items())
        console.print(
            f"  events: {data['events_total']} counted"
            + (f" ({counted})" if counted else "")
            + (f", refused: {refused}" if refused else ""),
            markup=False,
        )


COUNTERS_COLUMNS = ("counter",)


def counters_rows(data: dict) -> Rows:
    """One row a counter name of the page."""
    return COUNTERS_COLUMNS, [{"counter": name} for name in data["counters"]]


BOARD_COLUMNS = ("rank", "member", "total")


def board_rows(data: dict) -> Rows:
    """One row a member, best first: its rank (from 1), name and total over the window."""
    return BOARD_COLUMNS, [
        {"rank": rank, "member": member, "total": total} for rank, (member, total) in enumerate(data["top"], 1)
    ]


def render_board(console: Any, data: dict) -> None:
    from rich.table import Table

    table = Table(
        title=f"{data['board']} (last {data['period_hours']} h, every {data['interval_hours']} h)",
        title_justify="left",
        caption=more_line(data),
        caption_justify="left",
    )
    table.add_column("#", justify="right")
    table.add_column("member")
    table.add_column("total", justify="right")
    for row in board_rows(data)[1]:
        table.add_row(str(row["rank"]), row["member"], str(row["total"]))
    console.print(table)


DELETE_BOARD_COLUMNS = ("board", "deleted")


def delete_board_rows(data: dict) -> Rows:
    """One row: the board, and whether it was there to delete (true/false)."""
    return DELETE_BOARD_COLUMNS, [{"board": data["board"], "deleted": data["deleted"]}]


STATS_COLUMNS = ("day", "pv", "uv", "skipped", *UV_FIELDS)


def stats_rows(data: dict) -> Rows:
    """One row a day of the range: the day (ISO 8601), its page views, unique visitors, the
    requests that were not page views (``skipped``; empty for a path, which has none of its own),
    and whether the day's UV is exact and its error (``UV_FIELDS``: an estimate in
    ``COUNTERS_UV_MODE=hll``)."""
    return STATS_COLUMNS, [
        {"day": d["day"], "pv": d["pv"], "uv": d["uv"], "skipped": d.get("skipped", ""), **uv_fields(d)}
        for d in data["days"]
    ]


def skipped_line(data: dict) -> str | None:
    """What a site's figures leave out, said beside them: ``skipped N (reason n, ...)``, or None
    for a path's figures. Requests with no browser User-Agent (scripts, monitors) are ``crawler``."""
    if "skipped" not in data:
        return None
    if not data["skipped_total"]:
        return "skipped 0: every request counted was a page view"
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(data["skipped"].items(), key=lambda kv: -kv[1]))
    return (
        f"skipped {data['skipped_total']} requests that were not page views ({reasons}; "
        f"docs/api.md, the page view rule)"
    )


def render_stats(console: Any, data: dict) -> None:
    from rich.table import Table

    where = data["path"] or "whole site"
    uv = uv_text(data)
    several = data["from"] != data["to"]
    note = (
        ""
        if data["uv_exact"]
        else "  (UV over several days: an estimate of the union, ± its relative standard error, docs/api.md)"
        if several
        else "  (UV: an estimate, ± its relative standard error, COUNTERS_UV_MODE=hll, docs/api.md)"
    )
    console.print(f"[bold]{where}[/bold] {data['from']} .. {data['to']}: PV {data['pv']}, UV {uv}{note}")
    skipped = skipped_line(data)
    if skipped is not None:
        console.print(skipped, markup=False, style="yellow" if data["skipped_total"] > data["pv"] else None)
    table = Table(box=None, pad_edge=False)
    table.add_column("day", justify="left")
    table.add_column("PV", justify="right")
    table.add_column("UV", justify="right")
    if skipped is not None:
        table.add_column("skipped", justify="right")
    table.add_column("", justify="left")
    _, days = stats_rows(data)
    high = max((d["pv"] for d in days), default=0) or 1
    for d in days:
        bar = "█" * round(30 * d["pv"] / high)
        cells = [d["day"], str(d["pv"]), uv_text(d), *([str(d["skipped"])] if skipped is not None else []), bar]
        table.add_row(*cells)
    console.print(table)


PAGES_COLUMNS = ("rank", "path", "pv")


def pages_rows(data: dict) -> Rows:
    """One row a path, most viewed first: its rank (from 1), the path and its page views."""
    return PAGES_COLUMNS, [{"rank": rank, "path": path, "pv": pv} for rank, (path, pv) in enumerate(data["pages"], 1)]


def render_pages(console: Any, data: dict) -> None:
    from rich.table import Table

    table = Table(
        title=f"top pages {data['from']} .. {data['to']}",
        title_justify="left",
        caption=more_line(data),
        caption_justify="left",
    )
    table.add_column("#", justify="right")
    table.add_column("path")
    table.add_column("PV", justify="right")
    for row in pages_rows(data)[1]:
        table.add_row(str(row["rank"]), row["path"], str(row["pv"]))
    console.print(table)


SOURCES_COLUMNS = ("rank", "source", "pv", "uv", *UV_FIELDS)


def sources_rows(data: dict) -> Rows:
    """One row a source, most viewed first: its rank (from 1), the source (a domain, ``(direct)``,
    ``(internal)``, a campaign tag, ``(other)``), its page views and distinct visitors, and
    whether that UV is exact and its error (``UV_FIELDS``)."""
    return SOURCES_COLUMNS, [
        {"rank": rank, "source": s["source"], "pv": s["pv"], "uv": s["uv"], **uv_fields(s)}
        for rank, s in enumerate(data["sources"], 1)
    ]


def render_sources(console: Any, data: dict) -> None:
    from rich.table import Table

    notes = [note for note in (uv_note(data, data["sources"]), more_line(data)) if note]
    table = Table(
        title=f"{data['kind']} {data['from']} .. {data['to']}",
        title_justify="left",
        caption="\n".join(notes) or None,
        caption_justify="left",
    )
    table.add_column("#", justify="right")
    table.add_column(data["kind"])
    table.add_column("PV", justify="right")
    table.add_column("UV", justify="right")
    for row in sources_rows(data)[1]:
        table.add_row(str(row["rank"]), row["source"], str(row["pv"]), uv_text(row))
    console.print(table)


UNIQUES_COLUMNS = ("day", "visitors", "visitor_ids_expired")


def uniques_rows(data: dict) -> Rows:
    """One row a day: the day, its distinct session ids, and whether its per-visitor data has
    expired (then the day is not in the range's total)."""
    missing = set(data["missing_days"])
    return UNIQUES_COLUMNS, [
        {"day": d["day"], "visitors": d["visitors"], "visitor_ids_expired": d["day"] in missing} for d in data["days"]
    ]


def render_uniques(console: Any, data: dict) -> None:
    console.print(f"[bold]unique visitors[/bold] {data['from']} .. {data['to']}: {data['visitors']}")
    _, days = uniques_rows(data)
    values = [d["visitors"] for d in days]
    if len(values) > 1:
        console.print(sparkline(values))
    for d in days:
        console.print(f"  {d['day']}  {d['visitors']:>9}")
    if data["missing_days"]:
        console.print(f"  (per-visitor data expired for {', '.join(data['missing_days'])}: not in the total)")


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.0f}s ago"


def _deployment_detail(info: dict) -> str:
    """The deployment line of ``health``: its key layout and the last data loss."""
    if "error" in info:
        return info["error"]
    if not info["layout_ok"]:
        return deployment.layout_message(info["layout"])
    if info.get("problem"):
        return info["problem"]
    parts = [f"key layout {info['layout'] or info['package_layout']}" + ("" if info["layout"] else " (new)")]
    if info["lost_at"] is not None:
        when = datetime.fromtimestamp(info["lost_at"], timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        parts.append(
            f"Redis LOST ITS DATA at {when} (seen by {info['lost_by']}): figures before then are gone"
            if info["recent_loss"]
            else f"last data loss {when}"
        )
    if info.get("warning"):
        parts.append(info["warning"])
    return "; ".join(parts)


def _beat_detail(beat: dict) -> str:
    """The beat line of ``health``: its job's last start, and beat's own start when that is later
    (just after a start, before the job first ran)."""
    job, started = beat["last_run_age_seconds"], beat.get("started_age_seconds")
    since = "" if started is None or (job is not None and job <= started) else f", beat started {_ago(started)}"
    return f"clean_counters last started {_ago(job)}{since} (limit {beat['max_age_seconds']:.0f}s)"


HEALTH_COLUMNS = ("check", "ok", "detail")


def health_rows(data: dict) -> Rows:
    """One row a check the verdict rests on (redis, server, data, workers, beat, queues): its
    name, whether it passed, and the detail the terminal shows."""
    redis_, servers, workers, beat, queues = (data[k] for k in ("redis", "servers", "workers", "beat", "queues"))
    checks = [
        ("redis", redis_["ok"], f"{redis_.get('latency_ms', 0):.1f} ms" if redis_["ok"] else redis_["error"]),
        (
            "server",
            servers["ok"],
            "; ".join(servers["errors"])
            or ", ".join(f"{s['software']} {s['version']} ({s['maxmemory_policy']})" for s in servers["servers"]),
        ),
        ("data", data["deployment"]["ok"], _deployment_detail(data["deployment"])),
        ("workers", workers["ok"], ", ".join(workers["names"]) or workers.get("error", "no worker answered")),
        ("beat", beat["ok"], beat.get("error") or _beat_detail(beat)),
        (
            "queues",
            queues["ok"],
            "  ".join(f"{q}={queues[q]}" for q in ("visits", "maintenance")) if queues["ok"] else queues["error"],
        ),
    ]
    return HEALTH_COLUMNS, [{"check": check, "ok": ok, "detail": detail} for check, ok, detail in checks]


def render_health(console: Any, data: dict) -> None:
    for row in health_rows(data)[1]:
        console.print(f"{'[green]ok  [/green]' if row['ok'] else '[red]FAIL[/red]'} {row['check']:<8} {row['detail']}")
        if row["check"] == "server":
            for warning in data["servers"]["warnings"]:
                console.print(f"[yellow]warn[/yellow] server   {warning}")
        if row["check"] == "data":
            for warning in data.get("traffic", {}).get("warnings", []):
                console.print(f"[yellow]warn[/yellow] skipped  {warning}", markup=False)
    for job, info in data["jobs"].items():
        took = "" if info["last_duration"] is None else f", took {info['last_duration'] * 1000:.1f} ms"
        result = "" if info["last_result"] is None else f", result {info['last_result']}"
        console.print(f"     job      {job}: {_ago(info['age_seconds'])}{took}{result}, skipped {info['skipped']}")
    if "who_visits" in data:
        console.print(f"     who      {sitestats.client_tables_said(data['who_visits'])}", markup=False)
    if data["refused"]:
        console.print("     refused  " + "  ".join(f"{reason}={n}" for reason, n in data["refused"].items()))
    if "dead_letters" in data:
        dead = data["dead_letters"]
        console.print(f"     dead     {dead['count']} set aside (counters-tasks dead-letters list)")
    console.print("healthy" if data["ok"] else "UNHEALTHY")


DEAD_LETTER_COLUMNS = ("index", "at_epoch", "at_iso", "reason", "task", "id", "queue")


def dead_letter_rows(data: dict) -> Rows:
    """One row a dead letter, newest first: its index (for requeue and drop), when it was set aside
    (epoch seconds, and ISO 8601 in COUNTERS_TIMEZONE), why, and its task, id and queue."""
    zone = get_settings().zone
    return DEAD_LETTER_COLUMNS, [
        {
            "index": letter["index"],
            "at_epoch": int(letter["at"]),
            "at_iso": datetime.fromtimestamp(int(letter["at"]), zone).isoformat(),
            "reason": letter["reason"],
            "task": letter.get("task"),
            "id": letter.get("id"),
            "queue": letter.get("queue"),
        }
        for letter in data["records"]
    ]


def render_dead_letters(console: Any, data: dict) -> None:
    console.print(
        f"[bold]{data['count']} dead letters[/bold]"
        + (
            " (ever, by reason: " + ", ".join(f"{r}={n}" for r, n in data["by_reason"].items()) + ")"
            if data["by_reason"]
            else ""
        )
    )
    for row in dead_letter_rows(data)[1]:
        when = datetime.fromtimestamp(row["at_epoch"], get_settings().zone).strftime("%Y-%m-%d %H:%M:%S")
        console.print(
            f"  #{row['index']:<4} {when}  {row['reason']:<14} {row['task'] or '-'} "
            f"{row['id'] or '-'} from {row['queue'] or '-'}",
            markup=False,
        )
    more = more_line(data)
    if more:
        console.print(f"  {more}", markup=False)


TOKEN_COLUMNS = ("name", "created_epoch", "created_iso", "scope", "site")


def token_rows(data: dict) -> Rows:
    """One row a token, oldest first: its name, when it was made (epoch seconds, and ISO 8601 in
    COUNTERS_TIMEZONE), its scope and the one site it reads (empty: every site, and /metrics).
    Never the token or its hash: only its entry is kept."""
    zone = get_settings().zone

    def when(ts: int | None) -> str | None:
        return None if ts is None else datetime.fromtimestamp(int(ts), zone).isoformat()

    return TOKEN_COLUMNS, [
        {
            "name": token["name"],
            "created_epoch": token["created"],
            "created_iso": when(token["created"]),
            "scope": token["scope"],
            "site": token["site"],
        }
        for token in data["tokens"]
    ]


def render_tokens(console: Any, data: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    zone = get_settings().zone
    table = Table(title=f"{len(data['tokens'])} tokens (at most {data['max']})", title_justify="left")
    for column in ("name", "created", "scope", "site"):
        table.add_column(column)
    for row in token_rows(data)[1]:
        created = (
            "-"
            if row["created_epoch"] is None
            else datetime.fromtimestamp(int(row["created_epoch"]), zone).strftime("%Y-%m-%d %H:%M:%S")
        )
        table.add_row(Text(str(row["name"])), created, str(row["scope"]), Text(row["site"] or "all"))
    console.print(table)


FORGET_COLUMNS = ("kind", "figure", "detail")


def forget_rows(data: dict) -> Rows:
    """One row a figure corrected (``corrected``), a figure that is an estimate (``estimate``, its
    relative standard error: it may still count the visitor), a table holding something of a
    visitor without a forgetter (``not forgotten``, its declared reason), and the total removed."""
    rows: list[dict[str, Any]] = [{"kind": "removed", "figure": "entries", "detail": data["removed"]}]
    rows += [{"kind": "corrected", "figure": figure, "detail": ""} for figure in data["corrected"]]
    rows += [{"kind": "estimate", "figure": figure, "detail": f"{error:.2%}"} for figure, error in data["estimates"]]
    rows += [{"kind": "not forgotten", "figure": name, "detail": why} for name, why in data["not_forgotten"]]
    return FORGET_COLUMNS, rows


def render_forget(console: Any, data: dict) -> None:
    """What ``counters-tasks forget`` did: entries removed, figures corrected (counted by kind),
    each estimate that may still count the visitor, the tables without a forgetter, the audit entry."""
    console.print(
        f"[bold]site {data['site']}[/bold]: {data['removed']} entries removed from "
        f"{', '.join(data['tables']) or 'no table'}; {len(data['corrected'])} exact figures corrected",
        highlight=False,
    )
    kinds: dict[str, int] = {}
    for figure in data["corrected"]:
        name = " ".join(word for word in figure.split() if not word[:1].isdigit())
        kinds[name] = kinds.get(name, 0) + 1
    for name, n in kinds.items():
        console.print(f"  corrected: {name} x{n}", markup=False, highlight=False)
    for figure, error in data["estimates"]:
        console.print(f"  estimate (cannot forget one visitor, ±{error:.2%}): {figure}", markup=False, highlight=False)
    for name, why in data["not_forgotten"]:
        console.print(f"  not forgotten: {name}: {why}", markup=False, highlight=False)
    console.print(f"  audit entry: {json.dumps(data['audit'], sort_keys=True)}", markup=False, highlight=False)
