"""Reading the input of ``counters-tasks import``: ``open_input`` (a file or stdin, gzip
recognised by its magic bytes whatever the file's name, the bytes read counted for a progress
bar) and ``read_lines`` (a line longer than ``MAX_LINE`` bytes is read past and reported as
malformed, never held whole, so one runaway line cannot take the memory of an import).
"""

from __future__ import annotations

import gzip
import io
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, BinaryIO

MAX_LINE = 64 * 1024
"""Longest line read (bytes, without its line ending); a longer one is skipped as malformed."""


class CountingReader(io.RawIOBase):
    """A readable stream that counts the bytes read from the one it wraps (for a progress bar:
    compressed bytes of a ``.gz``)."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        read = getattr(self.raw, "read1", self.raw.read)
        data = read(len(buffer))
        size = len(data)
        buffer[:size] = data
        self.count += size
        return size


@dataclass
class Input:
    """An opened input: its lines' stream, the bytes read so far and, for a regular file, its size."""

    name: str
    stream: BinaryIO
    counter: CountingReader
    size: int | None
    compressed: bool
    owned: bool = True  # stdin is left open

    def bytes_read(self) -> int:
        return self.counter.count

    def close(self) -> None:
        self.stream.close()
        if self.owned:
            self.counter.raw.close()


def open_input(path: str, stdin: IO[bytes] | None = None) -> Input:
    """Open ``path`` (``-``: ``stdin``) for reading lines, through gzip when it starts with
    gzip's magic bytes (whatever its name)."""
    raw: IO[bytes] = stdin if path == "-" and stdin is not None else open(path, "rb")  # Input.close closes it
    size = None
    try:
        info = os.fstat(raw.fileno())
        size = info.st_size if stat.S_ISREG(info.st_mode) else None
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        pass
    counter = CountingReader(raw)
    buffered = io.BufferedReader(counter, buffer_size=1 << 16)
    compressed = buffered.peek(2)[:2] == b"\x1f\x8b"
    stream: Any = gzip.GzipFile(fileobj=buffered, mode="rb") if compressed else buffered
    is_stdin = path == "-" and stdin is not None
    return Input("<stdin>" if is_stdin else path, stream, counter, size, compressed, owned=not is_stdin)


def read_lines(stream: BinaryIO, max_line: int = MAX_LINE) -> Iterator[bytes | None]:
    """The lines of ``stream``; ``None`` for a line longer than ``max_line`` bytes (its ending
    aside), read past in pieces without holding it whole."""
    while True:
        line = stream.readline(max_line + 2)
        if not line:
            return
        if len(line.rstrip(b"\r\n")) <= max_line:
            yield line
            continue
        while not line.endswith(b"\n"):
            line = stream.readline(max_line + 2)
            if not line:
                break
        yield None


def chain_lines(head: list[bytes | None], rest: Iterator[bytes | None]) -> Iterator[bytes | None]:
    """The lines already read, then the others."""
    yield from head
    yield from rest
