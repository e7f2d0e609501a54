"""The spec's reference, generated from the pydantic model itself: ``bakeoff schema`` prints its
JSON schema, and docs/spec.md is ``markdown()`` (tests/test_first_contact.py checks it is current:
regenerate it with ``bakeoff schema --markdown > docs/spec.md``)."""

from __future__ import annotations

import json
import typing

from pydantic import BaseModel

from bakeoff.spec import Spec


def json_schema() -> str:
    """The JSON schema of a sweep spec (editors validate a TOML spec with it, e.g. taplo)."""
    return json.dumps(Spec.model_json_schema(), indent=2, sort_keys=True) + "\n"


def _type(annotation) -> str:
    """A field's type in words: ``list[str]``, ``int | None``, ``'auto' | 'on' | 'off'``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(repr(a) for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " \\| ".join(_type(a) for a in args)
    if origin in (list, dict, tuple):
        return f"{origin.__name__}[{', '.join(_type(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _default(field) -> str:
    if field.is_required():
        return "required"
    d = field.get_default(call_default_factory=True)
    if isinstance(d, BaseModel):
        return "(table)"
    return "`" + json.dumps(d, default=str) + "`"


def _models(model: type[BaseModel], prefix: str, seen: list) -> list[tuple[str, type[BaseModel]]]:
    """(table name, model) for the spec and every nested table, depth first."""
    out = [(prefix or "(top level)", model)]
    for name, field in model.model_fields.items():
        for arg in (field.annotation, *typing.get_args(field.annotation)):
            inner = [arg, *typing.get_args(arg)]
            for cand in inner:
                if isinstance(cand, type) and issubclass(cand, BaseModel) and cand not in seen:
                    seen.append(cand)
                    out += _models(cand, f"{prefix}.{name}" if prefix else name, seen)
    return out


def markdown() -> str:
    """docs/spec.md: every table of the spec, each key with its type, default and description."""
    lines = ["# The sweep spec: every key", "",
             "Generated from the pydantic model (`bakeoff schema --markdown > docs/spec.md`); "
             "`bakeoff schema` prints the JSON schema. The README explains how the parts work together.", ""]
    for table, model in _models(Spec, "", [Spec]):
        lines += [f"## `{table}`", ""]
        doc = (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        if doc and model is not Spec:
            lines += [" ".join(doc.split()), ""]
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            desc = " ".join((field.description or "").split()).replace("|", "\\|")
            lines.append(f"| `{name}` | {_type(field.annotation)} | {_default(field)} | {desc} |")
        lines.append("")
    return "\n".join(lines)
