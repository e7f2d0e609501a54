"""The layout: bakeoff's modules depend one way (issue 28).

pipeline -> run -> (judge, measure) -> store -> spec, with decide and report above the store.
Imports are read from the source (module- and function-level alike, as
/work/shared/tools/import_cycles.py reads them): a function-level import is a dependency too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import bakeoff

ROOT = Path(bakeoff.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(mod: str, path: Path, known: set[str]) -> set[str]:
    """The bakeoff modules ``mod`` imports anywhere in its source (``from x import y``: ``x.y``
    when it is a module, else ``x``)."""
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                src = f"{base}.{node.module}" if node.module else base
            else:
                src = node.module or ""
            names = [src] + [f"{src}.{a.name}" for a in node.names]
        for n in names:
            while n and n not in known:
                n = n.rpartition(".")[0]
            if n and n != mod:
                found.add(n)
    return found


def graph() -> dict[str, set[str]]:
    """module -> the bakeoff modules it imports; a package importing its own submodules is left
    out (that alone is no cycle)."""
    mods = _modules()
    return {m: {t for t in _imports(m, p, set(mods)) if not t.startswith(m + ".")} for m, p in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    """No cycle among all of bakeoff's modules. Passes once issue 28's three branches are in:
    this one (store, decide, measure, executors, pipeline), the registry's (spec.py imports
    nothing above it) and the judge's (judge.probes and judge.lmeval no longer import each other)."""
    found = cycles(graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


# what other work removes (issue 28): spec.py's imports of judge/, plan/ and run/, and the
# judge.probes <-> judge.lmeval pair; every other edge must already go one way
_ELSEWHERE = {"bakeoff.spec": None, "bakeoff.judge.probes": {"bakeoff.judge.lmeval"},
              "bakeoff.judge.lmeval": {"bakeoff.judge.probes"}}


def test_no_import_cycle_besides_spec_and_the_judge():
    g = graph()
    for mod, edges in _ELSEWHERE.items():
        g[mod] = set() if edges is None else g[mod] - edges
    found = cycles(g)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_lower_layers_never_import_upper_ones():
    """The store imports nothing of the stages; measure and judge nothing of run's executors and
    trials, plan, decide (but its statistics), report or the pipeline; decide nothing of those
    either but judge's and measure's; plan nothing of run, report or the pipeline; run nothing of
    the pipeline, decide or report."""
    g = graph()
    upper = {
        "bakeoff.store": ("bakeoff.judge", "bakeoff.measure", "bakeoff.run", "bakeoff.plan", "bakeoff.decide",
                          "bakeoff.report", "bakeoff.pipeline", "bakeoff.relaunch"),
        "bakeoff.measure": ("bakeoff.run.executors", "bakeoff.run.trial", "bakeoff.plan", "bakeoff.decide",
                            "bakeoff.report", "bakeoff.pipeline", "bakeoff.relaunch"),
        "bakeoff.judge": ("bakeoff.run.executors", "bakeoff.run.trial", "bakeoff.plan", "bakeoff.decide",
                          "bakeoff.report", "bakeoff.pipeline", "bakeoff.relaunch"),
        "bakeoff.decide": ("bakeoff.run.executors", "bakeoff.run.trial", "bakeoff.plan.base", "bakeoff.plan.space",
                           "bakeoff.report", "bakeoff.pipeline", "bakeoff.relaunch", "bakeoff.cli"),
        "bakeoff.plan": ("bakeoff.run", "bakeoff.report", "bakeoff.pipeline", "bakeoff.relaunch", "bakeoff.cli"),
        "bakeoff.run": ("bakeoff.pipeline", "bakeoff.relaunch", "bakeoff.decide", "bakeoff.report", "bakeoff.cli"),
    }
    wrong = []
    for mod, targets in g.items():
        for low, ups in upper.items():
            if mod == low or mod.startswith(low + "."):
                wrong += [f"{mod} -> {t}" for t in sorted(targets)
                          if any(t == u or t.startswith(u + ".") for u in ups)
                          and t != "bakeoff.decide.stats"]
    assert not wrong, "imports against the layout: " + ", ".join(wrong)
