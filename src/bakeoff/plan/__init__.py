"""Strategies that turn a spec into the list of configurations to try.

* ``baseline``: the baseline alone.
* ``ofat``: the baseline, then each other value of each axis with everything else at baseline —
  every trial differs from the baseline in exactly one axis.
* ``grid``: every combination, the baseline first.
Pruning: a value that failed with a hard incompatibility (or a preflight verdict) drops the
other configurations that contain it, unless the spec forces it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass

from bakeoff.spec import Model, Spec, Value, render


@dataclass(frozen=True)
class Planned:
    idx: int
    config: dict[str, Value]
    changed: tuple[str, ...]  # axes that differ from the baseline

    @property
    def key(self) -> str:
        return config_key(self.config)

    @property
    def label(self) -> str:
        if not self.changed:
            return "baseline"
        return ", ".join(f"{a}={render(self.config[a])}" for a in self.changed)


def config_key(config: dict[str, Value]) -> str:
    blob = json.dumps({k: render(v) for k, v in sorted(config.items())}, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def make_plan(spec: Spec) -> list[Planned]:
    base = spec.baseline_config()
    configs: list[dict[str, Value]] = [base]
    if spec.plan.strategy == "ofat":
        for axis in spec.axes:
            for value in axis.values:
                if render(value) != render(base[axis.name]):
                    configs.append({**base, axis.name: value})
    elif spec.plan.strategy == "grid":
        names = [a.name for a in spec.axes]
        for combo in itertools.product(*(a.values for a in spec.axes)):
            cfg = dict(zip(names, combo))
            if config_key(cfg) != config_key(base):
                configs.append(cfg)
    out = []
    for i, cfg in enumerate(configs):
        changed = tuple(a.name for a in spec.axes if render(cfg[a.name]) != render(base[a.name]))
        out.append(Planned(i, cfg, changed))
    return out


def pruned_by(planned: Planned, bad: dict[tuple[str, str], str], force: list[str]) -> str | None:
    """If ``planned`` contains a known-bad (axis, value) not forced, say why it is skipped."""
    if not planned.changed:
        return None
    for axis in planned.changed:
        pair = (axis, render(planned.config[axis]))
        if pair in bad and f"{axis}={pair[1]}" not in force:
            return bad[pair]
    return None


def axis_env_and_args(spec: Spec, config: dict[str, Value]) -> tuple[list[str], dict[str, str]]:
    """Render a configuration into argv fragments (flag axes) and env entries (env axes).
    A model axis renders into neither: see ``model_of``."""
    args: list[str] = []
    env: dict[str, str] = {}
    for axis in spec.axes:
        value = config[axis.name]
        if axis.flag is not None:
            args += axis.argv(value)
        elif axis.env is not None:
            env[axis.env] = render(value)
    return args, env


def model_of(spec: Spec, config: dict[str, Value], default: str) -> str:
    """The model path this configuration serves: a model axis's value, else ``default``."""
    for axis in spec.axes:
        if axis.model:
            return Model(path=render(config[axis.name])).resolve()
    return default
