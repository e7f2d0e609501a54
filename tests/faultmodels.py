"""Broken GGUFs for the real-fault tests, written at test time from the real SmolLM2 file.

Each helper copies the source GGUF to ``dest`` and rewrites tensor data in place through a
numpy memmap at the offsets ``gguf.GGUFReader`` reports, so the header and every other tensor
stay byte-identical. Nothing here is committed: the files live in pytest's tmp_path.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader


def _tensor(path: Path, name: str):
    reader = GGUFReader(str(path))
    for t in reader.tensors:
        if t.name == name:
            return t.tensor_type, int(t.data_offset), int(t.n_bytes), tuple(int(x) for x in t.data.shape)
    raise KeyError(f"{path.name}: no tensor {name!r}")


def nan_weights(src: str | Path, dest: str | Path, tensor: str = "output_norm.weight", value: float = float("nan")) -> Path:
    """Copy ``src`` and set every element of an F32 tensor to ``value`` (NaN by default).

    ``output_norm.weight`` is the final RMSNorm scale: NaN there makes every logit NaN, which
    llama-server reports as ``"logprob": null`` on every token (and greedy picks token 0s/dots).
    """
    dest = Path(dest)
    shutil.copyfile(src, dest)
    ttype, offset, nbytes, _ = _tensor(dest, tensor)
    if ttype != GGMLQuantizationType.F32:
        raise ValueError(f"{tensor} is {ttype.name}; nan_weights rewrites F32 tensors only")
    data = np.memmap(dest, dtype=np.float32, mode="r+", offset=offset, shape=(nbytes // 4,))
    data[:] = value
    data.flush()
    del data
    return dest


def shuffled_rows(src: str | Path, dest: str | Path, tensors: list[str], seed: int = 0) -> Path:
    """Copy ``src`` and permute the rows of each named tensor.

    Works for quantized tensors too: a row of a Q4_1/Q8_0 tensor is a whole number of blocks, so
    moving rows keeps every block intact — the weights stay finite and plausible, only wrong.
    """
    dest = Path(dest)
    shutil.copyfile(src, dest)
    rng = np.random.default_rng(seed)
    for name in tensors:
        _, offset, nbytes, shape = _tensor(dest, name)
        rows = shape[0]
        data = np.memmap(dest, dtype=np.uint8, mode="r+", offset=offset, shape=(rows, nbytes // rows))
        data[:] = data[rng.permutation(rows)]
        data.flush()
        del data
    return dest


def garbage_file(dest: str | Path, size: int = 1 << 16, seed: int = 0) -> Path:
    """A file that exists and is named like a model but holds random bytes (no GGUF magic)."""
    dest = Path(dest)
    dest.write_bytes(np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes())
    return dest
