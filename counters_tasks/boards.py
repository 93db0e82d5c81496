"""A ranking's board and bump, checked: the board's name and settings (``check_board``: its
window and slot size), and one bump of a member of it (``bump_on``). What the rankings table
(``ranking``: the boards' keys, writes, reads and rotation) and the bump kind (``ranking_bumps``:
the ``incr_ranking`` tasks) share; it reads and writes nothing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import NoneType
from typing import Any, NamedTuple

from .core.settings import Settings, get_settings
from .core.sites import check_site
from .core.validation import check_amount, check_int, check_item_time, check_text
from .errors import InvalidInput
from .store import keys

HOURS_DIVIDING_DAY = (1, 2, 3, 4, 6, 8, 12)
MAX_PERIOD_HOURS = 24 * 3660  # ten years


def check_board_settings(period_hours: Any, interval_hours: Any) -> tuple[int, int]:
    """``interval_hours`` divides 24 or is a multiple of 24; ``period_hours`` a positive multiple of it."""
    check_int(interval_hours, "interval_hours", 1, MAX_PERIOD_HOURS)
    check_int(period_hours, "period_hours", 1, MAX_PERIOD_HOURS)
    if interval_hours not in HOURS_DIVIDING_DAY and interval_hours % 24:
        raise InvalidInput(f"interval_hours must divide 24 or be a multiple of 24, got {interval_hours}")
    if period_hours % interval_hours:
        raise InvalidInput(f"period_hours ({period_hours}) must be a multiple of interval_hours ({interval_hours})")
    return period_hours, interval_hours


def slot_of(ts: float, interval_hours: int) -> int:
    """The slot number of epoch seconds ``ts``."""
    return int(ts // (interval_hours * 3600))


@dataclass(frozen=True)
class Board:
    """A board's name and settings, validated (``check_board``); no connection: what bumps are
    prepared for and what a batch groups by."""

    name: str
    period_hours: int = 24
    interval_hours: int = 1

    @property
    def slots_in_window(self) -> int:
        return self.period_hours // self.interval_hours

    def slot_of(self, ts: float) -> int:
        return slot_of(ts, self.interval_hours)


def check_board(name: Any, period_hours: Any = 24, interval_hours: Any = 1, site: Any = None) -> Board:
    """A valid board name and settings (raises InvalidInput; reads and writes nothing). The
    board's ``name`` is scoped to its site (``store.keys.scoped``: the name itself for the
    default site), which is how its keys and the registry know it. A board is checked once a
    process and settings (most bumps name a few boards): values of other types than a str
    name, int settings and a str or None site are checked every time."""
    if (
        type(name) is str
        and type(period_hours) is int
        and type(interval_hours) is int
        and type(site) in (str, NoneType)
    ):
        return _checked_board(get_settings(), name, period_hours, interval_hours, site)
    return _check_board(name, period_hours, interval_hours, site)


@functools.lru_cache(maxsize=1024)
def _checked_board(settings: Settings, name: str, period_hours: int, interval_hours: int, site: str | None) -> Board:
    """``_check_board`` of values that hash as what they are, for one settings (their sites)."""
    return _check_board(name, period_hours, interval_hours, site)


def _check_board(name: Any, period_hours: Any, interval_hours: Any, site: Any) -> Board:
    check_text(name, "board")
    period_hours, interval_hours = check_board_settings(period_hours, interval_hours)
    return Board(keys.scoped(check_site(site), name), period_hours, interval_hours)


class RankingBump(NamedTuple):
    """One validated ranking bump: ``amount`` added to ``member`` of ``board`` in ``slot``. (A
    NamedTuple: one is made per bump a worker applies.)"""

    board: Board
    member: str
    amount: int
    slot: int


def bump_on(board: Board, member: Any, amount: Any, ts: Any, what: str = "ts") -> RankingBump:
    """One bump of ``board`` checked (raises InvalidInput; writes nothing): the one check of a
    member, an amount and a time that ``Ranking.incr_many`` and ``ranking_bumps.prepare_bump``
    share (``what``: the time's name in the message, ``now`` for the contract's methods)."""
    check_text(member, "member")
    check_amount(amount, "amount")
    return RankingBump(board, member, amount, board.slot_of(check_item_time(ts, what)))
