"""Build the two small models the GPU sweeps serve, with random weights and a fixed seed.

No weights travel to the GPU machine (its upload limit is 64 MiB and it has no network), so
this script makes them there, in seconds, from transformers configs:

* ``dense``: a 4-layer Llama (hidden 256, head_dim 64) — the attention/dtype sweep.
* ``moe``:   a 2-layer Mixtral (8 experts, top-2) — the attention/dtype/experts sweep.
  (Not Qwen3-MoE: for qwen3 model types transformers serve attaches a reasoning parser that
  keeps special tokens and, with this tokenizer, echoed the prompt into every reply on the
  H200 — which hid the float16 failure from the text comparison.)
  Layer 0's MLP input norm is scaled by ``--overflow-scale`` and its experts' down
  projection divided by the square, so the function is unchanged in bfloat16/float32 while
  the gate*up product passes float16's maximum (65504): float16 goes non-finite, on purpose.
  ``moe-<impl>`` copies differ only in config.json's ``experts_implementation`` key
  (transformers serve has no flag for it); ``moe`` links to the one being served.

The tokenizer is a small BPE trained on the system's licence texts plus the probe prompts:
all-ASCII vocabulary, so random token ids still decode to printable text. The lm_head is
scaled up so greedy decoding is decisive (random models otherwise have near-tied logits and
bfloat16 vs float32 would differ by noise alone).

usage: python make_models.py OUT_DIR [--overflow-scale 400]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
from pathlib import Path

import torch

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
SPECIALS = ["<unk>", "<s>", "</s>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>", "<pad>"]
EXPERTS_IMPLS = ("eager", "batched_mm", "grouped_mm")


def corpus() -> list[str]:
    texts = []
    for f in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(f):
            texts.append(Path(f).read_text(errors="ignore"))
    here = Path(__file__).resolve().parents[2] / "src/bakeoff/data/probes/default.toml"
    if here.is_file():
        texts.append(here.read_text())
    texts.append("0 1 2 3 4 5 6 7 8 9 { } \" : , . ? ! ' ( ) Paris red blue yellow Alice PELICAN sky light")
    return texts


def make_tokenizer(out: Path, vocab_size: int = 2048):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=[chr(c) for c in range(32, 127)])
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="<|end|>",
                                   pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def _finish(model, tok, out: Path, lm_scale: float) -> None:
    with torch.no_grad():
        model.lm_head.weight.mul_(lm_scale)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def make_dense(out: Path, tok, seed: int) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
                      tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, initializer_range=0.05, dtype="float32")
    model = LlamaForCausalLM(cfg).eval()
    _finish(model, tok, out, lm_scale=20.0)


def make_moe(out: Path, tok, seed: int, overflow_scale: float) -> None:
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(seed)
    cfg = MixtralConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_local_experts=8,
                        num_experts_per_tok=2, max_position_embeddings=4096, tie_word_embeddings=False,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                        initializer_range=0.05, dtype="float32")
    model = MixtralForCausalLM(cfg).eval()
    if overflow_scale:
        layer = model.model.layers[0]
        with torch.no_grad():
            layer.post_attention_layernorm.weight.mul_(overflow_scale)
            layer.mlp.experts.down_proj.div_(overflow_scale ** 2)
    weights = out.parent / f"{out.name}-weights"
    _finish(model, tok, weights, lm_scale=20.0)
    for impl in EXPERTS_IMPLS:
        d = out.parent / f"{out.name}-{impl}"
        d.mkdir(parents=True, exist_ok=True)
        for f in weights.iterdir():
            target = d / f.name
            if target.exists() or target.is_symlink():
                target.unlink()
            if f.name == "config.json":
                c = json.loads(f.read_text())
                c["experts_implementation"] = impl
                target.write_text(json.dumps(c, indent=2))
            else:
                target.symlink_to(f.resolve())
    # OUT/moe is a link to the copy being served (scripts/gpu/tserve re-points it per trial):
    # transformers serve pins the path it was given and refuses requests for any other name
    if out.is_symlink() or out.exists():
        out.unlink()
    out.symlink_to(f"{out.name}-eager")


def make_short_vocab(dense: Path, out: Path, keep: int = 512) -> None:
    """``fault-full`` (the dense model) and ``fault-short-vocab`` (the same with only the first
    ``keep`` rows of the embedding and lm_head, config.json saying so), with ``fault`` a link to
    one of them (scripts/gpu/tserve re-points it per trial from MODEL_VARIANT). The tokenizer is
    unchanged, so prompts carry ids >= ``keep``: on CUDA the embedding lookup trips a
    device-side assert at the first request, after a clean, healthy-looking startup."""
    from transformers import AutoModelForCausalLM

    full, short = out.parent / f"{out.name}-full", out.parent / f"{out.name}-short-vocab"
    full.mkdir(parents=True, exist_ok=True)
    for f in dense.iterdir():
        if not (full / f.name).exists():
            (full / f.name).symlink_to(f.resolve())
    model = AutoModelForCausalLM.from_pretrained(dense, dtype=torch.float32)
    with torch.no_grad():
        model.resize_token_embeddings(keep)
    model.config.vocab_size = keep
    model.save_pretrained(short, safe_serialization=True)
    for f in dense.iterdir():  # the tokenizer files, untouched
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")) and not (short / f.name).exists():
            (short / f.name).symlink_to(f.resolve())
    if out.is_symlink() or out.exists():
        out.unlink()
    out.symlink_to(full.name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--overflow-scale", type=float, default=400.0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if (a.out / "moe").is_dir() and not (a.out / "moe").is_symlink():
        raise SystemExit(f"{a.out}/moe is a directory from an older layout; remove it")
    tok = make_tokenizer(a.out / "tokenizer")
    make_dense(a.out / "dense", tok, a.seed)
    make_moe(a.out / "moe", tok, a.seed, a.overflow_scale)
    make_short_vocab(a.out / "dense", a.out / "fault")
    print(json.dumps({"vocab": len(tok), "out": str(a.out)}))


if __name__ == "__main__":
    main()
