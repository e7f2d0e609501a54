"""The executor contract, and the in-memory recorder a trial uses away from the driver's store."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from bakeoff.judge.probes import results_from_json
from bakeoff.plan import Planned
from bakeoff.run.engines.base import get_engine
from bakeoff.run.hosts import Host
from bakeoff.run.trial import Progress, TrialRunner
from bakeoff.spec import Spec
from bakeoff.store import TrialRecord

if TYPE_CHECKING:
    from bakeoff.store import Store


@dataclass
class Events:
    """Callbacks for live progress; all optional."""

    trial_start: Callable[[Planned, int], None] = lambda p, n: None
    # (phase, "") when a trial's phase starts, then (phase, note) for its progress notes
    phase: Callable[[str, str], None] = lambda phase, line: None
    trial_end: Callable[[TrialRecord], None] = lambda rec: None
    note: Callable[[str], None] = lambda msg: None


@dataclass(frozen=True)
class Job:
    """One trial to run: its configuration, its stored record, and the baseline's stored probe
    answers (``None`` for the baseline itself, or when no healthy baseline exists)."""

    planned: Planned
    record: TrialRecord
    baseline_probes: dict | None


@dataclass
class Context:
    """What every executor is given: the resolved spec and where results go."""

    spec: Spec
    store: "Store"
    host: Host
    out_dir: Path
    model_path: str
    events: Events
    should_stop: Callable[[], bool]


class Executor(ABC):
    """Where a trial runs and how many run at once. ``capacity`` / ``submit`` / ``wait`` are the
    contract; ``interrupt`` and ``kill_now`` answer the first and second Ctrl-C."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    @abstractmethod
    def capacity(self) -> int:
        """How many more trials can start now."""

    @abstractmethod
    def submit(self, job: Job) -> None:
        """Start (or queue to start at once) one trial."""

    @abstractmethod
    def wait(self) -> list[TrialRecord]:
        """Block until at least one submitted trial ends (or the user stops); return the ended
        trials' records, their artifacts already in the store. Never raises for a failed
        configuration; an ``infra_error`` record says the host or worker failed."""

    def interrupt(self) -> None:
        """First Ctrl-C: stop running trials now; ``wait`` then returns them as interrupted."""

    def kill_now(self) -> None:
        """Second Ctrl-C: SIGKILL every server at once, without waiting."""


class Recorder:
    """The two store methods a TrialRunner calls, kept in memory (a trial away from the driver).

    ``on_save`` sees every saved record; the first one after launch carries the server's pid and
    process group, which is how a driver learns what to stop if this worker dies.
    """

    def __init__(self, on_save: Callable[[TrialRecord], None] | None = None) -> None:
        self.last: TrialRecord | None = None
        self.artifacts: dict[str, Any] = {}
        self._on_save = on_save or (lambda rec: None)

    def save(self, rec: TrialRecord) -> None:
        self.last = rec
        self._on_save(rec)

    def put_artifact(self, trial_key: str, name: str, data: Any) -> None:
        self.artifacts[name] = data


def runner_for(spec: Spec, host: Host, store: Any, sweep_dir: Path, model_path: str, *,
               progress: Progress | None = None, should_stop: Callable[[], bool] = lambda: False) -> TrialRunner:
    engine = get_engine(spec.engine, **spec.engine_options)
    return TrialRunner(spec, engine, host, store, Path(sweep_dir), model_path, progress, should_stop)


def run_job(runner: TrialRunner, job: Job) -> TrialRecord:
    """Run one job with ``runner``: the baseline's stored answers become the reference."""
    spec = runner.spec
    baseline = results_from_json(job.baseline_probes, spec.probes.set) if job.baseline_probes else None
    return runner.run(job.record, job.planned, baseline if job.planned.changed else None)
