"""``bakeoff init``: the launch command you run today -> a spec with it as the baseline.

Takes a local command (``[K=V ...] PROGRAM ARGS``, optionally after ``export K=V && ...``) or the
SSH form ``ssh [user@]host 'export K=V && ... && [setsid] [nohup] PROGRAM ARGS > LOG 2>&1 &'``.
The program names the engine (``llama-server``, ``python -m sglang.launch_server``, ``vllm
serve``, ``trtllm-serve``, ``transformers serve``); the engine's own flags become their spec
fields (the model, ``--host``, ``--port``, the served name); every other argument stays in
``server.args`` in its order; ``PATH="/x:$PATH"`` becomes ``server.env_prepend``. `bakeoff plan`
on the spec prints the same command, flag by flag (tests/test_first_contact.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex

from bakeoff.errors import SpecError

# what follows the launch argv in a backgrounded command line
_REDIRECTS = re.compile(r"^(?:\d*>>?|\d*>&\d*|<|&|\||\d*>.+|<.+)$")
_WRAPPERS = ("setsid", "nohup", "exec")
_SSH_ARG_OPTS = set("bcDEeFIiJLlmOopQRSWw")  # ssh options that take an argument
ALIASES = {"llamacpp": {"-m": "--model", "-a": "--alias"}}  # short forms of the flags bakeoff sets


def _split_ssh(words: list[str]) -> tuple[dict | None, list[str]]:
    """(host table, the remote command's words) for an ``ssh`` command; (None, words) otherwise."""
    if not words or os.path.basename(words[0]) != "ssh":
        return None, words
    host: dict = {"kind": "ssh"}
    i = 1
    while i < len(words) and words[i].startswith("-"):
        opt = words[i]
        if len(opt) == 2 and opt[1] in _SSH_ARG_OPTS:
            if opt == "-p":
                host["port"] = int(words[i + 1])
            elif opt == "-i":
                host["identity_file"] = words[i + 1]
            i += 2
        else:
            i += 1
    if i >= len(words):
        raise SpecError("init: an ssh command needs a destination and the command run there")
    user, _, address = words[i].rpartition("@")
    host["address"] = address
    if user:
        host["user"] = user
    return host, shlex.split(" ".join(words[i + 1:]))


def _segments(words: list[str]) -> list[list[str]]:
    """The command's parts between ``&&`` / ``;``."""
    out: list[list[str]] = [[]]
    for w in words:
        if w in ("&&", ";"):
            out.append([])
        else:
            out[-1].append(w)
    return [s for s in out if s]


def _assignment(word: str) -> tuple[str, str] | None:
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", word, re.S)
    return (m.group(1), m.group(2)) if m else None


def _env_and_launch(words: list[str]) -> tuple[dict[str, str], list[str], str | None]:
    """(env from exports and K=V prefixes, the launch argv, the log path it is redirected to)."""
    env: dict[str, str] = {}
    launch: list[str] = []
    for seg in _segments(words):
        if seg[0] == "export":
            for w in seg[1:]:
                kv = _assignment(w)
                if kv:
                    env[kv[0]] = kv[1]
            continue
        launch = seg
    while launch and _assignment(launch[0]):
        k, v = _assignment(launch.pop(0))
        env[k] = v
    while launch and launch[0] in _WRAPPERS:
        launch.pop(0)
    log = None
    for i, w in enumerate(launch):
        if _REDIRECTS.match(w):
            rest = launch[i:]
            log = next((rest[j + 1] for j, r in enumerate(rest[:-1]) if r in (">", ">>", "1>")), None)
            launch = launch[:i]
            break
    if not launch:
        raise SpecError("init: no launch command found (give the command that starts the server)")
    return env, launch, log


def _engine_of(argv: list[str]) -> tuple[str, dict]:
    """(engine kind, engine_options) from the program the command starts."""
    prog = os.path.basename(argv[0])
    plain = "/" not in argv[0]
    if prog.startswith("llama-server"):
        return "llamacpp", ({} if plain else {"binary": argv[0]})
    python = {} if plain and re.fullmatch(r"python3?(\.\d+)?", prog) else {"python": argv[0]}
    if argv[1:3] == ["-m", "sglang.launch_server"]:
        return "sglang", python
    if argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]:
        return "vllm", {"entrypoint": "module", **python}
    if prog == "vllm" and argv[1:2] == ["serve"]:
        return "vllm", ({} if plain else {"binary": argv[0]})
    if prog == "trtllm-serve":
        return "trtllm", ({} if plain else {"binary": argv[0]})
    if prog == "transformers" and argv[1:2] == ["serve"]:
        return "transformers", ({} if plain else {"binary": argv[0]})
    raise SpecError(f"init: cannot tell the engine from {argv[0]!r}; known: llama-server, python -m sglang.launch_server, "
                    "vllm serve, python -m vllm.entrypoints.openai.api_server, trtllm-serve, transformers serve "
                    "(for any other server write an engine = \"generic\" spec)")


def _path_edit(name: str, value: str) -> tuple[list[str], list[str]] | None:
    parts = value.split(":")
    if f"${name}" not in parts or parts.count(f"${name}") != 1:
        return None
    at = parts.index(f"${name}")
    return parts[:at], parts[at + 1:]


def spec_from_command(command: str, name: str | None = None) -> dict:
    """The spec (as a dict, no axes yet) whose baseline is ``command``."""
    from bakeoff.run.engines.base import get_engine
    from bakeoff.run.engines.helptext import program_of

    try:
        words = shlex.split(command)
    except ValueError as err:
        raise SpecError(f"init: the command is not valid shell words ({err})") from None
    host, words = _split_ssh(words)
    env, argv, log = _env_and_launch(words)
    kind, options = _engine_of(argv)
    engine = get_engine(kind, **options)
    prefix = len(program_of(engine))
    fields = engine.own_flags()
    fields.update({short: fields[long] for short, long in ALIASES.get(kind, {}).items() if long in fields})
    positional = "model.path" not in fields.values()
    model: dict = {}
    server: dict = {}
    args: list[str] = []
    rest = argv[prefix:]
    i = 0
    while i < len(rest):
        w = rest[i]
        flag, eq, inline = w.partition("=")
        field = fields.get(flag) if flag.startswith("-") else None
        if field is not None:
            value = inline if eq else (rest[i + 1] if i + 1 < len(rest) else "")
            i += 1 if eq else 2
            section, key = field.split(".")
            target = model if section == "model" else server
            target[key] = int(value) if key == "port" else value
            continue
        if positional and "path" not in model and not w.startswith("-") and (not args or not args[-1].startswith("-")):
            model["path"] = w  # a positional model (vllm serve MODEL, trtllm-serve MODEL)
            i += 1
            continue
        args.append(w)
        i += 1
    if "path" not in model:
        raise SpecError("init: no model in the command (the engine's model flag or positional model)")
    if args:
        server["args"] = args
    plain_env = {k: v for k, v in env.items() if _path_edit(k, v) is None}
    prepend = {k: e[0] for k, v in env.items() if (e := _path_edit(k, v)) and e[0]}
    append = {k: e[1] for k, v in env.items() if (e := _path_edit(k, v)) and e[1]}
    if plain_env:
        server["env"] = plain_env
    if prepend:
        server["env_prepend"] = prepend
    if append:
        server["env_append"] = append
    m = re.fullmatch(r"(.+)/([^/]+)/logs/[^/]+", log or "")
    if host is not None and m:
        host["remote_dir"] = m.group(1)
    name = name or (m.group(2) if m else None) or f"{kind}-{os.path.basename(model['path'].rstrip('/'))}"
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", name).lstrip(".-") or kind
    spec: dict = {"name": name, "engine": kind}
    if host is not None:
        spec["host"] = host
    if options:
        spec["engine_options"] = options
    spec["model"] = model
    spec["server"] = server
    return spec


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(v, ensure_ascii=False)  # a TOML basic string


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def to_toml(spec: dict) -> str:
    """The spec as TOML, with a note on where the axes go."""
    lines = ["# written by `bakeoff init` from the command you run today: it is the baseline.",
             "# Add [[axes]] (a flag and its values) to sweep; `bakeoff plan` prints the commands."]
    tables = {k: v for k, v in spec.items() if isinstance(v, dict) and k != "host"}
    for k, v in spec.items():
        if k not in tables:
            lines.append(f"{_key(k)} = {_value(v)}")
    for table, body in tables.items():
        lines += ["", f"[{table}]"]
        subtables = {k: v for k, v in body.items() if isinstance(v, dict)}
        for k, v in body.items():
            if k not in subtables:
                lines.append(f"{_key(k)} = {_value(v)}")
        for sub, sv in subtables.items():
            lines += ["", f"[{table}.{sub}]"] + [f"{_key(k)} = {_value(x)}" for k, x in sv.items()]
    lines += ["", "# [[axes]]", "# name = \"example\"", "# flag = \"--some-flag\"", "# values = [\"a\", \"b\"]", ""]
    return "\n".join(lines)
