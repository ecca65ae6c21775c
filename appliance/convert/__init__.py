"""``appliance convert``: a PyTorch checkpoint to a safetensors folder, without unpickling.

Public API::

    convert(src, out_dir, *, dtype="keep", max_shard_bytes=4 GiB, limits=None,
            progress=None) -> Result
    ConvertError            # .code in CONVERT_CODES; .findings when refused
    CONVERT_CODES, DTYPES, Limits, Result

``src``: a ``torch.save`` zip checkpoint (>= 1.6), a legacy (pre-1.6) checkpoint, or a
folder with ``pytorch_model.bin.index.json`` and its shards (or one ``pytorch_model.bin``;
a folder's config and tokenizer files are copied). ``out_dir``: a new (or empty) folder;
it receives ``model.safetensors`` or ``model-0000i-of-0000n.safetensors`` shards,
``model.safetensors.index.json``, the copied files and ``conversion.json``
(``appliance.convert._provenance``). Nothing is written unless the whole conversion
succeeds and the result scans clean.

Layers (each private module's docstring has the details and sources):
``_symbolic`` (the scanner's pickle interpreter with the converter's allowlist) ->
``_sources`` (zip / legacy / folder layouts) -> ``_plan`` (names, bounds) -> ``_write``
(streamed safetensors; ``_copy``: in-kernel copies, hashing and writing behind the
reader, early writeback) -> ``_run`` (order, temp folder, scans, rename).
"""

from __future__ import annotations

from appliance.convert._dtypes import TARGETS
from appliance.convert._errors import CONVERT_CODES, ConvertError
from appliance.convert._plan import Limits
from appliance.convert._run import DEFAULT_SHARD_BYTES, Result, convert

DTYPES = tuple(TARGETS)
"""``--dtype`` choices: ``keep`` (default), ``bf16``, ``fp16``, ``fp32``."""

__all__ = ["CONVERT_CODES", "DEFAULT_SHARD_BYTES", "DTYPES", "ConvertError", "Limits",
           "Result", "convert"]
