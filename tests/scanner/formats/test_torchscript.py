"""TorchScript models: ``torch.jit.save`` archives (``.pt``), lite-interpreter zip
archives (``.ptl``: ``bytecode.pkl`` + ``code/``) and PyTorch Mobile flatbuffer modules
(``PTMF``). Each is refused by policy; operators that reach files, Python, other
processes or the network make it malicious (``torchscript.dangerous_operator``), operators
of unknown namespaces are named (``torchscript.custom_operator``), unreadable code and
out-of-bounds flatbuffers are malformed, and nothing here ever comes out clean.

Models are built with torch (``torch.jit.script``, ``torch.jit.save``,
``_save_for_lite_interpreter``) and never loaded. What torch will not write (a
``prim::PythonOp`` in an operator table, a bad union tag) is built from the public
description: a bytecode tuple pickled with ``pickle.dumps``, and flatbuffer modules with
the ``flatbuffers`` builder following ``mobile_bytecode.fbs`` (Module slots 0 version,
1 extra_files, 2 methods, 4 ivalues, 7 object_types, 8 jit_sources; IValue 0 tag, 1 val;
Function 0 qn, 2 operators; Operator 0 name, 1 overload; ExtraFile 0 name, 1 content;
ObjectType 0 type_name, 1 type).
"""

from __future__ import annotations

import io
import pickle
import random
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import flatbuffers
import pytest

from scanner.api import scan_paths
from scanner.core.model import Verdict
from scanner.formats import torchops

torch = pytest.importorskip("torch")

_LIB = torch.library.Library("scantestns", "DEF")  # a custom operator namespace
_LIB.define("run(Tensor x) -> Tensor")
_LIB.impl("run", lambda x: x, "CPU")


class Benign(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class ReadsFile(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.from_file("some-file.bin", False, 4, dtype=torch.uint8)
        return x + y.float().sum()


class WritesFile(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.save(x, "written-by-a-model.pt")
        return x


class CustomOp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.scantestns.run(x)


FORMS = ("jit.pt", "lite.ptl", "flat.ptl")


def _save(module: torch.nn.Module, form: str, path: Path) -> None:
    scripted = torch.jit.script(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the lite interpreter's deprecation notice
        if form == "jit.pt":
            torch.jit.save(scripted, str(path))
        elif form == "lite.ptl":
            scripted._save_for_lite_interpreter(str(path))
        else:
            scripted._save_for_lite_interpreter(str(path), _use_flatbuffer=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("torchscript")
    out = {}
    for name, cls in (("benign", Benign), ("reads", ReadsFile), ("writes", WritesFile),
                      ("custom", CustomOp)):
        for form in FORMS:
            path = root / f"{name}_{form}"
            _save(cls(), form, path)
            out[name, form] = path
    return out


def _scan(path: Path) -> tuple[Verdict | None, dict[str, str]]:
    (result,) = scan_paths([path]).targets
    rules: dict[str, str] = {}
    for f in result.findings:
        rules[f.rule_id] = rules.get(f.rule_id, "") + f" {f.message} | {f.evidence};"
    return result.verdict, rules


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# -- built with torch ---------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_benign_torchscript_is_policy_with_no_operator_finding(
        built: dict[tuple[str, str], Path], form: str) -> None:
    verdict, rules = _scan(built["benign", form])
    assert verdict is Verdict.POLICY, rules
    assert not [r for r in rules if r.startswith("torchscript.")], rules
    assert "format.extension_mismatch" not in rules, rules
    policy = "format.torch_mobile_not_allowed" if form == "flat.ptl" else \
        "format.torch_zip_not_allowed"
    assert policy in rules, rules


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("name", "op"), [("reads", "aten::from_file"),
                                          ("writes", "aten::save")])
def test_file_operators_are_malicious(built: dict[tuple[str, str], Path], form: str,
                                      name: str, op: str) -> None:
    verdict, rules = _scan(built[name, form])
    assert verdict is Verdict.MALICIOUS, rules
    evidence = rules["torchscript.dangerous_operator"]
    assert op in evidence
    # the TorchScript source is judged in every form; the operator table where there is one
    assert "code/__torch__" in evidence or "jit source" in evidence
    if form != "jit.pt":
        assert "__torch__." in evidence and ("bytecode.pkl" in evidence
                                             or "function" in evidence)


@pytest.mark.parametrize("form", FORMS)
def test_custom_namespace_operator_is_named_policy(built: dict[tuple[str, str], Path],
                                                   form: str) -> None:
    verdict, rules = _scan(built["custom", form])
    assert verdict is Verdict.POLICY, rules
    assert "scantestns::run" in rules["torchscript.custom_operator"]


def test_flatbuffer_module_is_recognised_under_any_name(
        built: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    path = _write(tmp_path, "weights.bin", built["writes", "flat.ptl"].read_bytes())
    verdict, rules = _scan(path)
    assert verdict is Verdict.MALICIOUS and "format.torch_mobile_not_allowed" in rules


def test_truncated_or_mutated_flatbuffer_never_clean_never_crashes(
        built: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    for name in ("benign", "writes"):
        data = built[name, "flat.ptl"].read_bytes()
        rng = random.Random(22)
        cases = [data[:n] for n in range(0, len(data), max(1, len(data) // 40))]
        for _ in range(40):
            mutated = bytearray(data)
            for _ in range(rng.randrange(1, 5)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            cases.append(bytes(mutated))
        for index, case in enumerate(cases):
            verdict, rules = _scan(_write(tmp_path, "m.ptl", case))
            assert verdict is not None and verdict > Verdict.CLEAN, (name, index, rules)
            assert "scanner.internal_error" not in rules, (name, index, rules)
        verdict, rules = _scan(_write(tmp_path, "m.ptl", data[: len(data) // 2]))
        assert verdict is Verdict.MALFORMED or verdict is Verdict.MALICIOUS, rules


# -- lite-interpreter zip archives rebuilt ------------------------------------------------


def _replace_member(path: Path, suffix: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, data if info.filename.endswith(suffix) else src.read(info))
    return out.getvalue()


def _bytecode(*ops: tuple[str, str]) -> bytes:
    """A bytecode.pkl value as torch's export_module writes it (version, (qualified
    name, code table, schema))."""
    table = (("instructions", (("OP", 0, 0), ("RET", 0, 0))),
             ("operators", tuple((name, overload, 1) for name, overload in ops)),
             ("constants", ()), ("types", ()), ("register_size", 2))
    schema = (("arguments", ()), ("returns", ()))
    return pickle.dumps((8, ("__torch__.Benign.forward", table, schema)), protocol=2)


def test_operator_table_is_judged_apart_from_the_source(
        built: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    data = _replace_member(built["benign", "lite.ptl"], "/bytecode.pkl",
                           _bytecode(("aten::relu", ""), ("prim::PythonOp", "")))
    verdict, rules = _scan(_write(tmp_path, "m.ptl", data))
    assert verdict is Verdict.MALICIOUS, rules
    assert "prim::PythonOp in bytecode.pkl __torch__.Benign.forward" in \
        rules["torchscript.dangerous_operator"]


@pytest.mark.parametrize("op", ["c10d::send", "_c10d_functional::all_reduce",
                                "prim::rpc_async", "debugprims::load_tensor"])
def test_network_and_store_operators_in_the_table_are_malicious(
        built: dict[tuple[str, str], Path], tmp_path: Path, op: str) -> None:
    data = _replace_member(built["benign", "lite.ptl"], "/bytecode.pkl", _bytecode((op, "")))
    verdict, rules = _scan(_write(tmp_path, "m.ptl", data))
    assert verdict is Verdict.MALICIOUS and op in rules["torchscript.dangerous_operator"]


def test_truncated_bytecode_is_unreadable(built: dict[tuple[str, str], Path],
                                          tmp_path: Path) -> None:
    with zipfile.ZipFile(built["benign", "lite.ptl"]) as z:
        name = next(n for n in z.namelist() if n.endswith("/bytecode.pkl"))
        whole = z.read(name)
    data = _replace_member(built["benign", "lite.ptl"], "/bytecode.pkl", whole[:-40])
    verdict, rules = _scan(_write(tmp_path, "m.ptl", data))
    assert verdict is Verdict.MALFORMED and "torchscript.unreadable" in rules, rules


def test_unparseable_source_is_unreadable(built: dict[tuple[str, str], Path],
                                          tmp_path: Path) -> None:
    data = _replace_member(built["benign", "jit.pt"], ".py",
                           b"def forward(self:\n  return\n")
    verdict, rules = _scan(_write(tmp_path, "m.pt", data))
    assert verdict is Verdict.MALFORMED and "torchscript.unreadable" in rules, rules


def test_source_names_resolve_to_operators() -> None:
    text = ("def f(x):\n"
            "    a = ops.aten.save\n"
            "    torch.ops.other.thing(x)\n"
            "    y = torch.nn.functional.relu(x)\n"
            "    return rpc_async('w', f)\n")
    found = {name for name, _ in torchops.source_operators(text, "code/x.py")}
    assert {"aten::save", "other::thing", "prim::rpc_async"} <= found
    verdicts = {f.rule_id for f in torchops.judge("m", torchops.source_operators(text, "x"))}
    assert verdicts == {"torchscript.dangerous_operator", "torchscript.custom_operator"}
    assert torchops.judge("m", [("aten::add", "x"), ("quantized::linear", "x")]) == []


# -- flatbuffer modules from the public schema ---------------------------------------------


@dataclass
class Module:
    """A PTMF module: functions as (qualified name, operator names), jit sources and extra
    files as (name, content), object types as (name, type), method indices, a union tag
    to force on the first value."""

    functions: list[tuple[str, list[str]]] = field(
        default_factory=lambda: [("__torch__.M.forward", ["aten::add"])])
    jit_sources: list[tuple[str, bytes]] = field(default_factory=list)
    extra_files: list[tuple[str, bytes]] = field(default_factory=list)
    object_types: list[tuple[str, int]] = field(default_factory=list)
    methods: list[int] | None = None
    tag: int | None = None


def _vector(b: flatbuffers.Builder, items: list[int]) -> int:
    b.StartVector(4, len(items), 4)
    for item in reversed(items):
        b.PrependUOffsetTRelative(item)
    return int(b.EndVector())


def _files(b: flatbuffers.Builder, files: list[tuple[str, bytes]]) -> int:
    tables = []
    for name, content in files:
        n, c = b.CreateString(name), b.CreateString(content)
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(0, n, 0)
        b.PrependUOffsetTRelativeSlot(1, c, 0)
        tables.append(b.EndObject())
    return _vector(b, tables)


def build_module(spec: Module) -> bytes:
    b = flatbuffers.Builder(1024)
    values = []
    for qn, names in spec.functions:
        ops = []
        for name in names:
            n, o = b.CreateString(name), b.CreateString("")
            b.StartObject(3)
            b.PrependUOffsetTRelativeSlot(0, n, 0)
            b.PrependUOffsetTRelativeSlot(1, o, 0)
            ops.append(b.EndObject())
        op_vec, q = _vector(b, ops), b.CreateString(qn)
        b.StartObject(9)
        b.PrependUOffsetTRelativeSlot(0, q, 0)
        b.PrependUOffsetTRelativeSlot(2, op_vec, 0)
        function = b.EndObject()
        b.StartObject(2)
        b.PrependUint8Slot(0, spec.tag if spec.tag is not None and not values else 16, 0)
        b.PrependUOffsetTRelativeSlot(1, function, 0)
        values.append(b.EndObject())
    types = []
    for name, kind in spec.object_types:
        n = b.CreateString(name)
        b.StartObject(3)
        b.PrependUOffsetTRelativeSlot(0, n, 0)
        b.PrependUint8Slot(1, kind, 0)
        types.append(b.EndObject())
    value_vec, type_vec = _vector(b, values), _vector(b, types)
    sources, extras = _files(b, spec.jit_sources), _files(b, spec.extra_files)
    methods = spec.methods if spec.methods is not None else list(range(len(values)))
    b.StartVector(4, len(methods), 4)
    for index in reversed(methods):
        b.PrependUint32(index)
    method_vec = b.EndVector()
    b.StartObject(12)
    b.PrependUint32Slot(0, 9, 0)
    b.PrependUOffsetTRelativeSlot(1, extras, 0)
    b.PrependUOffsetTRelativeSlot(2, method_vec, 0)
    b.PrependUOffsetTRelativeSlot(4, value_vec, 0)
    b.PrependUOffsetTRelativeSlot(7, type_vec, 0)
    b.PrependUOffsetTRelativeSlot(8, sources, 0)
    b.Finish(b.EndObject(), file_identifier=b"PTMF")
    return bytes(b.Output())


def test_schema_built_aten_module_is_policy_only(tmp_path: Path) -> None:
    verdict, rules = _scan(_write(tmp_path, "m.ptl", build_module(Module())))
    assert (verdict, set(rules)) == (Verdict.POLICY, {"format.torch_mobile_not_allowed"})


def test_python_op_in_a_function_is_malicious(tmp_path: Path) -> None:
    spec = Module(functions=[("__torch__.M.forward", ["aten::add", "prim::PythonOp"])])
    verdict, rules = _scan(_write(tmp_path, "m.ptl", build_module(spec)))
    assert verdict is Verdict.MALICIOUS
    assert "prim::PythonOp in function __torch__.M.forward" in \
        rules["torchscript.dangerous_operator"]


def test_jit_source_is_judged(tmp_path: Path) -> None:
    source = b"def forward(self, x):\n    return ops.c10d.send(x)\n"
    spec = Module(jit_sources=[("__torch__", source)])
    verdict, rules = _scan(_write(tmp_path, "m.ptl", build_module(spec)))
    assert verdict is Verdict.MALICIOUS
    assert "c10d::send in jit source __torch__:2" in rules["torchscript.dangerous_operator"]


def test_custom_class_of_unknown_namespace_is_named(tmp_path: Path) -> None:
    spec = Module(object_types=[("__torch__.torch.classes.quantized.LinearPackedParamsBase",
                                 2), ("__torch__.torch.classes.evilns.Loader", 2),
                                ("__torch__.M", 1)])
    verdict, rules = _scan(_write(tmp_path, "m.ptl", build_module(spec)))
    assert verdict is Verdict.POLICY
    evidence = rules["torchscript.custom_operator"]
    assert "class evilns.Loader" in evidence and "quantized" not in evidence


def test_extra_file_is_analysed_as_content(tmp_path: Path) -> None:
    payload = b"cos\nsystem\n(S'id'\ntR."  # a protocol-0 pickle calling os.system
    spec = Module(extra_files=[("model_info.pkl", payload)])
    verdict, rules = _scan(_write(tmp_path, "m.ptl", build_module(spec)))
    assert verdict is Verdict.MALICIOUS, rules
    assert "format.torch_mobile_not_allowed" in rules


@pytest.mark.parametrize(("spec", "needle"), [
    (Module(methods=[5]), "method 0 names ivalue 5 of 1"),
    (Module(tag=40), "union tag 40"),
])
def test_bad_references_are_malformed(tmp_path: Path, spec: Module, needle: str) -> None:
    verdict, rules = _scan(_write(tmp_path, "m.ptl", build_module(spec)))
    assert verdict is Verdict.MALFORMED and needle in rules["torch_mobile.malformed"], rules


def test_operators_read_before_the_damage_still_count(tmp_path: Path) -> None:
    spec = Module(functions=[("__torch__.M.forward", ["aten::from_file"])], methods=[3])
    verdict, rules = _scan(_write(tmp_path, "m.ptl", build_module(spec)))
    assert verdict is Verdict.MALICIOUS
    assert {"torch_mobile.malformed", "torchscript.dangerous_operator"} <= set(rules)


def _offsets(data: bytes) -> Iterator[int]:
    yield from range(0, len(data), 4)


def test_every_u32_set_out_of_bounds_is_never_clean(tmp_path: Path) -> None:
    data = build_module(Module(jit_sources=[("__torch__", b"def f(x):\n    return x\n")],
                               extra_files=[("a.txt", b"hello")]))
    for at in _offsets(data):
        bad = bytearray(data)
        bad[at:at + 4] = (0x7FFFFFF0).to_bytes(4, "little")
        verdict, rules = _scan(_write(tmp_path, "m.ptl", bytes(bad)))
        assert verdict is not None and verdict > Verdict.CLEAN, (at, rules)
        assert "scanner.internal_error" not in rules, (at, rules)


@pytest.mark.parametrize("content", [b"\x00\x00\x00\x00PTMF", bytes(range(64)), b"hello\n"])
def test_named_ptl_that_is_not_a_module_is_not_clean(tmp_path: Path, content: bytes) -> None:
    verdict, _ = _scan(_write(tmp_path, "m.ptl", content))
    assert verdict is not None and verdict > Verdict.POLICY
