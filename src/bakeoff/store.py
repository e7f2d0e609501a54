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
from pathlib import Path
from typing import Any

from bakeoff.errors import StoreError
from bakeoff.redact import mask_argv, redact_env, redact_obj, redact_text

SCHEMA_VERSION = 2  # 2: trials.identity (what the result depends on), meta 'decision'

VERDICTS = ("ok", "slow", "wrong", "unstable", "crashed", "skipped", "interrupted", "infra_error")
FINISHED_VERDICTS = ("ok", "slow", "wrong", "unstable", "crashed", "skipped")

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
    metrics: dict[str, Any] = field(default_factory=dict)
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
        if self.state not in ("pending", "running", "finished"):
            raise ValueError(f"bad trial state {self.state!r}")
        if self.state == "finished" and self.verdict not in VERDICTS:
            raise ValueError(f"finished trial {self.key} needs a verdict, has {self.verdict!r}")
        if self.state != "finished" and self.verdict not in (None, "interrupted", "infra_error"):
            raise ValueError(f"unfinished trial {self.key} cannot have verdict {self.verdict!r}")

    def is_finished(self) -> bool:
        return self.state == "finished" and self.verdict in FINISHED_VERDICTS

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


# -- identity: what a trial's result depends on besides its configuration ------------------------
# Everything of the spec that can change a result (model, server args and env, engine and its
# options, host, probes, bench, the baseline and how each axis is applied) and the engine's
# version; not the name, the plan strategy or the list of values to try.
IDENTITY_FIELDS = ("engine", "engine_options", "model", "server", "host", "probes", "bench")


# spec fields added after sweeps were stored, with the value that means "as before": a field at
# that value leaves a trial's identity as it was, so upgrading bakeoff does not make old verdicts stale
ADDED_LATER = (("probes", "lm_eval", None), ("server", "thinking", "auto"), ("server", "thinking_tokens", None),
               ("bench", "early_stop_share", 0.05))


def identity_parts(spec: Any, fingerprint: dict, host: Any = None) -> dict:
    d = spec.model_dump(mode="json")
    parts = {k: d.get(k) for k in IDENTITY_FIELDS}
    parts["server"] = {k: v for k, v in (parts["server"] or {}).items() if k not in ("port",)}
    for table, name, off in ADDED_LATER:  # at its "off" value: the identity of a sweep made before the field existed
        if parts.get(table) is not None and parts[table].get(name, off) == off:
            parts[table] = {k: v for k, v in parts[table].items() if k != name}
    if parts.get("bench") is not None:  # how far the race goes changes no launch's figures: a finer resolve resumes
        parts["bench"] = {k: v for k, v in parts["bench"].items() if k not in ("resolve", "max_extra_launches")}
    parts["axes"] = [{k: a.get(k) for k in ("name", "flag", "env", "model", "style")} for a in d.get("axes", [])]
    parts["baseline"] = {k: str(v) for k, v in spec.baseline_config().items()}
    parts["engine_version"] = fingerprint.get("engine_version")
    parts["model_file"] = _file_stamp(spec) if host is None or not spec.is_remote else _remote_stamp(host, spec.model_path())
    # inputs that change a verdict without changing the spec's text; each is added only where it
    # applies, so the identity of a sweep that has none of them stays what it was
    for name, value in (("probe_set", _probe_set_digest(spec)), ("engine_binary", _binary_stamp(spec, host)),
                        ("model_axis_files", _model_axis_stamps(spec, host)), ("model_revision", _hf_revision(spec, host)),
                        ("lm_eval_data", _lm_eval_data(spec))):
        if value is not None:
            parts[name] = value
    return parts


def identity_of(spec: Any, fingerprint: dict, host: Any = None) -> str:
    """The digest of what a trial's result depends on besides its configuration
    (``identity_parts``); ``host``: where the servers run, asked about its files."""
    import hashlib

    blob = json.dumps(redact_obj(identity_parts(spec, fingerprint, host)), sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _digest(obj: Any) -> str:
    import hashlib

    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _probe_set_digest(spec: Any) -> str | None:
    """A probe-set file's prompts and long document, as loaded (its includes resolved): the
    baseline's stored answers are read against these prompts by id, so new prompts are a new
    sweep. Built-in sets go with bakeoff's version (None)."""
    name = spec.probes.set
    if not name.endswith(".toml"):
        return None
    from dataclasses import asdict

    from bakeoff.judge.probes import load_prompt_set

    prompts, long_cfg = load_prompt_set(name)
    return _digest([[asdict(p) for p in prompts], long_cfg])


def _local_stamp(path: str | os.PathLike, content: bool = False) -> list | None:
    """[size, mtime] of a file or folder here (a folder: of every file in it), with the content's
    hash when ``content`` (a binary rebuilt at the same path in the same second)."""
    p = Path(os.path.expanduser(str(path)))
    if not p.exists():
        return None
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file())
        return [_digest([[str(f.relative_to(p)), f.stat().st_size, int(f.stat().st_mtime)] for f in files])]
    st = p.stat()
    stamp: list = [st.st_size, int(st.st_mtime)]
    if content:
        import hashlib

        h = hashlib.sha1()
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        stamp.append(h.hexdigest()[:16])
    return stamp


def _remote_stamp(host: Any, path: str, content: bool = False) -> list | None:
    """[size, mtime] (and the content's hash) of a file on a remote host, read there; a folder:
    the digest of its files' sizes and mtimes. None when the host cannot say."""
    if host is None or not host.is_remote or not path:
        return None
    script = ('p="$1"; if [ -d "$p" ]; then find "$p" -type f -printf "%P %s %T@\\n" | sort | sha1sum; '
              'else stat -L -c "%s %Y" "$p"' + (' && sha1sum "$p"' if content else '') + '; fi')
    try:
        rc, out = host.run_argv(["sh", "-c", script, "sh", path], 120)
    except Exception:  # the identity never stops a sweep; the host failing shows at launch
        return None
    return out.split()[:3] if rc == 0 and out.strip() else None


def _binary_stamp(spec: Any, host: Any) -> list | None:
    """``engine_options.binary`` (a build at a fixed path, rebuilt between sweeps): its size, mtime
    and content hash where the servers run. None when the spec names no binary."""
    binary = (spec.engine_options or {}).get("binary")
    if not isinstance(binary, str) or not binary:
        return None
    if spec.is_remote:
        return _remote_stamp(host, binary, content=True) if host is not None else None
    import shutil

    found = binary if os.sep in binary else shutil.which(binary)
    return _local_stamp(found, content=True) if found else None


def _model_axis_stamps(spec: Any, host: Any) -> dict | None:
    """Size and mtime of every model a model axis serves (``value -> stamp``)."""
    values = [str(v) for a in spec.axes if a.model for v in a.values]
    if not values:
        return None
    out = {}
    for v in values:
        if spec.is_remote:
            out[v] = _remote_stamp(host, v) if host is not None else None
        else:
            try:
                from bakeoff.spec import Model

                out[v] = _local_stamp(Model(path=v).resolve())
            except Exception:
                out[v] = None
    return out


def _hf_revision(spec: Any, host: Any) -> str | None:
    """The commit an ``hf:org/name`` model resolves to in the Hugging Face cache where the servers
    run (``refs/main``): a new upload of the model is another model. None when not cached."""
    path = spec.model.path
    if not path.startswith("hf:"):
        return None
    repo = path[3:].split("@", 1)[0]
    rel = f"models--{repo.replace('/', '--')}/refs/main"
    if spec.is_remote:
        if host is None or not host.is_remote:
            return None
        try:
            rc, out = host.run_argv(["sh", "-c", 'cat "${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}/$1"', "sh", rel], 60)
        except Exception:
            return None
        return out.strip() or None if rc == 0 else None
    cache = os.environ.get("HF_HUB_CACHE") or os.path.join(os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub")
    ref = Path(cache) / rel
    return ref.read_text().strip() or None if ref.is_file() else None


def _lm_eval_data(spec: Any) -> list | None:
    """The lm-eval task folder (``include_path``: its YAMLs and local data files), by size and mtime."""
    lm = spec.probes.lm_eval
    if lm is None or not lm.include_path:
        return None
    return _local_stamp(lm.include_path)


def _file_stamp(spec: Any) -> list | None:
    """Size and mtime of a local model file or folder (a re-downloaded model is another model)."""
    try:
        path = Path(spec.model.resolve())
    except Exception:
        return None
    if not path.exists():
        return None
    st = path.stat()
    return [st.st_size, int(st.st_mtime)]


def spec_changes(store: "Store", spec: Any, identity: str) -> list[str]:
    """Lines for the user when a sweep directory is resumed with an edited spec: which fields
    changed and how many finished trials will not be reused."""
    old = store.sweep()
    if old is None or old.get("identity") in (None, identity):
        return []
    new = spec.model_dump(mode="json")
    changed = sorted(k for k in set(old["spec"]) | set(new) if k != "name" and redact_obj(old["spec"].get(k)) != redact_obj(new.get(k)))
    stale = [t for t in store.trials() if t.identity != identity and t.is_finished()]
    what = ", ".join(changed) or "the engine version or the model file"
    return [f"the spec changed since this directory's last run ({what}): {len(stale)} finished trial(s) are stale — "
            "kept in the store with their logs, listed apart, not ranked or recommended; the configurations still "
            "in the spec run again as new trials"]
