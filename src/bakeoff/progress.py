"""Progress inside a trial's phases, for the live view and the plain progress lines: the phase's
runner sets ``reporting(callback)`` around a phase, and the code doing the work says where it is
with ``note("single-request prompts: 9")`` — without threading a callback through every call.
A context variable, so it reaches the coroutines ``asyncio.run`` starts in the same thread."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

_sink: ContextVar[Callable[[str], None] | None] = ContextVar("bakeoff_progress", default=None)


@contextmanager
def reporting(callback: Callable[[str], None]) -> Iterator[None]:
    """Within this block, ``note(text)`` calls ``callback(text)``."""
    token = _sink.set(callback)
    try:
        yield
    finally:
        _sink.reset(token)


def note(text: str) -> None:
    """Say where the current phase is (nothing when no one listens); never raises."""
    sink = _sink.get()
    if sink is not None:
        try:
            sink(text)
        except Exception:  # noqa: BLE001 - a display problem must not fail a trial
            pass
