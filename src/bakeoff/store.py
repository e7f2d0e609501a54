"""SQLite store, one file per sweep directory: the sweep, its trials, their artifacts.

Writes are transactional (WAL). Nothing secret is written: every row and artifact goes through
``bakeoff.redact`` on its way in. The schema is versioned from the first release: a store written
by a newer bakeoff fails clearly instead of being misread. One ``bakeoff run`` at a time holds
the directory's lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict

from pydantic import BaseModel, ValidationError

from bakeoff.errors import StoreError
from bakeoff.redact import mask_argv, redact_env, redact_obj, redact_text
from bakeoff.spec import Bench, Probes, Server, Spec

SCHEMA_VERSION = 2  # 2: trials.identity (what the result depends on), meta 'decision'


class Verdict(StrEnum):
    """A trial's verdict. A ``str`` enum: stored as its value, equal to it (``Verdict.OK == "ok"``)."""

    OK = "ok"                    # correct, and not slower than the baseline beyond its noise
    SLOW = "slow"                # correct, slower than ``bench.slow_fraction`` of the baseline
    WRONG = "wrong"              # failed a correctness check
    UNSTABLE = "unstable"        # failed a statistical gate once, passed it when launched again (judge.confirm)
    CRASHED = "crashed"          # the server failed to start, died or hung
    SKIPPED = "skipped"          # never launched: a known-bad combination (plan.prune)
    INTERRUPTED = "interrupted"  # stopped by the user; runs again on resume
    INFRA_ERROR = "infra_error"  # the host or worker failed, not the configuration; runs again on resume


VERDICTS = tuple(Verdict)
FINISHED_VERDICTS = (Verdict.OK, Verdict.SLOW, Verdict.WRONG, Verdict.UNSTABLE, Verdict.CRASHED, Verdict.SKIPPED)
CORRECT = (Verdict.OK, Verdict.SLOW)  # passed correctness: the only verdicts ranked, recommended or used as a reference
FAILED = (Verdict.WRONG, Verdict.CRASHED)  # the configuration itself failed (not skipped, stopped or the host's fault)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sweep (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    name TEXT NOT NULL, spec TEXT NOT NULL, fingerprint TEXT NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS trials (
    key TEXT PRIMARY KEY,
    idx INTEGER NOT NULL,
    config TEXT NOT NULL,
    changed TEXT NOT NULL,
    argv TEXT NOT NULL,
    env TEXT NOT NULL,
    state TEXT NOT NULL,
    verdict TEXT,
    cause TEXT,
    detail TEXT,
    evidence TEXT NOT NULL DEFAULT '[]',
    metrics TEXT NOT NULL DEFAULT '{}',
    phases TEXT NOT NULL DEFAULT '{}',
    log_path TEXT,
    pid INTEGER, pgid INTEGER, port INTEGER, argv0 TEXT,
    started REAL, finished REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    identity TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS artifacts (
    trial_key TEXT NOT NULL, name TEXT NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (trial_key, name)
);
"""


class TrialMetrics(TypedDict, total=False):
    """What a trial's ``metrics`` column holds (JSON): every key optional, none other written by
    bakeoff. The writers: run/trial.py (a run), decide (against the baseline), judge/confirm.py and
    judge/rejudge.py (a relaunch, a re-judgement), relaunch.py (the race)."""

    # the run (run/trial.py)
    probe: dict[str, Any]                 # the judge's figures (agreement, tasks, gate, drift ...)
    checks_not_run: list[str]             # weaker or skipped checks, said in every output
    failed_mode: str | None               # single | long | concurrent | bench c=N | gate ...
    detector: str                         # the check or bench fault that failed it
    baseline_below_floor: bool            # the baseline itself failed an absolute floor
    levels: list[dict[str, Any]]          # the benchmark's load levels (measure.bench)
    output_tok_s: float                   # headline figures (measure.bench.headline)
    ttft_p50_ms: float | None
    tpot_p50_ms: float | None
    level: str
    objective: dict[str, Any]             # goodput at the SLO load found
    energy: dict[str, Any]                # NVML during the benchmark
    hint: str                             # a failure's triage (crashed trials)
    hard: bool                            # the cause is the configuration's (never retried)
    confidence: str
    server_left_running: bool
    # decide (the final verdict is the ``verdict`` column; the run's own is kept here)
    judged: str                           # the run's verdict before the speed judgement (``TrialRecord.judged``)
    judged_detail: str | None
    vs_baseline: dict[str, Any]           # decide.stats.Ratio.to_json()
    ratio_vs_baseline: float
    unverified: bool                      # correct by the absolute checks only (no baseline to compare)
    # confirm / rejudge
    first_launch: dict[str, Any]          # a statistical gate's first failure, kept while it is relaunched
    launches_judged: int
    without_baseline: bool
    rejudged: str


@dataclass(frozen=True)
class TrialRecord:
    """A stored trial. ``state`` is pending|running|finished; a finished trial has a verdict."""

    key: str
    idx: int
    config: dict[str, Any]
    changed: list[str]
    argv: list[str]
    env: dict[str, str]
    state: str = "pending"
    verdict: str | None = None
    cause: str | None = None
    detail: str | None = None
    evidence: list[str] = field(default_factory=list)
    metrics: TrialMetrics = field(default_factory=dict)  # type: ignore[assignment]
    phases: dict[str, float] = field(default_factory=dict)
    log_path: str | None = None
    pid: int | None = None
    pgid: int | None = None
    port: int | None = None
    argv0: str | None = None
    started: float | None = None
    finished: float | None = None
    attempts: int = 0
    identity: str = ""  # digest of what the result depends on besides the configuration (``identity_of``)

    def __post_init__(self) -> None:
        if self.verdict in VERDICTS and not isinstance(self.verdict, Verdict):
            object.__setattr__(self, "verdict", Verdict(self.verdict))
        if self.state not in ("pending", "running", "finished"):
            raise ValueError(f"bad trial state {self.state!r}")
        if self.state == "finished" and self.verdict not in VERDICTS:
            raise ValueError(f"finished trial {self.key} needs a verdict, has {self.verdict!r}")
        if self.state != "finished" and self.verdict not in (None, "interrupted", "infra_error"):
            raise ValueError(f"unfinished trial {self.key} cannot have verdict {self.verdict!r}")

    def is_finished(self) -> bool:
        return self.state == "finished" and self.verdict in FINISHED_VERDICTS

    @property
    def judged(self) -> Verdict | None:
        """The verdict of the trial's own run, for correctness: ``verdict`` is the final one, where
        ``decide`` may have made an ``ok`` run ``slow`` against the baseline, and keeps the run's in
        ``metrics["judged"]``; before any decision the two are the same."""
        v = self.metrics.get("judged", self.verdict)
        return Verdict(v) if v in VERDICTS else v

    @property
    def is_baseline(self) -> bool:
        return not self.changed

    def with_(self, **kw: Any) -> "TrialRecord":
        return replace(self, **kw)


_JSON_FIELDS = ("config", "changed", "argv", "env", "evidence", "metrics", "phases")


class Store:
    def __init__(self, directory: str | os.PathLike, *, lock: bool = False) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_fh = None
        if lock:
            self._acquire_lock()
        self.path = self.dir / "bakeoff.sqlite"
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as err:
            raise StoreError(f"{self.path}: not a bakeoff store ({err})") from None

    # -- lifecycle -------------------------------------------------------------------------
    def _acquire_lock(self) -> None:
        fh = open(self.dir / ".lock", "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise StoreError(f"{self.dir}: another bakeoff run is using this sweep directory (pid {holder}); wait for it or use another --out") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._lock_fh = fh

    def close(self) -> None:
        self.db.close()
        if self._lock_fh is not None:
            self._lock_fh.close()
            self._lock_fh = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self):
        """One write transaction (BEGIN IMMEDIATE .. COMMIT); rolled back on any exception."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _migrate(self) -> None:
        self.db.executescript(_SCHEMA)
        with self._tx():
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row["value"]) > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: written by a newer bakeoff (schema {row['value']}, this one reads {SCHEMA_VERSION}); upgrade bakeoff"
                )
            elif int(row["value"]) < SCHEMA_VERSION:
                # 1 -> 2: trials gain an identity; an old trial's is unknown (''), so it is stale
                # for any spec: it stays readable, and a resumed sweep runs it again
                cols = {r["name"] for r in self.db.execute("PRAGMA table_info(trials)")}
                if "identity" not in cols:
                    self.db.execute("ALTER TABLE trials ADD COLUMN identity TEXT NOT NULL DEFAULT ''")
                self.db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))

    # -- sweep -----------------------------------------------------------------------------
    def init_sweep(self, name: str, spec: dict, fingerprint: dict, identity: str = "") -> None:
        """Record the spec this sweep runs now (the latest, when an edited spec resumes a
        directory) and its identity: trials of another identity are stale."""
        with self._tx():
            created = self.db.execute("SELECT created FROM sweep WHERE id=1").fetchone()
            before = self.db.execute("SELECT spec FROM sweep WHERE id=1").fetchone()
            old_ident = self.db.execute("SELECT value FROM meta WHERE key='identity'").fetchone()
            if before is not None and old_ident is not None and _text(old_ident["value"]) != identity:
                # the spec its stale trials ran under stays readable: meta 'spec~<identity>'
                self.db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (f"spec~{_text(old_ident['value'])}", before["spec"]))
            self.db.execute(
                "INSERT OR REPLACE INTO sweep VALUES (1, ?, ?, ?, ?)",
                (name, json.dumps(redact_obj(spec)), json.dumps(redact_obj(fingerprint)),
                 created["created"] if created else time.time()),
            )
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('identity', ?)", (json.dumps(identity),))

    def sweep(self) -> dict | None:
        row = self.db.execute("SELECT * FROM sweep WHERE id=1").fetchone()
        if row is None:
            return None
        return {"name": row["name"], "spec": json.loads(row["spec"]), "fingerprint": json.loads(row["fingerprint"]),
                "created": row["created"], "identity": self.meta("identity")}

    def spec(self) -> Spec:
        """The spec this sweep runs now, as the spec model (defaults for fields added since it was
        stored). StoreError, one line, when none is recorded or it no longer validates."""
        sweep = self.sweep()
        if sweep is None:
            raise StoreError(f"{self.path}: no sweep recorded in this store")
        try:
            return Spec.model_validate(sweep["spec"])
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "spec"
            raise StoreError(f"{self.path}: its stored spec does not validate with this bakeoff "
                             f"({where}: {first['msg']}; {err.error_count()} error(s))") from None

    def set_meta(self, key: str, value: Any) -> None:
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(redact_obj(value))))

    def meta(self, key: str) -> Any:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row["value"])
        except json.JSONDecodeError:  # bare text: 'identity' as written from 9d877f3 until e8046c0 (same schema 2)
            return row["value"]

    # -- progress (what the running bakeoff is doing now; for watchers and tests) ----------
    def set_progress(self, trial_key: str | None, phase: str) -> None:
        value = json.dumps({"trial": trial_key, "phase": phase, "pid": os.getpid(), "t": time.time()})
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('progress', ?)", (value,))

    def progress(self) -> dict | None:
        row = self.db.execute("SELECT value FROM meta WHERE key='progress'").fetchone()
        return json.loads(row["value"]) if row else None

    # -- trials ----------------------------------------------------------------------------
    def add_trial(self, rec: TrialRecord) -> TrialRecord:
        """Insert a planned trial unless one with that key exists; return the stored one."""
        with self._tx():
            existing = self.get(rec.key)
            if existing is not None:
                return existing
            self._write(rec)
        return rec

    def add_trials(self, recs: list[TrialRecord]) -> None:
        """Insert every planned trial not stored yet, all in one transaction."""
        with self._tx():
            for rec in recs:
                if self.get(rec.key) is None:
                    self._write(rec)

    def save(self, rec: TrialRecord) -> None:
        with self._tx():
            self._write(rec)

    def _write(self, rec: TrialRecord) -> None:
        d = rec.__dict__.copy()
        d["env"] = redact_env(d["env"])
        d["argv"] = mask_argv(d["argv"])
        for f in ("detail", "cause"):
            if d[f]:
                d[f] = redact_text(d[f])
        for f in _JSON_FIELDS:
            d[f] = json.dumps(redact_obj(d[f]))
        cols = ", ".join(d)
        marks = ", ".join(f":{k}" for k in d)
        self.db.execute(f"INSERT OR REPLACE INTO trials ({cols}) VALUES ({marks})", d)

    def retire(self, key: str) -> TrialRecord | None:
        """Keep the trial stored under ``key`` (one of an earlier spec: another identity) under a
        key of its own, ``<key>~<its identity>``, with its artifacts and its log file as they are,
        so that the configuration's new trial never replaces it; returns the kept record."""
        with self._tx():
            rec = self.get(key)
            if rec is None:
                return None
            new = f"{key}~{rec.identity or 'v1'}"
            n = 1
            while self.get(new) is not None:  # the same identity again (an edit undone and redone)
                n += 1
                new = f"{key}~{rec.identity or 'v1'}~{n}"
            self.db.execute("UPDATE trials SET key=? WHERE key=?", (new, key))
            self.db.execute("UPDATE artifacts SET trial_key=? WHERE trial_key=?", (new, key))
        return self.get(new)

    def restore(self, key: str, identity: str) -> TrialRecord | None:
        """The configuration's trial of ``identity`` kept by ``retire`` (a spec edited, then
        edited back), under its own key ``key`` again, with its artifacts; None when none is kept."""
        with self._tx():
            kept = self.get(f"{key}~{identity}")
            if kept is None or not identity or self.get(key) is not None:
                return None
            self.db.execute("UPDATE trials SET key=? WHERE key=?", (key, kept.key))
            self.db.execute("UPDATE artifacts SET trial_key=? WHERE trial_key=?", (key, kept.key))
        return self.get(key)

    def get(self, key: str) -> TrialRecord | None:
        row = self.db.execute("SELECT * FROM trials WHERE key=?", (key,)).fetchone()
        return _row(row) if row else None

    def trials(self) -> list[TrialRecord]:
        return [_row(r) for r in self.db.execute("SELECT * FROM trials ORDER BY idx")]

    def stale(self) -> list[TrialRecord]:
        """Trials of an earlier spec (another identity): kept, listed apart, never ranked or reused."""
        ident = self.meta("identity")
        return [t for t in self.trials() if ident is not None and t.identity != ident]

    def current(self) -> list[TrialRecord]:
        """The trials of the spec this sweep runs now (stale ones of an edited spec left out)."""
        ident = self.meta("identity")
        return [t for t in self.trials() if ident is None or t.identity == ident]

    def next_idx(self) -> int:
        row = self.db.execute("SELECT MAX(idx) AS m FROM trials").fetchone()
        return 0 if row["m"] is None else row["m"] + 1

    # -- artifacts -------------------------------------------------------------------------
    def put_artifact(self, trial_key: str, name: str, data: Any) -> None:
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO artifacts VALUES (?, ?, ?)", (trial_key, name, json.dumps(redact_obj(data))))

    def artifact(self, trial_key: str, name: str) -> Any:
        row = self.db.execute("SELECT data FROM artifacts WHERE trial_key=? AND name=?", (trial_key, name)).fetchone()
        return json.loads(row["data"]) if row else None


_TABLES: dict[str, type[BaseModel]] = {"bench": Bench, "server": Server, "probes": Probes}


def spec_table(spec: dict, name: str) -> dict:
    """Table ``name`` (bench, server, probes) of a stored spec (its JSON, ``Store.sweep()["spec"]``)
    with the spec model's default for every field it does not hold: a sweep stored before a field
    existed reads as the model says, and no reader restates a default."""
    fields = _TABLES[name].model_fields
    defaults = {k: f.get_default(call_default_factory=True) for k, f in fields.items() if not f.is_required()}
    return {**defaults, **(spec.get(name) or {})}


def _text(value: str) -> str:
    """A meta value as text: JSON, or bare text as an older bakeoff wrote it."""
    try:
        v = json.loads(value)
    except json.JSONDecodeError:
        return value
    return v if isinstance(v, str) else json.dumps(v)


def _row(row: sqlite3.Row) -> TrialRecord:
    d = dict(row)
    for f in _JSON_FIELDS:
        d[f] = json.loads(d[f])
    return TrialRecord(**d)


def open_readonly(directory: str | os.PathLike) -> Store:
    if not (Path(directory) / "bakeoff.sqlite").exists():
        raise StoreError(f"{directory}: no bakeoff sweep here (bakeoff.sqlite missing)")
    return Store(directory)
