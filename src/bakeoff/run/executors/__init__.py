"""Executors: where trials run.

``local`` is :func:`bakeoff.pipeline.run_sweep`, one trial after another in this process. ``ray``
(:mod:`bakeoff.run.executors.ray`) runs each trial as a Ray task on a cluster node. Both run the
same :class:`~bakeoff.run.trial.TrialRunner`; away from the driver, the runner gets a
:class:`Recorder` in place of the SQLite store, and the driver saves what comes back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from bakeoff.run.engines.base import get_engine
from bakeoff.run.hosts.base import Host
from bakeoff.plan import Planned
from bakeoff.judge.probes import results_from_json
from bakeoff.spec import Spec
from bakeoff.store import TrialRecord
from bakeoff.pipeline import make_host
from bakeoff.run.trial import Progress, TrialRunner


class Recorder:
    """The two store methods a TrialRunner calls, kept in memory.

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


def run_detached(spec: Spec, planned: Planned, rec: TrialRecord, sweep_dir: Path, model_path: str,
                 baseline_probes: dict | None, recorder: Recorder, *, host: Host | None = None,
                 progress: Progress | None = None, should_stop: Callable[[], bool] = lambda: False) -> TrialRecord:
    """Run one planned trial without the driver's store; returns the finished record.

    ``baseline_probes`` is the baseline's stored "probes" artifact (JSON), or None.
    """
    engine = get_engine(spec.engine, **spec.engine_options)
    host = host or make_host(spec)
    baseline = results_from_json(baseline_probes, spec.probes.set) if baseline_probes else None
    runner = TrialRunner(spec, engine, host, recorder, Path(sweep_dir), model_path, progress, should_stop)
    return runner.run(rec, planned, baseline if planned.changed else None)
