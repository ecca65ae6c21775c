"""Rules (finding kinds) of the pickle analyzer. Stable ids: reports and policies key on them."""

from __future__ import annotations

from scanner.core.model import Severity as S
from scanner.core.model import Verdict as V
from scanner.core.rules import rule

_CONVERT = (
    "Convert the weights to safetensors in a trusted environment (load with "
    "torch.load(weights_only=True), save with safetensors.torch.save_file) and ship that."
)
_REMOVE = (
    "Do not deploy this artifact; obtain the weights as safetensors from a trusted source."
)

PICKLE_NOT_ALLOWED = rule(
    "format.pickle_not_allowed", V.POLICY, S.MEDIUM,
    "Pickle-based weights are never served (only tensor-rebuilding globals were found)",
    _CONVERT,
)
FRAMEWORK_GLOBAL = rule(
    "pickle.framework_global", V.POLICY, S.MEDIUM,
    "Pickle builds framework objects or plain-data types (plain/framework allowlist "
    "tier: refused by policy, no evidence of code execution)",
    _CONVERT + " Framework objects (torch.nn modules, sklearn estimators) need their "
    "state exported as tensors first.",
)
UNSAFE_GLOBAL = rule(
    "pickle.unsafe_global", V.MALICIOUS, S.CRITICAL,
    "Pickle imports a known-dangerous callable (runs commands or code, imports, loads "
    "another payload, reaches the network or files, or walks attributes)",
    _REMOVE,
)
UNKNOWN_GLOBAL = rule(
    "pickle.unknown_global", V.POLICY, S.MEDIUM,
    "Pickle imports a global outside every allowlist tier that is not a known-dangerous "
    "callable (refused: loading would import its package; no evidence of code execution)",
    _CONVERT + " Objects of other packages (pandas, custom classes) need their data "
    "exported as tensors or plain values first; if the package is trusted, review it.",
)
DYNAMIC_GLOBAL = rule(
    "pickle.dynamic_global", V.MALICIOUS, S.CRITICAL,
    "STACK_GLOBAL operands are not literal strings (name computed at load time)",
    _REMOVE,
)
UNSAFE_CALL = rule(
    "pickle.unsafe_call", V.MALICIOUS, S.CRITICAL,
    "Pickle calls something that is not an allowlisted callable, or with refused arguments",
    _REMOVE,
)
BUILD_ON_GLOBAL = rule(
    "pickle.build_on_global", V.MALICIOUS, S.CRITICAL,
    "BUILD / SETITEM / APPEND mutates an imported global or sets a dunder attribute",
    _REMOVE,
)
EXTENSION_CODE = rule(
    "pickle.extension_code", V.MALICIOUS, S.CRITICAL,
    "EXT1/EXT2/EXT4 loads a global through the copyreg extension registry",
    _REMOVE,
)
SECOND_OPINION = rule(
    "pickle.second_opinion", V.MALICIOUS, S.HIGH,
    "picklescan reports a dangerous global this analyzer did not flag",
    _REMOVE + " Report the artifact to the appliance maintainers (analyzer disagreement).",
)
NESTED_PICKLE = rule(
    "pickle.nested_pickle", V.POLICY, S.LOW,
    "A string or bytes constant inside the pickle is itself a pickle",
    "Inspect what loads the embedded pickle; its own findings are reported separately.",
)
PERSISTENT_ID = rule(
    "pickle.persistent_id", V.MALFORMED, S.HIGH,
    "PERSID/BINPERSID is not a torch storage reference, or appears where no loader "
    "resolves persistent ids",
    _CONVERT,
)
TRUNCATED = rule(
    "pickle.truncated", V.MALFORMED, S.HIGH,
    "Pickle stream ends before its STOP opcode",
    "Re-export the file; a truncated pickle cannot be loaded and is not trusted.",
)
MALFORMED = rule(
    "pickle.malformed", V.MALFORMED, S.HIGH,
    "Pickle stream is invalid (unknown opcode, stack/mark/memo misuse, bad argument)",
    "Re-export the file with a standard pickler; do not deploy it as is.",
)
FRAME_DIVERGENCE = rule(
    "pickle.frame_divergence", V.MALFORMED, S.HIGH,
    "An opcode crosses a FRAME boundary: CPython's unpicklers disagree on what runs "
    "(python/cpython#154848); both readings are analysed",
    "Re-export the file with a standard pickler; do not deploy it as is.",
)
TRAILING_DATA = rule(
    "pickle.trailing_data", V.MALFORMED, S.MEDIUM,
    "Bytes after the last pickle's STOP are not a pickle",
    "Remove the trailing bytes (re-export the file).",
)
TORCH_LEGACY_HEADER = rule(
    "pickle.torch_legacy_header", V.MALFORMED, S.HIGH,
    "Legacy torch.save header pickles (magic number, protocol version, sys_info) are "
    "not the expected literals",
    _CONVERT,
)
TORCH_LEGACY_LAYOUT = rule(
    "pickle.torch_legacy_layout", V.MALFORMED, S.HIGH,
    "Legacy torch.save raw storage section does not match the storage keys",
    _CONVERT,
)
