"""Raw visitor IPs looked for in a Redis, and an app process that sends them.

``raw_ips_in`` reads every key of a Redis (SCAN) and every value of it, whatever its type
(strings, hashes, lists, sets, sorted sets with their scores, streams), and looks for each IP in
every form it could be kept in: its text as sent, its canonical and exploded text (IPv6), its
packed bytes (4 or 16) and the base64 of its text at each of the three alignments (a kombu
message body is base64). The privacy promise (docs/keys.md, docs/reliability.md "Where raw IPs
live") is checked with it.

Run as ``python -m tests.support.raw_ips`` with a JSON list of actions on stdin, it is the app
side as a user's app runs it: the package's tasks called with ``.delay()`` and a
``VisitRecorder``, on the broker of its environment (``CELERY_BROKER_URL``)::

    [{"op": "delay", "task": "record_visit", "args": [...], "kwargs": {...}},
     {"op": "record", "args": [ip, path, session_id, ts]},  # VisitRecorder.record
     {"op": "flush"}]                                        # VisitRecorder.flush: one batch

It prints the ids of the tasks it sent, as JSON. ``counted_actions`` and ``failing_actions`` are
the scenario both brokers' tests send: one IPv4 and one IPv6 address for each path a visit can
take (``PATHS``).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from typing import Any

from counters_tasks.local.waiting import wait_until
from tests.support.procs import REPO


def forms(ip: str) -> tuple[list[bytes], list[bytes]]:
    """Every form of ``ip`` a value could hold it in: ``(its texts, lower case, to look for in a
    value lower-cased; its bytes, to look for as they are)``."""
    address = ipaddress.ip_address(ip)
    texts = [text.encode() for text in {ip.lower(), str(address), address.exploded}]
    binary = [address.packed]
    for raw in texts:
        for shift in range(3):  # the base64 characters made of the text's bits alone, at each alignment
            encoded = base64.b64encode(b"\0" * shift + raw)
            binary.append(encoded[-(-8 * shift // 6) : (8 * (shift + len(raw))) // 6])
    return texts, binary


def values_of(client: Any, key: bytes) -> list[bytes]:
    """Every value held under ``key``, whatever its type, with the key itself."""
    kind = client.type(key)
    kind = kind.decode() if isinstance(kind, bytes) else kind
    out: list[Any] = [key]
    if kind == "string":
        out.append(client.get(key))
    elif kind == "hash":
        for field, value in client.hgetall(key).items():
            out += [field, value]
    elif kind == "list":
        out += client.lrange(key, 0, -1)
    elif kind == "set":
        out += list(client.smembers(key))
    elif kind == "zset":
        for member, score in client.zrange(key, 0, -1, withscores=True):
            out += [member, repr(score)]
    elif kind == "stream":
        for entry_id, fields in client.xrange(key):
            out.append(entry_id)
            for field, value in fields.items():
                out += [field, value]
    elif kind != "none":  # gone meanwhile: nothing to read
        raise AssertionError(f"{key!r}: a value of type {kind} this check cannot read")
    return [value if isinstance(value, bytes) else str(value).encode() for value in out if value is not None]


def raw_ips_in(client: Any, ips: Iterable[str], skip: Iterable[bytes] = ()) -> dict[bytes, set[str]]:
    """``{key: the raw IPs of ips found in it or in its name}`` over every key of ``client`` but
    those of ``skip`` (exact names)."""
    wanted = {ip: forms(ip) for ip in ips}
    skipped = set(skip)
    found: dict[bytes, set[str]] = {}
    for key in client.scan_iter(count=1000):
        if key in skipped:
            continue
        for value in values_of(client, key):
            lowered = value.lower()
            for ip, (texts, binary) in wanted.items():
                if any(form in lowered for form in texts) or any(form in value for form in binary):
                    found.setdefault(key, set()).add(ip)
    return found


PATHS = {
    name: (f"198.18.{n}.77", f"2001:db8:7e57:{n}::77")
    for n, name in enumerate(
        (
            "delay_applied",
            "recorder_applied",
            "batch_applied",
            "delay_refused",
            "batch_refused",
            "malformed",
            "delay_failed",
            "recorder_failed",
            "poison",
        ),
        start=1,
    )
}
"""The raw IPs (an IPv4 and an IPv6 address) each path of a visit is tried with: one to a path, so
that a finding names the path that kept it."""
FAILING_PATH = "/fail"
"""The page whose writes fail (its counter's key clobbered by the test): its visits are set aside."""
APPLIED_PATH = "/ok"
APPLIED = 6
"""Views of ``APPLIED_PATH`` the scenario applies."""
REFUSED = {"bad_input": 4, "malformed": 2}
"""What the scenario refuses, by reason."""
SET_ASIDE = 3
"""Calls the scenario has set aside: two ``record_visit`` messages and one ``VisitRecorder`` batch."""


def counted_actions(now: float) -> list[dict[str, Any]]:
    """What the app side sends that is applied or refused: ``APPLIED`` views of ``APPLIED_PATH``
    and ``REFUSED`` refusals."""
    v4, v6 = PATHS["delay_applied"]
    actions = [
        delay("record_visit", v4, APPLIED_PATH, None, now),
        delay("record_visit", ip=v6, path=APPLIED_PATH, ts=now),
    ]
    actions += [{"op": "record", "args": [ip, APPLIED_PATH, None, now]} for ip in PATHS["recorder_applied"]]
    actions.append({"op": "flush"})
    actions += [delay("record_visit", ip, "/bad\npath", None, now) for ip in PATHS["delay_refused"]]
    actions.append(
        delay(
            "record_visits",
            [{"ip": ip, "path": "/bad\npath", "ts": now} for ip in PATHS["batch_refused"]]
            + [{"ip": ip, "path": APPLIED_PATH, "ts": now} for ip in PATHS["batch_applied"]],
        )
    )
    actions += [delay("record_visit", ip) for ip in PATHS["malformed"]]  # no path: malformed
    return actions


def failing_actions(now: float) -> list[dict[str, Any]]:
    """What the app side sends that is set aside (``FAILING_PATH``): ``SET_ASIDE`` calls. Sent
    once the others are applied: a worker batch that cannot be written sets aside every message
    it claimed (docs/reliability.md), so a message applied with them would be set aside too."""
    v4, v6 = PATHS["delay_failed"]
    actions = [
        delay("record_visit", v4, FAILING_PATH, None, now),
        delay("record_visit", ip=v6, path=FAILING_PATH, ts=now),
    ]
    actions += [{"op": "record", "args": [ip, FAILING_PATH, None, now]} for ip in PATHS["recorder_failed"]]
    actions.append({"op": "flush"})
    return actions


def delay(task: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The action ``tasks.<task>.delay(*args, **kwargs)``."""
    return {"op": "delay", "task": task, "args": list(args), "kwargs": kwargs}


def all_ips() -> list[str]:
    return [ip for pair in PATHS.values() for ip in pair]


def wait_for(read: Callable[[], Any], expected: Any, worker: Any, what: str, timeout: float = 60.0) -> None:
    """Until ``read()`` gives ``expected``; else fail with what it last gave and the worker's log."""
    seen: list[Any] = []

    def reached() -> bool:
        seen.append(read())
        return seen[-1] == expected

    try:
        wait_until(reached, timeout=timeout, what=what)
    except TimeoutError:
        raise AssertionError(f"{what}: {seen[-1]!r} != {expected!r}; log:\n{worker.output()[-6000:]}") from None


def send(env: dict[str, str], actions: list[dict[str, Any]]) -> list[str]:
    """Run the app side (this module as a program) with ``env``; the ids of the tasks it sent."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.raw_ips"],
        input=json.dumps(actions),
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", "")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from counters_tasks import VisitRecorder, tasks

    recorder = VisitRecorder(max_delay=60, flush_on_sigterm=False)  # sent on flush only: one batch a flush
    sent = []
    for action in json.load(sys.stdin):
        if action["op"] == "delay":
            sent.append(getattr(tasks, action["task"]).delay(*action.get("args", []), **action.get("kwargs", {})).id)
        elif action["op"] == "record":
            recorder.record(*action["args"])
        elif action["op"] == "flush":
            assert recorder.flush(timeout=30), "the recorder's batch was not sent"
        else:
            raise ValueError(action)
    assert recorder.close(timeout=30)
    print(json.dumps(sent))


if __name__ == "__main__":
    main()
