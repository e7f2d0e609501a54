"""``optuna``: Bayesian search (Optuna's TPE sampler) over categorical and numeric axes, with
correctness as a constraint.

Each ask rebuilds an in-memory study from the stored history — every finished trial is added
with ``add_trial`` (its parameters, its figure, and its constraint), the running ones as
RUNNING so that the sampler's constant liar spreads parallel proposals — and then asks it for up
to ``n`` new configurations. The sampler's seed is ``plan.seed`` plus the number of trials it
was told about: the same stored history gives the same proposals, so a resumed search goes on
where the killed one stood.

* objective: ``decide.objective_of`` (maximized, or minimized for a lower-is-better figure);
* constraint: a wrong, crashed or skipped trial is *infeasible* (constraint value 1), not
  slow; TPE's ``constraints_func`` keeps the feasible ones as the good side;
* categorical axes sample their listed values; numeric axes (``range``, ``step``, ``log``)
  sample the range itself, ints on int axes;
* budget: ``plan.max_trials`` / ``plan.max_hours`` (enforced by the pipeline for every
  executor); ``plan.patience``: stop when that many trials finished without a new best;
  a discrete space whose every configuration ran ends the search too.
"""

from __future__ import annotations

import math
import warnings

from bakeoff.errors import MissingExtra
from bakeoff.plan import config_key
from bakeoff.plan import space
from bakeoff.plan.base import Strategy
from bakeoff.spec import render

INFEASIBLE, FEASIBLE = 1.0, 0.0
DUPLICATE_RETRIES = 30  # asks per wanted proposal before concluding the sampler only repeats itself


def _constraints(trial) -> list[float]:
    return list(trial.system_attrs.get("constraints", [FEASIBLE]))


class OptunaSearch(Strategy):
    name = "optuna"
    adaptive = True

    def distributions(self) -> dict:
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        out = {}
        for a in self.spec.axes:
            if a.numeric:
                lo, hi = a.range
                if a.is_int:
                    out[a.name] = IntDistribution(int(lo), int(hi), log=a.log, step=int(a.step or 1))
                else:
                    out[a.name] = FloatDistribution(float(lo), float(hi), log=a.log,
                                                    step=float(a.step) if a.step is not None else None)
            else:
                out[a.name] = CategoricalDistribution([render(v) for v in a.values])
        return out

    def _params(self, config: dict) -> dict | None:
        """A configuration as the study's parameters; None when it lies outside the space."""
        params = {}
        for a in self.spec.axes:
            v = config.get(a.name)
            if a.numeric:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    return None
                params[a.name] = int(v) if a.is_int else float(v)
            else:
                params[a.name] = render(v)
        return params

    def _config(self, params: dict) -> dict:
        cfg = {}
        for a in self.spec.axes:
            p = params[a.name]
            cfg[a.name] = p if a.numeric else next(v for v in a.values if render(v) == p)
        return cfg

    def study(self, history, running):
        """An in-memory study holding ``history`` (finished) and ``running`` (RUNNING)."""
        try:
            import optuna
            from optuna.trial import TrialState, create_trial
        except ImportError:
            raise MissingExtra("plan.strategy = 'optuna'", "optuna", "optuna") from None

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        dists = self.distributions()
        told = 0
        trials = []
        for t in sorted(history, key=lambda t: (t.finished or 0, t.idx)):
            params = self._params(t.config)
            ok = space.passed(t) and space.figure(t) is not None
            value = math.log(space.figure(t)) if ok else self._worst(history)
            try:
                trials.append(create_trial(params=params, distributions=dists, value=value,
                                           system_attrs={"constraints": [FEASIBLE if ok else INFEASIBLE]}))
            except (ValueError, TypeError):
                continue  # outside this space (a trial kept from an older spec)
            told += 1
        for c in running:
            params = self._params(c)
            if params is not None:
                trials.append(create_trial(state=TrialState.RUNNING, params=params, distributions=dists))
        sampler = optuna.samplers.TPESampler(
            seed=self.spec.plan.seed + told + len(running), n_startup_trials=max(3, len(self.spec.axes)),
            multivariate=True, constant_liar=True, constraints_func=_constraints,
            warn_independent_sampling=False)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.add_trials(trials)
        return study, dists

    @staticmethod
    def _worst(history) -> float:
        """An infeasible trial's value: below every feasible one (the constraint already marks it)."""
        figs = [space.figure(t) for t in history if space.passed(t) and space.figure(t)]
        return math.log(min(figs)) - 1.0 if figs else 0.0

    def ask(self, history, running, n):
        # a batch is at most the sampler's random start: past it, each proposal should learn from
        # results (and `bakeoff plan`, which asks for everything at once, shows that first round)
        n = min(n, max(3, len(self.spec.axes)))
        if self._out_of_patience(history):
            return []
        study, dists = self.study(history, running)
        seen = {config_key(t.config) for t in history} | {config_key(c) for c in running}
        out = []
        for _ in range(n * DUPLICATE_RETRIES):
            if len(out) >= n:
                break
            trial = study.ask(dists)
            cfg = self._config(trial.params)
            key = config_key(cfg)
            if key in seen:
                # the sampler repeated a configuration that ran: tell it the known outcome, ask again
                known = next((t for t in history if config_key(t.config) == key), None)
                ok = known is not None and space.passed(known) and space.figure(known) is not None
                study._storage.set_trial_system_attr(trial._trial_id, "constraints", [FEASIBLE if ok else INFEASIBLE])
                study.tell(trial, math.log(space.figure(known)) if ok else self._worst(history))
                continue
            seen.add(key)
            out.append(cfg)
        if not out and not running:
            finite = all(not a.numeric or a.is_int or a.step is not None for a in self.spec.axes)
            self.why_done = ("optuna: every configuration of the space ran" if finite and self._exhausted(history)
                             else f"optuna: the sampler proposed only configurations that already ran "
                                  f"({DUPLICATE_RETRIES} tries each)")
        return out

    def _exhausted(self, history) -> bool:
        size = 1
        for a in self.spec.axes:
            if a.numeric:
                size *= int(round((a.range[1] - a.range[0]) / (a.step or 1))) + 1
            else:
                size *= len(a.values)
        return len({config_key(t.config) for t in history}) >= size

    def _out_of_patience(self, history) -> bool:
        patience = self.spec.plan.patience
        if not patience:
            return False
        best, since = None, 0
        for t in sorted(history, key=lambda t: (t.finished or 0, t.idx)):
            f = space.figure(t) if space.passed(t) else None
            if f is not None and (best is None or f > best):
                best, since = f, 0
            else:
                since += 1
        if since >= patience:
            self.why_done = f"optuna: no new best in the last {since} trials (plan.patience = {patience})"
            return True
        return False
