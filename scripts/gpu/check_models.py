"""Sanity check of the generated models: greedy text per dtype, finiteness, experts impl.

usage: python check_models.py MODELS_DIR [--device cuda] -> one JSON object on stdout
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = ["What is 2+3? Answer with just the number.", "Once upon a time", "Name three primary colors."]


def greedy(path: str, dtype: str, device: str, attn: str = "sdpa") -> dict:
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), attn_implementation=attn).to(device).eval()
    out = {"experts_implementation": getattr(model.config, "_experts_implementation", None), "texts": [], "finite": True}
    for p in PROMPTS:
        ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, return_tensors="pt")
        ids = (ids["input_ids"] if hasattr(ids, "keys") else ids).to(device)
        with torch.no_grad():
            logits = model(ids).logits
            gen = model.generate(ids, max_new_tokens=16, do_sample=False)
        out["finite"] = out["finite"] and bool(torch.isfinite(logits).all())
        out["texts"].append(tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    res = {}
    for name in ("dense", "moe-eager"):
        for dtype in ("float32", "bfloat16", "float16"):
            try:
                res[f"{name}/{dtype}"] = greedy(f"{a.models}/{name}", dtype, a.device)
            except Exception as err:  # noqa: BLE001 - report and go on
                res[f"{name}/{dtype}"] = {"error": f"{type(err).__name__}: {err}"[:300]}
    json.dump(res, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
