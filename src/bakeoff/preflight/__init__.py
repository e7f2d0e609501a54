"""Preflight: probe each backend directly, in seconds, before any server is launched.

A probe runs one library operation on small realistic shapes, compares it with a float32
reference, times it, and gets one verdict:

* ``unsupported``   the library refused (its reason is kept, e.g. SDPA's "No available kernel")
* ``compile-failed`` a JIT compiler (Triton) could not build the kernel for this device
* ``nan``           the output has NaN or inf
* ``mismatch``      finite but off the reference by more than the tolerance (errors kept)
* ``ok``            within tolerance (median time kept)

Probes live one small module per library (``torch_sdpa``, ``torch_fp8``, ``torch_grouped``,
``triton_kernel``; ``flashinfer`` registers only when importable; the modules are listed in
``bakeoff.registry.PREFLIGHT_PROBES``). ``@probe(name)`` adds a function to that registry;
the function returns ``(output, reference, tolerance)`` or raises.
The planner uses the verdicts through ``prune_map`` (see ``bakeoff.preflight.plan``).
"""

from __future__ import annotations

import fnmatch
import re
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Callable

from bakeoff.registry import PREFLIGHT_PROBES

VERDICTS = ("ok", "mismatch", "nan", "compile-failed", "unsupported")
BLOCKING = ("unsupported", "compile-failed", "nan")  # verdicts that prune an axis value


class Unsupported(Exception):
    """A probe's precondition is not met (no GPU, old compute capability, package missing)."""


class CompileFailed(Exception):
    """A JIT compiler could not build the probe's kernel."""


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float  # relative to max |reference|


@dataclass
class ProbeResult:
    name: str
    library: str
    verdict: str
    reason: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    time_ms: float | None = None
    params: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Probe:
    name: str
    library: str
    fn: Callable[[], tuple]
    params: dict


def probe(name: str, library: str, **params) -> Callable:
    """Register ``fn`` as probe ``name``. ``fn()`` returns (run, reference, Tolerance) where
    ``run`` is a zero-argument callable producing the output (it is timed) and ``reference``
    is a float32 tensor."""

    def deco(fn: Callable) -> Callable:
        PREFLIGHT_PROBES.add(name, Probe(name, library, fn, params))
        return fn

    return deco


def registry() -> dict[str, Probe]:
    """Every probe by name (``bakeoff.registry.PREFLIGHT_PROBES``: each probe module registers its own)."""
    return dict(PREFLIGHT_PROBES.items())


def select(patterns: list[str] | None) -> list[Probe]:
    """Probes whose names match any glob in ``patterns`` (all when None), in name order."""
    reg = registry()
    if not patterns:
        return [reg[k] for k in sorted(reg)]
    names = sorted({n for p in patterns for n in reg if fnmatch.fnmatchcase(n, p)})
    return [reg[n] for n in names]


# -- classification (pure; tested on CPU) -------------------------------------------------


def compare(out, ref, tol: Tolerance) -> tuple[str, float | None, float | None, str]:
    """Verdict of an output tensor against its float32 reference: (verdict, abs, rel, reason)."""
    import torch

    out = out.detach().float()
    ref = ref.detach().float().to(out.device)
    if out.shape != ref.shape:
        return "mismatch", None, None, f"shape {tuple(out.shape)} vs reference {tuple(ref.shape)}"
    finite = torch.isfinite(out)
    nonfinite = int((~finite).sum())
    err = (out - ref).abs().max().item() if not nonfinite else None
    return verdict_for(nonfinite, out.numel(), err, ref.abs().max().item(), tol)


def verdict_for(nonfinite: int, total: int, max_abs_err: float | None, ref_scale: float,
                tol: Tolerance) -> tuple[str, float | None, float | None, str]:
    """The rule itself, on plain numbers: any NaN/inf -> nan; error over atol + rtol*max|ref|
    -> mismatch; else ok."""
    if nonfinite:
        return "nan", None, None, f"{nonfinite}/{total} outputs are NaN or inf"
    assert max_abs_err is not None
    scale = max(ref_scale, 1e-12)
    rel = max_abs_err / scale
    if max_abs_err > tol.atol + tol.rtol * scale:
        return "mismatch", max_abs_err, rel, (f"max abs err {max_abs_err:.3g} (rel {rel:.3g}) > atol {tol.atol}"
                                             f" + rtol {tol.rtol} x {scale:.3g}")
    return "ok", max_abs_err, rel, ""


def classify_error(err: BaseException, caught: list[str]) -> tuple[str, str]:
    """Verdict of a probe that raised: the library's own words are the reason."""
    msg = f"{type(err).__name__}: {err}".strip()
    if isinstance(err, CompileFailed) or type(err).__name__ in ("CompilationError", "CompileTimeAssertionFailure",
                                                               "OutOfResources", "PTXASError"):
        return "compile-failed", _first_line(msg)
    reason = _first_line(msg)
    why = [_first_line(re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", w)) for w in caught]
    why = [w for w in why if w and not w.rstrip().endswith("because:")]
    if why:
        # SDPA says *why* a backend has no kernel in warnings before it raises
        reason = reason + " | " + " | ".join(dict.fromkeys(why[:6]))
    return "unsupported", reason


def _first_line(s: str, limit: int = 400) -> str:
    s = s.strip().splitlines()[0] if s.strip() else s
    return s[:limit]


# -- running ------------------------------------------------------------------------------


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time_ms(run: Callable, reps: int) -> float:
    times = []
    for _ in range(reps):
        _sync()
        t0 = time.perf_counter()
        run()
        _sync()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return times[len(times) // 2]


def run_probe(p: Probe, reps: int = 10) -> ProbeResult:
    """Run one probe; never raises for a library failure (that is the verdict)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run, ref, tol = p.fn()
            out = run()
            _sync()
            verdict, abs_err, rel_err, reason = compare(out, ref, tol)
            ms = _time_ms(run, reps) if verdict in ("ok", "mismatch") else None
            return ProbeResult(p.name, p.library, verdict, reason, abs_err, rel_err,
                               round(ms, 4) if ms is not None else None, p.params)
        except Exception as err:  # noqa: BLE001 - whatever the library raised is the verdict
            verdict, reason = classify_error(err, [str(w.message) for w in caught])
            return ProbeResult(p.name, p.library, verdict, reason, params=p.params)


def run_all(patterns: list[str] | None = None, reps: int = 10) -> dict:
    """Every selected probe's result, plus the device it ran on."""
    from bakeoff.preflight.device import describe

    results = [run_probe(p, reps).to_json() for p in select(patterns)]
    return {"schema": 1, "device": describe(), "results": results}
