"""Symbolic pickle interpreter: walks the opcode stream of one pickle (protocols 0-5)
with a model of the unpickler's stack, mark stack and memo, never importing or calling.

Reference: CPython ``Lib/pickle.py`` (``_Unpickler``) and ``Modules/_pickle.c``: the
stack/metastack semantics (MARK starts a new stack frame; POP on an empty frame pops the
mark), memo keys (PUT/BINPUT/LONG_BINPUT explicit, MEMOIZE = ``len(memo)``), Python 2
name mapping for protocols < 3 (``_compat_pickle``), dotted STACK_GLOBAL names (>= 4).

What it reports is in ``scanner.formats.pickle.rules``; see ``Machine.run``.
"""

from __future__ import annotations

import _compat_pickle
from collections.abc import Callable
from typing import ClassVar

from scanner.core.allowlist import DANGEROUS, UNKNOWN, Entry, classify
from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, Finding
from scanner.core.rules import INTERNAL_ERROR, Rule
from scanner.formats.pickle import npdtype
from scanner.formats.pickle import rules as R
from scanner.formats.pickle.consts import KEEP_CHARS, Handler
from scanner.formats.pickle.ops import TABLE
from scanner.formats.pickle.reader import INLINE_MAX, Reader, Truncated
from scanner.formats.pickle.values import (
    FLOAT,
    Bad,
    Big,
    Glob,
    Made,
    Seq,
    describe,
    is_dunder_key,
)

RETAIN_ITEMS = 4_000_000  # container elements kept per stream; beyond, only counted
RETAIN_BYTES = 64 << 20  # constant bytes kept per stream
MAX_STACK = 8_000_000  # stack + mark-stack entries per stream
MAX_FINDINGS = 64  # distinct findings per stream; more are dropped
MAX_TIERED = 4096  # distinct plain/framework-tier globals remembered per stream
MAX_LISTED = 8  # tiered globals named in the evidence
# C/OS-specific module names and the public module they are (CPython Lib/os.py imports
# posix or nt as os; _pickle is pickle's accelerator): named in evidence.
_ALIASES = {"posix": "os", "nt": "os", "_posixsubprocess": "subprocess",
            "_pickle": "pickle", "_io": "io", "_operator": "operator",
            "_functools": "functools", "_codecs": "codecs", "_thread": "threading"}
_SCALARS = ("numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar")
NESTED_MIN = 8  # shortest constant considered as a nested pickle
MAX_NESTED = 32  # nested pickles reported per stream (evidence only; see _pickle)
MAX_NESTED_TRIES = 10_000  # constants tried as nested pickles per stream
CHECK_EVERY = 4096  # ops between deadline / limit checks

# (abs offset, length, bytes or None when too big to hold) -> findings of the nested pickle
NestedHook = Callable[[int, int, "bytes | None"], list[Finding]]


class StreamResult:
    """Outcome of interpreting one pickle starting at ``start``.

    ``end`` is the offset after STOP (or where interpretation stopped); ``ok`` is true
    when STOP was reached; ``value`` is STOP's value; ``storages`` maps persistent-id
    storage keys to (allowlist entry of the storage type, numel); ``seen`` maps every
    resolved global to whether it was let pass (a tier entry, or ``unknown``: not
    reported as dangerous); ``tiered`` holds the plain/framework-tier globals;
    ``unknown`` maps each global outside the tiers that is not known-dangerous to the
    reason (one ``pickle.unknown_global`` per stream); ``straddled`` is the first frame
    straddle (readers disagree, see ``Reader``). A slotted class, not a dataclass: the
    scanner's start-up is on a fleet scan's critical path."""

    __slots__ = ("start", "end", "ok", "stopped_at_first_op", "limited", "value", "findings",
                 "n_globals", "n_calls", "n_pids", "storages", "seen", "tiered", "unknown",
                 "straddled")

    def __init__(self, start: int) -> None:
        self.start = start
        self.end = 0
        self.ok = False
        self.stopped_at_first_op = False
        self.limited = False
        self.value: object = None
        self.findings: list[Finding] = []
        self.n_globals = self.n_calls = self.n_pids = 0
        self.storages: dict[str, tuple[Entry, int]] = {}
        self.seen: dict[str, bool] = {}
        self.tiered: dict[str, Entry] = {}
        self.unknown: dict[str, str] = {}
        self.straddled: int | None = None


class Machine:
    """Interpret one pickle of ``blob`` starting at ``start``; ``run()`` returns a
    ``StreamResult``. Never raises for bad input (limit hits become findings too).

    ``persistent_ids``: whether PERSID/BINPERSID may appear (torch storage references);
    ``nested``: called for string/bytes constants that look like pickles."""

    # opcode byte -> handler; a subclass may extend a copy (a stricter reader of the same
    # stream, such as the appliance's converter, watching BUILD)
    table: ClassVar[dict[int, Handler]] = TABLE

    def __init__(
        self,
        ctx: ScanContext,
        blob: Blob,
        start: int,
        *,
        persistent_ids: bool,
        nested: NestedHook | None = None,
        drop_frames: bool = False,
    ) -> None:
        self.ctx = ctx
        self.path = blob.name
        self.r = Reader(blob, start, ctx.limits.max_pickle_bytes, drop_frames)
        self.persistent_ids = persistent_ids
        self.nested = nested
        self.res = StreamResult(start=start)
        self.stack: list[object] = []
        self.meta: list[list[object]] = []
        self.meta_items = 0  # entries held in the frames of ``meta``
        self.memo: dict[int, object] = {}
        self.proto = 0
        self.op_at = start
        self.retained = 0
        self.retained_bytes = 0
        self._keys: set[tuple[str, str]] = set()
        self.nested_found = 0
        self.nested_tries = 0

    # -- driver ------------------------------------------------------------------------

    def run(self) -> StreamResult:
        res, r, table = self.res, self.r, self.table
        ops = 0
        try:
            while True:
                self.op_at = r.base + r.i
                code = r.byte()
                handler = table.get(code)
                if handler is None:
                    raise Bad(f"unknown opcode 0x{code:02x}")
                ops += 1
                if ops % CHECK_EVERY == 0:
                    self._periodic(ops)
                if handler(self, code):
                    res.ok = True
                    break
        except Truncated as exc:
            self.report(R.TRUNCATED, f"stream ends inside an opcode at offset {exc.offset} "
                        f"(needs {exc.need} more bytes) before STOP", "truncated", exc.offset)
        except Bad as exc:
            self.report(R.MALFORMED, f"invalid pickle at offset {self.op_at}: {exc}",
                        str(exc)[:200])
        except LimitHit as hit:
            res.limited = True
            res.findings.append(hit.finding(self.path))
        except Exception as exc:  # noqa: BLE001 - fail closed, keep what was found
            res.limited = True
            self.report(INTERNAL_ERROR, f"pickle interpretation crashed at offset "
                        f"{self.op_at}: {type(exc).__name__}", f"{type(exc).__name__}: {exc}")
        res.stopped_at_first_op = not res.ok and ops <= 1 and self.op_at == res.start
        res.end = r.pos
        res.straddled = r.straddled
        if res.tiered:
            res.findings.append(tier_finding(self.path, res.start, res.tiered))
        if res.unknown:
            res.findings.append(unknown_finding(self.path, res.start, res.unknown))
        return res

    def _periodic(self, ops: int) -> None:
        self.ctx.check_deadline()
        limits = self.ctx.limits
        if ops > limits.max_pickle_ops:
            raise LimitHit("max_pickle_ops", limits.max_pickle_ops, ops)
        depth = len(self.stack) + len(self.meta) + self.meta_items
        if depth > MAX_STACK:
            raise LimitHit("pickle_stack_entries", MAX_STACK, depth)

    def report(self, rule: Rule, message: str, evidence: str, offset: int | None = None) -> None:
        """Add a finding (deduplicated on rule and evidence, capped per stream)."""
        key = (rule.id, evidence)
        if key in self._keys or len(self._keys) >= MAX_FINDINGS:
            return
        self._keys.add(key)
        at = self.op_at if offset is None else offset
        self.res.findings.append(rule.finding(self.path, message, evidence[:300], at))

    # -- stack primitives ----------------------------------------------------------------

    def push(self, value: object) -> None:
        self.stack.append(value)

    def pop(self) -> object:
        try:
            return self.stack.pop()
        except IndexError:
            raise Bad("stack underflow") from None

    def top(self) -> object:
        try:
            return self.stack[-1]
        except IndexError:
            raise Bad("stack underflow") from None

    def pop_mark(self) -> list[object]:
        items = self.stack
        try:
            self.stack = self.meta.pop()
        except IndexError:
            raise Bad("MARK not found") from None
        self.meta_items -= len(self.stack)
        return items

    def seq(self, kind: str, items: list[object]) -> Seq:
        n = len(items)
        if self.retained + n > RETAIN_ITEMS:
            return Seq(kind, None, n)
        self.retained += n
        return Seq(kind, items, n)

    # -- constants -------------------------------------------------------------------

    def int_arg(self, n: int, signed: bool = False) -> int:
        return int.from_bytes(self.r.read(n), "little", signed=signed)

    def line(self, keep: int = KEEP_CHARS) -> bytes:
        data, length = self.r.readline(keep)
        if length > keep:
            raise Bad(f"text argument of {length} bytes is too long")
        return data

    def push_data(self, n: int, kind: str) -> None:
        """Push a counted str/bytes argument of ``n`` bytes (``kind``: ``utf8``,
        ``latin1`` for Python 2 ``str``, or ``bytes``)."""
        if n < 0:
            raise Bad("negative byte count")
        off = self.r.pos
        if n > INLINE_MAX:
            self.r.skip(n)
            self.look_nested(off, n, None)
            self.push(Big("bytes" if kind == "bytes" else "str", n))
            return
        data = self.r.read(n)
        self.look_nested(off, n, data)
        value: object
        if kind == "utf8":
            try:
                value = data.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                raise Bad("BINUNICODE argument is not UTF-8") from None
        elif kind == "latin1":
            value = data.decode("latin-1")
        else:
            value = data
        self.push(self.keep(value, n, kind))

    def keep(self, value: object, n: int, kind: str) -> object:
        if n > KEEP_CHARS or self.retained_bytes + n > RETAIN_BYTES:
            return Big("bytes" if kind == "bytes" else "str", n)
        self.retained_bytes += n
        return value

    def look_nested(self, off: int, n: int, data: bytes | None) -> None:
        if (self.nested is None or n < NESTED_MIN or self.nested_found >= MAX_NESTED
                or self.nested_tries >= MAX_NESTED_TRIES):
            return
        if data is None:
            head = self.r.blob.read_at(off, 2)
            tail = self.r.blob.read_at(off + n - 1, 1)
        else:
            head, tail = data[:2], data[-1:]
        if len(head) < 2:
            return
        if (head[0] == 0x80 and head[1] <= 5) or (head[0] in TABLE and tail == b"."):
            self.nested_tries += 1
            found = self.nested(off, n, data)
            if found:
                self.nested_found += 1
                self.res.findings.extend(found)

    # -- globals, calls, persistent ids ----------------------------------------------

    def resolve(self, module: str, name: str) -> Glob:
        """Resolve a global by name (with protocol < 3 Python 2 name mapping)."""
        self.res.n_globals += 1
        mod, nm = module, name
        if self.proto < 3:
            if (mod, nm) in _compat_pickle.NAME_MAPPING:
                mod, nm = _compat_pickle.NAME_MAPPING[(mod, nm)]
            elif mod in _compat_pickle.IMPORT_MAPPING:
                mod = _compat_pickle.IMPORT_MAPPING[mod]
        found = classify(mod, nm)
        entry = found.entry
        qual = f"{module}.{name}"
        self.res.seen[qual] = found.tier != DANGEROUS
        mapped = f" (resolves to {mod}.{nm})" if (mod, nm) != (module, name) else ""
        alias = _ALIASES.get(mod.partition(".")[0])
        if alias is not None:
            mapped += f" (alias of {alias}{mod[len(mod.partition('.')[0]):]}.{nm})"
        if found.tier == DANGEROUS:
            self.report(R.UNSAFE_GLOBAL, f"imports {qual}{mapped}: {found.reason}", qual)
        elif found.tier == UNKNOWN:
            if len(self.res.unknown) < MAX_TIERED:
                self.res.unknown.setdefault(qual + mapped, found.reason)
        elif entry is not None and entry.tier != "data" and len(self.res.tiered) < MAX_TIERED:
            self.res.tiered.setdefault(qual + mapped, entry)
        return Glob(qual, entry, self.op_at)

    def call(self, func: object, args: object, how: str) -> None:
        """Model ``func(*args)`` (REDUCE, OBJ, INST, NEWOBJ, NEWOBJ_EX); push the result."""
        self.res.n_calls += 1
        if not isinstance(func, Glob):
            self.report(R.UNSAFE_CALL, f"{how} calls {describe(func)}, which is not an "
                        "allowlisted global imported by name", describe(func))
            self.push(Made("a call", None))
            return
        entry = func.entry
        if entry is not None and "call" not in entry.uses:
            self.report(R.UNSAFE_CALL, f"{how} calls {func.qualname}, which is allowlisted "
                        "only as a value, never as a callable", func.qualname)
            entry = None
        elif entry is not None and entry.args and not _args_ok(entry.args, args):
            self.report(R.UNSAFE_CALL, f"{how} calls {func.qualname} with arguments outside "
                        f"the allowed shape ({entry.args})", func.qualname)
            entry = None
        detail: object = None
        if entry is not None and isinstance(args, Seq) and args.items:
            if func.qualname == "numpy.dtype":
                detail = npdtype.from_type(args.items[0])
            elif func.qualname in _SCALARS and len(args.items) == 2:
                data = args.items[1]
                if isinstance(data, Made) and isinstance(data.detail, bytes):
                    data = data.detail  # bytes made by _codecs.encode (protocol < 3)
                detail = npdtype.scalar_int(args.items[0], data)
            elif (func.qualname == "_codecs.encode" and isinstance(args.items[0], str)
                    and len(args.items[0]) <= 64):
                try:
                    detail = args.items[0].encode("latin-1")
                except UnicodeEncodeError:
                    detail = None
        self.push(Made(f"{func.qualname}()", entry, detail))

    def nested_stream(self, offset: int) -> None:
        """Interpret the pickle that starts at ``offset`` of this blob (joblib object
        arrays), keep its findings, and continue after its STOP."""
        if self.ctx.depth + 1 > self.ctx.limits.max_nesting_depth:
            raise LimitHit("max_nesting_depth", self.ctx.limits.max_nesting_depth)
        self.ctx.depth += 1
        try:
            sub = Machine(self.ctx, self.r.blob, offset, persistent_ids=False,
                          nested=self.nested).run()
        finally:
            self.ctx.depth -= 1
        self.res.findings.extend(f for f in sub.findings if f.rule_id not in (
            R.FRAMEWORK_GLOBAL.id, R.UNKNOWN_GLOBAL.id))
        self.res.seen.update(sub.seen)
        self.res.tiered.update(sub.tiered)
        self.res.unknown.update(sub.unknown)
        if not sub.ok:
            raise Bad("joblib object array pickle does not reach STOP")
        self.r.skip(sub.end - self.r.pos)

    def persistent(self, pid: object) -> None:
        self.res.n_pids += 1
        if not self.persistent_ids:
            self.report(R.PERSISTENT_ID, "persistent id where the loader has no "
                        "persistent_load (the load fails or runs a custom hook)",
                        describe(pid))
            self.push(Made("persistent id", None))
            return
        storage = _torch_storage(pid)
        if storage is None:
            self.report(R.PERSISTENT_ID, f"persistent id {describe(pid)} is not a torch "
                        "storage reference ('storage', <Storage type>, key, location, numel)",
                        describe(pid))
        else:
            key, entry, numel = storage
            if self.res.storages.setdefault(key, (entry, numel)) != (entry, numel):
                self.report(R.PERSISTENT_ID, f"storage key {key!r} is referenced with two "
                            "different types or sizes", f"storage {key[:100]}")
        self.push(Made("persistent id", None))

    def mutate(self, target: object, how: str, items: list[object], keys: bool) -> None:
        """Model APPEND(S)/SETITEM(S)/ADDITEMS on ``target`` (``keys``: items are pairs)."""
        if isinstance(target, Glob):
            self.report(R.BUILD_ON_GLOBAL, f"{how} mutates the imported global "
                        f"{target.qualname} (changes module state for later calls)",
                        target.qualname)
            return
        if not isinstance(target, Seq):
            return
        target.n += len(items) // 2 if keys else len(items)
        if keys and any(is_dunder_key(k) for k in items[0::2]):
            target.dunder = True
        if target.items is not None:
            if self.retained + len(items) > RETAIN_ITEMS:
                target.items = None
            else:
                self.retained += len(items)
                target.items.extend(items)


def tier_finding(path: str, offset: int, tiered: dict[str, Entry]) -> Finding:
    """One ``pickle.framework_global`` finding for the plain/framework-tier globals of a
    stream: which tier decided, and each name with its tier and reason (first few)."""
    tiers = sorted({e.tier for e in tiered.values()})
    names = sorted(tiered)
    listed = "; ".join(f"{q} [{tiered[q].tier}: {tiered[q].reason}]"
                       for q in names[:MAX_LISTED])
    more = f" (+{len(names) - MAX_LISTED} more)" if len(names) > MAX_LISTED else ""
    return R.FRAMEWORK_GLOBAL.finding(
        path, f"tier {'/'.join(tiers)} decided: {len(names)} global(s) outside the data "
        f"tier, none outside the allowlist tiers: {', '.join(names[:MAX_LISTED])}{more}",
        evidence=(listed + more)[:1000], offset=offset)


def unknown_finding(path: str, offset: int, unknown: dict[str, str]) -> Finding:
    """One ``pickle.unknown_global`` finding for the globals of a stream that are outside
    every allowlist tier without being known-dangerous (first few named)."""
    names = sorted(unknown)
    more = f" (+{len(names) - MAX_LISTED} more)" if len(names) > MAX_LISTED else ""
    return R.UNKNOWN_GLOBAL.finding(
        path, f"{len(names)} global(s) outside every allowlist tier, none of them a "
        f"known-dangerous callable: {', '.join(names[:MAX_LISTED])}{more}",
        evidence=("; ".join(names[:MAX_LISTED]) + more)[:1000], offset=offset)


def _args_ok(kind: str, args: object) -> bool:
    if not isinstance(args, Seq) or args.kind != "tuple" or args.items is None:
        return False
    items = args.items
    latin1 = (len(items) == 2 and isinstance(items[0], (str, Big))
              and items[1] in ("latin1", "latin-1"))  # (text, "latin1")
    if kind == "latin1":
        return latin1
    if kind == "ndarray_subtype":
        head = items[0] if items else None
        return isinstance(head, Glob) and head.qualname == "numpy.ndarray"
    if kind == "dtype_string":
        return len(items) >= 1 and isinstance(items[0], str)
    if kind == "list_literal":
        return not items or (len(items) == 1 and isinstance(items[0], Seq)
                             and items[0].kind in ("list", "tuple"))
    if kind == "bytearray":
        return not items or (len(items) == 1 and _is_bytes(items[0])) or latin1
    if kind == "empty":
        return not items
    if kind == "reconstructor":  # copyreg._reconstructor(cls, base, state)
        # object.__new__(cls), or base.__new__(cls, state) + base.__init__(obj, state) for
        # a builtin container/number/string base (protocol 0/1 subclasses of builtins)
        if not (len(items) == 3 and isinstance(items[0], Glob) and items[0].entry is not None
                and isinstance(items[1], Glob)):
            return False
        base = items[1].qualname.replace("__builtin__.", "builtins.", 1)
        return (base == "builtins.object" and items[2] is None) or base in _BUILTIN_BASES
    if kind == "newobj":  # copyreg.__newobj__(cls, *args) == cls.__new__(cls, *args)
        return bool(items) and isinstance(items[0], Glob) and items[0].entry is not None
    if kind == "numbers":
        return len(items) <= 2 and all(
            (isinstance(v, int) and not isinstance(v, bool)) or v is FLOAT for v in items)
    return False


_BUILTIN_BASES = frozenset(f"builtins.{t}" for t in (
    "list", "dict", "set", "frozenset", "tuple", "int", "float", "complex", "str", "bytes",
    "bytearray", "bool"))


def _is_bytes(value: object) -> bool:
    """A bytes literal, or bytes made by the allowlisted ``_codecs.encode`` (protocol < 3)."""
    if isinstance(value, Made):
        return value.entry is not None and value.entry.qualname == "_codecs.encode"
    return isinstance(value, bytes) or (isinstance(value, Big) and value.kind == "bytes")


def _torch_storage(pid: object) -> tuple[str, Entry, int] | None:
    """(key, storage type entry, numel) when ``pid`` is torch's storage persistent id."""
    if not isinstance(pid, Seq) or pid.kind != "tuple" or pid.items is None:
        return None
    items = pid.items
    if len(items) not in (5, 6) or items[0] not in ("storage", b"storage"):
        return None
    typ, key, location, numel = items[1:5]
    if not (isinstance(typ, Glob) and typ.entry is not None and typ.entry.storage_bytes):
        return None
    if not (isinstance(key, str) and isinstance(location, str)):
        return None
    if isinstance(numel, bool) or not isinstance(numel, int) or numel < 0:
        return None
    if len(items) == 6 and not (items[5] is None or isinstance(items[5], Seq)):
        return None
    return key, typ.entry, numel
