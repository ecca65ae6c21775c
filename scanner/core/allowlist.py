"""The pickle global allowlist, in tiers: what each name is, and so what a pickle that
uses it deserves as a verdict.

Tiers (``Entry.tier``; ``TIERS`` holds their meaning for triage):

- ``data``: the names a plain tensor checkpoint needs and the plain-value constructors
  the pickle protocols themselves emit (``_rebuild_tensor_v2``, ``OrderedDict``,
  ``set([..])``). A pickle of only these is ``format.pickle_not_allowed`` (policy).
- ``plain``: other plain-data builtins and containers (``builtins.len``, ``dict``,
  ``collections.deque``, ``datetime``): they build values and run no code taken from
  the pickle. ``pickle.framework_global`` (policy).
- ``framework``: classes of well-known ML frameworks (``torch.nn`` modules, sklearn
  estimators, transformers training arguments, numpy scalar/RNG types, joblib array
  wrappers, TorchScript class references): loading builds framework objects, which is
  refused without being evidence that the file runs code. ``pickle.framework_global``
  (policy). Matched by module prefix and a class-shaped name (upper-case first letter):
  module-level *functions* of those packages are not in the tier.
- outside every tier, ``classify`` tells two cases apart:

  - ``dangerous``: a known-dangerous callable (``scanner.core.dangerous``: process, import,
    code-object, network, file and deserialisation modules and names, any dotted or dunder
    name, any other standard-library name): ``pickle.unsafe_global`` (malicious), the
    evidence that loading runs code (``os.system``, ``pty.spawn``, ``shutil.copy``,
    ``builtins.getattr``, ``functools.partial``, ``torch.load``);
  - ``unknown``: a name nothing is known about (a third-party class or helper such as
    ``pandas._libs.tslibs.timestamps._unpickle_timestamp``): ``pickle.unknown_global``
    (policy). Loading imports its module, which is refused, but the name alone is no
    evidence; what the pickle does with it still is (calling the result of a call,
    BUILD on a global, EXT opcodes stay malicious).

``classify(module, name)`` and ``classify_dotted("pkg.mod.Class")`` (for config
``_target_`` callables) are the one answer to "which tier is this callable".

Default deny (nothing outside the tiers is ever loaded). Entries are keyed by
fully-qualified name (``module.name`` exactly as the pickle's GLOBAL / STACK_GLOBAL /
INST names it, after Python 2 name mapping), never by package:
``torch._utils._rebuild_tensor_v2`` is allowed, ``torch._utils`` as a whole is not.
A dotted ``name`` (an attribute walk such as ``zipfile`` + ``os.system``) or a dunder name
(``numpy.__builtins__``) is never allowed, whatever its module.

A pickle made only of data-tier names is still refused (``format.pickle_not_allowed``:
pickle weights are never served) but is *policy*, i.e. convertible to safetensors.

Each entry says how the name may be used:

- ``call``: it may be called (REDUCE, OBJ, INST, NEWOBJ, NEWOBJ_EX);
- ``ref``: it may only appear as a value (a storage type tag in a persistent id, the
  ``subtype`` argument of ``_reconstruct``); calling it is ``pickle.unsafe_call``.

``args`` names an argument check done by the interpreter (see ``scanner.formats.pickle.vm``).
Deliberately absent (each of these can load or run something, or is not needed by a
plain ``torch.save(state_dict)``): ``torch.storage._load_from_bytes`` (calls
``torch.load`` on embedded bytes), ``torch._tensor._rebuild_from_type_v2`` (calls an
argument), ``torch._utils._rebuild_parameter_with_state`` (``setattr`` of arbitrary
names), ``torch.device`` and dtypes (not used by a tensor state dict), every ``builtins``
name except the five plain-value constructors below (with argument checks),
``functools.partial``, ``operator.*``, ``copyreg.*``.

Protocol < 3 pickles name builtins ``__builtin__.*``; the interpreter maps them like
``pickle`` does (``_compat_pickle``) before the lookup.
"""

from __future__ import annotations

from typing import NamedTuple

from scanner.core.dangerous import STDLIB, danger_reason


class Entry(NamedTuple):
    """One allowlisted global: its qualified name, allowed uses, why it is safe, and its
    tier (``data``, ``plain`` or ``framework``; see ``TIERS``).

    ``storage_bytes`` is the element size in bytes for torch storage type tags (used to
    check the legacy raw storage layout), else ``None``.
    """

    qualname: str
    uses: frozenset[str]
    reason: str
    args: str | None = None
    storage_bytes: int | None = None
    tier: str = "data"


CALL = frozenset({"call"})
REF = frozenset({"ref"})

# Element sizes of the typed storage classes torch.save writes as persistent-id tags
# (torch/storage.py ``_pickle_storage_type`` and the legacy ``torch.*Storage`` classes).
_STORAGE_BYTES: dict[str, int] = {
    "DoubleStorage": 8,
    "FloatStorage": 4,
    "HalfStorage": 2,
    "BFloat16Storage": 2,
    "LongStorage": 8,
    "IntStorage": 4,
    "ShortStorage": 2,
    "CharStorage": 1,
    "ByteStorage": 1,
    "BoolStorage": 1,
    "ComplexDoubleStorage": 16,
    "ComplexFloatStorage": 8,
    "QUInt8Storage": 1,
    "QInt8Storage": 1,
    "QInt32Storage": 4,
    "QUInt4x2Storage": 1,
    "QUInt2x4Storage": 1,
    "UntypedStorage": 1,
}

_STORAGE_REASON = (
    "storage type tag inside a torch persistent id ('storage', type, key, location, "
    "numel); torch's persistent_load only reads its dtype, the class is never called"
)

_ENTRIES: list[Entry] = [
    Entry(
        "collections.OrderedDict", CALL,
        "state_dict container (OrderedDict() then SETITEMS, BUILD with _metadata); "
        "constructing and filling a dict runs no code from the pickle",
    ),
    Entry(
        "torch._utils._rebuild_tensor_v2", CALL,
        "rebuilds a tensor view (offset, size, stride, requires_grad, hooks) over a "
        "storage delivered by persistent id; torch bounds-checks the view; it calls "
        "nothing taken from its arguments",
    ),
    Entry(
        "torch._utils._rebuild_tensor_v3", CALL,
        "_rebuild_tensor_v2 with an explicit dtype (torch >= 2.1 writes it for dtypes "
        "without a typed storage class: float8, uint16/32/64); an UntypedStorage view",
    ),
    Entry(
        "torch._utils._rebuild_sparse_tensor", CALL,
        "rebuilds a sparse COO/CSR/CSC/BSR/BSC tensor from its layout and index/value "
        "tensors; torch validates the indices after loading; calls nothing it is given",
    ),
    Entry(
        "torch._utils._rebuild_meta_tensor_no_storage", CALL,
        "an empty tensor on the meta device from (dtype, size, stride, requires_grad)",
    ),
    Entry(
        "torch._utils._rebuild_qtensor", CALL,
        "a quantized tensor over a storage from its quantizer parameters (scheme ref, "
        "scales, zero points); calls nothing it is given",
    ),
    Entry(
        "torch._utils._rebuild_tensor", CALL,
        "the pre-0.4 form of _rebuild_tensor_v2 (storage, offset, size, stride): the same "
        "bounds-checked view, without grad flags or hooks; calls nothing",
    ),
    Entry(
        "torch._utils._rebuild_parameter", CALL,
        "wraps a rebuilt tensor in nn.Parameter(data, requires_grad); hooks are stored, "
        "not called, and can only hold other allowlisted values",
    ),
    Entry(
        "torch.OrderedDict", CALL,
        "collections.OrderedDict as torch builds that import it into the torch namespace "
        "expose it (state dicts pickled under that name; issue 30); torch builds without "
        "the name fail the load (AttributeError, torch 2.13); builds and fills a dict",
    ),
    Entry(
        "torch.Size", CALL,
        "tuple subclass of ints (shapes in checkpoint metadata)",
    ),
    Entry(
        "numpy.core.multiarray._reconstruct", CALL,
        "ndarray.__reduce__ helper (numpy < 2): allocates an empty array of subtype "
        "numpy.ndarray; contents come from BUILD -> ndarray.__setstate__",
        args="ndarray_subtype",
    ),
    Entry(
        "numpy._core.multiarray._reconstruct", CALL,
        "same helper under its numpy >= 2 module name",
        args="ndarray_subtype",
    ),
    Entry(
        "numpy.core.multiarray.scalar", CALL,
        "numpy scalar from (dtype, raw bytes) (numpy < 2); copies bytes, calls nothing",
    ),
    Entry(
        "numpy._core.multiarray.scalar", CALL,
        "same helper under its numpy >= 2 module name",
    ),
    Entry(
        "numpy.core.numeric._frombuffer", CALL,
        "ndarray.__reduce_ex__(5) helper (numpy < 2): frombuffer(bytes, dtype).reshape("
        "shape, order); copies nothing it does not get, calls nothing",
    ),
    Entry(
        "numpy._core.numeric._frombuffer", CALL,
        "same helper under its numpy >= 2 module name",
    ),
    Entry(
        "numpy.dtype", CALL,
        "dtype from a type string such as 'f4' (dtype.__reduce__); parses the string, "
        "calls nothing",
        args="dtype_string",
    ),
    Entry(
        "numpy.ndarray", REF,
        "only as the subtype argument of _reconstruct; calling it directly is refused",
    ),
    Entry(
        "_codecs.encode", CALL,
        "protocol-2 pickles carry ndarray bytes as _codecs.encode(str, 'latin1'); only "
        "that exact encoding is accepted (other codecs can decompress or import)",
        args="latin1",
    ),
    Entry(
        "builtins.set", CALL,
        "protocol < 4 encoding of a set: set([items]); only a list literal is accepted",
        args="list_literal",
    ),
    Entry(
        "builtins.frozenset", CALL,
        "protocol < 4 encoding of a frozenset: frozenset([items]); list literal only",
        args="list_literal",
    ),
    Entry(
        "builtins.bytearray", CALL,
        "protocol < 5 encoding of a bytearray: bytearray(bytes) or bytearray(str, "
        "'latin-1'); an integer size (allocation) is refused",
        args="bytearray",
    ),
    Entry(
        "builtins.bytes", CALL,
        "protocol < 3 encoding of b'': bytes(); only the empty call is accepted",
        args="empty",
    ),
    Entry(
        "builtins.complex", CALL,
        "complex(real, imag) from two number literals",
        args="numbers",
    ),
]
_ENTRIES += [
    Entry(f"torch.{name}", REF, _STORAGE_REASON, storage_bytes=size)
    for name, size in _STORAGE_BYTES.items()
]
# torch >= 2.1 tags untyped storages (numel in bytes) under their defining module
_ENTRIES.append(Entry("torch.storage.UntypedStorage", REF, _STORAGE_REASON, storage_bytes=1))

ALLOWLIST: dict[str, Entry] = {entry.qualname: entry for entry in _ENTRIES}

TIERS: dict[str, str] = {
    "data": "tensor/array rebuild helpers and the plain values pickle protocols emit",
    "plain": "plain-data builtins and containers: build values, run no pickled code",
    "framework": "classes of well-known ML frameworks: framework objects, refused by "
                 "policy, no evidence of code execution",
}

ANY = frozenset({"call", "ref"})
_PLAIN_REASON = "plain-data constructor or pure function of its arguments; runs no code it is given"
_PLAIN: dict[str, str] = {
    "builtins.len": _PLAIN_REASON, "builtins.dict": _PLAIN_REASON,
    "builtins.list": _PLAIN_REASON, "builtins.tuple": _PLAIN_REASON,
    "builtins.int": _PLAIN_REASON, "builtins.float": _PLAIN_REASON,
    "builtins.str": _PLAIN_REASON, "builtins.bool": _PLAIN_REASON,
    "builtins.slice": _PLAIN_REASON, "builtins.range": _PLAIN_REASON,
    "builtins.object": "the base class; copyreg._reconstructor names it as the base",
    "builtins.NotImplemented": "a singleton value", "builtins.Ellipsis": "a singleton value",
    "collections.deque": "a list-like container; filled from an iterable of values",
    "collections.defaultdict": "a dict; its factory runs only on a missing key, and a "
                               "factory outside the tiers is itself reported",
    "collections.Counter": "a dict of counts",
    "datetime.datetime": "a timestamp value", "datetime.date": "a date value",
    "datetime.time": "a time value", "datetime.timedelta": "a duration value",
    "datetime.timezone": "a fixed-offset time zone value",
    "decimal.Decimal": "a decimal number value", "fractions.Fraction": "a fraction value",
    "types.SimpleNamespace": "an attribute bag; BUILD fills its __dict__",
    "array.array": "a typed array of numbers; built from a typecode and values",
    "array._array_reconstructor": "array.__reduce_ex__ helper: array from (class, "
                                  "typecode, machine format code, bytes); copies bytes",
    "pathlib.PurePath": "a path value (never touches the file system when built)",
    "pathlib.PurePosixPath": "a path value", "pathlib.PureWindowsPath": "a path value",
    "pathlib.Path": "a path value (built from strings; nothing is opened)",
    "pathlib.PosixPath": "a path value", "pathlib.WindowsPath": "a path value",
}
_FRAMEWORK_EXACT: dict[str, str] = {
    "copyreg._reconstructor": "protocol 0/1 object reconstruction: base.__new__(cls); "
                              "accepted only with base builtins.object and a tier class",
    "torch.device": "a device name ('cpu', 'cuda:0'); parses a string",
    "numpy.random._pickle.__randomstate_ctor": "RandomState.__reduce__: looks a bit "
                                               "generator up by name in a fixed table",
    "numpy.random._pickle.__bit_generator_ctor": "BitGenerator.__reduce__: fixed table "
                                                 "lookup by name",
    "numpy.random._pickle.__generator_ctor": "Generator.__reduce__: fixed table lookup",
    "copyreg.__newobj__": "cls.__new__(cls, *args) (a __reduce_ex__ helper); accepted "
                          "only when cls is a tier class",
    "torch.serialization._get_layout": "looks a torch.layout up by its name in a table "
                                       "built from torch's own layout values",
    "torch.jit._pickle.build_intlist": "TorchScript list builder over values",
    "torch.jit._pickle.build_tensorlist": "TorchScript list builder over values",
    "torch.jit._pickle.build_doublelist": "TorchScript list builder over values",
    "torch.jit._pickle.build_boollist": "TorchScript list builder over values",
    "torch.jit._pickle.restore_type_tag": "TorchScript type annotation of a value",
}
_TORCH_DTYPES = ("float16", "float32", "float64", "bfloat16", "half", "float", "double",
                 "int8", "int16", "int32", "int64", "uint8", "bool", "complex64",
                 "complex128", "long", "int", "short", "uint16", "uint32", "uint64",
                 "complex32", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                 "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "qint8", "quint8",
                 "qint32", "quint4x2", "quint2x4", "per_tensor_affine",
                 "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric",
                 "per_channel_affine_float_qparams", "sparse_coo", "sparse_csr",
                 "sparse_csc", "sparse_bsr", "sparse_bsc", "strided")
_FRAMEWORK_EXACT.update({f"torch.{d}": "a torch dtype value (ref)" for d in _TORCH_DTYPES})
_NUMPY_TYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                "uint8", "uint16", "uint32", "uint64", "bool_", "complex64", "complex128",
                "str_", "bytes_", "longlong", "ulonglong", "intc", "uintc")
_FRAMEWORK_EXACT.update({f"numpy.{t}": "a numpy scalar type" for t in _NUMPY_TYPES})

# (module prefix, reason): class-shaped names under these modules are framework tier.
FRAMEWORK_PREFIXES: tuple[tuple[str, str], ...] = (
    ("torch.nn.modules", "torch.nn module class: torch.save(model) pickles modules; "
                         "__setstate__ restores attributes"),
    ("torch.nn.parameter", "torch Parameter/Buffer wrapper class"),
    ("torch.nn.utils.parametrize", "torch parametrization container class"),
    ("sklearn", "scikit-learn estimator/transformer class: __init__ stores parameters, "
                "__setstate__ updates __dict__"),
    ("scipy.sparse", "scipy sparse matrix class (arrays only)"),
    ("numpy.random", "numpy random generator class (state is arrays and ints)"),
    ("numpy.ma.core", "numpy masked array class"),
    ("joblib.numpy_pickle", "joblib array wrapper: the array data follows in the stream"),
    ("transformers.training_args", "transformers TrainingArguments (dataclass of settings)"),
    ("transformers.training_args_seq2seq", "transformers Seq2SeqTrainingArguments"),
    ("transformers.trainer_utils", "transformers training enum (IntervalStrategy, ...)"),
    ("transformers.trainer_pt_utils", "transformers trainer config dataclass"),
    ("transformers.debug_utils", "transformers DebugOption enum"),
    ("transformers.generation.configuration_utils", "transformers GenerationConfig"),
    ("accelerate.utils.dataclasses", "accelerate settings dataclass / enum"),
    ("__torch__", "TorchScript class reference: resolved by torch.jit's compilation "
                  "unit from the archive's code/, never imported by Python"),
)
# Modules under a framework prefix that hold gadgets (run code, fetch or write files).
FRAMEWORK_EXCLUDED: tuple[str, ...] = (
    "sklearn.utils._testing", "sklearn.externals", "sklearn.utils.fixes",
    "sklearn.datasets", "sklearn.utils._show_versions",
)
# __future__ feature flags: inert records of (version, version, compiler flag); what
# pickle.dumps(__future__.annotations) writes is _Feature + NEWOBJ + BUILD of those fields
_FUTURE_REASON = "a __future__ feature record (two version tuples and a flag); inert"
_PLAIN.update({f"__future__.{n}": _FUTURE_REASON for n in (
    "_Feature", "annotations", "division", "print_function", "absolute_import",
    "unicode_literals", "generators", "nested_scopes", "with_statement", "generator_stop",
    "barry_as_FLUFL")})
_EXTRA: dict[str, Entry] = {}
for _name, _reason in _PLAIN.items():
    _EXTRA[_name] = Entry(_name, ANY, _reason, tier="plain")
for _name, _reason in _FRAMEWORK_EXACT.items():
    _EXTRA[_name] = Entry(_name, ANY, _reason, tier="framework", args={
        "copyreg._reconstructor": "reconstructor", "copyreg.__newobj__": "newobj"}.get(_name))
EXTRA: dict[str, Entry] = _EXTRA  # plain and exact framework-tier entries
_PREFIX_CACHE: dict[str, Entry | None] = {}


def lookup(module: str, name: str) -> Entry | None:
    """The allowlist entry for the global ``module`` + ``name``, or ``None`` (deny).

    ``name`` containing ``.`` (attribute walk) or any dunder part is always denied, as is
    a module with a dunder component (``deny_reason`` says which), except the exact
    framework entries (numpy RNG constructors) and TorchScript ``__torch__`` class
    references. Matching is exact and case-sensitive; framework prefixes match whole
    module components and class-shaped names only.
    """
    if not module or not name or "." in name:
        return None
    qual = f"{module}.{name}"
    exact = ALLOWLIST.get(qual) or EXTRA.get(qual)
    if exact is not None:
        return exact if "__" not in qual or exact.tier == "framework" or module == \
            "__future__" else None
    if deny_reason(module, name) is not None and not _torchscript(module, name):
        return None
    return _framework(module, name, qual)


def _torchscript(module: str, name: str) -> bool:
    parts = module.split(".")
    return (parts[0] == "__torch__" and not _dunder(name)
            and not any(_dunder(p) and not p.startswith("___torch_mangle_")
                        for p in parts[1:]))


def _framework(module: str, name: str, qual: str) -> Entry | None:
    if not name[:1].isupper() or not name.isidentifier():
        return None
    if qual in _PREFIX_CACHE:
        return _PREFIX_CACHE[qual]
    found: Entry | None = None
    for prefix, reason in FRAMEWORK_PREFIXES:
        if module == prefix or module.startswith(prefix + "."):
            if not any(module == ex or module.startswith(ex + ".")
                       for ex in FRAMEWORK_EXCLUDED):
                found = Entry(qual, ANY, reason, tier="framework")
            break
    if len(_PREFIX_CACHE) < 65536:
        _PREFIX_CACHE[qual] = found
    return found


def deny_reason(module: str, name: str) -> str | None:
    """Why ``module`` + ``name`` is denied whatever the allowlist holds, or ``None``."""
    if "." in name:
        return "a dotted name (attribute walk), never allowlisted"
    if _dunder(name) or any(_dunder(part) for part in module.split(".")):
        return "a dunder name, never allowlisted"
    return None


def _dunder(part: str) -> bool:
    return part.startswith("__") or part.endswith("__")


# -- classification: the tier of any callable --------------------------------------------

DANGEROUS = "dangerous"
UNKNOWN = "unknown"


class Classification(NamedTuple):
    """What a global is: ``tier`` is ``data``, ``plain`` or ``framework`` (``entry`` is its
    allowlist entry), ``dangerous`` (known-dangerous: evidence of code execution,
    exfiltration or escape) or ``unknown`` (outside every tier, nothing known about it);
    ``reason`` says why, for findings."""

    tier: str
    reason: str
    entry: Entry | None = None


def classify(module: str, name: str) -> Classification:
    """The tier of the global ``module`` + ``name`` exactly as a pickle's GLOBAL /
    STACK_GLOBAL names it (after Python 2 name mapping): the allowlist tiers first
    (``lookup``), then ``scanner.core.dangerous.danger_reason``, else ``unknown``."""
    entry = lookup(module, name)
    if entry is not None:
        return Classification(entry.tier, entry.reason, entry)
    why = danger_reason(module, name)
    if why is not None:
        return Classification(DANGEROUS, why)
    return Classification(UNKNOWN, "outside every allowlist tier (data, plain, framework); "
                          "not a known-dangerous callable")


def classify_dotted(target: str) -> Classification:
    """The tier of a dotted callable path as a config names it (Hydra/OmegaConf
    ``_target_: pkg.module.Class``; resolved by importing the longest importable module
    prefix, then walking attributes).

    The longest module prefix decides (``classify(module, last name)``), unless another
    reading, a shorter module with an attribute walk, is dangerous (its module or last
    name, or a dunder on the way): ``os.path.join`` is dangerous through ``os``,
    ``torch.optim.Adam`` unknown, ``torch.nn.modules.linear.Linear`` framework. An empty
    path, an empty part, or a part that is not an identifier is ``dangerous`` (not
    resolvable as written).
    """
    parts = target.split(".")
    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        return Classification(DANGEROUS, f"{target[:80]!r} is not a dotted path of "
                              "identifiers")
    best = classify(".".join(parts[:-1]), parts[-1])
    if best.tier == DANGEROUS:
        return best
    for i in range(len(parts) - 2, 0, -1):
        found = _walk(".".join(parts[:i]), parts[i:])
        if found.tier == DANGEROUS:
            return found
    alias = _stdlib_alias(parts)
    return alias if alias is not None else best


def _stdlib_alias(parts: list[str]) -> Classification | None:
    """A standard-library module re-exported by another module on the way (``getattr``
    walks reach it: ``pkg.x.subprocess.Popen`` is ``subprocess.Popen``, ``logging.os.
    system`` is ``os.system``): the name right before the last part is a standard-library
    module, or a standard-library package (``os``, ``importlib``, ``http`` ...) appears
    after the first part. A framework package of the same name with further module parts
    (NeMo's ``nemo.lightning.io.pl``) is not one: ``io`` has no submodules."""
    if len(parts) > 2 and parts[-2] in STDLIB:
        return Classification(DANGEROUS, f"{parts[-2]} (standard library) re-exported on "
                              f"the way to {parts[-1]}")
    for part in parts[1:-1]:
        if part in _STDLIB_PACKAGES:
            return Classification(DANGEROUS, f"standard-library package {part} re-exported "
                                  "on the way")
    return None


def _walk(module: str, rest: list[str]) -> Classification:
    """An attribute walk ``module.a.b.c``: dangerous when any part is a dunder, the
    module is dangerous, or its last name is (``builtins.getattr``-like names); else
    unknown (a class attribute of an unknown class)."""
    for attr in rest:
        if _dunder(attr):
            return Classification(DANGEROUS, "a dunder attribute in an attribute walk")
    why = danger_reason(module, rest[-1])
    if why is not None:
        return Classification(DANGEROUS, why)
    return Classification(UNKNOWN, f"attribute {'.'.join(rest)} of {module}, outside "
                          "every allowlist tier; not a known-dangerous callable")
# -- config targets (Hydra ``_target_``, NeMo ``target``) ------------------------------------
# A config target is imported by ``hydra._internal.utils._locate``: the longest importable
# module prefix, then ``getattr`` for each further part, so any module's re-export is
# reachable (``logging.os.system`` is ``os.system``; hydra PR 3409). Its node's keys are
# the call's arguments. The pickle tiers apply (an entry with an argument check, or usable
# only as a value, does not: the pickle interpreter's checks do not run on a config), plus:
CONFIG_PREFIXES: tuple[tuple[str, str], ...] = (
    ("torch.optim", "torch optimizer / learning-rate scheduler class: stores parameters"),
    ("torch.nn", "torch.nn module class (layers, losses, containers): builds tensors"),
    ("torch.utils.data", "torch dataset / sampler / loader class"),
    ("nemo.collections", "NVIDIA NeMo model, module, loss, metric or tokenizer class; its "
                         "nested configs are judged on their own"),
    ("nemo.lightning", "NeMo 2 trainer context, strategy and precision-plugin class "
                       "(context/model.yaml of a NeMo 2 checkpoint)"),
    ("megatron.core", "Megatron-Core transformer / parallelism config class"),
    ("fiddle._src.config", "Fiddle Config / Partial / traverser metadata class (the "
                           "structure of a NeMo 2 context/io.json; the callable a Config "
                           "builds is its own pyref, judged on its own)"),
)
TIERS["config"] = ("classes a training config instantiates (optimizers, layers, NeMo "
                   "modules): config targets only, never pickle globals")
_STDLIB = STDLIB | {"python_multiprocessing"}


def classify_target(path: str) -> Classification | None:
    """``None`` when the config target ``path`` (``"torch.optim.Adam"``) names a callable
    of an allowlist tier (``_target_refusal``), else its ``Classification``: ``unknown``
    when nothing but being outside every tier is against it (``classify_dotted`` finds no
    danger on any reading), ``dangerous`` otherwise (a known-dangerous name, an alias of a
    standard-library module, a pickle entry usable only with checks, a malformed path)."""
    if path in CONFIG_FUNCTIONS:
        return None
    why = _target_refusal(path)
    if why is None:
        return None
    if why == _OUTSIDE:
        found = classify_dotted(path)
        if found.tier in (DANGEROUS, UNKNOWN):
            return found
    return Classification(DANGEROUS, why)


_OUTSIDE = "outside every allowlist tier (data, plain, framework, config)"


def _target_refusal(path: str) -> str | None:
    """Why the config target ``path`` (``"torch.optim.Adam"``) is outside every tier, or
    ``None`` when it names a callable of the ``data``/``plain``/``framework`` tiers (the
    pickle tiers, via ``lookup``) or of the ``config`` tier (a class-shaped last part
    under ``CONFIG_PREFIXES``). A prefix match fails when the path may run through a
    standard-library module re-exported by a framework module (``_aliased``: an alias
    such as ``nemo.collections.x.subprocess.Popen`` reaches ``subprocess.Popen``), and for
    a dunder or non-identifier part."""
    module, _, name = path.rpartition(".")
    parts = path.split(".")
    if not module or not all(p.isidentifier() and p.isascii() for p in parts):
        return "not a dotted path of identifiers"
    entry = lookup(module, name)
    if entry is not None and "call" in entry.uses and entry.args is None:
        if entry.qualname in ALLOWLIST or entry.qualname in EXTRA:
            return None  # an exact entry: the real name, not an alias
        prefix = next((p for p, _ in FRAMEWORK_PREFIXES
                       if module == p or module.startswith(p + ".")), "")
        if not _aliased(module, prefix):
            return None
    elif entry is not None:
        return "allowlisted for pickles only with checks a config cannot have"
    why = deny_reason(module, name)
    if why is not None:
        return why
    for prefix, _reason in CONFIG_PREFIXES:
        if module == prefix or module.startswith(prefix + "."):
            if name[:1].isupper() and not _aliased(module, prefix):
                return None
            break
    return _OUTSIDE


# Standard-library packages (modules with submodules): a path through one may continue
# into its submodules (``x.logging.handlers.FileHandler``, ``x.http.server.HTTPServer``).
_STDLIB_PACKAGES = frozenset({
    "asyncio", "collections", "concurrent", "ctypes", "curses", "dbm", "distutils", "email",
    "encodings", "ensurepip", "html", "http", "idlelib", "importlib", "json", "lib2to3",
    "logging", "multiprocessing", "os", "pydoc_data", "sqlite3", "tkinter", "unittest",
    "urllib", "venv", "wsgiref", "xml", "xmlrpc", "zoneinfo"})


def _aliased(module: str, prefix: str) -> bool:
    """A part of ``module`` after ``prefix`` may be a standard-library module re-exported
    by a framework module: a standard-library name right before the class name, or a
    standard-library package anywhere (its submodules follow). A module without
    submodules followed by more module parts (NeMo's own ``nemo.lightning.io.pl``) is the
    framework's package of that name: the standard-library one has no such attribute."""
    rest = module[len(prefix):].strip(".")
    if not rest:
        return False
    parts = rest.split(".")
    return parts[-1] in _STDLIB or any(p in _STDLIB_PACKAGES for p in parts)


# -- functions configs name as values -----------------------------------------------------
# Elementwise activations a config hands to a model (NeMo 2 ``context/io.json``
# ``activation_func`` fiddle pyrefs, a Hydra ``_target_`` with ``_partial_``): pure tensor
# math on their arguments. Other torch functions stay dangerous (loaders, hook installers).
CONFIG_FUNCTIONS = frozenset(f"torch.nn.functional.{name}" for name in (
    "silu", "gelu", "relu", "relu6", "leaky_relu", "elu", "selu", "celu", "mish", "sigmoid",
    "tanh", "softplus", "softsign", "hardswish", "hardsigmoid", "glu", "softmax",
    "log_softmax"))

# -- logging.config.dictConfig (``scanner.formats.logconfig``) ------------------------------
# Classes a dictConfig builds from a handler's or formatter's ``class``, a ``()`` factory,
# or an ``ext://`` value (``BaseConfigurator.resolve``: import, then ``getattr``): the
# standard library's record sinks into the streams and files the config names, its
# formatter and filter, and the formatter of Hydra's colorlog plugin. Handlers that send
# records elsewhere (socket, HTTP, SMTP, syslog, queue listeners) are not listed.
LOGGING_CALLABLES: dict[str, str] = {
    **{f"logging.{name}": "standard-library log handler / formatter / filter" for name in (
        "StreamHandler", "FileHandler", "NullHandler", "Formatter", "Filter")},
    **{f"logging.handlers.{name}": "standard-library file-rotating / buffering handler"
       for name in ("RotatingFileHandler", "TimedRotatingFileHandler", "WatchedFileHandler",
                    "MemoryHandler", "BufferingHandler")},
    "sys.stdout": "the process's standard output (ext://sys.stdout)",
    "sys.stderr": "the process's standard error (ext://sys.stderr)",
    "colorlog.ColoredFormatter": "hydra_colorlog plugin formatter",
}


def classify_logging(path: str) -> Classification | None:
    """``None`` when a dictConfig callable ``path`` is in ``LOGGING_CALLABLES`` or is
    accepted as a config target (``classify_target``), else its ``Classification``."""
    if path in LOGGING_CALLABLES:
        return None
    return classify_target(path)
