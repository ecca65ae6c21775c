"""``[engine]`` and ``[engine.cpu]``: what the launcher passes to vLLM.

Every key maps to one engine flag or environment variable in
:func:`appliance.engine.launcher.build_argv` / ``build_env``: ``device`` (cpu|gpu),
``tool_call_parser`` (a vetted parser), ``chat_template`` (a file inside the signed model
folder), ``max_model_len`` (tokens), ``dtype``, ``max_num_seqs``, ``startup_timeout_s``
(seconds), ``enforce_eager``, ``max_num_batched_tokens`` and ``num_kv_blocks`` (optional
scheduler bounds), ``disable_any_whitespace`` (vLLM's structured-outputs switch);
``[engine.cpu]``: ``omp_threads_bind``, ``kvcache_space_gib`` (GiB).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from appliance.config.base import StrictModel


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
    cpu: CpuEngine = CpuEngine()

    @field_validator("chat_template")
    @classmethod
    def _relative_name(cls, value: str) -> str:
        parts = Path(value).parts
        if not parts or Path(value).is_absolute() or ".." in parts:
            raise ValueError("must be a relative path inside the model folder")
        return value
