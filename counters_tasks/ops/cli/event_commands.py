"""The commands of events, goals and funnels (issue 43, docs/events.md): the reads ``events``,
``goals`` and ``funnel NAME`` (``--format table|csv|json``, ``--site``, ``--from``, ``--to``, as
the other read commands), and the definitions' ``define-goal``, ``define-funnel``,
``remove-goal`` and ``remove-funnel``. Each runs its view (``ops.event_views``) through
``common.query`` (bad input: exit 2 with the InvalidInput's message) and prints it through
``render.emit`` with ``render_events``' renderers.
"""

from __future__ import annotations

import click

from .. import event_views
from ..event_views import STEP_KINDS
from .common import EXIT_FAILED, output_options, query, site_option
from .render import emit
from .render_events import (
    DEFINITION_COLUMNS,
    EVENTS_COLUMNS,
    FUNNEL_COLUMNS,
    GOALS_COLUMNS,
    REMOVE_COLUMNS,
    definition_rows,
    events_rows,
    funnel_notes,
    funnel_rows,
    goals_rows,
    remove_rows,
    render_definition,
    render_events,
    render_funnel,
    render_goals,
    render_remove,
)

from_option = click.option("--from", "start", help="first day: YYYY-MM-DD, today or yesterday (default: the last day)")
to_option = click.option("--to", "end", help="last day (default today)")


@click.command("events")
@from_option
@to_option
@site_option
@output_options(
    EVENTS_COLUMNS,
    "a row an event (prop and value empty), then a row a value of each of its properties; uv_exact false: "
    "the UV is an estimate, uv_error its relative standard error",
)
def events_command(start: str | None, end: str | None, site: str | None, output: str) -> None:
    """The events of a range of days by count: each one's unique visitors and its properties'
    values ((none): events without the property; (other): the values past a day's cap)."""
    emit(query(lambda conn: event_views.events_view(conn, start, end, site=site)), output, render_events, events_rows)


@click.command("goals")
@from_option
@to_option
@site_option
@output_options(
    GOALS_COLUMNS,
    "rate: converters / the range's unique visitors (a fraction); partial true: the goal was defined after "
    "the range began and counts from since_iso",
)
def goals_command(start: str | None, end: str | None, site: str | None, output: str) -> None:
    """The goals of a site over a range of days: conversions, unique converters, the conversion
    rate of the range's unique visitors, revenue, and when each counts from."""
    emit(query(lambda conn: event_views.goals_view(conn, start, end, site=site)), output, render_goals, goals_rows)


@click.command("funnel")
@click.argument("name")
@from_option
@to_option
@site_option
@output_options(
    FUNNEL_COLUMNS,
    "of_first and of_previous are fractions; time_to_convert: visitors by time from the step before, "
    "bucket=n joined by '; '; the window, since, open days and late events are in json",
)
def funnel_command(name: str, start: str | None, end: str | None, site: str | None, output: str) -> None:
    """Funnel NAME over a range of days (by the day each visitor entered it): the visitors who
    reached each step in order within the window, their share, and the time between steps."""
    data = query(lambda conn: event_views.funnel_view(conn, name, start, end, site=site))
    emit(data, output, render_funnel, funnel_rows)
    if output == "csv":  # what the rows do not say (the days still open, the events not judged): stderr
        for note in funnel_notes(data)[1:]:
            click.echo(note, err=True)


@click.command("define-goal")
@click.argument("name")
@click.option("--page", help="a page: its path (with --match)")
@click.option(
    "--match",
    type=click.Choice(["exact", "prefix", "pattern"]),
    default=None,
    help="how --page compares a view's path (default exact; pattern: * any run but /, ** any run)",
)
@click.option("--event", help="an event, by name")
@click.option("--prop", help="only the events with this property (with --value)")
@click.option("--value", help="the property's value (with --prop)")
@click.option("--revenue", help="an event's numeric property, summed as the goal's revenue")
@site_option
@output_options(DEFINITION_COLUMNS)
def define_goal_command(
    name: str,
    page: str | None,
    match: str | None,
    event: str | None,
    prop: str | None,
    value: str | None,
    revenue: str | None,
    site: str | None,
    output: str,
) -> None:
    """Define (or replace) goal NAME: a page (--page, --match) or an event (--event, optionally
    --prop K --value V), optionally with --revenue. It counts from its since, said: a few minutes
    from now (COUNTERS_FUTURE_TOLERANCE plus 5 s, to the minute), when every worker judges with it."""
    emit(
        query(
            lambda conn: event_views.define_goal_view(conn, name, page, match, event, prop, value, revenue, site=site)
        ),
        output,
        render_definition,
        definition_rows,
    )


@click.command("define-funnel")
@click.argument("name")
@click.option("--window", "-w", required=True, help="from entering the funnel to its last step: 30m, 2h, 7d")
@click.option(
    "--step",
    "steps",
    multiple=True,
    required=True,
    metavar="STEP",
    help=f"a step, in order, 2 to 8 of them: {', '.join(k + ':...' for k in STEP_KINDS)} "
    "(page:/a, prefix:/blog/, pattern:/blog/*, event:signup, event:signup[plan=pro]); "
    "@WINDOW at the end is the step's own window from the step before (page:/done@10m)",
)
@site_option
@output_options(DEFINITION_COLUMNS)
def define_funnel_command(name: str, window: str, steps: tuple[str, ...], site: str | None, output: str) -> None:
    """Define (or replace) funnel NAME: its steps in order and its window. It counts from its
    since, said: a few minutes from now (COUNTERS_FUTURE_TOLERANCE plus 5 s, to the minute)."""
    emit(
        query(lambda conn: event_views.define_funnel_view(conn, name, window, steps, site=site)),
        output,
        render_definition,
        definition_rows,
    )


def remove_command(what: str) -> click.Command:
    """``remove-goal`` or ``remove-funnel``: exit 1 when there is no such definition."""

    @click.command(
        f"remove-{what}",
        help=f"Remove {what} NAME's definition (exit 1 when there is none); its figures stay until their days expire.",
    )
    @click.argument("name")
    @site_option
    @output_options(REMOVE_COLUMNS)
    def command(name: str, site: str | None, output: str) -> None:
        data = query(lambda conn: event_views.remove_view(conn, what, name, site=site))
        emit(data, output, render_remove, remove_rows)
        if not data["removed"]:
            raise SystemExit(EXIT_FAILED)

    return command


remove_goal_command = remove_command("goal")
remove_funnel_command = remove_command("funnel")
