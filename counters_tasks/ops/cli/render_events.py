"""How ``events``, ``goals`` and ``funnel NAME`` show their answers (``ops.event_views``): their
rows (the same for the rich table and the CSV) and the notes under a table, and the sentences of
the definitions' commands (``define-goal``, ``define-funnel``, ``remove-goal``, ``remove-funnel``).
The shared pieces (``Rows``, ``uv_note``, ``UV_FIELDS``) are ``render``'s."""

from __future__ import annotations

from typing import Any

from ...core.events import MAX_PROPS, NONE, OTHER
from ..views import uv_bound, uv_text
from .render import UV_FIELDS, Rows, uv_fields, uv_note

EVENTS_COLUMNS = ("event", "prop", "value", "total", "uv", *UV_FIELDS, "no_visitor", "dropped_props")
"""One row an event (``prop`` and ``value`` empty), then one a value of each of its properties
(``no_visitor`` and ``dropped_props`` empty): filter on an empty ``prop`` for the events alone."""

GOALS_COLUMNS = (
    "goal",
    "label",
    "conversions",
    "converters",
    "converters_exact",
    "converters_error",
    "rate",
    "rate_exact",
    "revenue",
    "no_revenue",
    "since_iso",
    "partial",
)

FUNNEL_COLUMNS = ("step", "label", "visitors", "of_first", "of_previous", "time_to_convert")
"""``time_to_convert``: the visitors by time from the step before, ``bucket=n`` joined by ``; ``."""


def _site(data: dict) -> str:
    return "" if data["site"] == "default" else f", site {data['site']}"


def share_text(share: float, exact: bool = True) -> str:
    """A share or rate as a table prints it: a percent with one decimal (``≈`` for an estimate)."""
    return ("" if exact else "≈") + f"{share * 100:.1f}%"


# --- events ---------------------------------------------------------------------------------


def events_rows(data: dict) -> Rows:
    """One row an event, by count, each followed by its properties' values (by count)."""
    rows: list[dict[str, Any]] = []
    for event in data["events"]:
        rows.append(
            {
                "event": event["name"],
                "prop": None,
                "value": None,
                "total": event["total"],
                "uv": event["uv"],
                **uv_fields(event),
                "no_visitor": event["no_visitor"],
                "dropped_props": event["dropped_props"],
            }
        )
        for key, values in event["props"].items():
            rows.extend(
                {
                    "event": event["name"],
                    "prop": key,
                    "value": value["value"],
                    "total": value["total"],
                    "uv": value["uv"],
                    **uv_fields(value),
                    "no_visitor": None,
                    "dropped_props": None,
                }
                for value in values
            )
    return EVENTS_COLUMNS, rows


NO_EVENTS = "none counted in the range: an app sends them with track_event (docs/events.md)"


def events_notes(data: dict) -> list[str]:
    """What the figures leave out or fold, said under the table: events without a visitor (no IP:
    counted, in no UV), properties dropped past the cap, ``(other)`` and ``(none)``."""
    notes = []
    values = [v for e in data["events"] for vs in e["props"].values() for v in vs]
    no_visitor = sum(e["no_visitor"] for e in data["events"])
    dropped = sum(e["dropped_props"] for e in data["events"])
    if no_visitor:
        notes.append(f"events without a visitor (no IP): {no_visitor}, counted, in no UV")
    if dropped:
        notes.append(f"properties dropped past the {MAX_PROPS} an event keeps: {dropped}")
    if any(e["name"] == OTHER for e in data["events"]) or any(v["value"] == OTHER for v in values):
        notes.append(f"{OTHER}: the event names or values past a day's cap, their counts shown")
    if any(v["value"] == NONE for v in values):
        notes.append(f"{NONE}: the events without that property")
    note = uv_note(data, [*data["events"], *values])
    if note:
        notes.append(note)
    if not data["events"]:
        notes.append(NO_EVENTS)
    return notes


def render_events(console: Any, data: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    notes = events_notes(data)
    table = Table(
        title=Text(f"events {data['from']} .. {data['to']}{_site(data)}"),
        title_justify="left",
        caption=Text("\n".join(notes)) if notes else None,
        caption_justify="left",
    )
    table.add_column("event")
    table.add_column("property")
    table.add_column("value")
    table.add_column("count", justify="right")
    table.add_column("UV", justify="right")
    for row in events_rows(data)[1]:
        if row["prop"] is None:
            table.add_row(Text(row["event"], style="bold"), "", "", str(row["total"]), uv_text(row))
        else:
            table.add_row("", Text(row["prop"]), Text(row["value"]), str(row["total"]), uv_text(row))
    console.print(table)


# --- goals ----------------------------------------------------------------------------------


def goals_rows(data: dict) -> Rows:
    """One row a goal, as defined (by name): its conversions, converters, rate, revenue (empty
    without a revenue property; ``no_revenue``: conversions whose property was missing or not a
    number) and when it counts from (``partial``: after the range began)."""
    return GOALS_COLUMNS, [
        {
            "goal": goal["name"],
            "label": goal["label"],
            "conversions": goal["conversions"],
            "converters": goal["converters"],
            "converters_exact": goal["converters_exact"],
            "converters_error": goal["converters_error"],
            "rate": goal["rate"],
            "rate_exact": goal["rate_exact"],
            "revenue": goal["revenue"],
            "no_revenue": goal["no_revenue"],
            "since_iso": goal["since_iso"],
            "partial": goal["partial"],
        }
        for goal in data["goals"]
    ]


def converters_text(goal: dict) -> str:
    """A goal's converters marked as every UV is (``views.uv_text``)."""
    return uv_text(
        {"uv": goal["converters"], "uv_exact": goal["converters_exact"], "uv_error": goal["converters_error"]}
    )


def visitors_text(data: dict) -> str:
    """The range's unique visitors a rate is of, marked as every UV is."""
    if data["visitors_exact"]:
        return str(data["visitors"])
    return f"≈{data['visitors']} {uv_bound(data['visitors_error'])}"


def revenue_text(revenue: float | None) -> str:
    """A goal's revenue as the table prints it: plain digits, at most two decimals (``1234.5``,
    ``2000000``), empty for a goal without a revenue property."""
    if revenue is None:
        return ""
    return f"{revenue:.2f}".rstrip("0").rstrip(".")


NO_GOALS = "no goal defined for this site: counters-tasks define-goal NAME (--page P | --event E) (docs/events.md)"


def render_goals(console: Any, data: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    notes = [
        f"{g['name']}: conversions without a numeric revenue property: {g['no_revenue']} (in conversions, not revenue)"
        for g in data["goals"]
        if g["no_revenue"]
    ]
    if any(g["partial"] for g in data["goals"]):
        notes.append("*: defined after the range began: counts from its time only")
    if not data["visitors_exact"] or not all(g["converters_exact"] for g in data["goals"]):
        notes.append("≈N ±X%: an estimate, ±X% its relative standard error; a rate of an estimate is one")
    if not data["goals"]:
        notes.append(NO_GOALS)
    table = Table(
        title=Text(
            f"goals {data['from']} .. {data['to']}{_site(data)}: rates of {visitors_text(data)} unique visitors"
        ),
        title_justify="left",
        caption=Text("\n".join(notes)) if notes else None,
        caption_justify="left",
    )
    for column, justify in (
        ("goal", "left"),
        ("matches", "left"),
        ("conversions", "right"),
        ("converters", "right"),
        ("rate", "right"),
        ("revenue", "right"),
        ("counts from", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for goal in data["goals"]:
        table.add_row(
            Text(goal["name"]),
            Text(goal["label"]),
            str(goal["conversions"]),
            converters_text(goal),
            share_text(goal["rate"], goal["rate_exact"]),
            revenue_text(goal["revenue"]),
            goal["since_iso"] + (" *" if goal["partial"] else ""),
        )
    console.print(table)


# --- funnels --------------------------------------------------------------------------------


def histogram_text(buckets: list[dict]) -> str:
    """A step's time from the step before as one cell: ``bucket=n`` joined by ``; ``."""
    return "; ".join(f"{b['bucket']}={b['visitors']}" for b in buckets)


def funnel_rows(data: dict) -> Rows:
    """One row a step, in order: its visitors, their share of the first step's and of the step
    before's (fractions), and the time from the step before (``histogram_text``)."""
    return FUNNEL_COLUMNS, [
        {
            "step": step["step"],
            "label": step["label"],
            "visitors": step["visitors"],
            "of_first": step["of_first"],
            "of_previous": step["of_previous"],
            "time_to_convert": histogram_text(step["time_to_convert"]),
        }
        for step in data["steps"]
    ]


def funnel_notes(data: dict) -> list[str]:
    """Under a funnel: its window and since, the days whose window is still open, and the step
    events not judged (late, or past their visitor's state cap)."""
    notes = [
        f"visitors who reached each step in order within {data['window_text']}, credited to the day they entered; "
        f"counted from {data['since_iso']}"
        + (" (defined after the range began: the days before are not judged)" if data["partial"] else "")
    ]
    if data["open_days"]:
        notes.append(f"still open (their window not over, figures may grow): {', '.join(data['open_days'])}")
    if data["late"]:
        notes.append(f"step events later than the window plus COUNTERS_FUNNEL_LATENESS: {data['late']}, not judged")
    if data["capped"]:
        notes.append(f"step events past their visitor's state cap: {data['capped']}, not judged")
    return notes


def render_funnel(console: Any, data: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=Text(f"funnel {data['name']} {data['from']} .. {data['to']}{_site(data)}"),
        title_justify="left",
        caption=Text("\n".join(funnel_notes(data))),
        caption_justify="left",
    )
    table.add_column("#", justify="right")
    table.add_column("step")
    table.add_column("visitors", justify="right")
    table.add_column("")
    table.add_column("of first", justify="right")
    table.add_column("of previous", justify="right")
    table.add_column("time from the step before (visitors)")
    _, rows = funnel_rows(data)
    high = max((row["visitors"] for row in rows), default=0) or 1
    for row, step in zip(rows, data["steps"], strict=True):
        first = row["step"] == rows[0]["step"]
        reached = "; ".join(f"{b['bucket']} {b['visitors']}" for b in step["time_to_convert"] if b["visitors"])
        table.add_row(
            str(row["step"]),
            Text(row["label"] + (f" (within {step['step_window_text']})" if step.get("step_window") else "")),
            str(row["visitors"]),
            "█" * round(20 * row["visitors"] / high),
            share_text(row["of_first"]),
            "" if first else share_text(row["of_previous"]),
            Text(reached),
        )
    console.print(table)


# --- definitions ----------------------------------------------------------------------------

DEFINITION_COLUMNS = ("name", "site", "label", "window", "since_iso")


def definition_rows(data: dict) -> Rows:
    """A defined goal or funnel as one row: its name, site, what it matches (a funnel's steps
    joined by `` > ``), its window (empty for a goal) and when it counts from."""
    steps = data.get("steps")
    label = " > ".join(s["label"] + (f" @{s['window_text']}" if s["window"] else "") for s in steps) if steps else None
    return DEFINITION_COLUMNS, [
        {
            "name": data["name"],
            "site": data["site"],
            "label": label or data.get("label"),
            "window": data.get("window_text"),
            "since_iso": data["since_iso"],
        }
    ]


def render_definition(console: Any, data: dict) -> None:
    row = definition_rows(data)[1][0]
    what = "funnel" if "steps" in data else "goal"
    window = f" within {row['window']}" if row["window"] else ""
    site = "" if data["site"] == "default" else f" of site {data['site']}"
    console.print(
        f"{what} {row['name']!r}{site} defined: {row['label']}{window}; counts from {row['since_iso']}", markup=False
    )


REMOVE_COLUMNS = ("what", "name", "site", "removed")


def remove_rows(data: dict) -> Rows:
    return REMOVE_COLUMNS, [{name: data[name] for name in REMOVE_COLUMNS}]


def render_remove(console: Any, data: dict) -> None:
    console.print(
        f"{data['what']} {data['name']!r} removed (its figures stay until their days expire)"
        if data["removed"]
        else f"no {data['what']} named {data['name']!r}",
        markup=False,
    )
