"""Read an engine's ``--help`` output into ``{flag: [choices]}`` and check axis values against it.

Handles the help layouts the engines print:
  * argparse (SGLang, vLLM, TensorRT-LLM's older scripts): ``--flag {a,b,c}`` in the usage block
    and the options list, choice sets that wrap across lines (``{a,b,\\n     c}``), metavar-only
    flags (``--flag CHOICE``), aliases (``--tp-size TP_SIZE, --tensor-parallel-size TP_SIZE``),
    and ``[--flag | --no-flag]`` boolean pairs;
  * click / typer (``trtllm-serve``, ``transformers serve``): ``--flag [a|b|c]`` and
    ``--flag / --no-flag``;
  * vLLM's "Possible choices: a, b" lines under a flag.

A flag with ``[]`` takes a free-form value (or none). Lines starting with ``#`` before the help
text proper are a provenance header of a captured file and are skipped.
"""

from __future__ import annotations

import functools
import re
import subprocess
import shutil
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bakeoff.registry import suggest
from bakeoff.errors import SpecError

# a flag token: not preceded by a word char or '-' (so "--no-x" is one token, "a--b" none)
_FLAG = r"(?<![\w-])(--?[A-Za-z0-9][A-Za-z0-9_.-]*)"
# argparse choices: {a,b,c}; may wrap across lines (whitespace inside is dropped)
_BRACES = re.compile(_FLAG + r"(?:[ \t]+|=)\{([^{}]*)\}")
# click choices: [a|b|c]
_CLICK = re.compile(_FLAG + r"[ \t]+\[([^\[\]]*\|[^\[\]]*)\]")
_ANY_FLAG = re.compile(_FLAG)
_POSSIBLE = re.compile(r"Possible choices:\s*(.+)")


def _split_choices(body: str, sep: str) -> list[str]:
    body = re.sub(r"\s+", "", body)
    items = [c for c in body.split(sep) if c != ""]
    if not items or any(c.startswith("-") for c in items):
        return []
    return items


def _strip_header(text: str) -> str:
    lines = text.splitlines()
    i = 0
    while i < len(lines) and (lines[i].startswith("#") or not lines[i].strip()):
        i += 1
    return "\n".join(lines[i:])


def parse_help(text: str) -> dict[str, list[str]]:
    """``--help`` output -> ``{flag: choices}``; ``[]`` means any value (or a bare switch)."""
    text = _strip_header(text)
    flags: dict[str, list[str]] = {}

    def note(flag: str, choices: list[str]) -> None:
        if choices and not flags.get(flag):
            flags[flag] = choices
        else:
            flags.setdefault(flag, [])

    for line in text.splitlines():
        stripped = line.lstrip()
        # only where a flag is declared: an options-list entry or the usage block, not prose
        if not (stripped.startswith("-") or stripped.startswith("[") or stripped.lower().startswith("usage:")):
            continue
        for m in _ANY_FLAG.finditer(line):
            tok = m.group(1)
            if len(tok) > 1 and not re.fullmatch(r"-\d[\d.]*", tok):
                note(tok, [])
    for m in _BRACES.finditer(text):
        note(m.group(1), _split_choices(m.group(2), ","))
    for m in _CLICK.finditer(text):
        note(m.group(1), _split_choices(m.group(2), "|"))
    # vLLM style: "--flag ..." entry followed by a "Possible choices: a, b" line
    current: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("-"):
            current = [t for t in _ANY_FLAG.findall(stripped.split("  ")[0]) if t in flags]
            continue
        pm = _POSSIBLE.search(stripped)
        if pm and current:
            vals = [v.strip() for v in pm.group(1).split(",") if v.strip()]
            for f in current:
                if not flags.get(f):
                    flags[f] = vals
    flags.pop("-", None)
    return flags


def resolve_flag(flags: dict[str, list[str]], flag: str, allow_abbrev: bool = True) -> str | None:
    """The declared flag ``flag`` names: itself, or (argparse's allow_abbrev) the one long flag it
    is a unique prefix of, e.g. ``--tp`` -> ``--tp-size``. None when unknown or ambiguous."""
    if flag in flags:
        return flag
    name = flag.split("=", 1)[0]
    if name in flags:
        return name
    if allow_abbrev and name.startswith("--"):
        hits = [f for f in flags if f.startswith(name) and f.startswith("--")]
        if len(hits) == 1:
            return hits[0]
    return None


def check_value(flags: dict[str, list[str]], flag: str, value: str, program: str, allow_abbrev: bool = True) -> None:
    """Raise SpecError if ``flag`` is not one ``program`` declares, or ``value`` not one of its choices."""
    if not flags:
        return
    canon = resolve_flag(flags, flag, allow_abbrev)
    if canon is None:
        longs = [f for f in flags if f.startswith("--")]
        raise SpecError(f"{flag}: not a flag of {program}{suggest(flag, longs)}")
    allowed = flags[canon]
    if allowed and value not in allowed:
        raise SpecError(
            f"{flag}: {value!r} is not a valid choice{suggest(value, allowed)}; valid: {', '.join(allowed)}"
        )


def load_help_file(path: str | Path) -> dict[str, list[str]]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise SpecError(f"engine_options.help_text: {str(p)!r} is not a file")
    return parse_help(p.read_text(encoding="utf-8", errors="replace"))


@functools.lru_cache(maxsize=16)
def _run_help(argv: tuple[str, ...], timeout: float) -> str:
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout + "\n" + out.stderr


def installed_flags(*argvs: list[str], timeout: float = 120) -> dict[str, list[str]]:
    """Run the first help command (of ``argvs``) that yields flags; cached per command; {} if none."""
    for argv in argvs:
        flags = parse_help(_run_help(tuple(argv), timeout))
        if len([f for f in flags if f.startswith("--")]) >= 3:
            return flags
    return {}


def console_script(name: str, python: str, binary: str | None = None) -> str:
    """An engine's console script: ``binary`` if given, else the one beside ``python``, else PATH."""
    if binary:
        return binary
    beside = Path(python).with_name(name)
    if beside.is_file():
        return str(beside)
    return shutil.which(name) or name


class ScriptOptions(BaseModel):
    """``engine_options`` of an engine started by a console script (trtllm, transformers)."""

    model_config = ConfigDict(extra="forbid")

    python: str | None = None
    binary: str | None = None
    help_text: str | None = None


class ScriptEngine:
    """Mixin for engines started by a console script of a Python package (options: python, binary, help_text)."""

    script: str = ""
    Options = ScriptOptions

    def __init__(self, python: str | None = None, binary: str | None = None, help_text: str | None = None) -> None:
        self.python = python or sys.executable
        self.binary = binary
        self.help_text = help_text

    def _binary(self) -> str:
        return console_script(self.script, self.python, self.binary)


class HelpValidated:
    """Mixin: ``validate_value`` from a captured help file (engine option ``help_text``) or, when
    the engine is installed here, from running its help once. Otherwise every value passes."""

    help_text: str | None = None
    python: str | None = None  # where the engine's --help comes from (set by the engines that take them)
    binary: str | None = None
    program: str = "the engine"
    allow_abbrev: bool = True

    def help_argvs(self) -> list[list[str]]:
        """Commands that print the installed engine's help; [] when it is not installed."""
        return []

    def known_flags(self) -> dict[str, list[str]]:
        if self.help_text:
            return load_help_file(self.help_text)
        argvs = self.help_argvs()
        return installed_flags(*argvs) if argvs else {}

    def flag_choices(self, flag: str) -> list[str]:
        try:
            flags = self.known_flags()
        except (TypeError, ValueError, OSError):
            return []
        canon = resolve_flag(flags, flag) if flags else None
        return list(flags[canon]) if canon is not None else []

    def validate_value(self, flag: str, value: str) -> None:
        check_value(self.known_flags(), flag, value, self.program, self.allow_abbrev)

    def cannot_check_here(self) -> str | None:
        """A free-form command (no help source at all: generic) has nothing to check; an engine
        whose --help cannot be read here says so."""
        try:
            if self.known_flags():
                return None
        except (OSError, ValueError):
            pass
        opts = ", ".join(f"{k} = {v!r}" for k, v in (("python", self.python), ("binary", self.binary),
                                                      ("help_text", self.help_text)) if v)
        return f"{self.program}'s --help could not be read here (" + (opts or "not installed here") + ")"


# -- --help captured where the server runs ---------------------------------------------------
_SENTINEL = "\x00bakeoff-model\x00"


def program_of(engine) -> list[str]:
    """The argv prefix that names the server program (``[python, -m, sglang.launch_server]``,
    ``[llama-server]``, ``[vllm, serve]``): the engine's own command up to its model argument."""
    from bakeoff.run.engines.base import LaunchContext

    argv = engine.command(LaunchContext(model=_SENTINEL, host="127.0.0.1", port=1, args=[], axis_args=[]))
    i = argv.index(_SENTINEL)
    return argv[: i - 1] if i > 0 and argv[i - 1].startswith("-") and i - 1 > 0 else argv[:i]


def version_argv(program: list[str]) -> list[str]:
    """A command printing the installed version: the package's for ``python -m pkg.mod``,
    else ``PROGRAM --version``."""
    if len(program) >= 3 and program[1] == "-m":
        dist = program[2].split(".")[0]
        return [program[0], "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))", dist]
    return [program[0], "--version"]


def capture_on_host(engine, run, cache_dir: Path, host_name: str) -> Path:
    """The engine's ``--help`` as printed on the host that runs the servers, saved once per
    (host, program, version) in ``cache_dir`` and reused. ``run(argv) -> (exit status, output)``
    runs a command on that host. SpecError naming the host when the help cannot be read there."""
    import hashlib

    program = program_of(engine)
    _, version = run(version_argv(program))
    version = version.strip().splitlines()[-1][:200] if version.strip() else "unknown"
    key = hashlib.sha256(repr((host_name, program, version)).encode()).hexdigest()[:16]
    path = Path(cache_dir) / f"{engine.kind}-{key}.help.txt"
    if path.is_file():
        return path
    argv = [*program, "--help"]
    rc, text = run(argv)
    if len([f for f in parse_help(text) if f.startswith("--")]) < 3:
        last = (text.strip().splitlines() or [f"exit status {rc}"])[-1][:300]
        raise SpecError(f"{' '.join(argv)} printed no usable help on {host_name} (exit {rc}: {last}); "
                        "is the engine installed there (engine_options.python / binary)?")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# captured: {' '.join(argv)} on {host_name} (version: {version})\n\n{text}", encoding="utf-8")
    return path
