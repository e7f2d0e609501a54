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
Readiness: ``/health`` only: with FORCE_MODEL it answers 200 once the model is loaded, while
``/v1/models`` lists only the HF hub cache (never the local dir) and answers 500 when that cache
dir does not exist. ``ignore_eos`` is not an accepted request field; ``logprobs`` are ignored.
Requests carry no ``model`` field (``request_model``): a pinned server refuses any name but the
exact FORCE_MODEL string ("Server is pinned to ..."), and has no served-model-name option.
Environment defaults (the spec's ``server.env`` wins): ``HF_HUB_DISABLE_UPDATE_CHECK=1`` (else
the CLI asks PyPI for a newer version at every start), and ``HF_HUB_OFFLINE=1`` when the model
is a local directory.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from bakeoff.run.engines.base import Engine, LaunchContext, Phase
from bakeoff.run.engines.helptext import HelpValidated, ScriptEngine


class TransformersServe(ScriptEngine, HelpValidated, Engine):
    kind = "transformers"
    script = "transformers"
    program = "transformers serve"
    allow_abbrev = False  # click/typer: no prefixes of long options
    health_paths = ("/health",)
    supports_ignore_eos = False
    supports_logprobs = False  # serve ignores logprobs/top_logprobs (UNUSED_CHAT_COMPLETION_FIELDS, 5.19)
    ready_pattern = r"Uvicorn running on|Application startup complete"
    phases = (
        Phase("load_model", r"\[transformers\] Loading \S+@"),  # FORCE_MODEL, before uvicorn starts
        Phase("load_weights", r"Loading weights"),
        Phase("start_http", r"Started server process"),
        Phase("startup", r"Waiting for application startup"),
        Phase("ready", r"Application startup complete|Uvicorn running on"),
    )

    def command(self, ctx: LaunchContext) -> list[str]:
        argv = [self._binary(), "serve", ctx.model, "--host", ctx.host, "--port", str(ctx.port)]
        return argv + [str(a) for a in ctx.args] + [str(a) for a in ctx.axis_args]

    def request_model(self, served_name: str | None) -> str | None:
        """Send no ``model`` field: the pinned server takes the request as for its FORCE_MODEL."""
        return None

    def default_env(self, ctx: LaunchContext) -> dict[str, str]:
        env = {"HF_HUB_DISABLE_UPDATE_CHECK": "1"}
        if Path(ctx.model).expanduser().is_dir():
            env["HF_HUB_OFFLINE"] = "1"
        return env

    def help_argvs(self) -> list[list[str]]:
        if not self.binary and importlib.util.find_spec("transformers") is None:
            return []
        return [[self._binary(), "serve", "--help"]]

    def version(self) -> str | None:
        try:
            return importlib.metadata.version("transformers")
        except importlib.metadata.PackageNotFoundError:
            return None
