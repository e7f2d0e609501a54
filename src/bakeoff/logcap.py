"""A log writer that keeps the head and the tail of a chatty process within a byte budget."""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from typing import IO

from bakeoff.redact import redact_text

MARK = "\n[bakeoff: {n} bytes of log cut here to stay under the size cap]\n"


class CappedLogWriter:
    """Writes the first half of the budget as it comes; beyond that keeps a rolling tail.

    The file on disk always holds at most about ``max_bytes``: the head, a marker with how much
    was dropped, and the most recent tail (rewritten on flush). Secrets are redacted per line.
    """

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = Path(path)
        self.head_budget = max_bytes // 2
        self.tail_budget = max_bytes - self.head_budget
        self.head_written = 0
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_size = 0
        self.dropped = 0
        self.lock = threading.Lock()
        self.path.write_bytes(b"")
        self._fh = open(self.path, "ab", buffering=0)
        self._head_end = 0

    def write_line(self, raw: bytes) -> None:
        line = redact_text(raw.decode("utf-8", "replace")).encode("utf-8")
        with self.lock:
            if self.head_written + len(line) <= self.head_budget and not self.tail:
                self._fh.write(line)
                self.head_written += len(line)
                self._head_end = self.head_written
                return
            self.tail.append(line)
            self.tail_size += len(line)
            while self.tail_size > self.tail_budget and self.tail:
                old = self.tail.popleft()
                self.tail_size -= len(old)
                self.dropped += len(old)
            self._rewrite_tail()

    def _rewrite_tail(self) -> None:
        self._fh.seek(self._head_end)
        self._fh.truncate()
        if self.dropped:
            self._fh.write(MARK.format(n=self.dropped).encode())
        self._fh.write(b"".join(self.tail))

    def pump(self, stream: IO[bytes]) -> None:
        try:
            for raw in iter(stream.readline, b""):
                self.write_line(raw)
        finally:
            self._fh.close()
