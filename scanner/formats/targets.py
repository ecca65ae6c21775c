"""Config keys that make a loader import and call code: Hydra/OmegaConf ``_target_`` and
``trust_remote_code``.

Read in any config format (JSON through ``scanner.formats.text.json_findings``, YAML through
``scanner.formats.yamlconf``), at any depth:

- ``_target_`` (and ``_call_``): ``hydra.utils.instantiate`` imports the dotted path
  (``hydra._internal.utils._locate``: the longest importable module prefix, then
  ``getattr`` for every further part, so ``logging.os.system`` is ``os.system``) and calls
  it with the node's other keys as keyword arguments and ``_args_`` as positional ones;
  ``_partial_: true`` returns ``functools.partial`` of it, called later by the
  application; nested nodes with their own ``_target_`` are instantiated first
  (``_recursive_``). NeMo's ``from_config_dict`` does the same for a root ``target``
  (``scanner.formats.yamlconf`` reads it). The path is judged
  by the allowlist tiers of ``scanner.core.allowlist`` (``classify``), the same tiers as
  pickle globals, plus the ``config`` tier there: ``config.unsafe_target`` when it is
  outside every tier. A target holding an OmegaConf interpolation (``${...}``) that the
  YAML reader could not resolve to a literal is ``config.dynamic_target``: the callable
  is chosen at load time (environment, resolver), like a pickle's computed
  ``STACK_GLOBAL``.
- ``cls`` (NeMo's Hydra 0.x form, with or without ``params``): NeMo's
  ``maybe_update_config_version`` -> ``_convert_config`` (``nemo/utils/model_utils.py``)
  walks every nested mapping, renames ``cls`` to ``_target_`` where the mapping has no
  ``_target_`` and hoists ``params`` into the mapping; ``from_config_dict`` /
  ``hydra.utils.instantiate`` then import and call it. A ``cls`` holding a dotted import
  path (``pkg.mod.Class``) or an interpolation is judged like ``_target_``, at any depth
  (list items too: code hands list entries to ``from_config_dict``); any other value
  (``cls: 3``, a tokenizer's ``cls: "[CLS]"``, ``["[CLS]", 101]``) names nothing to import.
- fiddle ``pyref`` objects ``{"type": "pyref", "module": M, "name": N}`` (fiddle
  ``serialization.dump_json``, NeMo 2's ``context/io.json``): ``load_json`` imports ``M``
  and walks ``getattr`` along ``N`` (``import_symbol``; the default ``PyrefPolicy`` admits
  every import), NeMo's ``io.api.load`` ``pydoc.locate``s each object's type, and
  ``fdl.build`` calls every ``Config``'s callable. Each pyref, at any depth of any JSON or
  YAML config, is judged as the target ``M.N``.
- ``trust_remote_code`` (or ``trust-remote-code``) set to anything but ``false``/``null``/
  ``0``/``""`` (NeMo ``hf_data_cfg``, tokenizer sections; NVIDIA-NeMo/Speech issue 15598):
  the loader hands it to ``from_pretrained``, which then imports Python from the model
  repository.

Python ``logging.config.dictConfig`` factories are ``scanner.formats.logconfig``'s (same
rules, judged here).

Sources: NVIDIA NeMo CVE-2025-23304 (``.nemo`` ``model_config.yaml`` ``_target_``),
NeMo ``model_utils._convert_config``, google/fiddle ``_src/experimental/serialization.py``,
Salesforce Uni2TS CVE-2026-22584, SapienzaNLP/relik pull request 40, hydra PR 3409
(aliased target names such as ``logging.os.system``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from scanner.core.allowlist import UNKNOWN, Classification
from scanner.core.allowlist import classify_target as classify_target  # re-exported
from scanner.core.model import Finding, Severity, Verdict
from scanner.core.rules import rule

V, S = Verdict, Severity

UNSAFE_TARGET = rule(
    "config.unsafe_target", V.MALICIOUS, S.CRITICAL,
    "A config names a callable that hydra.utils.instantiate (or NeMo's from_config_dict, "
    "fiddle's load_json/build, logging.config.dictConfig, sentence-transformers, PEFT) "
    "imports and calls, known to be dangerous (CVE-2025-23304, CVE-2026-22584)",
    "Do not load this config; targets must name allowlisted framework classes "
    "(torch.optim, torch.nn, nemo.collections ...).",
)
UNKNOWN_TARGET = rule(
    "config.unknown_target", V.POLICY, S.HIGH,
    "A config names a callable that hydra.utils.instantiate (or NeMo, fiddle, "
    "logging.config.dictConfig, sentence-transformers, PEFT) imports and calls, outside "
    "every allowlist tier but not known to be dangerous (a project's own class): it runs "
    "code that was not reviewed",
    "Review the named class; serve configs whose targets name allowlisted framework "
    "classes (torch.optim, torch.nn, nemo.collections ...).",
)
DYNAMIC_TARGET = rule(
    "config.dynamic_target", V.MALICIOUS, S.CRITICAL,
    "A config target is an OmegaConf interpolation (${...}) resolved at load time, so the "
    "callable cannot be judged before it runs",
    "Write the target as a literal dotted path to an allowlisted class.",
)
TRUST_REMOTE_CODE = rule(
    "config.trust_remote_code", V.POLICY, S.HIGH,
    "A config sets trust_remote_code: the loader imports Python from the model repository "
    "(NVIDIA-NeMo/Speech issue 15598)",
    "Remove trust_remote_code (or set it to false) and use an architecture built into "
    "transformers/vLLM.",
)

AUTO_MAP_CROSS_REPO = rule(
    "config.auto_map_cross_repo", V.POLICY, S.HIGH,
    "auto_map (or a sentence-transformers modules.json type) references code in another "
    "Hub repository ('repo--module.Class'), which is not in the scanned folder and cannot "
    "be judged",
    "Remove the cross-repository reference; it downloads and imports foreign code.",
)

TARGET_KEYS = ("_target_", "_call_")
# the keyword, and its spelling in vLLM/CLI-style YAML configs (``trust-remote-code: true``)
TRUST_KEYS = ("trust_remote_code", "trust-remote-code")
ARGS_KEY = "_args_"
PARTIAL_KEY = "_partial_"
CLS_KEY = "cls"  # NeMo's Hydra 0.x target (``_convert_config``)
PARAMS_KEY = "params"  # its keyword arguments, hoisted into the node
PYREF_KEY = "module"  # the key that marks a fiddle pyref object (with type and name)
_SHOWN = 160
# A dotted import path: what ``_convert_config`` hands to hydra as a target.
IMPORT_PATH = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)+")


def _payload(node: dict[object, object], hoisted: bool = False) -> str:
    """What the call would receive, for the evidence: ``_args_`` and the keyword args
    (``hoisted``: with the keys of a ``params`` mapping, NeMo's Hydra 0.x form)."""
    parts: list[str] = []
    if node.get(PARTIAL_KEY) is True:
        parts.append("_partial_")
    args = node.get(ARGS_KEY)
    if isinstance(args, list):
        parts.append(f"args {args!r}"[:_SHOWN])
    keys = list(node)
    params = node.get(PARAMS_KEY)
    if hoisted:
        keys = [k for k in keys if k not in (CLS_KEY, PARAMS_KEY)]
        keys += list(params) if isinstance(params, dict) else []
    kwargs = [str(k) for k in keys if isinstance(k, str) and not (
        k.startswith("_") and k.endswith("_"))]
    if kwargs:
        parts.append("kwargs " + ", ".join(kwargs[:6]) + (" ..." if len(kwargs) > 6 else ""))
    return f" ({'; '.join(parts)})" if parts else ""


def target_findings(path: str, ptr: str, key: str, node: dict[object, object]) -> list[Finding]:
    """Findings for the target ``node[key]`` (``key`` in ``TARGET_KEYS``) of the config
    node ``node`` at pointer ``ptr`` (the pointer of ``node[key]``). Non-string targets
    yield nothing here (instantiate refuses them; nested nodes are walked anyway)."""
    value = node.get(key)
    if not isinstance(value, str):
        return []
    return judge_target(path, ptr, value, _payload(node))


def legacy_cls_findings(path: str, ptr: str, node: dict[object, object]) -> list[Finding]:
    """Findings for NeMo's Hydra 0.x ``cls`` of ``node`` (``ptr``: pointer of
    ``node["cls"]``): judged like ``_target_`` when the node has no ``_target_`` and the
    value is a dotted import path or an interpolation (module docstring)."""
    value = node.get(CLS_KEY)
    if "_target_" in node or not isinstance(value, str):
        return []
    if "${" not in value and IMPORT_PATH.fullmatch(value.strip()) is None:
        return []
    return judge_target(path, ptr, value, _payload(node, hoisted=True))


def pyref_findings(path: str, ptr: str, node: dict[object, object]) -> list[Finding]:
    """Findings for a fiddle pyref object ``node`` at pointer ``ptr``: the target
    ``module.name``, or nothing when ``node`` is not ``{"type": "pyref", "module": str,
    "name": str}`` (fiddle's loader cannot import anything else)."""
    module, name = node.get(PYREF_KEY), node.get("name")
    if node.get("type") != "pyref" or not isinstance(module, str) or not isinstance(
            name, str):
        return []
    return judge_target(path, ptr, f"{module}.{name}", " (fiddle pyref)")


def judge_target(path: str, ptr: str, value: str, payload: str = "",
                 classify: Callable[[str], Classification | None] = classify_target,
                 ) -> list[Finding]:
    """``config.dynamic_target``, ``config.unsafe_target`` (known-dangerous) or
    ``config.unknown_target`` (outside every tier, nothing known against it) for one
    target string, or nothing when it names a callable of an allowlist tier
    (``classify``: ``allowlist.classify_target``, or a caller's stricter or wider view
    such as ``allowlist.classify_logging``)."""
    if "${" in value:
        return [DYNAMIC_TARGET.finding(
            path, f"{ptr} is an interpolation resolved at load time: {value[:120]!r}",
            f"{ptr}: {value}"[:300])]
    found = classify(value)
    if found is None:
        return []
    kind = UNKNOWN_TARGET if found.tier == UNKNOWN else UNSAFE_TARGET
    return [kind.finding(
        path, f"{ptr} names {value[:120]!r}, which the loader imports and calls: "
        f"{found.reason}"
        f"{payload}", f"{ptr}: {value}{payload}"[:300])]


def trusts_remote_code(value: object) -> bool:
    """Whether ``trust_remote_code: value`` would be truthy where a loader reads it
    (``if trust_remote_code:``; a string, even ``"false"``, is truthy)."""
    return value not in (False, None, 0, "")


def trust_findings(path: str, ptr: str, value: object) -> list[Finding]:
    """``config.trust_remote_code`` when ``value`` would be truthy."""
    if not trusts_remote_code(value):
        return []
    shown = repr(value)[:300]  # a YAML alias can make the value a large shared structure
    return [TRUST_REMOTE_CODE.finding(
        path, f"{ptr} is {shown}: the loader imports repository code",
        f"{ptr}: {shown}"[:300])]
