"""Child-process entry: convert the built-in GGUF to a safetensors model folder.

Run as ``python -m appliance.builtin.convert GGUF_FILE OUT_DIR DTYPE``. Uses transformers' GGUF
reader (the file is pinned by SHA-256 before this runs; no code from the model is run) and
writes ``model.safetensors``, ``config.json``, tokenizer files. The GGUF-derived quantizer is
dropped so ``save_pretrained`` accepts the de-quantized weights: transformers' GGUF loader
leaves a ``GgufHfQuantizer`` whose ``is_serializable()`` is always False even though the
tensors are dense, so ``save_pretrained`` raises "The model is quantized with gguf and is not
serializable" (transformers 5.19-5.24).
"""

from __future__ import annotations

import sys
from pathlib import Path


def convert(gguf: Path, out: Path, dtype_name: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype_name]
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=dtype)
    model.hf_quantizer = None  # type: ignore[assignment]
    model.config.__dict__.pop("quantization_config", None)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))


if __name__ == "__main__":
    convert(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
