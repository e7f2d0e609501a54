"""The local executor: one trial after another, in this process, on the spec's host."""

from __future__ import annotations

from bakeoff.run.executors.base import Context, Executor, Job, run_job, runner_for
from bakeoff.store import TrialRecord


class Local(Executor):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._job: Job | None = None
        self._phase: list = [None]
        self.runner = runner_for(ctx.spec, ctx.host, ctx.store, ctx.out_dir, ctx.model_path,
                                 progress=self._on_phase, should_stop=ctx.should_stop)

    def _on_phase(self, phase: str, line: str) -> None:
        if phase != self._phase[0]:
            self._phase[0] = phase
            self.ctx.store.set_progress(self._job.record.key if self._job else None, phase)
        self.ctx.events.phase(phase, line)

    def capacity(self) -> int:
        return 0 if self._job else 1

    def submit(self, job: Job) -> None:
        assert self._job is None, "the local executor runs one trial at a time"
        self._job = job

    def wait(self) -> list[TrialRecord]:
        job, self._phase[0] = self._job, None
        if job is None:
            return []
        try:
            self.ctx.events.trial_start(job.planned, len(self.ctx.store.trials()))
            self.ctx.store.set_progress(job.record.key, "launch")
            return [run_job(self.runner, job)]
        finally:
            self._job = None

    def interrupt(self) -> None:
        self.runner.abort_current()

    def kill_now(self) -> None:
        self.ctx.host.kill_all()
