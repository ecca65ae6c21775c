"""``appliance convert SRC OUT_DIR [--dtype keep|bf16|fp16|fp32] [--max-shard-size N]``:
the command-line face of :mod:`appliance.convert`. ``register(subparsers)`` adds it."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 1 << 10,
          "mib": 1 << 20, "gib": 1 << 30}


def _size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS or int(match.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 4GiB or 500MB")
    return int(match.group(1)) * _UNITS[unit]


def _cmd_convert(args: argparse.Namespace) -> int:
    from appliance.convert import convert

    def progress(done: int, total: int) -> None:
        if args.progress:
            print(f"\r{done / (1 << 20):,.0f} / {total / (1 << 20):,.0f} MiB", end="",
                  file=sys.stderr, flush=True)

    result = convert(args.source, args.out_dir, dtype=args.dtype,
                     max_shard_bytes=args.max_shard_size, progress=progress)
    if args.progress:
        print(file=sys.stderr)
    print(f"converted {result.tensors} tensors ({result.nbytes / (1 << 20):,.1f} MiB) from "
          f"{args.source} -> {result.out_dir} in {result.seconds:.1f} s: "
          f"{', '.join(result.shards)}")
    if result.dropped:
        print(f"dropped {len(result.dropped)} non-tensor value(s) (listed in conversion.json)")
    if result.copied:
        print(f"copied {', '.join(result.copied)}")
    print(f"provenance: {result.out_dir / 'conversion.json'} (source SHA-256, per-tensor "
          "SHA-256); the folder scans clean")
    print(f"next: review it, then `appliance sign {result.out_dir} --private-key KEY` and "
          "`appliance import` it")
    return 0


def register(sub: Any) -> None:
    """Add ``convert`` to the ``appliance`` subparsers."""
    from appliance.convert import DEFAULT_SHARD_BYTES, DTYPES

    p = sub.add_parser("convert", help="PyTorch checkpoint -> safetensors folder, never "
                       "unpickling it")
    p.add_argument("source", type=Path, help="torch.save file (zip or legacy), or a folder "
                   "with pytorch_model.bin.index.json and its shards")
    p.add_argument("out_dir", type=Path, help="new (or empty) output folder")
    p.add_argument("--dtype", choices=DTYPES, default="keep",
                   help="write floating tensors as this type (default: keep)")
    p.add_argument("--max-shard-size", type=_size, default=DEFAULT_SHARD_BYTES,
                   help="largest shard file (default 4GiB; units B, KB, MB, GB, KiB, MiB, GiB)")
    p.add_argument("--progress", action="store_true", help="print progress on stderr")
    p.set_defaults(func=_cmd_convert)
