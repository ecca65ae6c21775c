"""Opcode handlers of the symbolic pickle interpreter (``scanner.formats.pickle.vm.Machine``).

One function per opcode family of CPython ``Lib/pickletools.py`` (protocols 0-5), each
mirroring ``Lib/pickle.py``'s ``_Unpickler.load_*`` on symbolic values. A handler gets
the machine and the opcode byte, and returns True only for STOP. This module holds the
stack, memo, container, global and call opcodes; ``scanner.formats.pickle.consts`` the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scanner.core.context import LimitHit
from scanner.formats.pickle import rules as R
from scanner.formats.pickle.consts import TABLE as TABLE  # complete once this module registered
from scanner.formats.pickle.consts import op as _op
from scanner.formats.pickle.npdtype import DType, apply_state
from scanner.formats.pickle.values import Bad, Big, Glob, Made, Seq, describe, is_dunder_key

if TYPE_CHECKING:
    from scanner.formats.pickle.vm import Machine

MAX_MEMO = 4_000_000  # memo entries per stream


# -- opcode handlers: each returns True only for STOP ------------------------------------

@_op(b".")
def _stop(m: Machine, code: int) -> bool:
    m.res.value = m.pop()
    return True


@_op(b"(")
def _mark(m: Machine, code: int) -> None:
    m.meta_items += len(m.stack)
    m.meta.append(m.stack)
    m.stack = []


@_op(b"0")
def _pop(m: Machine, code: int) -> None:
    if m.stack:
        m.stack.pop()
    else:
        m.pop_mark()


@_op(b"1")
def _pop_mark(m: Machine, code: int) -> None:
    m.pop_mark()


@_op(b"2")
def _dup(m: Machine, code: int) -> None:
    m.push(m.top())


@_op(b")")
def _empty_tuple(m: Machine, code: int) -> None:
    m.push(Seq("tuple", [], 0))


@_op(b"\x85", b"\x86", b"\x87")
def _tuple_n(m: Machine, code: int) -> None:
    n = code - 0x84
    items = [m.pop() for _ in range(n)][::-1]
    m.push(m.seq("tuple", items))


@_op(b"t")
def _tuple(m: Machine, code: int) -> None:
    m.push(m.seq("tuple", m.pop_mark()))


@_op(b"]")
def _empty_list(m: Machine, code: int) -> None:
    m.push(m.seq("list", []))


@_op(b"l")
def _list(m: Machine, code: int) -> None:
    m.push(m.seq("list", m.pop_mark()))


@_op(b"}")
def _empty_dict(m: Machine, code: int) -> None:
    m.push(m.seq("dict", []))


@_op(b"d")
def _dict(m: Machine, code: int) -> None:
    items = m.pop_mark()
    if len(items) % 2:
        raise Bad("DICT with an odd number of items")
    value = m.seq("dict", items)
    value.n = len(items) // 2
    value.dunder = any(is_dunder_key(k) for k in items[0::2])
    m.push(value)


@_op(b"\x8f")
def _empty_set(m: Machine, code: int) -> None:
    m.push(m.seq("set", []))


@_op(b"\x91")
def _frozenset(m: Machine, code: int) -> None:
    m.push(m.seq("frozenset", m.pop_mark()))


@_op(b"a")
def _append(m: Machine, code: int) -> None:
    value = m.pop()
    m.mutate(m.top(), "APPEND", [value], keys=False)


@_op(b"e")
def _appends(m: Machine, code: int) -> None:
    items = m.pop_mark()
    m.mutate(m.top(), "APPENDS", items, keys=False)


@_op(b"\x90")
def _additems(m: Machine, code: int) -> None:
    items = m.pop_mark()
    m.mutate(m.top(), "ADDITEMS", items, keys=False)


@_op(b"s")
def _setitem(m: Machine, code: int) -> None:
    value = m.pop()
    key = m.pop()
    m.mutate(m.top(), "SETITEM", [key, value], keys=True)


@_op(b"u")
def _setitems(m: Machine, code: int) -> None:
    items = m.pop_mark()
    if len(items) % 2:
        raise Bad("SETITEMS with an odd number of items")
    m.mutate(m.top(), "SETITEMS", items, keys=True)


@_op(b"g")
def _get(m: Machine, code: int) -> None:
    try:
        key = int(m.line())
    except ValueError:
        raise Bad("GET argument is not an integer") from None
    _memo_get(m, key)


@_op(b"h")
def _binget(m: Machine, code: int) -> None:
    _memo_get(m, m.r.byte())


@_op(b"j")
def _long_binget(m: Machine, code: int) -> None:
    _memo_get(m, m.int_arg(4))


def _memo_get(m: Machine, key: int) -> None:
    try:
        m.push(m.memo[key])
    except KeyError:
        raise Bad(f"memo key {key} read before it was written") from None


@_op(b"p")
def _put(m: Machine, code: int) -> None:
    try:
        key = int(m.line())
    except ValueError:
        raise Bad("PUT argument is not an integer") from None
    if key < 0:
        raise Bad("negative PUT argument")
    _memo_put(m, key)


@_op(b"q")
def _binput(m: Machine, code: int) -> None:
    _memo_put(m, m.r.byte())


@_op(b"r")
def _long_binput(m: Machine, code: int) -> None:
    _memo_put(m, m.int_arg(4))


@_op(b"\x94")
def _memoize(m: Machine, code: int) -> None:
    _memo_put(m, len(m.memo))


def _memo_put(m: Machine, key: int) -> None:
    if key not in m.memo and len(m.memo) >= MAX_MEMO:
        raise LimitHit("pickle_memo_entries", MAX_MEMO)
    m.memo[key] = m.top()


def _name_lines(m: Machine) -> tuple[str, str]:
    try:
        return m.line().decode("utf-8"), m.line().decode("utf-8")
    except UnicodeDecodeError:
        raise Bad("GLOBAL/INST name is not UTF-8") from None


@_op(b"c")
def _global(m: Machine, code: int) -> None:
    module, name = _name_lines(m)
    m.push(m.resolve(module, name))


@_op(b"\x93")
def _stack_global(m: Machine, code: int) -> None:
    name = m.pop()
    module = m.pop()
    if isinstance(module, str) and isinstance(name, str):
        m.push(m.resolve(module, name))
        return
    for operand in (module, name):  # only a computed value may turn out to be a str
        if not (isinstance(operand, (str, Made, Glob))
                or (isinstance(operand, Big) and operand.kind == "str")):
            raise Bad(f"STACK_GLOBAL operand is {describe(operand)}, not a str")
    evidence = f"STACK_GLOBAL({describe(module)}, {describe(name)})"
    m.report(R.DYNAMIC_GLOBAL, f"{evidence}: the imported name is computed while loading",
             evidence)
    m.push(Glob("<dynamic>", None, m.op_at))


@_op(b"i")
def _inst(m: Machine, code: int) -> None:
    module, name = _name_lines(m)
    cls = m.resolve(module, name)
    m.call(cls, m.seq("tuple", m.pop_mark()), "INST")


@_op(b"o")
def _obj(m: Machine, code: int) -> None:
    items = m.pop_mark()
    if not items:
        raise Bad("OBJ without a class")
    m.call(items[0], m.seq("tuple", items[1:]), "OBJ")


@_op(b"R")
def _reduce(m: Machine, code: int) -> None:
    args = m.pop()
    m.call(m.pop(), args, "REDUCE")


@_op(b"\x81")
def _newobj(m: Machine, code: int) -> None:
    args = m.pop()
    m.call(m.pop(), args, "NEWOBJ")


@_op(b"\x92")
def _newobj_ex(m: Machine, code: int) -> None:
    m.pop()  # kwargs
    args = m.pop()
    m.call(m.pop(), args, "NEWOBJ_EX")


@_op(b"b")
def _build(m: Machine, code: int) -> None:
    state = m.pop()
    inst = m.top()
    if isinstance(inst, Glob):
        m.report(R.BUILD_ON_GLOBAL, f"BUILD sets state on the imported global {inst.qualname}"
                 " instead of on an object created by the pickle", inst.qualname)
    slots = state.items[1] if (isinstance(state, Seq) and state.kind == "tuple"
                               and state.items is not None and len(state.items) == 2) else None
    for part in (state, slots):
        if isinstance(part, Seq) and part.dunder:
            m.report(R.BUILD_ON_GLOBAL, f"BUILD on {describe(inst)} sets a dunder attribute",
                     f"dunder state on {describe(inst)}")
    if isinstance(inst, Made) and inst.entry is not None:
        if inst.entry.qualname == JOBLIB_WRAPPER:
            _joblib_array(m, state)
        elif isinstance(inst.detail, DType):  # numpy.dtype(...) then its pickled state
            apply_state(inst.detail, state)


JOBLIB_WRAPPER = "joblib.numpy_pickle.NumpyArrayWrapper"
JOBLIB_BUFFER = 16 * 1024 ** 2  # joblib numpy_pickle_utils.BUFFER_SIZE


def _dim(value: object) -> int | None:
    """A shape dimension as NumPy reads it: an int literal, or a NumPy integer scalar
    whose value the pickle spells out (``numpy.core.multiarray.scalar``)."""
    if isinstance(value, Made) and isinstance(value.detail, int):
        value = value.detail
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _joblib_array(m: Machine, state: object) -> None:
    """joblib's NumpyUnpickler reads the array right after the wrapper's BUILD, from the
    same file (joblib/numpy_pickle.py ``NumpyArrayWrapper.read_array``): for a dtype with
    objects (``hasobject``, after its pickled state: ``npdtype``), a whole pickle;
    otherwise an optional alignment pad (one length byte, then that many bytes), then
    ``prod(shape) * itemsize`` raw bytes. Skip the raw bytes; interpret an object array's
    pickle as a nested stream. A size the pickle does not spell out (a dimension or an
    item size computed by a call, which ``Machine.call`` has judged) stops the reading:
    the loader's next bytes are unknown."""
    if not (isinstance(state, Seq) and state.kind == "dict" and state.items is not None):
        raise Bad("joblib NumpyArrayWrapper state is not a literal dict")
    fields = dict(zip(state.items[0::2], state.items[1::2], strict=False))
    shape, dtype = fields.get("shape"), fields.get("dtype")
    dims = shape.items if isinstance(shape, Seq) and shape.kind in ("tuple", "list") else None
    spec = dtype.detail if isinstance(dtype, Made) else None
    if not isinstance(spec, DType):
        raise Bad(f"joblib NumpyArrayWrapper dtype {describe(dtype)} is not a numpy.dtype "
                  "of a plain type string")
    if spec.hasobject:
        m.nested_stream(m.r.pos)
        return
    sizes = [_dim(d) for d in dims] if dims is not None else None
    if sizes is None or any(d is None for d in sizes):
        raise Bad(f"joblib NumpyArrayWrapper shape {describe(shape)} is not spelled out as "
                  "non-negative ints: the array's size, and so the bytes after it, are "
                  "unknown")
    if spec.itemsize is None or spec.itemsize == 0:
        raise Bad(f"joblib NumpyArrayWrapper item size {spec.itemsize} cannot be read "
                  "(joblib divides its buffer by it)")
    align = fields.get("numpy_array_alignment_bytes")
    if align is not None:
        pad = m.r.byte()
        if not isinstance(align, int) or pad > align:
            raise Bad(f"joblib alignment pad of {pad} bytes exceeds {align}")
        m.r.skip(pad)
    count = 1
    for d in sizes:
        count *= d  # type: ignore[operator]
    m.r.skip(count * spec.itemsize)


@_op(b"P")
def _persid(m: Machine, code: int) -> None:
    try:
        pid = m.line().decode("ascii")
    except UnicodeDecodeError:
        raise Bad("PERSID argument is not ASCII") from None
    m.persistent(pid)


@_op(b"Q")
def _binpersid(m: Machine, code: int) -> None:
    m.persistent(m.pop())


@_op(b"\x82", b"\x83", b"\x84")
def _ext(m: Machine, code: int) -> None:
    width = {0x82: 1, 0x83: 2, 0x84: 4}[code]
    ext = m.int_arg(width, signed=width == 4)
    m.report(R.EXTENSION_CODE, f"EXT{width} {ext}: loads a global from the copyreg "
             "extension registry, which the pickle itself can change", f"EXT{width} {ext}")
    m.push(Made(f"EXT{width} {ext}", None))

