"""What a *kind* of thing counted is (visits, ranking bumps, counter updates, skips...): one
declaration, ``Kind``, from which every table of the package is derived. The task table and the
worker's batches (``worker.kind_tasks``, ``worker.batch_apply``), the app-side buffer
(``recorder``), the metrics' item times (``ops.metrics``) and the throughput totals
(``throughput``) read a kind's declaration instead of keeping their own list of task names,
argument positions and fields. The package's own kinds are declared in ``counters_tasks.kinds``;
docs/architecture.md "Adding a kind" walks through a new one.

This module holds the declaration's type and the registry only: it imports nothing of the data
modules, so every layer can read the registry (a kind is registered by the module that declares
it, at import).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..errors import MalformedMessage
from .validation import check_item_text

Call = tuple[list[Any], str | None]
"""One write call of a kind: the prepared items it writes, and its dedupe id (None: no dedupe)."""


def short_name(task: str) -> str:
    """A task's name without its package (``counters_tasks.record_visit`` -> ``record_visit``):
    the name its batches and refusals are counted under."""
    return task.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Kind:
    """The declaration of one kind of thing counted.

    The names:
      ``name``: its name in the worker's claims and in the throughput totals (``visit``);
      ``fields``: the arguments of one item, in the order its per-item task takes them, the first
      ``required`` of them required (an item of a batch message is a dict of these names);
      ``item_task``: the task sent once per item (``counters_tasks.record_visit``), if any;
      ``worker_batches``: the worker applies ``item_task``'s messages in claimed batches;
      ``payload_task`` and ``items_argument``: the task that carries many items in one message
      (``counters_tasks.record_visits``, argument ``visits``), if any; ``max_items`` the most it
      may carry.
    How an item is checked, kept and written (each None when the kind has no such path):
      ``prepare(fields)``: one item, its fields as ``bind`` returns them (a dict by name, the
      defaults left out), checked (InvalidInput) and prepared for writing, in a worker;
      ``app_item(fields)``: the same checked in the app's process (no COUNTERS_SECRET there) and
      returned as the dict a batch message carries (``VisitRecorder`` and a buffered ``.delay()``);
      ``to_entry`` / ``from_entry``: a prepared item as JSON-able data and back (the journal of a
      worker's claimed batch);
      ``recheck(item)``: the checks of ``prepare`` that depend on what changes while an item waits
      (its visitor forgotten: ``store.tombstones``), made again on a prepared item read back from
      the journal of a batch left by a dead worker (raises InvalidInput: that item is refused);
      ``write(plan, calls, tally)``: queue the writes of calls of prepared items on ``plan`` (the
      write's one ``store.scripts.WritePlan``: one round trip, with the tables a feeder adds to the
      kind, ``core.table``), each call at most once per its id; returns how to read the outcome
      once the plan is sent: a function giving per call None, or the InvalidInput refusing all of
      it (nothing of it written), and filling in ``tally`` (``throughput.Tally``);
      ``per_call`` and ``call_key``: a payload is cut into calls of ``per_call`` positions, and
      within those, one call per ``call_key(item)`` (a ranking's board; None: one call);
      ``screen(conn, accepted)``: a check of a payload's prepared items against what Redis holds
      (a board's fixed settings) before anything is written: ``(accepted, refused)`` pairs;
      ``merge(items)``: a batch's ``app_item`` dicts as fewer items giving the same figures (a
      ranking's bumps of one member and slot as one, amounts summed), applied by the app-side
      buffer to each batch before it is sent: what the whole chain then carries, checks and
      writes once.
    ``applied_metric``: (name, help) of a Prometheus counter of its own for the items applied, besides
    ``counters_events_applied_total{kind=...}`` (the visits' and the ranking bumps' names, kept for
    the dashboards and alerts that read them).
    """

    name: str
    fields: tuple[str, ...]
    required: int
    item_task: str | None = None
    worker_batches: bool = False
    payload_task: str | None = None
    items_argument: str = "items"
    max_items: int = 20_000
    prepare: Callable[[dict[str, Any]], Any] | None = None
    app_item: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    to_entry: Callable[[Any], Any] | None = None
    from_entry: Callable[[Any], Any] | None = None
    recheck: Callable[[Any], None] | None = None
    write: Callable[[Any, list[Call], Any], Callable[[], list[Any]]] | None = None
    per_call: int = 500
    call_key: Callable[[Any], Hashable] | None = None
    screen: Callable[[Any, list[tuple[int, Any]]], tuple[list[tuple[int, Any]], list[tuple[int, Any]]]] | None = None
    merge: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None
    applied_metric: tuple[str, str] | None = None

    @property
    def signature(self) -> str:
        """How its per-item task is called, for messages that do not fit (``ip, path,
        session_id=None, ...``)."""
        return ", ".join(f if n < self.required else f"{f}=None" for n, f in enumerate(self.fields))

    @property
    def item_noun(self) -> str:
        """What one item is called in a refusal (``visit 3: ...``): its batch argument's singular."""
        return self.items_argument.removesuffix("s")

    @property
    def ts_position(self) -> int | None:
        """Where the item's time (``ts``) sits among its per-item task's arguments, if it has one."""
        return self.fields.index("ts") if "ts" in self.fields else None

    @cached_property
    def field_names(self) -> frozenset[str]:
        """``fields`` as a set, made once (every item of every batch is checked against it)."""
        return frozenset(self.fields)

    @cached_property
    def required_names(self) -> frozenset[str]:
        """The fields an item must have (the first ``required``)."""
        return frozenset(self.fields[: self.required])

    def bind(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """One item's fields by name, from its positional and named values (TypeError when they
        do not fit ``fields``: a name it does not have, one given twice, a required one missing),
        the defaults left out, every text in them checked (``core.validation.check_item_text``:
        InvalidInput for a string UTF-8 cannot encode). The one rule of an item's shape and text:
        a per-item message's arguments, a batch item's dict (``item_fields``) and an item the
        app's process queues (``VisitRecorder.add``) all go through it."""
        if not args and kwargs.keys() <= self.field_names and self.required_names <= kwargs.keys():
            check_item_text(kwargs)
            return dict(kwargs)  # the common case, a batch item that fits: one set test, not four
        if not kwargs and self.required <= len(args) <= len(self.fields):
            bound = dict(zip(self.fields, args, strict=False))  # a call by position (VisitRecorder.record)
            check_item_text(bound)
            return bound
        if len(args) > len(self.fields):
            raise TypeError(f"takes at most {len(self.fields)} arguments")
        unknown = set(kwargs) - self.field_names
        if unknown:
            raise TypeError(f"unknown keys: {', '.join(sorted(map(str, unknown)))[:200]}")
        bound = dict(zip(self.fields, args, strict=False))
        repeated = [name for name in kwargs if name in bound]
        if repeated:
            raise TypeError(f"given twice: {', '.join(repeated)}")
        bound.update(kwargs)
        missing = [name for name in self.fields[: self.required] if name not in bound]
        if missing:
            raise TypeError(f"needs {' and '.join(missing)}")
        check_item_text(bound)
        return bound

    def item_fields(self, item: Any) -> dict[str, Any]:
        """An item of a batch message (a dict of ``fields``) checked for its shape by ``bind``
        (MalformedMessage) and its text (InvalidInput): what ``prepare`` then takes by name."""
        if not isinstance(item, dict):
            raise MalformedMessage(f"must be a dict, got {type(item).__name__}")
        try:
            return self.bind((), item)
        except TypeError as exc:
            raise MalformedMessage(str(exc)) from None


_registry: dict[str, Kind] = {}
_lock = threading.Lock()


def register(kind: Kind) -> Kind:
    """Make ``kind`` known to every table derived from the registry (its tasks, the worker's
    batches, the recorder, the metrics); registering the same declaration again changes nothing,
    another one under a taken name or task raises ValueError."""
    with _lock:
        for other in _registry.values():
            if other is kind:
                return kind
            taken = {other.name, other.item_task, other.payload_task} - {None}
            if {kind.name, kind.item_task, kind.payload_task} & taken:
                raise ValueError(f"kind {kind.name!r}: its name or a task name is taken by kind {other.name!r}")
        _registry[kind.name] = kind
    return kind


def registered() -> list[Kind]:
    """Every kind registered in this process, in the order they were."""
    return list(_registry.values())


def by_task(task: str) -> Kind | None:
    """The kind whose per-item or payload task is named ``task``, if any."""
    for kind in _registry.values():
        if task in (kind.item_task, kind.payload_task):
            return kind
    return None
