"""Executors: where trials run and how many at once — nothing else.

The pipeline (``bakeoff.pipeline``) owns the plan, pruning, the store and the decision; an
executor is handed one trial at a time (``submit``) while it has room (``capacity``) and hands
back finished records (``wait``). ``local``: one trial after another in this process. ``ray``:
each trial a Ray task with resources of its own. One module each, named in
``bakeoff.registry.EXECUTORS``; :func:`make_executor` picks.
"""

from __future__ import annotations

from bakeoff.registry import EXECUTORS
from bakeoff.run.executors.base import Context, Executor, Job

__all__ = ["Context", "Executor", "Job", "make_executor", "KNOWN"]

KNOWN = tuple(EXECUTORS.names())


def make_executor(name: str, ctx: Context) -> Executor:
    """The executor ``name`` names (``bakeoff.registry.EXECUTORS``), for this sweep."""
    return EXECUTORS.get(name)(ctx)
