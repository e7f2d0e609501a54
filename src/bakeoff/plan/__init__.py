"""Plan: which configurations to try, and in what order.

A configuration is a dict axis -> value; a :class:`Planned` one has its place in the sweep
(``idx``) and the axes where it differs from the baseline. A strategy (``base.Strategy``, one
module each: ``fixed.py`` for baseline / ofat / grid) proposes the next configurations from the
finished trials (ask/tell through the store: resume replays what is stored). ``prune.Gate``
skips configurations that contain a combination known to fail.
"""

from __future__ import annotations

import hashlib
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
        if axis.model:  # on a remote host, `bakeoff run` checked the paths there (run/hosts/checks.py)
            model = Model(path=render(config[axis.name]))
            return model.resolve(exists=lambda path: True) if spec.is_remote else model.resolve()
    return default


def planned(idx: int, config: dict[str, Value], spec: Spec) -> Planned:
    """A configuration with its place in the sweep and the axes where it leaves the baseline."""
    base = spec.baseline_config()
    return Planned(idx, dict(config), tuple(a.name for a in spec.axes if render(config[a.name]) != render(base[a.name])))


def make_plan(spec: Spec) -> list[Planned]:
    """The configurations a strategy would run if every trial passed (what `bakeoff plan` prints).
    For an adaptive strategy this is its first round; later rounds depend on results."""
    from bakeoff.plan.base import make_strategy

    base = spec.baseline_config()
    configs = [base] + make_strategy(spec).ask([], [], n=10_000)
    return [planned(i, c, spec) for i, c in enumerate(configs)]
