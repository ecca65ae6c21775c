"""``[[models]]``: several models on one appliance, each with its own engine.

Shape (one entry per served model; docs/serving.md, "Several models")::

    [engine]                        # the defaults every model's engine starts from
    device = "cpu"
    ...
    [[models]]
    served_name = "smollm2"         # what clients send as ``model`` (unique, 1-64 of
                                    # [A-Za-z0-9._-])
    model = "smollm2"               # a store model NAME[@DIGEST], or a signed folder path
                                    # (holding '/', relative to the policy file)
    [models.engine]                 # this engine's overrides of [engine] (any [engine] key)
    max_model_len = 2048
    [models.engine.cpu]
    omp_threads_bind = "0"          # the CPU cores this engine's threads are bound to
    kvcache_space_gib = 1

Each entry's ``engine`` is ``[engine]`` with the entry's keys laid over it (tables merged
key by key), validated as a whole :class:`~.engine.EnginePolicy`. Without ``[[models]]``
the policy's ``[model]`` and ``[engine]`` (and ``serve --model``) are the one entry:
:func:`served_models` turns both forms into the same tuple of :class:`ServedModel`, which
is all the serving spine reads.

Refusals (``PolicyError``; code, the field, the fix), at load time
(:func:`check_models_table`, :func:`check_models`):

- ``models_conflict``: ``[[models]]`` together with ``[model]`` (or ``serve --model``).
- ``models_duplicate``: two entries with one ``served_name``.
- ``models_cpu_overlap``: two CPU engines bound to a common core (``omp_threads_bind``).
- ``models_gpu_overlap``: two GPU engines on a common GPU (``[engine.gpu] devices``; an
  engine without ``devices`` uses every visible GPU).
- ``models_cluster``: several models with ``[cluster]`` (multi-node serves one model).
- ``models_workers``: several models with ``[gateway] workers > 1``.

and at serve time, before any engine starts (:func:`check_host`): ``models_over_host``,
an engine bound to cores this process may not run on, or the engines' KV caches together
above the host's memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from appliance.config.base import StrictModel
from appliance.config.engine import EnginePolicy, cpu_ids
from appliance.errors import PolicyError

SERVED_NAME = r"^[A-Za-z0-9._-]{1,64}$"
MAX_MODELS = 16


class ModelEntry(StrictModel):
    """One ``[[models]]`` entry (``engine``: the merged, validated engine table)."""

    served_name: str = Field(pattern=SERVED_NAME)
    model: str = Field(min_length=1, max_length=4096)
    engine: EnginePolicy = EnginePolicy()


@dataclass(frozen=True)
class ServedModel:
    """One model the appliance serves: its public name, where it comes from (``ref``: a
    store NAME[@DIGEST], else ``path``: a signed folder) and its engine's settings."""

    served_name: str
    engine: EnginePolicy
    ref: str | None = None
    path: Path | None = None

    @property
    def source(self) -> str:
        return self.ref if self.ref is not None else str(self.path)


def merge_engines(data: dict[str, Any]) -> dict[str, Any]:
    """The raw policy ``data`` with each ``[[models]]`` entry's ``engine`` replaced by
    ``[engine]`` overlaid with it (nested tables merged key by key). Anything that is not
    the expected shape is left for validation to refuse."""
    entries = data.get("models")
    if not isinstance(entries, list):
        return data
    base = data.get("engine", {})
    if not isinstance(base, dict):
        return data
    merged = []
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("engine", {}), dict):
            entry = {**entry, "engine": _overlay(base, entry.get("engine", {}))}
        merged.append(entry)
    return {**data, "models": merged}


def _overlay(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _overlay(out[key], value)
        else:
            out[key] = value
    return out


def check_models_table(data: dict[str, Any], where: str) -> None:
    """Raw-table refusals: ``[[models]]`` beside ``[model]`` (``models_conflict``), an
    empty or over-long list (``policy_invalid``)."""
    if "models" not in data:
        return
    if "model" in data:
        raise PolicyError("the policy has both [model] and [[models]]", code="models_conflict",
                          where=f"{where}: model",
                          fix="move the [model] served_name into a [[models]] entry (with "
                              "its model = store NAME) and remove [model]; signer keys go in "
                              "[[trust.keys]]")
    entries = data["models"]
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_MODELS:
        raise PolicyError(f"[[models]] must hold 1-{MAX_MODELS} entries",
                          where=f"{where}: models",
                          fix="write one [[models]] table per served model")


def check_models(policy: Any) -> None:
    """Cross-entry refusals of a loaded :class:`~.policy.Policy` (module docstring); none
    without ``[[models]]``. (``Any``: this module is below ``policy``, which imports it.)"""
    models = policy.models
    if not models:
        return
    seen: dict[str, int] = {}
    for index, entry in enumerate(models):
        if entry.served_name in seen:
            raise PolicyError(f"served_name {entry.served_name!r} is used by models "
                              f"{seen[entry.served_name]} and {index}", code="models_duplicate",
                              where=f"models.{index}.served_name",
                              fix="give each [[models]] entry its own served_name")
        seen[entry.served_name] = index
    if len(models) > 1 and policy.cluster is not None:
        raise PolicyError(f"{len(models)} models with [cluster]: a multi-node cluster serves "
                          "one model", code="models_cluster", where="cluster",
                          fix="keep one [[models]] entry, or run one appliance per model")
    if len(models) > 1 and policy.gateway.workers > 1:
        raise PolicyError(f"{len(models)} models with gateway.workers = "
                          f"{policy.gateway.workers}", code="models_workers",
                          where="gateway.workers",
                          fix="set gateway.workers = 1, or run one appliance per model")
    _check_disjoint(models)


def _check_disjoint(models: tuple[ModelEntry, ...]) -> None:
    cpus: dict[int, int] = {}
    gpus: dict[int | None, int] = {}
    for index, entry in enumerate(models):
        engine = entry.engine
        if engine.device == "cpu":
            ids = cpu_ids(engine.cpu.omp_threads_bind) or set()
            for cpu in sorted(ids):
                if cpu in cpus:
                    raise PolicyError(
                        f"models {cpus[cpu]} and {index} both bind CPU core {cpu}",
                        code="models_cpu_overlap",
                        where=f"models.{index}.engine.cpu.omp_threads_bind",
                        fix="give each model's engine its own cores, e.g. "
                            "omp_threads_bind = \"0\" and \"1\"")
                cpus[cpu] = index
            continue
        devices: tuple[int | None, ...] = engine.gpu.devices or (None,)
        for device in devices:
            other = gpus.get(device, gpus.get(None)) if device is not None else \
                next(iter(gpus.values()), None)
            if other is not None:
                what = f"GPU {device}" if device is not None else "every visible GPU"
                raise PolicyError(f"models {other} and {index} would share {what}",
                                  code="models_gpu_overlap",
                                  where=f"models.{index}.engine.gpu.devices",
                                  fix="give each model's engine its own GPUs with "
                                      "[models.engine.gpu] devices = [...]")
            gpus[device] = index


def served_models(policy: Any, model: str | None,
                  is_ref: Callable[[str], bool]) -> tuple[ServedModel, ...]:
    """Every model to serve (``policy``: a loaded :class:`~.policy.Policy`), in policy
    order: the ``[[models]]`` entries, else the one of ``[model]`` / ``[engine]`` loaded
    from ``model`` (``serve --model``). ``is_ref`` tells a store NAME[@DIGEST] from a folder
    path (``appliance.store.is_store_ref``; the policy layer imports no store code); a
    relative folder is relative to the policy file (entries) or the working folder
    (``--model``). Raises ``models_conflict`` for ``model`` beside ``[[models]]`` and
    ``policy_invalid`` for neither."""
    base = policy.source.parent if policy.source is not None else Path.cwd()
    if policy.models:
        if model is not None:
            raise PolicyError("serve --model together with [[models]] in the policy",
                              code="models_conflict", where="--model",
                              fix="drop --model: the policy's [[models]] name the models")
        return tuple(_entry(e.served_name, e.engine, e.model, base, is_ref)
                     for e in policy.models)
    if model is None:
        raise PolicyError("no model to serve", where="--model",
                          fix="pass --model NAME (or a folder), or list [[models]] in the "
                              "policy")
    return (_entry(policy.model.served_name, policy.engine, model, Path.cwd(), is_ref),)


def _entry(name: str, engine: EnginePolicy, model: str, base: Path,
           is_ref: Callable[[str], bool]) -> ServedModel:
    if is_ref(model):
        return ServedModel(name, engine, ref=model)
    path = Path(model)
    return ServedModel(name, engine, path=path if path.is_absolute() else base / path)


def check_host(models: tuple[ServedModel, ...], cpus: set[int] | None = None,
               memory_bytes: int | None = None) -> None:
    """Serve-time refusal ``models_over_host`` (several models only): an engine bound to a
    core this process may not run on, or the CPU engines' KV caches (GiB) together above
    the host's memory (``cpus`` / ``memory_bytes``: default read from this host)."""
    if len(models) < 2:
        return
    allowed = set(os.sched_getaffinity(0)) if cpus is None else cpus
    total = _memory_bytes() if memory_bytes is None else memory_bytes
    kv_gib = 0
    for model in models:
        if model.engine.device != "cpu":
            continue
        kv_gib += model.engine.cpu.kvcache_space_gib
        ids = cpu_ids(model.engine.cpu.omp_threads_bind) or set()
        if not ids <= allowed:
            raise PolicyError(f"model {model.served_name!r} binds CPU core(s) "
                              f"{sorted(ids - allowed)} this process cannot use (allowed: "
                              f"{sorted(allowed)})", code="models_over_host",
                              where=f"{model.served_name}: engine.cpu.omp_threads_bind",
                              fix="bind each model's engine to cores of this host")
    if total is not None and kv_gib * 2**30 > total:
        raise PolicyError(f"the models' KV caches need {kv_gib} GiB together, the host has "
                          f"{total / 2**30:.1f} GiB", code="models_over_host",
                          where="models.*.engine.cpu.kvcache_space_gib",
                          fix="lower kvcache_space_gib per model or serve fewer models")


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
