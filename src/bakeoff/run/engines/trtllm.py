"""TensorRT-LLM's OpenAI-compatible server, ``trtllm-serve``.

argv: ``trtllm-serve MODEL --host H --port P *args *axis_args``; the model is a positional
argument (there is no ``--model``), the flags are snake_case (``--tp_size``, ``--backend``,
``--kv_cache_free_gpu_memory_fraction``, ``--extra_llm_api_options``). ``trtllm-serve`` comes
from engine option ``binary``, else the script beside ``python``, else PATH.

Readiness: ``/health`` then ``/v1/models`` (both served by trtllm-serve). Phases: the C++
runtime's ``[TensorRT-LLM][INFO]`` lines for engine/weight loading and KV-cache sizing, then
uvicorn's startup lines. trtllm-serve is click-based, so ``--flag [a|b]`` choices are read from
its ``--help`` (click does not accept prefixes of long options: no abbreviations).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil

from bakeoff.run.engines.base import Engine, LaunchContext, Phase
from bakeoff.run.engines.helptext import HelpValidated, ScriptEngine


class TensorRTLLM(ScriptEngine, HelpValidated, Engine):
    kind = "trtllm"
    script = "trtllm-serve"
    program = "trtllm-serve"
    allow_abbrev = False
    health_paths = ("/health", "/v1/models")
    supports_ignore_eos = True
    ready_pattern = r"Uvicorn running on|Application startup complete"
    phases = (
        Phase("load_weights", r"Loaded engine size|Loading (?:model|weights|checkpoint)|Use \d+(?:\.\d+)? GB for model weights"),
        Phase("kv_cache", r"Memory usage when calculating max tokens|Max KV cache (?:pages|blocks)|for max tokens in paged KV cache|Max tokens in paged KV cache"),
        Phase("start_http", r"Started server process"),
        Phase("ready", r"Uvicorn running on|Application startup complete"),
    )

    def command(self, ctx: LaunchContext) -> list[str]:
        argv = [self._binary(), ctx.model, "--host", ctx.host, "--port", str(ctx.port)]
        if ctx.served_model_name:
            argv += ["--served_model_name", ctx.served_model_name]
        return argv + [str(a) for a in ctx.args] + [str(a) for a in ctx.axis_args]

    def help_argvs(self) -> list[list[str]]:
        if not self.binary and importlib.util.find_spec("tensorrt_llm") is None and not shutil.which("trtllm-serve"):
            return []
        return [[self._binary(), "serve", "--help"], [self._binary(), "--help"]]

    def version(self) -> str | None:
        for dist in ("tensorrt_llm", "tensorrt-llm"):
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None
