"""``--format [table|csv|json]`` (and its other name ``--output``; ``import`` has only ``--output``)
of the commands that print a table (every one of them, walked from the ``cli`` group, at the
end), run in-process through the real entry point (``cli.main``, under click's CliRunner
isolation) against the test Redis. The data is written through the package's API and the
expected figures are counted here, independently of the code that prints them; the CSV is
read back with ``csv.DictReader``."""

from __future__ import annotations

import csv
import io
import json
import re
import time
from collections import Counter
from datetime import datetime

import click
import pytest
from click.testing import CliRunner

from counters_tasks import counters, events, ranking, visits
from counters_tasks.core.days import local_day
from counters_tasks.core.settings import reset_settings
from counters_tasks.events.kind import EVENT
from counters_tasks.local.redis_server import free_port
from counters_tasks.ops import cli, views
from counters_tasks.payloads import apply_payload
from counters_tasks.store import keys
from counters_tasks.worker import dead_letters, forget
from tests.support import toy_table
from tests.support.cli_run import run_in_process
from tests.support.servers import use_settings

ODD_PATH = '/a,b"c'  # a comma and a quote: RFC 4180 quotes it and doubles the quote
ODD_NAME = 'launch, "beta" week'


def run(*args: str) -> tuple[int, str, str]:
    return run_in_process(*args, columns=100)


def csv_rows(text: str) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


def export(*args: str) -> tuple[list[str], list[dict[str, str]]]:
    code, out, err = run(*args, "--format", "csv")
    assert code == 0, (args, out, err)
    assert "\x1b" not in out and "[bold]" not in out  # no colour, no rich markup
    return csv_rows(out)


def test_counter_csv_has_one_row_a_bucket_with_the_totals_written(raw_conn):
    now = time.time()
    written = {0: 3, 1: 12345, 4: 7}  # buckets ago -> count (12345: no thousands separator)
    expected: Counter[int] = Counter()
    for ago, count in written.items():
        ts = now - ago * 60
        counters.update_counter(raw_conn, ODD_NAME, count, now=ts)
        expected[int(ts) - int(ts) % 60] += count
    header, rows = export("counter", ODD_NAME, "--precision", "60", "--last", "10")
    assert header == ["bucket_start_epoch", "bucket_start_iso", "total"]
    assert len(rows) == 10
    starts = [int(r["bucket_start_epoch"]) for r in rows]
    assert starts == sorted(starts) and {b - a for a, b in zip(starts, starts[1:], strict=False)} == {60}
    for row in rows:
        assert datetime.fromisoformat(row["bucket_start_iso"]).timestamp() == int(row["bucket_start_epoch"])
        assert re.fullmatch(r"\d+", row["total"])
    got = {int(r["bucket_start_epoch"]): int(r["total"]) for r in rows if r["total"] != "0"}
    assert got == dict(expected)


def test_top_csv_ranks_the_members_by_what_was_added(raw_conn):
    now = time.time()
    board = ranking.Ranking(raw_conn, "export-board")
    added = {ODD_NAME: [5, 4], "post-2": [3], "post-3": [1, 1, 1, 1, 1, 1, 1, 1]}
    for member, amounts in added.items():
        for n, amount in enumerate(amounts):
            board.incr(member, amount, now=now - 60 * n)
    expected = {member: sum(amounts) for member, amounts in added.items()}
    header, rows = export("top", "export-board", "--limit", "10")
    assert header == ["rank", "member", "total"]
    assert {r["member"]: int(r["total"]) for r in rows} == expected
    assert [r["member"] for r in rows] == sorted(expected, key=lambda m: -expected[m])
    assert [r["rank"] for r in rows] == ["1", "2", "3"]


def seed_visits(conn) -> tuple[list[tuple[float, str, str, str]], str, str]:
    """Visits over yesterday and today: ``(ts, ip, path, session)`` each, and the two days."""
    now = time.time()
    today, yesterday = local_day(now), local_day(now - 86400)
    plan = [  # (day offset, ip, path, session)
        (0, "192.0.2.1", "/", "1" * 32),
        (0, "192.0.2.1", ODD_PATH, "1" * 32),
        (0, "192.0.2.2", ODD_PATH, "2" * 32),
        (0, "192.0.2.3", ODD_PATH, "3" * 32),
        (0, "192.0.2.3", "/pricing", "4" * 32),
        (1, "192.0.2.1", "/", "1" * 32),
        (1, "192.0.2.5", "/", "5" * 32),
        (1, "192.0.2.5", ODD_PATH, "6" * 32),
    ]
    done = []
    for offset, ip, path, session in plan:
        ts = now - 86400 * offset
        visits.apply_visit(conn, ip, path, session, ts=ts)
        done.append((ts, ip, path, session))
    return done, yesterday.isoformat(), today.isoformat()


def test_stats_top_pages_and_uniques_csv_equal_the_visits_written(raw_conn):
    done, first, last = seed_visits(raw_conn)
    day_of = {ts: local_day(ts).isoformat() for ts, *_ in done}
    pv = Counter(day_of[ts] for ts, *_ in done)
    ips = {day: {ip for ts, ip, *_ in done if day_of[ts] == day} for day in (first, last)}
    sessions = {day: {s for ts, _ip, _p, s in done if day_of[ts] == day} for day in (first, last)}

    header, rows = export("stats", "--from", first, "--to", last)
    assert header == ["day", "pv", "uv", "skipped", "uv_exact", "uv_error"]
    assert [(r["day"], int(r["pv"]), int(r["uv"]), int(r["skipped"]), r["uv_exact"], r["uv_error"]) for r in rows] == [
        (day, pv[day], len(ips[day]), 0, "true", "0.0") for day in (first, last)
    ]  # nothing skipped: every visit was a view; a day's UV exact (the default mode)

    header, rows = export("stats", "--from", first, "--to", last, "--path", ODD_PATH)
    odd = Counter(day_of[ts] for ts, _ip, path, _s in done if path == ODD_PATH)
    assert [(r["day"], int(r["pv"])) for r in rows] == [(day, odd[day]) for day in (first, last)]

    header, rows = export("top-pages", "--from", first, "--to", last, "--limit", "10")
    assert header == ["rank", "path", "pv"]
    by_path = Counter(path for _ts, _ip, path, _s in done)
    assert {r["path"]: int(r["pv"]) for r in rows} == dict(by_path)  # the comma and quote round-trip
    assert rows[0]["path"] == ODD_PATH and [int(r["rank"]) for r in rows] == list(range(1, len(by_path) + 1))

    header, rows = export("uniques", "--from", first, "--to", last)
    assert header == ["day", "visitors", "visitor_ids_expired"]
    assert [(r["day"], int(r["visitors"]), r["visitor_ids_expired"]) for r in rows] == [
        (day, len(sessions[day]), "false") for day in (first, last)
    ]


def test_a_path_with_a_comma_and_a_quote_is_quoted_as_rfc_4180_says(raw_conn):
    visits.apply_visit(raw_conn, "192.0.2.9", ODD_PATH, "9" * 32)
    code, out, _ = run("top-pages", "--format", "csv")
    assert code == 0
    assert out.split("\r\n")[:2] == ["rank,path,pv", '1,"/a,b""c",1']  # CRLF, quoted, quote doubled
    assert next(csv.reader(io.StringIO(out.split("\r\n", 1)[1])))[1] == ODD_PATH


def test_write_csv_round_trips_any_text(raw_conn):
    values = ["plain", "a,b", 'say "hi"', "two\nlines", "cr\r\nlf", "", " spaced ", "=1+1"]
    with CliRunner().isolation() as (out, _err, _):
        cli.write_csv(
            ("n", "text", "flag", "none"),
            [{"n": n, "text": v, "flag": n % 2 == 0, "none": None} for n, v in enumerate(values)],
        )
    back = list(csv.reader(io.StringIO(out.getvalue().decode(), newline="")))
    assert back[0] == ["n", "text", "flag", "none"]
    assert back[1:] == [[str(n), v, "true" if n % 2 == 0 else "false", ""] for n, v in enumerate(values)]


def test_counters_csv_pages_through_every_name_with_the_cursor_on_stderr(raw_conn):
    names = {f"export-{n}" for n in range(7)} | {ODD_NAME}
    for name in names:
        counters.update_counter(raw_conn, name, 2)
    seen: list[str] = []
    args = ["counters", "--limit", "3", "--format", "csv"]
    for _ in range(20):
        code, out, err = run(*args)
        assert code == 0, err
        header, rows = csv_rows(out)
        assert header == ["counter"]
        seen += [r["counter"] for r in rows]
        more = re.search(r"--cursor (\S+)", err)
        if more is None:
            break
        args = ["counters", "--limit", "3", "--cursor", more[1], "--format", "csv"]
    assert sorted(seen) == sorted(names)


def test_delete_board_csv_and_its_exit_codes(raw_conn):
    ranking.Ranking(raw_conn, "export-gone").incr("x", 1)
    code, out, _ = run("delete-board", "export-gone", "--format", "csv")
    assert code == 0 and csv_rows(out) == (["board", "deleted"], [{"board": "export-gone", "deleted": "true"}])
    code, out, _ = run("delete-board", "export-gone", "--output", "csv")
    assert code == 1 and csv_rows(out)[1] == [{"board": "export-gone", "deleted": "false"}]


def test_health_csv_has_one_row_a_check_as_the_json_says(raw_conn):
    code_json, out_json, _ = run("health", "--timeout", "0.2", "--json")
    report = json.loads(out_json)
    code, out, _ = run("health", "--timeout", "0.2", "--format", "csv")
    assert code == code_json == 1  # no worker in this test: unhealthy either way
    header, rows = csv_rows(out)
    assert header == ["check", "ok", "detail"]
    parts = {
        "redis": "redis",
        "server": "servers",
        "data": "deployment",
        "workers": "workers",
        "beat": "beat",
        "queues": "queues",
    }
    assert [r["check"] for r in rows] == list(parts)
    assert {r["check"]: r["ok"] for r in rows} == {
        check: "true" if report[part]["ok"] else "false" for check, part in parts.items()
    }
    assert rows[0]["ok"] == "true" and rows[3]["ok"] == "false"


def test_dead_letters_list_csv(raw_conn):
    from counters_tasks.store import keys
    from counters_tasks.worker import dead_letters

    client = dead_letters.store_client()
    client.delete(keys.dead_letters())
    try:
        before = time.time()
        for n in range(3):
            dead_letters.set_aside_call("counters.update_counter", f"id,{n}", [n], {}, "visits", ValueError("bad"), 5)
        header, rows = export("dead-letters", "list", "--limit", "10")
        assert header == ["index", "at_epoch", "at_iso", "reason", "task", "id", "queue"]
        assert [(r["index"], r["id"], r["reason"], r["task"], r["queue"]) for r in rows] == [
            (str(n), f"id,{2 - n}", "failed", "counters.update_counter", "visits") for n in range(3)
        ]
        for row in rows:
            assert int(before) <= int(row["at_epoch"]) <= time.time()
            assert datetime.fromisoformat(row["at_iso"]).timestamp() == int(row["at_epoch"])
    finally:
        client.delete(keys.dead_letters())


def test_import_output_csv_counts_each_day(raw_conn, tmp_path):
    now = int(time.time())
    lines = [
        (now, "192.0.2.1", "/", "a" * 32),
        (now, "192.0.2.2", ODD_PATH, "b" * 32),
        (now - 86400, "192.0.2.3", "/", "c" * 32),
        (now - 86400, "192.0.2.3", ODD_PATH, "c" * 32),
        (now - 2 * 86400, "192.0.2.4", "/x", "d" * 32),
    ]
    log = tmp_path / "visits.jsonl"
    log.write_text(
        "".join(json.dumps({"ip": ip, "path": path, "ts": ts, "session_id": s}) + "\n" for ts, ip, path, s in lines)
    )
    expected = Counter(local_day(ts).isoformat() for ts, *_ in lines)
    code, out, err = run("import", str(log), "--format", "jsonl", "--output", "csv")
    assert code == 0, err
    header, rows = csv_rows(out)
    assert header == ["day", "counted"]
    assert {r["day"]: int(r["counted"]) for r in rows} == dict(expected) and len(expected) == 3
    again_json = run("import", str(log), "--json")
    again_output = run("import", str(log), "--output", "json")
    assert again_json[0] == again_output[0] == 0
    assert json.loads(again_json[1]) == json.loads(again_output[1])
    assert json.loads(again_json[1])["lines"] == len(lines)
    code, out, err = run("import", str(log), "--format", "csv")  # --format is the log's format here
    assert code == 2 and not out and "csv" in err


def test_format_json_equals_json_on_every_command(raw_conn):
    seed_visits(raw_conn)
    counters.update_counter(raw_conn, "hits-export", 4)
    ranking.Ranking(raw_conn, "export-board").incr("m", 2)
    for args in (
        ["counter", "hits-export", "--precision", "86400", "--last", "2"],
        ["counters"],
        ["top", "export-board"],
        ["stats", "--from", "yesterday"],
        ["top-pages", "--from", "yesterday"],
        ["uniques", "--from", "yesterday"],
        ["dead-letters", "list"],
    ):
        answers = []
        for chosen in (["--json"], ["--format", "json"], ["--output", "json"], ["--json", "--format", "json"]):
            code, out, err = run(*args, *chosen)
            assert code == 0, (args, err)
            data = json.loads(out)
            data.pop("now", None)  # the counter's answer carries the time of asking
            answers.append(data)
        assert answers[0] and all(a == answers[0] for a in answers), args
    table = run("top", "export-board")
    assert table[0] == 0 and "m" in table[1] and not table[1].startswith("rank,")


@pytest.mark.parametrize(
    "args",
    [
        ["top", "export-board", "--json", "--format", "csv"],  # --json is --format json: not both
        ["top", "export-board", "--format", "xml"],
        ["top", "no-such-board", "--format", "csv"],  # the usual usage error, in CSV mode too
        ["stats", "--day", "2026-13-01", "--output", "csv"],
    ],
)
def test_usage_errors_exit_2_with_nothing_on_stdout(raw_conn, args):
    ranking.Ranking(raw_conn, "export-board").incr("m", 2)
    code, out, err = run(*args)
    assert code == 2 and not out and "Error" in err, (args, out, err)


def test_unreachable_redis_exits_1_in_csv_mode(monkeypatch):
    monkeypatch.setenv("COUNTERS_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    reset_settings()
    code, out, err = run("stats", "--format", "csv")
    assert code == 1 and not out and "Redis at" in err


# --- every table, as CSV and as JSON ------------------------------------------------------
# The commands are walked from the click group, so a table command added later is exported here
# too: it either takes --format (and is run below) or is named in NOT_TABLES with what it prints.

NOT_TABLES = {
    ("run",): "the local stack's log, until Ctrl-C",
    ("demo",): "the demo's report, after a stack of its own",
    ("migrate",): "one sentence: what the migration did",
    ("serve",): "a web server",
    ("dead-letters", "requeue"): "one sentence: how many",
    ("dead-letters", "drop"): "one sentence: how many",
    ("tokens", "create"): "the token alone (scripts take it from stdout), or --json",
    ("tokens", "revoke"): "one sentence, or --json",
}
WALK_BOARD = "walk-board"
WALK_ARGS = {  # the arguments a table command needs to have rows to show (its options are left at their defaults)
    ("counter",): lambda tmp, n: ["walk-hits"],
    ("top",): lambda tmp, n: [WALK_BOARD],
    ("delete-board",): lambda tmp, n: [WALK_BOARD],
    ("forget",): lambda tmp, n: ["--ip", "192.0.2.250"],
    ("stats",): lambda tmp, n: ["--from", "yesterday"],
    ("top-pages",): lambda tmp, n: ["--from", "yesterday"],
    ("sources",): lambda tmp, n: ["--from", "yesterday"],
    ("uniques",): lambda tmp, n: ["--from", "yesterday"],
    ("health",): lambda tmp, n: ["--timeout", "0.2"],
    ("import",): lambda tmp, n: [str(walk_log(tmp, n)), "--format", "jsonl"],
    ("table",): lambda tmp, n: ["toy_hours", "--import", "tests.support.toy_table"],
    ("events",): lambda tmp, n: ["--from", "yesterday"],
    ("goals",): lambda tmp, n: ["--from", "yesterday"],
    ("funnel",): lambda tmp, n: ["walk-0", "--from", "yesterday"],
    ("define-goal",): lambda tmp, n: [f"walk-defined-{n}", "--page", "/walk"],
    ("define-funnel",): lambda tmp, n: [
        f"walk-defined-{n}",
        "--window",
        "30m",
        "--step",
        "page:/a",
        "--step",
        "page:/b",
    ],
    ("remove-goal",): lambda tmp, n: [f"walk-{n % 2}"],  # n: even for csv, odd for json (seed_every_table)
    ("remove-funnel",): lambda tmp, n: [f"walk-{n % 2}"],
}
WALK_COLUMNS = {("table",): ["hour", "likes"]}  # a table read through its reader: the reader's columns
WALK_EXIT = {("health",): 1}  # no worker in this test: unhealthy, and its answer printed all the same


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command ``counters-tasks`` runs, by its words (``("tokens", "list")``)."""
    found = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += leaf_commands(command, (*prefix, name))
        else:
            found.append(((*prefix, name), command))
    return found


def output_option(command: click.Command) -> click.Option | None:
    """The command's ``--format``/``--output`` [table|csv|json] option, if it has one."""
    return next(
        (
            p
            for p in command.params
            if isinstance(p, click.Option)
            and p.name == "output"
            and isinstance(p.type, click.Choice)
            and set(p.type.choices) == set(cli.OUTPUTS)
        ),
        None,
    )


def walk_log(tmp_path, n: int):
    """A JSON-lines log of two page views, new content each time (an import counts nothing twice)."""
    now = int(time.time())
    log = tmp_path / f"walk-{n}.jsonl"
    log.write_text(
        "".join(
            json.dumps({"ip": f"192.0.2.{k}", "path": f"/walk/{n}", "ts": now - k, "session_id": f"{n:016x}{k:016x}"})
            + "\n"
            for k in (1, 2)
        )
    )
    return log


def seed_every_table(conn) -> None:
    """Data for every table: visits (stats, pages, sources, uniques, counters), a counter, a board,
    a dead letter, a token, goals and funnels (defined), an event."""
    seed_visits(conn)
    counters.update_counter(conn, "walk-hits", 3)
    dead_letters.set_aside_call("counters.update_counter", "walk-id", [1], {}, "visits", ValueError("bad"), 5)
    views.create_token(conn, ODD_NAME)
    conn.hset(toy_table.HOURS, mapping={"3600": 2, "7200": 1})  # an app's table (``counters-tasks table``)
    walk_event = {"name": "walk-event", "props": {"plan": "pro"}, "ip": "192.0.2.9", "ts": time.time()}
    assert apply_payload(conn, EVENT, [walk_event], message_id="walk-events") == 1  # an event (``events``)
    for n in (0, 1):  # a goal and a funnel to read, and to remove once in each format
        events.define_goal(conn, f"walk-{n}", page="/walk")
        events.define_funnel(conn, f"walk-{n}", [{"page": "/walk"}, {"event": "walk-event"}], 1800)


def test_every_table_command_exports_csv_with_its_documented_columns_and_json(raw_conn, tmp_path, monkeypatch):
    """Each command with a table, walked from the ``cli`` group, run with ``--format csv`` and
    ``--format json`` against data: the CSV has the columns its ``--help`` names and a row or
    more, the JSON parses. A command without the option must be one that prints no table."""
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on")  # who visits: off by default
    monkeypatch.setattr(forget, "settle", lambda: None)  # (no worker here to wait for)
    seed_every_table(raw_conn)
    commands = leaf_commands(cli.cli)
    without = {words for words, command in commands if output_option(command) is None}
    assert without == set(NOT_TABLES), "a command without --format that prints a table (or NOT_TABLES is stale)"
    walked = []
    try:
        for n, (words, command) in enumerate(commands):
            option = output_option(command)
            if option is None:
                continue
            documented = re.search(r"columns: ([\w,]+)", option.help or "")
            assert documented, (words, option.help)
            columns = WALK_COLUMNS.get(words) or documented[1].split(",")
            name = next(o for o in option.opts if o in ("--format", "--output"))
            for fmt in ("csv", "json"):
                assert words in WALK_ARGS or not any(p.required for p in command.params), (
                    f"{' '.join(words)} needs arguments: add them to WALK_ARGS"
                )
                args = WALK_ARGS.get(words, lambda tmp, n: [])(tmp_path, 2 * n + (fmt == "json"))
                ranking.Ranking(raw_conn, WALK_BOARD).incr("walk-member", 2)  # delete-board takes it each time
                code, out, err = run(*words, *args, name, fmt)
                assert code == WALK_EXIT.get(words, 0), (words, fmt, code, out, err)
                if fmt == "csv":
                    header, rows = csv_rows(out)
                    assert header == columns, (words, header, columns)
                    assert rows and all(None not in row and None not in row.values() for row in rows), (words, out)
                    assert "\x1b" not in out and "[bold]" not in out
                else:
                    assert isinstance(json.loads(out), dict), (words, out)
            walked.append(words)
    finally:
        dead_letters.store_client().delete(keys.dead_letters())
    assert ("tokens", "list") in walked and len(walked) == len(commands) - len(NOT_TABLES)
