"""Verdict tiers of the pickle allowlist (issue 10): framework objects and plain data are
``policy`` with the tier that decided, stdlib gadgets stay ``malicious``. Every pickle is
assembled here from opcode bytes; nothing is unpickled. Test names carry the peer whose
fixture showed the false alarm (picklescan, fickling, modelaudit, modelscan)."""

from __future__ import annotations

import io
import pickle as P
import zipfile
from pathlib import Path

import pytest
from scanner_helpers import rules

from scanner.api import scan_paths
from scanner.core.allowlist import ALLOWLIST, EXTRA, FRAMEWORK_PREFIXES, TIERS, lookup
from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Finding, Verdict, worst
from scanner.formats.pickle.analyze import analyze_pickle


def u(s: str) -> bytes:
    b = s.encode()
    return P.SHORT_BINUNICODE + bytes([len(b)]) + b


def glob(module: str, name: str) -> bytes:
    return P.GLOBAL + f"{module}\n{name}\n".encode()


def sg(module: str, name: str) -> bytes:
    return u(module) + u(name) + P.STACK_GLOBAL


P2 = P.PROTO + b"\x02"
P4 = P.PROTO + b"\x04"


def obj(module: str, name: str, state: bytes = P.EMPTY_DICT) -> bytes:
    """``cls.__new__(cls)`` then BUILD ``state`` (what protocol 2+ writes for objects)."""
    return glob(module, name) + P.EMPTY_TUPLE + P.NEWOBJ + state + P.BUILD


def dict_of(*pairs: tuple[str, bytes]) -> bytes:
    return P.EMPTY_DICT + P.MARK + b"".join(u(k) + v for k, v in pairs) + P.SETITEMS


def scan(data: bytes) -> list[Finding]:
    return analyze_pickle(ScanContext(), BytesBlob("m.pkl", data))


def tier_of(findings: list[Finding]) -> str:
    [f] = [f for f in findings if f.rule_id == "pickle.framework_global"]
    return f.message


RELU = obj("torch.nn.modules.activation", "ReLU", dict_of(
    ("training", P.NEWTRUE), ("_parameters", glob("collections", "OrderedDict")
                              + P.EMPTY_TUPLE + P.REDUCE), ("inplace", P.NEWFALSE)))


def test_picklescan_torch_save_of_a_module_is_policy() -> None:
    findings = scan(P2 + RELU + P.STOP)
    assert worst(findings) is Verdict.POLICY, findings
    assert "framework" in tier_of(findings)
    [f] = [f for f in findings if f.rule_id == "pickle.framework_global"]
    assert "torch.nn.modules.activation.ReLU" in f.evidence and "torch.nn module" in f.evidence


def test_picklescan_torch_save_of_a_module_in_a_torch_zip_is_policy(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", P2 + RELU + P.STOP)
        z.writestr("archive/version", "3\n")
    (result,) = scan_paths([path]).targets
    assert result.verdict is Verdict.POLICY, result.findings


def _sklearn_pipeline() -> bytes:
    scaler = obj("sklearn.preprocessing._data", "StandardScaler", dict_of(
        ("with_mean", P.NEWTRUE), ("copy", P.NEWTRUE), ("_sklearn_version", u("1.5.0"))))
    model = obj("sklearn.linear_model._logistic", "LogisticRegression", dict_of(
        ("C", P.BINFLOAT + b"?\xf0\x00\x00\x00\x00\x00\x00"), ("penalty", u("l2"))))
    steps = (P.EMPTY_LIST + P.MARK + u("scale") + scaler + P.TUPLE2 + u("clf") + model
             + P.TUPLE2 + P.APPENDS)
    return P4 + obj("sklearn.pipeline", "Pipeline", dict_of(("steps", steps))) + P.STOP


def test_picklescan_plain_pickle_of_a_sklearn_pipeline_is_policy() -> None:
    findings = scan(_sklearn_pipeline())
    assert worst(findings) is Verdict.POLICY, findings
    assert "sklearn.pipeline.Pipeline" in tier_of(findings)


def test_modelscan_protocol0_sklearn_object_through_copyreg_reconstructor_is_policy() -> None:
    body = (glob("copy_reg", "_reconstructor") + P.MARK
            + glob("sklearn.linear_model._base", "LinearRegression")
            + glob("__builtin__", "object") + P.NONE + P.TUPLE + P.REDUCE
            + P.EMPTY_DICT + P.BUILD + P.STOP)
    assert worst(scan(body)) is Verdict.POLICY
    bad = body.replace(b"__builtin__\nobject", b"posix\nsystem")
    assert worst(scan(bad)) is Verdict.MALICIOUS


@pytest.mark.parametrize("call", [
    glob("builtins", "len") + P.EMPTY_LIST + P.TUPLE1 + P.REDUCE,
    glob("collections", "deque") + P.EMPTY_LIST + P.TUPLE1 + P.REDUCE,
    glob("datetime", "timedelta") + P.BININT1 + b"\x03" + P.TUPLE1 + P.REDUCE,
], ids=["fickling_builtins_len", "picklescan_collections_deque", "plain_timedelta"])
def test_plain_data_builtins_are_policy(call: bytes) -> None:
    findings = scan(P2 + call + P.STOP)
    assert worst(findings) is Verdict.POLICY, findings
    assert "plain" in tier_of(findings)


def test_training_args_bin_is_policy(tmp_path: Path) -> None:
    """corpus false alarm: training_args.bin is torch.save(TrainingArguments(...))."""
    enum = glob("transformers.trainer_utils", "IntervalStrategy") + u("steps") + P.TUPLE1 + P.REDUCE
    device = glob("torch", "device") + u("cpu") + P.TUPLE1 + P.REDUCE
    args = obj("transformers.training_args", "TrainingArguments", dict_of(
        ("output_dir", u("out")), ("eval_strategy", enum), ("_n_gpu", P.BININT1 + b"\x00"),
        ("optim", glob("transformers.training_args", "OptimizerNames") + u("adamw_torch")
         + P.TUPLE1 + P.REDUCE), ("device", device)))
    folder = tmp_path / "m"
    folder.mkdir()
    with zipfile.ZipFile(folder / "training_args.bin", "w") as z:
        z.writestr("training_args/data.pkl", P2 + args + P.STOP)
        z.writestr("training_args/version", "3\n")
    (result,) = scan_paths([folder]).targets
    assert result.verdict is Verdict.POLICY, result.findings


@pytest.mark.parametrize("module,name", [
    ("pty", "spawn"), ("shutil", "copy"), ("os", "system"), ("posix", "system"),
    ("sklearn.utils._testing", "TempMemmap"), ("sklearn.utils", "check_random_state"),
    ("torch", "load"), ("torch.hub", "load"),
    ("torch.nn.modules.module", "register_module_forward_hook"),
    ("builtins", "getattr"), ("builtins", "eval"), ("functools", "partial"),
    ("__torch__", "__init__"), ("numpy.random._pickle", "__dict__"),
])
def test_stdlib_gadgets_and_framework_functions_stay_malicious(module: str, name: str) -> None:
    findings = scan(P4 + sg(module, name) + P.EMPTY_TUPLE + P.REDUCE + P.STOP)
    assert worst(findings) is Verdict.MALICIOUS, findings
    assert lookup(module, name) is None


def test_alias_resolution_is_named_in_the_message() -> None:
    findings = scan(P4 + sg("posix", "system") + u("id") + P.TUPLE1 + P.REDUCE + P.STOP)
    [f] = [f for f in findings if f.rule_id == "pickle.unsafe_global"]
    assert f.evidence == "posix.system" and "alias of os.system" in f.message


def test_many_framework_globals_never_hide_a_gadget() -> None:
    """The tier finding is one per stream: 200 framework classes cannot use up the
    per-stream finding budget before os.system."""
    body = P4 + b"".join(obj("sklearn.cluster", f"K{i}") + P.POP for i in range(200))
    body += sg("os", "system") + u("id") + P.TUPLE1 + P.REDUCE + P.STOP
    findings = scan(body)
    assert worst(findings) is Verdict.MALICIOUS
    assert "os.system" in {f.evidence for f in findings if f.rule_id == "pickle.unsafe_global"}
    assert len([f for f in findings if f.rule_id == "pickle.framework_global"]) == 1


def test_every_tier_entry_has_a_reason_and_a_known_tier() -> None:
    for entry in [*ALLOWLIST.values(), *EXTRA.values()]:
        assert entry.tier in TIERS and len(entry.reason) > 10, entry
    assert all(len(reason) > 10 for _, reason in FRAMEWORK_PREFIXES)
    assert lookup("torch.nn.modules.linear", "Linear").tier == "framework"  # type: ignore[union-attr]
    assert lookup("torch._utils", "_rebuild_tensor_v2").tier == "data"  # type: ignore[union-attr]


def test_no_tier_entry_is_rated_dangerous_by_picklescan() -> None:
    from picklescan.scanner import SafetyLevel, scan_pickle_bytes

    names = [*EXTRA, "torch.nn.modules.linear.Linear", "sklearn.pipeline.Pipeline",
             "transformers.training_args.TrainingArguments"]
    for qualname in names:
        module, _, name = qualname.rpartition(".")
        stream = b"c" + module.encode() + b"\n" + name.encode() + b"\n."
        result = scan_pickle_bytes(io.BytesIO(stream), qualname)
        assert all(g.safety is not SafetyLevel.Dangerous for g in result.globals), qualname


# -- joblib: raw array bytes follow the NumpyArrayWrapper's BUILD -------------------------

def _joblib_wrapper(shape: tuple[int, ...], dtype: str, align: bool = True) -> bytes:
    dims = b"".join(P.BININT1 + bytes([d]) for d in shape)
    tup = {0: P.EMPTY_TUPLE, 1: P.TUPLE1, 2: P.TUPLE2, 3: P.TUPLE3}[len(shape)]
    dt = (sg("numpy", "dtype") + u(dtype) + P.NEWFALSE + P.NEWTRUE + P.TUPLE3 + P.REDUCE
          + P.MARK + P.BININT1 + b"\x03" + u("<") + P.NONE + P.NONE + P.NONE
          + P.BININT + b"\xff\xff\xff\xff" + P.BININT + b"\xff\xff\xff\xff"
          + P.BININT1 + b"\x00" + P.TUPLE + P.BUILD)
    pairs = [("subclass", sg("numpy", "ndarray")), ("shape", dims + tup), ("order", u("C")),
             ("dtype", dt), ("allow_mmap", P.NEWFALSE)]
    if align:
        pairs.append(("numpy_array_alignment_bytes", P.BININT1 + b"\x10"))
    return (sg("joblib.numpy_pickle", "NumpyArrayWrapper") + P.EMPTY_TUPLE + P.NEWOBJ
            + dict_of(*pairs) + P.BUILD)


def _joblib_array(body: bytes, nbytes: int, align: bool = True) -> bytes:
    if align:
        pad = 16 - ((len(body) + 1) % 16)
        body += bytes([pad]) + b"\xff" * pad
    return body + bytes(range(256))[:nbytes] * 1


def test_joblib_numpy_arrays_are_read_as_raw_data_not_malformed() -> None:
    """Issue 10: joblib writes array bytes into the pickle stream; joblib.load reads
    them after the wrapper's BUILD. A STOP-shaped byte inside the data must not end the
    stream, and nothing in it is an opcode."""
    for align in (True, False):
        body = _joblib_array(P4 + _joblib_wrapper((2, 3), "f8", align), 48, align)
        body = body[:-48] + b"." * 8 + bytes(40)  # data holds STOP bytes: still data
        findings = scan(body + P.STOP)
        assert worst(findings) is Verdict.POLICY, findings
        assert "joblib.numpy_pickle.NumpyArrayWrapper" in tier_of(findings)


def test_joblib_sklearn_pipeline_with_arrays_is_policy() -> None:
    array = _joblib_array(P4 + _joblib_wrapper((4,), "f8"), 32)
    coef = array[len(P4):]
    model = obj("sklearn.linear_model._base", "LinearRegression",
                dict_of(("coef_", coef), ("fit_intercept", P.NEWTRUE)))
    findings = scan(P4 + model + P.STOP)
    assert worst(findings) is Verdict.POLICY, findings


def test_joblib_object_array_pickle_is_interpreted() -> None:
    inner = P.PROTO + b"\x02" + glob("os", "system") + u("id") + P.TUPLE1 + P.REDUCE + P.STOP
    body = P4 + _joblib_wrapper((1,), "O8", align=False) + inner + P.STOP
    findings = scan(body)
    assert worst(findings) is Verdict.MALICIOUS
    assert "os.system" in {f.evidence for f in findings if f.rule_id == "pickle.unsafe_global"}


def test_joblib_array_running_past_the_file_is_truncated() -> None:
    body = P4 + _joblib_wrapper((100,), "f8", align=False) + bytes(16)
    assert "pickle.truncated" in rules(scan(body))


TORCHSCRIPT_CODE = '''op_version_set = 1
class Linear(Module):
  __parameters__ = ["weight", "bias", ]
  __buffers__ = []
  weight : Tensor
  bias : Tensor
  training : bool
  in_features : Final[int] = 4
  def forward(self: __torch__.torch.nn.modules.linear.Linear,
    input: Tensor) -> Tensor:
    bias = self.bias
    weight = self.weight
    return torch.linear(input, weight, bias)
'''


def _torch_tensor(key: str, numel: int) -> bytes:
    pid = (P.MARK + u("storage") + glob("torch", "FloatStorage") + u(key) + u("cpu")
           + P.BININT1 + bytes([numel]) + P.TUPLE + P.BINPERSID)
    return (glob("torch._utils", "_rebuild_tensor_v2") + P.MARK + pid + P.BININT1 + b"\x00"
            + P.BININT1 + bytes([numel]) + P.TUPLE1 + P.BININT1 + b"\x01" + P.TUPLE1
            + P.NEWFALSE + glob("collections", "OrderedDict") + P.EMPTY_TUPLE + P.REDUCE
            + P.TUPLE + P.REDUCE)


def test_modelaudit_torchscript_archive_is_policy(tmp_path: Path) -> None:
    """False alarm (issue 10): torch.jit.save archives name TorchScript classes
    (``__torch__.*``) and ship TorchScript source under code/."""
    module = obj("__torch__.torch.nn.modules.linear", "Linear", dict_of(
        ("training", P.NEWFALSE), ("weight", _torch_tensor("0", 4)),
        ("bias", _torch_tensor("1", 1))))
    path = tmp_path / "scripted.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("scripted/data.pkl", P2 + module + P.STOP)
        z.writestr("scripted/constants.pkl", P2 + P.EMPTY_TUPLE + P.STOP)
        z.writestr("scripted/code/__torch__/torch/nn/modules/linear.py", TORCHSCRIPT_CODE)
        z.writestr("scripted/data/0", bytes(16))
        z.writestr("scripted/data/1", bytes(4))
        z.writestr("scripted/version", "3\n")
    (result,) = scan_paths([path]).targets
    assert result.verdict is Verdict.POLICY, result.findings
