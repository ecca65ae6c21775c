"""A small random-weight Llama with 4 attention heads (2 KV heads, 2 layers, hidden 128),
built from the built-in SmolLM2 model's config and tokenizer, for tensor parallel 2.

The built-in model's ``config.json`` is read as JSON and its tokenizer files copied; only
torch/transformers create the weights (nothing from a model is executed). ``seed`` changes
the weights, so two seeds give two different, validly signable models.

Usage: ``python tests/e2e/tiny_model.py SRC DST [SEED]`` (SRC: ``appliance prepare``'s
``model_dir``).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

COPIED = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
          "special_tokens_map.json", "generation_config.json")


def build(src: Path, dst: Path, seed: int = 0) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = json.loads((src / "config.json").read_text("utf-8"))
    for key in ("_model_name_or_path", "transformers_version", "architectures", "dtype"):
        config.pop(key, None)
    config.update(num_attention_heads=4, num_key_value_heads=2, hidden_size=128,
                  intermediate_size=256, num_hidden_layers=2, head_dim=32,
                  max_position_embeddings=2048)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**config)).to(torch.bfloat16)
    dst.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dst, safe_serialization=True)
    for name in COPIED:
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
    return dst


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    print("ok")
