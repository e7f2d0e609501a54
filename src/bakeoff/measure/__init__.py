"""Measure: the streaming client, bakeoff's load generator (``bench``) and the engines' own
benchmark tools (``tools``), all producing the same per-level statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bakeoff.measure.bench import LevelStats
    from bakeoff.spec import Bench


def run(base_url: str, cfg: Bench, **kw) -> list[LevelStats]:
    """The benchmark of one server: bakeoff's load generator, or the engine's own tool (``cfg.tool``)."""
    from bakeoff.measure.bench import _run_loop, run_async

    if cfg.tool != "bakeoff":
        from bakeoff.measure import tools

        from bakeoff.measure.bench import with_samples

        # the external tool runs ``repetitions`` times (no adaptive stop: each run is a process)
        runs = [tools.run_tool(base_url, cfg, model=kw.get("model"),
                               ignore_eos=cfg.sends_ignore_eos(kw.get("ignore_eos", False)),
                               expect_logprobs=kw.get("expect_logprobs", True))
                for _ in range(cfg.repetitions)]
        out = []
        for per in zip(*runs):
            bad = next((s for s in per if not s.valid), None)
            out.append(bad if bad is not None else with_samples(per[0], list(per), "fixed"))
        return out
    return _run_loop(run_async(base_url, cfg, **kw))
