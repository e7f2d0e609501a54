"""Hugging Face transformers' built-in server, ``transformers serve``.

``transformers serve [OPTIONS] [FORCE_MODEL]`` (transformers 5.x, typer CLI; see
tests/data/help/transformers-serve-5.19.0.txt). It loads models on demand from each request's
``model`` field and unloads them after ``--model-timeout``; the optional positional
``FORCE_MODEL`` preloads one model and uses it for every request. bakeoff always passes the
model at launch (positional), so the load happens during startup and is timed with it.

Flags of interest for axes: ``--host``/``--port``, ``--attn-implementation TEXT`` (e.g. ``sdpa``,
``eager``, ``flash_attention_2``: free text, not validated against a list), ``--dtype TEXT``
(``auto`` from the weights), ``--device``, ``--continuous-batching / --no-continuous-batching``,
``--compile / --no-compile``, ``--quantization`` (``bnb-4bit``/``bnb-8bit``).

argv: ``[transformers, serve, MODEL, --host, H, --port, P, *args, *axis_args]``; ``transformers``
is engine option ``binary``, else the script beside ``python``, else PATH.
Readiness: ``/health`` then ``/v1/models``. ``ignore_eos`` is not an accepted request field.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import sys
from pathlib import Path

from bakeoff.engines.base import Engine, LaunchContext, Phase, register
from bakeoff.engines.helptext import HelpValidated


@register
class TransformersServe(HelpValidated, Engine):
    kind = "transformers"
    program = "transformers serve"
    allow_abbrev = False  # click/typer: no prefixes of long options
    health_paths = ("/health", "/v1/models")
    supports_ignore_eos = False
    supports_logprobs = False  # serve ignores logprobs/top_logprobs (UNUSED_CHAT_COMPLETION_FIELDS, 5.19)
    ready_pattern = r"Uvicorn running on|Application startup complete"
    phases = (
        Phase("start_http", r"Started server process"),
        Phase("startup", r"Waiting for application startup"),
        Phase("ready", r"Application startup complete|Uvicorn running on"),
    )

    def __init__(self, python: str | None = None, binary: str | None = None, help_text: str | None = None) -> None:
        self.python = python or sys.executable
        self.binary = binary
        self.help_text = help_text

    def _binary(self) -> str:
        if self.binary:
            return self.binary
        beside = Path(self.python).with_name("transformers")
        if beside.is_file():
            return str(beside)
        return shutil.which("transformers") or "transformers"

    def command(self, ctx: LaunchContext) -> list[str]:
        argv = [self._binary(), "serve", ctx.model, "--host", ctx.host, "--port", str(ctx.port)]
        return argv + [str(a) for a in ctx.args] + [str(a) for a in ctx.axis_args]

    def help_argvs(self) -> list[list[str]]:
        if not self.binary and importlib.util.find_spec("transformers") is None:
            return []
        return [[self._binary(), "serve", "--help"]]

    def version(self) -> str | None:
        try:
            return importlib.metadata.version("transformers")
        except importlib.metadata.PackageNotFoundError:
            return None
