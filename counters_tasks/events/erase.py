"""Forgetting one visitor from the events' and goals' day tables (``worker.forget``, issue 44):
the ``Erasure.forget`` of ``event_day`` and ``goal_day``.

- ``forget_event_days``: a site's day of events: the pairs members that start with the visitor's
  pair id (``SSCAN MATCH``), each event's ``uv`` of the day minus one with its member, and the
  visitor's 6-character id out of every list sketch of the day's HASH (an event's, a property
  value's, a key's ``(none)``), read with ``HSCAN``; each batch of fields corrected in one call of
  ``lua/forget_sketches.lua``.
- ``forget_goal_days``: a site's day of goals: each goal's pairs member, its converters ``u:``
  minus one and its sketch ``s:`` without the id, in one call.
- ``forget_funnels``: each funnel of the site: what each day credits the visitor with taken out
  of its step sets and time histogram, its results' fields and its state removed
  (``lua/funnel_forget.lua``).

A sketch past 256 visitors a day is a HyperLogLog: named in the answer as an estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from ..core.table import ForgetTarget, Forgotten
from ..core.visitors import pair_visitor
from ..sitestats.erase import has_id, is_list, scan_hash, scan_set, sketch_calls, visitor_ids
from ..store import hll, keys
from ..store.client import RedisClient
from ..store.page_sketch import ID_CHARS
from ..store.scripts import run_script
from . import event_day, funnel_steps, goal_day
from .definitions import funnels

SEP = event_day.SEP
FORMS = {"e": "5:2", "v": "2:0", "n": "1:0"}
"""The value's form of each kind of field of an events day (``lua/forget_sketches.lua``): a name's
``"<count> <uv> <no visitor> <dropped> <closed> <sketch>"``, a value's ``"<count> <number>
<sketch>"``, a key's ``(none)`` ``"<count> <sketch>"``."""


def forget_event_days(conn: RedisClient, target: ForgetTarget, days: Sequence[date]) -> Forgotten:
    """Forget ``target`` from the site's events of each of ``days`` (module docstring)."""
    done = Forgotten()
    with keys.bound(conn, write=True):
        for day in days:
            table_key = event_day.day_key(day, target.scope)
            if not conn.exists(table_key):
                continue
            for vid in visitor_ids(target, day):
                _forget_event_day(conn, done, table_key, event_day.pairs_key(day, target.scope), vid, day)
    return done


def _forget_event_day(conn: RedisClient, done: Forgotten, table_key: str, pairs_key: str, vid: str, day: date) -> None:
    pair = pair_visitor(vid)
    short = pair[:ID_CHARS]
    members = {member[len(pair) :]: member for member in scan_set(conn, pairs_key, pair)}
    fields: list[list[str]] = []
    estimates = 0
    for field, value in scan_hash(conn, table_key):
        letter = field[:1]
        form = FORMS.get(letter)
        if form is None or field[1:2] != SEP:
            continue
        lead = int(form.split(":")[0])
        sketch = (value.split(" ", lead) + [""])[lead] if lead else value
        member = ""
        if letter == "e":
            name = field[2:]
            digest = event_day.name_digest(name) if name else "~"
            member = members.pop(digest, "") or pair + digest  # (SREM of a member not there: no change)
        if member or (is_list(sketch) and has_id(sketch, short)):
            fields.append([field, form, member, ""])
        elif sketch.startswith(("#", "!")) and letter != "e":
            estimates += 1
    removed, corrected, hlls = sketch_calls(conn, table_key, short, fields, pairs_key)
    label = day.isoformat()
    done.removed += removed
    done.corrected += [f"event_day {label} uv of an event"] * corrected
    estimates += len(hlls)
    if estimates:
        done.estimates.append(
            (f"event_day {label}: {estimates} sketch(es) past 256 visitors (HLL)", hll.STANDARD_ERROR)
        )
    if members:  # members of names no longer in the HASH
        done.removed += int(run_script(conn, "forget_members", [pairs_key], ["", *members.values()]))


def forget_goal_days(conn: RedisClient, target: ForgetTarget, days: Sequence[date]) -> Forgotten:
    """Forget ``target`` from the site's goals of each of ``days`` (module docstring)."""
    done = Forgotten()
    with keys.bound(conn, write=True):
        for day in days:
            tag = goal_day.goal_day_tag(day, target.scope)
            table_key = goal_day.goal_day_key(day, tag=tag, site=target.scope)
            if not conn.exists(table_key):
                continue
            pairs_key = goal_day.goal_day_pairs(day, tag=tag, site=target.scope)
            values = dict(scan_hash(conn, table_key))
            goals = {field[2:] for field in values if field[:2] in ("u:", "s:", "c:")}
            for vid in visitor_ids(target, day):
                pair = pair_visitor(vid)
                short = pair[:ID_CHARS]
                members = {member[len(pair) :]: member for member in scan_set(conn, pairs_key, pair)}
                fields = []
                for goal in sorted(goals):
                    digest = keys.path_digest(goal)
                    member = members.pop(digest, "")
                    sketch = values.get("s:" + goal, "")
                    if member or (is_list(sketch) and has_id(sketch, short)):
                        member = member or pair + digest  # (not there: the id goes only if the pairs are gone)
                        fields.append(["s:" + goal, "0:0", member, "u:" + goal])
                removed, corrected, hlls = sketch_calls(conn, table_key, short, fields, pairs_key)
                done.removed += removed
                done.corrected += [f"goal_day {day.isoformat()} converters of a goal"] * corrected
                done.estimates += [(f"goal_day {day.isoformat()} sketch of a goal (HLL)", hll.STANDARD_ERROR)] * len(
                    hlls
                )
                if members:
                    done.removed += int(run_script(conn, "forget_members", [pairs_key], ["", *members.values()]))
    return done


def forget_funnels(conn: RedisClient, target: ForgetTarget, days: Sequence[date]) -> Forgotten:
    """Forget ``target`` from each funnel of its site: for each of ``days``, what the day credits
    the visitor with taken out of its step sets and time histogram, its results' fields removed,
    and its state deleted (``lua/funnel_forget.lua``, one call a funnel and day)."""
    done = Forgotten()
    with keys.bound(conn, write=True):
        for funnel in funnels(conn):
            if funnel.site != target.scope:
                continue
            base = funnel_steps.funnel_base(funnel)
            n = len(funnel.steps)
            ids_of = {day: visitor_ids(target, day) for day in days}
            for vid in sorted({vid for ids in ids_of.values() for vid in ids}):
                state = [base + "v:" + vid]
                for day in days:
                    if vid not in ids_of[day]:
                        continue
                    label = day.isoformat()
                    call_keys = [base + "res:" + label, base + "day:" + label]
                    call_keys += [f"{base}step:{label}:{k}" for k in range(1, n + 1)]
                    removed, fixed = run_script(conn, "funnel_forget", call_keys + state, [vid, n])
                    state = []  # (deleted with the first day)
                    done.removed += int(removed)
                    done.corrected += [f"funnel {label} time-to-step bucket"] * int(fixed)
                    if int(removed):
                        done.corrected.append(f"funnel {label} visitors by step")
    return done


event_day.FORGET_EVENT_DAY.install(forget_event_days)
goal_day.FORGET_GOAL_DAY.install(forget_goal_days)
funnel_steps.FORGET_FUNNEL.install(forget_funnels)
