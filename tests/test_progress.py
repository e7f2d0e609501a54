"""bakeoff.progress: where a trial's phase is (probe k of the modes, bench repetition k), for the
live view, `bakeoff status` and the plain progress lines."""

from __future__ import annotations

import asyncio

from bakeoff import progress


def test_notes_reach_the_listener_of_the_block_also_inside_asyncio_run():
    got: list[str] = []

    async def work():
        progress.note("single requests: 9 prompts")
        await asyncio.sleep(0)
        progress.note("task gate: 80 items")

    with progress.reporting(got.append):
        asyncio.run(work())
    progress.note("after the block: nobody listens")
    assert got == ["single requests: 9 prompts", "task gate: 80 items"]


def test_a_failing_listener_never_fails_the_work():
    def broken(_: str) -> None:
        raise RuntimeError("terminal gone")

    with progress.reporting(broken):
        progress.note("bench c=4: repetition 1")


def test_the_bench_says_which_repetition_of_which_level():
    from bakeoff.measure.bench import Load
    from bakeoff.spec import Bench

    got: list[str] = []

    class NoServer(Load):  # the repetition itself is not the point: stop right after the note
        def __init__(self):
            self.cfg = Bench(repetitions=3, max_repetitions=5)

        async def prompts(self, keys):
            raise StopAsyncIteration

    with progress.reporting(got.append):
        try:
            asyncio.run(NoServer().once("c=4", 4, None, 1, 8, 0))
        except StopAsyncIteration:
            pass
    assert got == ["c=4: repetition 2 (at least 3, at most 5), 8 requests"]
