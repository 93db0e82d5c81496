"""A real Celery task-event receiver for the tests: what Flower hears from the workers."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from counters_tasks.app import app
from counters_tasks.local.waiting import wait_until


class TaskEventLog:
    """Every task event (and worker event) the workers send through the broker at ``url``, captured by a
    receiver in a thread of the test."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.heard: list[dict] = []
        self.lock = threading.Lock()
        self.receiver = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    @classmethod
    @contextlib.contextmanager
    def listening(cls, url: str) -> Iterator[TaskEventLog]:
        """A receiver that has heard a test event sent after it started (so none of the test's is missed)."""
        log = cls(url)
        log.thread.start()
        try:
            with app.connection_for_write(url) as connection:
                dispatcher = app.events.Dispatcher(connection)

                def heard() -> bool:
                    dispatcher.send("test-ping")
                    return bool(log.of("test-ping"))

                wait_until(heard, timeout=20, interval=0.2, what="the event receiver")
                dispatcher.close()
            yield log
        finally:
            log.stop()

    def run(self) -> None:
        with app.connection_for_read(self.url) as connection:
            self.receiver = app.events.Receiver(connection, handlers={"*": self.add})
            self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def add(self, event: dict) -> None:
        with self.lock:
            self.heard.append(event)

    def of(self, kind: str) -> list[dict]:
        with self.lock:
            return [e for e in self.heard if e["type"] == kind]

    def ids(self, kind: str) -> set[str]:
        return {e["uuid"] for e in self.of(kind)}

    def stop(self) -> None:
        if self.receiver is not None:
            self.receiver.should_stop = True
        self.thread.join(10)
