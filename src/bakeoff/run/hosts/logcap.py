"""A log writer that keeps the head and the tail of a chatty process within a byte budget."""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from typing import IO

from bakeoff.redact import redact_text

MARK = "\n[bakeoff: {n} bytes of log cut here to stay under the size cap]\n"
_MARK_RESERVE = len(MARK.format(n=10**20))  # the marker never pushes the file over the cap
MAX_LINE = 64 * 1024  # a "line" without a newline is cut into pieces of this size


class CappedLogWriter:
    """Writes the first half of the budget as it comes; beyond that keeps a rolling tail.

    The file on disk never holds more than ``max_bytes``: the head (written through at once), a
    marker saying how many bytes were dropped, and the most recent tail. The tail lives in
    memory (a ring of lines) and is written out every ``flush_s`` seconds and on close, so a
    flood costs one rewrite of at most ``max_bytes / 2`` per ``flush_s``, not one per line.
    Secrets are redacted per line.
    """

    def __init__(self, path: Path, max_bytes: int, flush_s: float = 0.5) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.head_budget = max_bytes // 2
        self.tail_budget = max(0, max_bytes - self.head_budget - _MARK_RESERVE)
        self.flush_s = flush_s
        self.head_written = 0
        self.in_tail = False
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_size = 0
        self.dropped = 0
        self.total = 0
        self._dirty = False
        self._closed = threading.Event()
        self.lock = threading.Lock()
        self._fh = open(self.path, "wb", buffering=0)
        self._flusher: threading.Thread | None = None

    # -- writing ---------------------------------------------------------------------------
    def write_line(self, raw: bytes) -> None:
        line = redact_text(raw.decode("utf-8", "replace")).encode("utf-8")
        with self.lock:
            self.total += len(line)
            if not self.in_tail and self.head_written + len(line) <= self.head_budget:
                self._fh.write(line)
                self.head_written += len(line)
                return
            if not self.in_tail:  # fill the head to the byte, the rest of the line starts the tail
                room = self.head_budget - self.head_written
                self._fh.write(line[:room])
                self.head_written += room
                line = line[room:]
                self.in_tail = True
                self._start_flusher()
            if len(line) > self.tail_budget:  # keep the end of a giant line only
                self.dropped += len(line) - self.tail_budget
                line = line[len(line) - self.tail_budget:]
            self.tail.append(line)
            self.tail_size += len(line)
            while self.tail_size > self.tail_budget:
                old = self.tail.popleft()
                self.tail_size -= len(old)
                self.dropped += len(old)
            self._dirty = True

    def flush(self) -> None:
        """Write head marker + tail to disk (a no-op while nothing changed)."""
        with self.lock:
            if not self._dirty or self._fh.closed:
                return
            self._fh.seek(self.head_written)
            if self.dropped:
                self._fh.write(MARK.format(n=self.dropped).encode())
            self._fh.write(b"".join(self.tail))
            self._fh.truncate()
            self._dirty = False

    def close(self) -> None:
        self._closed.set()
        self.flush()
        with self.lock:
            if not self._fh.closed:
                self._fh.close()

    def _start_flusher(self) -> None:
        def loop() -> None:
            while not self._closed.wait(self.flush_s):
                self.flush()

        self._flusher = threading.Thread(target=loop, name=f"logcap-flush:{self.path.name}", daemon=True)
        self._flusher.start()

    # -- reading a stream ------------------------------------------------------------------
    def pump(self, stream: IO[bytes]) -> None:
        """Copy ``stream`` to the file line by line until EOF, then close (flushing the tail)."""
        pending = b""
        read = getattr(stream, "read1", stream.read)
        try:
            while True:
                chunk = read(65536)
                if not chunk:
                    break
                pending += chunk
                start = 0
                while True:
                    nl = pending.find(b"\n", start)
                    if nl < 0:
                        break
                    self.write_line(pending[start:nl + 1])
                    start = nl + 1
                pending = pending[start:]
                while len(pending) >= MAX_LINE:
                    self.write_line(pending[:MAX_LINE])
                    pending = pending[MAX_LINE:]
            if pending:
                self.write_line(pending)
        except (OSError, ValueError):
            pass  # the pipe went away with the process
        finally:
            self.close()

