"""Executors: where trials run and how many at once — nothing else.

The pipeline (``bakeoff.pipeline``) owns the plan, pruning, the store and the decision; an
executor is handed one trial at a time (``submit``) while it has room (``capacity``) and hands
back finished records (``wait``). ``local``: one trial after another in this process. ``ray``:
each trial a Ray task with resources of its own. One module each; :func:`make_executor` picks.
"""

from __future__ import annotations

from bakeoff.errors import SpecError
from bakeoff.run.executors.base import Context, Executor, Job

__all__ = ["Context", "Executor", "Job", "make_executor", "KNOWN"]

KNOWN = ("local", "ray")


def make_executor(name: str, ctx: Context) -> Executor:
    if name == "local":
        from bakeoff.run.executors.local import Local

        return Local(ctx)
    if name == "ray":
        from bakeoff.run.executors.ray import RayExecutor

        return RayExecutor(ctx)
    raise SpecError(f"executor: unknown executor {name!r}; known: {', '.join(KNOWN)}")
