"""An independent judge of "would a loader still run code from these bytes", for the
malicious-to-clean oracle. It never executes, unpickles or imports anything from the
input, and shares no code with the scanner: pickles are read with ``pickletools.genops``
(the stdlib's opcode decoder), zip and tar archives with ``zipfile``/``tarfile``, YAML
with PyYAML's safe parser (no object construction; unknown tags recorded, not built).

A loader picks its parser by the file's name (transformers hands ``*.bin``/``*.pt``/
``*.ckpt`` to ``torch.load``, NeMo untars ``.nemo``, Hydra instantiates a config's
``_target_``), so ``would_run(name, data)`` judges by the name first, as loaders do.

A pickle "would run" when, decoding it op by op with ``pickletools.genops`` and running
the ops on a model of the unpickler's stack (marks, memo, underflow stops it), a call op
(REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST, or BUILD with a state holding a callable) is
reached whose callable is dangerous (``dangerous()``), named by GLOBAL/INST or by the two
strings a STACK_GLOBAL takes. Approximate where the unpickler's checks are finer (a string
that is not valid for its opcode, a class that cannot be built): every report is a saved
input to triage, never a silent pass.
"""

from __future__ import annotations

import io
import pickletools
import tarfile
import zipfile
from dataclasses import dataclass
from typing import Any

# Callables that run commands or code, as a fixed table (never looked up in a module: a
# name that does not exist there fails ``find_class`` and runs nothing).
_COMMANDS = ("system", "popen", "execv", "execve", "execl", "execlp", "execvp", "spawnv",
             "spawnl", "spawnlp", "posix_spawn", "startfile")
DANGEROUS_CALLABLES = frozenset(
    {(module, name) for module in ("os", "posix", "nt") for name in _COMMANDS}
    | {("subprocess", name) for name in ("Popen", "call", "check_call", "check_output",
                                         "run", "getoutput", "getstatusoutput")}
    | {(builtins, name) for builtins in ("builtins", "__builtin__")
       for name in ("eval", "exec", "execfile", "compile", "__import__", "getattr", "open",
                    "breakpoint", "input", "setattr", "delattr", "globals", "vars", "apply")}
    | {("runpy", "_run_code"), ("runpy", "run_path"), ("runpy", "run_module"),
       ("pty", "spawn"), ("webbrowser", "open"), ("code", "interact"),
       ("importlib", "import_module"), ("ctypes", "CDLL"), ("pickle", "loads"),
       ("_pickle", "loads"), ("marshal", "loads"), ("shutil", "rmtree"), ("socket", "socket"),
       ("timeit", "timeit"), ("pdb", "run")})
STRING_OPS = frozenset({"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE",
                        "SHORT_BINUNICODE", "BINUNICODE8"})
PICKLE_SUFFIXES = (".pkl", ".pickle", ".bin", ".pt", ".pth", ".ckpt", ".joblib")
TAR_SUFFIXES = (".nemo", ".tar", ".tar.gz", ".tgz")
ZIP_SUFFIXES = (".zip", ".pt", ".pth", ".bin", ".ckpt", ".mar", ".npz")
YAML_SUFFIXES = (".yaml", ".yml")
MAX_MEMBER = 4 << 20  # members read for judging (bytes)
# PyYAML's unsafe-loader tags that import or call, with the name after the colon that its
# multi-constructors require (a bare ``!!python/object/apply`` has no constructor and fails;
# python/str, python/tuple ... are inert)
CODE_TAGS = tuple(f"tag:yaml.org,2002:python/{kind}:" for kind in (
    "object", "object/apply", "object/new", "name", "module"))


def dangerous(module: str, name: str) -> bool:
    """``module.name`` is in the fixed table of callables that run code or commands."""
    return (module, name) in DANGEROUS_CALLABLES


class _Mark:
    pass


_MARK = _Mark()


@dataclass(frozen=True)
class _Value:
    """A stack item: ``ref`` the callable a GLOBAL/STACK_GLOBAL named (when dangerous),
    ``text`` a string's value, ``tainted`` whether it holds a dangerous callable."""

    ref: str | None = None
    text: str | None = None
    tainted: bool = False


_OPAQUE = _Value()


def _global(module: object, name: object) -> _Value:
    if isinstance(module, str) and isinstance(name, str) and dangerous(module, name):
        return _Value(ref=f"{module}.{name}", tainted=True)
    return _OPAQUE


def _called(op: str, items: list[Any]) -> str | None:
    """The dangerous callable that ``op`` calls with its popped ``items``."""
    callee: Any = None
    if op in ("REDUCE", "NEWOBJ") and len(items) >= 2:
        callee = items[-2]
    elif op == "NEWOBJ_EX" and len(items) >= 3:
        callee = items[-3]
    elif op == "OBJ" and items:
        callee = items[0]
    elif op == "BUILD" and len(items) >= 2 and isinstance(items[-1], _Value) \
            and items[-1].tainted:  # a state holding a callable: the __setstate__ gadget
        return "a dangerous callable set by BUILD"
    if isinstance(callee, _Value) and callee.ref is not None:
        return callee.ref
    return None


TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


def pickle_would_run(data: bytes, torch_legacy: bool = False) -> str | None:
    """:func:`pickle_at` from offset 0; with ``torch_legacy`` (a file ``torch.load`` reads),
    when that first pickle is torch's legacy magic number, the pickles after it too, as
    ``torch.load`` reads them (magic, protocol version, sys_info, the object, storage
    keys)."""
    reason, end, value = pickle_at(data, 0)
    if reason is not None or not torch_legacy or value != TORCH_LEGACY_MAGIC:
        return reason
    for _ in range(4):
        if end is None:
            return None
        reason, end, _value = pickle_at(data, end)
        if reason is not None:
            return reason
    return None


def pickle_at(data: bytes, start: int) -> tuple[str | None, int | None, object]:
    """(the dangerous callable unpickling ``data[start:]`` would call or None, the offset
    after its STOP or None, the integer it unpickles to when it is a lone integer)."""
    reason, end, ops = _run_pickle(memoryview(data)[start:])
    value = ops[0][1] if len(ops) == 1 and isinstance(ops[0][1], int) else None
    return reason, None if end is None else start + end, value


def _run_pickle(data: memoryview) -> tuple[str | None, int | None, list[tuple[str, Any]]]:
    """(reason, end, [(op, arg) of the ops before STOP, PROTO/FRAME left out])."""
    seen: list[tuple[str, Any]] = []
    reason = _pickle_would_run(bytes(data), seen)
    return reason, seen.pop()[1] if seen and seen[-1][0] == "STOP" else None, seen


def _pickle_would_run(data: bytes, seen: list[tuple[str, Any]]) -> str | None:
    """The dangerous callable (``"os.system"``) that unpickling ``data`` from offset 0
    would call, or None.

    Ops are decoded one at a time (``pickletools.genops``) and run on a model of the
    unpickler's stack (marks, memo, stack underflow; each op's stack effect from
    pickletools' own opcode table), as ``pickle.load`` runs them: a call made before the
    stream turns bad has still run, so a truncated or corrupted tail does not excuse it.
    """
    stack: list[Any] = []
    memo: dict[Any, Any] = {}
    try:
        for op, arg, pos in pickletools.genops(data):
            name = op.name
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                seen.append((name, (pos or 0) + 1))
                return None
            seen.append((name, arg))
            if name in ("MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"):
                if not stack or stack[-1] is _MARK:
                    return None
                memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
                continue
            if name in ("GET", "BINGET", "LONG_BINGET"):
                if arg not in memo:
                    return None
                stack.append(memo[arg])
                continue
            if name == "DUP":
                if not stack:
                    return None
                stack.append(stack[-1])
                continue
            before = list(op.stack_before)
            items: list[Any] = []
            if pickletools.stackslice in before:  # pop to the topmost mark, then below it
                marks = [i for i, item in enumerate(stack) if item is _MARK]
                if not marks:
                    return None
                items = stack[marks[-1] + 1:]
                del stack[marks[-1]:]
                below = before.index(pickletools.markobject)
                if below:
                    if len(stack) < below:
                        return None
                    items = stack[-below:] + items
                    del stack[-below:]
            elif name == "POP" and stack and stack[-1] is _MARK:
                stack.pop()  # the unpickler's POP drops a mark too
                continue
            elif before:
                if len(stack) < len(before) or any(item is _MARK for item in
                                                   stack[-len(before):]):
                    return None  # stack underflow: the unpickler stops here
                items = stack[-len(before):]
                del stack[-len(before):]
            if name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                ref = _global(module, attr)
                if name == "INST" and ref.ref is not None:
                    return ref.ref
                if name == "GLOBAL":
                    stack.append(ref)
                    continue
            elif name == "STACK_GLOBAL":
                texts = [item.text if isinstance(item, _Value) else None for item in items]
                stack.append(_global(*texts))
                continue
            called = _called(name, items)
            if called is not None:
                return called
            after = list(op.stack_after)
            for entry in after:
                if entry is pickletools.markobject:
                    stack.append(_MARK)
                elif name in STRING_OPS:
                    text = arg.decode("latin-1") if isinstance(arg, bytes) else str(arg)
                    stack.append(_Value(text=text))
                else:
                    tainted = any(isinstance(i, _Value) and i.tainted for i in items)
                    stack.append(_Value(tainted=tainted) if tainted else _OPAQUE)
    except Exception:  # noqa: BLE001 - undecodable from here: the unpickler stops too
        return None
    return None


def zip_would_run(data: bytes, depth: int = 0) -> str | None:
    """A pickle member (``*/data.pkl``, ``*.pkl``) or nested archive of a zip that would
    run code when ``torch.load``/``joblib`` reads it."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()[:256]
    except Exception:  # noqa: BLE001 - zipfile cannot open it: neither can torch's reader
        return None
    for info in infos:
        if info.file_size > MAX_MEMBER:
            continue
        try:
            member = archive.read(info)
        except Exception:  # noqa: BLE001 - unreadable member
            continue
        reason = member_would_run(info.filename, member, depth + 1)
        if reason is not None:
            return f"{info.filename}: {reason}"
    return None


def tar_would_run(data: bytes, depth: int = 0) -> str | None:
    """A member of a tar (plain or gzip, a ``.nemo``) that would run code when the loader
    that unpacks it reads it."""
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
        members = archive.getmembers()[:256]
    except Exception:  # noqa: BLE001 - tarfile cannot open it
        return None
    for info in members:
        if not info.isfile() or info.size > MAX_MEMBER:
            continue
        try:
            handle = archive.extractfile(info)
            member = handle.read() if handle is not None else b""
        except Exception:  # noqa: BLE001
            continue
        reason = member_would_run(info.name, member, depth + 1)
        if reason is not None:
            return f"{info.name}: {reason}"
    return None


def torch_tar_would_run(data: bytes) -> str | None | bool:
    """``torch.load``'s legacy tar path (torch/serialization.py ``_legacy_load``): when
    ``tarfile.open(f, "r:")`` opens the file, the ``storages``, ``tensors`` and ``pickle``
    members (the last copy of each name, as ``getmember`` finds it) are unpickled, in that
    order; ``False`` when tarfile refuses the file (torch then unpickles it from offset 0)."""
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
    except Exception:  # noqa: BLE001 - tarfile.TarError: torch falls back to pickle
        return False
    try:
        members = {info.name: info for info in archive.getmembers()[:256]}
    except Exception:  # noqa: BLE001 - a later header it cannot read
        return None
    for member in ("storages", "tensors", "pickle"):
        info = members.get(member)
        if info is None or not info.isfile() or info.size > MAX_MEMBER:
            return None  # torch.load fails here (KeyError) before unpickling anything more
        try:
            handle = archive.extractfile(info)
            body = handle.read() if handle is not None else b""
        except Exception:  # noqa: BLE001
            return None
        reason = pickle_would_run(body)
        if reason is not None:
            return f"{member}: {reason}"
    return None


def member_would_run(name: str, data: bytes, depth: int) -> str | None:
    """An archive member judged as its loader would (``data.pkl`` inside a torch zip is
    unpickled whatever its suffix list says)."""
    if depth > 3:
        return None
    base = name.rsplit("/", 1)[-1].lower()
    if base.endswith(TORCH_SUFFIXES) and not data.startswith(b"PK\x03\x04"):
        legacy = torch_tar_would_run(data)
        if legacy is not False:
            return legacy
    if base == "data.pkl" or base.endswith(PICKLE_SUFFIXES):
        if data.startswith(b"PK"):
            return zip_would_run(data, depth)
        return pickle_would_run(data, torch_legacy=base.endswith(TORCH_SUFFIXES))
    if base.endswith(ZIP_SUFFIXES):
        return zip_would_run(data, depth)
    if base.endswith(TAR_SUFFIXES):
        return tar_would_run(data, depth)
    if base.endswith(YAML_SUFFIXES):
        return yaml_would_run(data)
    return None


def would_run(name: str, data: bytes) -> str | None:
    """What a loader picked by ``name`` would run from ``data`` (``"os.system"``,
    ``"archive/data.pkl: os.system"``), or None."""
    return member_would_run(name, data, 0)


def _target_names(node: Any, seen: set[int], depth: int = 0) -> list[str]:
    """Every ``_target_``/``_call_`` string under ``node``; each shared node (an alias)
    walked once, so a billion-laughs document costs its node count."""
    found: list[str] = []
    if depth > 64 or id(node) in seen:
        return found
    seen.add(id(node))
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("_target_", "_call_", "_func_") and isinstance(value, str):
                found.append(value)
            found.extend(_target_names(value, seen, depth + 1))
    elif isinstance(node, list):
        for value in node:
            found.extend(_target_names(value, seen, depth + 1))
    return found


def yaml_would_run(data: bytes) -> str | None:
    """A Hydra/OmegaConf ``_target_`` naming a dangerous callable, or a ``!!python/``
    tag that imports or calls (``CODE_TAGS``: run by PyYAML's unsafe loaders), in any
    document of ``data``. None when PyYAML is not installed or the text does not parse."""
    try:
        import yaml
    except ImportError:
        return None
    tags: list[str] = []

    class Loader(yaml.SafeLoader):  # type: ignore[misc] # plain data only; tags recorded
        pass

    def record(loader: Any, suffix: str, node: Any) -> Any:
        tags.append(node.tag)
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("", record)
    try:
        documents = list(yaml.load_all(data, Loader=Loader))  # noqa: S506 - safe loader
    except Exception:  # noqa: BLE001 - not YAML a loader reads
        return None
    for tag in tags:
        if tag.startswith(CODE_TAGS):
            return f"tag {tag}"
    for document in documents:
        for target in _target_names(document, set()):
            module, _, attr = target.rpartition(".")
            if module and dangerous(module, attr):
                return f"_target_ {target}"
    return None
