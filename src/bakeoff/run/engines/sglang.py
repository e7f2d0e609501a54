"""SGLang: ``python -m sglang.launch_server``.

argv: ``[python, -m, sglang.launch_server, --model-path, MODEL, --host, H, --port, P, *args,
*axis_args]``; ``python`` is engine option ``python`` (default: this interpreter).

Readiness: ``/health`` then ``/v1/models``. ``/health_generate`` (``HEALTH_GENERATE_PATH``) runs
a real one-token generation through the scheduler: a deeper probe for a server that answers
``/health`` but cannot generate (a wedged scheduler, a broken kernel).

Phases come from the log lines SGLang prints while starting (texts checked against
``sglang/srt/model_executor/model_runner.py`` and ``srt/entrypoints/http_server.py`` of 0.5.23
and against startup logs quoted in SGLang issues; see tests/data/logs_ok/sglang-*.log).

Axis values are checked against ``--help`` (``helptext``): engine option ``help_text`` (a file,
e.g. tests/data/help/sglang-0.5.23.txt), else ``python -m sglang.launch_server --help`` of the
installed package, else accepted. argparse prefix abbreviations (``--tp`` for ``--tp-size``) are
accepted like SGLang's own parser does.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from bakeoff.run.engines.base import Engine, LaunchContext, Phase
from bakeoff.run.engines.helptext import HelpValidated

HEALTH_GENERATE_PATH = "/health_generate"
DEFAULT_PORT = 30000  # ServerArgs.port in sglang/srt/server_args.py


class SGLangOptions(BaseModel):
    """``engine_options`` for ``engine = "sglang"``."""

    model_config = ConfigDict(extra="forbid")

    python: str | None = None
    help_text: str | None = None


class SGLang(HelpValidated, Engine):
    kind = "sglang"
    Options = SGLangOptions
    default_port = 30000  # sglang.launch_server --port default
    program = "sglang.launch_server"
    health_paths = ("/health", "/v1/models")
    deep_health_path: ClassVar[str] = HEALTH_GENERATE_PATH
    supports_ignore_eos = True
    templated_prompt = "chat-prompt-ids"  # teacher forcing: chat request with return_prompt_token_ids
    ready_pattern = r"The server is fired up and ready to roll!"
    phases = (
        Phase("init_distributed", r"Init torch distributed begin"),
        Phase("load_weights", r"Load weight begin"),
        Phase("alloc_kv_cache", r"Load weight end"),
        Phase("capture_cuda_graph", r"Capture cuda graph begin"),
        Phase("start_http", r"Capture cuda graph end|Started server process"),
        Phase("warmup", r"Uvicorn running on"),
        Phase("ready", r"The server is fired up and ready to roll!"),
    )

    def __init__(self, python: str | None = None, help_text: str | None = None) -> None:
        self.python = python or sys.executable
        self.help_text = help_text

    def command(self, ctx: LaunchContext) -> list[str]:
        argv = [self.python, "-m", "sglang.launch_server", "--model-path", ctx.model, "--host", ctx.host]
        if ctx.port != DEFAULT_PORT:  # SGLang's own default needs no flag (the seed's command has none)
            argv += ["--port", str(ctx.port)]
        if ctx.served_model_name:
            argv += ["--served-model-name", ctx.served_model_name]
        return argv + [str(a) for a in ctx.args] + [str(a) for a in ctx.axis_args]

    def help_argvs(self) -> list[list[str]]:
        if self.python == sys.executable and importlib.util.find_spec("sglang") is None:
            return []
        return [[self.python, "-m", "sglang.launch_server", "--help"]]

    def version(self) -> str | None:
        try:
            return importlib.metadata.version("sglang")
        except importlib.metadata.PackageNotFoundError:
            return None
