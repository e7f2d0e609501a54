"""A trial's identity: what its result depends on besides its configuration (the spec's model,
server, engine, host, probes and bench, the engine's version, and the files behind them as
they are where the servers run). A stored trial of another identity is stale: kept, listed
apart, never ranked or reused (``Store.stale``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bakeoff.judge.probes import load_prompt_set
from bakeoff.redact import redact_obj
from bakeoff.spec import Model
from bakeoff.store import Store

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


def spec_changes(store: Store, spec: Any, identity: str) -> list[str]:
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
