"""The package's exceptions.

Every refusal of bad input is an ``InvalidInput`` (a ``ValueError``); its ``reason`` says which
kind, and is the name it is counted under (``counters_tasks.refusals``).
"""

from __future__ import annotations


class CountersError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidInput(CountersError, ValueError):
    """Bad input: raised before anything is written, and never retried by the tasks."""

    reason = "bad_input"


class ClosedDay(InvalidInput):
    """An item of a day whose per-visitor data has expired. Never raised for a visit (any past
    time is accepted); its reason names the visits counted without that day's unique visitors
    (``refusals.count_partial``)."""

    reason = "closed_day"


class FutureTime(InvalidInput):
    """An item further ahead of this process's clock than ``COUNTERS_FUTURE_TOLERANCE``."""

    reason = "future"


class BoardSettingsConflict(InvalidInput):
    """A ranking bump for a board that is fixed to other (period, interval) settings."""

    reason = "board_settings"


class ForgottenVisitor(InvalidInput):
    """An item of a visitor forgotten (``forget_visitor``) after the item was made: still on the
    broker during the erasure, it is not counted back (``store.tombstones``)."""

    reason = "forgotten"


class MalformedMessage(InvalidInput):
    """A message whose shape is wrong: arguments that do not fit the task, an id that is not a
    short string, a batch over its size limit."""

    reason = "malformed"


REFUSAL_REASONS = tuple(
    cls.reason
    for cls in (InvalidInput, ClosedDay, FutureTime, BoardSettingsConflict, MalformedMessage, ForgottenVisitor)
)
"""Every reason a refusal is counted under."""


class TransientError(CountersError):
    """A failure after which the same write, made again later, can succeed (like Redis being
    away): the tasks and the worker's batches retry it, never set it aside."""


class TagKeyChanged(TransientError):
    """A write was made with a tag key that is no longer the deployment's: Redis lost its data
    and another process made a new tag key before this one put its own back, so the keys just
    written are under a key no reader uses. The write is to be made again (it then goes under the
    deployment's key, where its message id is new, so it counts once)."""


class SetAside(CountersError):
    """A call that kept failing for a reason that is not Redis being away: it is kept in the dead
    letters (``counters-tasks dead-letters`` lists, requeues or drops it) and its message is
    acknowledged and reported failed, batched or not, so that Flower's failed tasks are the
    messages that did not count."""

    def __init__(self, attempts: int, error: BaseException) -> None:
        super().__init__(f"set aside in the dead letters after {attempts} tries: {error!r}")
        self.attempts, self.error = attempts, error


class ConfigurationError(CountersError):
    """A setting (environment variable) is missing or malformed."""


class DeploymentNotBound(CountersError, RuntimeError):
    """A Redis key was made outside ``store.keys.bound(conn)`` with no ``COUNTERS_TAG_KEY``
    pinned: which deployment's tag key it is made with is not known. A bug of the caller (a
    function given a client that makes keys opens ``keys.bound`` first), never retried."""
