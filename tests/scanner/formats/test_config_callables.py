"""Config callables beyond Hydra's ``_target_`` (scanner.formats.targets, .logconfig,
.yamlconf): NeMo's Hydra 0.x ``cls``, OmegaConf relative interpolations in aliased nodes,
fiddle pyrefs (NeMo 2 ``context/io.json``) and ``logging.config.dictConfig`` factories.
Every test is named after its public source and reproduces the red-team's file; configs
are written here from the loaders' published formats; nothing is loaded, instantiated or
imported."""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path

import pytest
from scanner_helpers import rules

from scanner.api import scan_paths
from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Finding, Verdict, worst
from scanner.scan.dispatch import analyze_blob


def scan(text: str, name: str = "config.yaml") -> list[Finding]:
    return analyze_blob(ScanContext(), BytesBlob(name, text.encode()))


def evidence(found: list[Finding], rule_id: str) -> list[str]:
    return [f.evidence for f in found if f.rule_id == rule_id]


# -- NeMo model_utils._convert_config: Hydra 0.x ``cls`` (and ``params``) at any depth ----

@pytest.mark.parametrize("text,name,expected", [
    ("model:\n  encoder:\n    cls: os.system\n    params:\n      command: id\n",
     "model_config.yaml", "/model/encoder/cls: os.system (kwargs command)"),
    ("model:\n  encoder:\n    cls: subprocess.Popen\n    args: [sh, -c, id]\n",
     "noparams.yaml", "/model/encoder/cls: subprocess.Popen (kwargs args)"),
    ("cls: os.system\nparams:\n  command: id\n", "root_cls.yaml",
     "/cls: os.system (kwargs command)"),
    ('{"model": {"encoder": {"cls": "os.system", "params": {"command": "id"}}}}',
     "nested_cls.json", "/model/encoder/cls: os.system (kwargs command)"),
    ("model:\n  layers:\n    - cls: posix.system\n      params: {command: id}\n",
     "model_config.yaml", "/model/layers/0/cls: posix.system (kwargs command)"),
    ("name: os.system\nmodel:\n  encoder: {cls: '${name}'}\n", "model_config.yaml",
     "/model/encoder/cls: os.system"),
], ids=["nested_params", "nested_no_params", "root_two_parts", "json", "list_item",
        "interpolated"])
def test_nemo_convert_config_nested_cls_is_a_target(text: str, name: str,
                                                    expected: str) -> None:
    found = scan(text, name)
    assert evidence(found, "config.unsafe_target") == [expected], found
    assert worst(found) is Verdict.MALICIOUS


def test_nemo_convert_config_nested_cls_in_a_nemo_archive() -> None:
    """The red-team's ``cls_model.nemo``: the tar member's config is judged and named."""
    config = b"model:\n  encoder:\n    cls: os.system\n    params:\n      command: id\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("./model_config.yaml")
        info.size = len(config)
        tar.addfile(info, io.BytesIO(config))
    found = analyze_blob(ScanContext(), BytesBlob("model.nemo", buf.getvalue()))
    hits = [(f.path, f.evidence) for f in found if f.rule_id == "config.unsafe_target"]
    assert hits == [("model.nemo!./model_config.yaml",
                     "/model/encoder/cls: os.system (kwargs command)")], found


def test_nemo_convert_config_nested_cls_unknown_and_dynamic() -> None:
    found = scan("encoder:\n  cls: my_project.models.Encoder\n  params: {d: 4}\n")
    assert evidence(found, "config.unknown_target") == [
        "/encoder/cls: my_project.models.Encoder (kwargs d)"]
    assert worst(found) is Verdict.POLICY
    found = scan("encoder:\n  cls: '${oc.env:ENCODER}'\n")
    assert rules(found) == {"config.dynamic_target"}, found


@pytest.mark.parametrize("text,name", [
    # tokenizer configs: special tokens, not import paths
    ('{"cls_token": "[CLS]", "sep_token": "[SEP]", "do_lower_case": true}',
     "tokenizer_config.json"),
    ('{"post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 102], '
     '"cls": ["[CLS]", 101]}}', "tokenizer.json"),
    ("tokens:\n  cls: '[CLS]'\n  bos: <s>\nheads: {cls: 3, reg: 1}\ncls: vocab\n",
     "config.yaml"),
    ("cls: ${tokens.c}\ntokens: {c: '[CLS]'}\n", "config.yaml"),
    # NeMo's own Hydra 0.x config naming allowlisted classes
    ("encoder:\n  cls: nemo.collections.asr.modules.ConvASREncoder\n  params:\n"
     "    feat_in: 64\noptim:\n  cls: torch.optim.Adam\n  params: {lr: 0.1}\n",
     "model_config.yaml"),
    # beside a _target_, cls is a keyword argument (_convert_config leaves it)
    ("layer:\n  _target_: torch.nn.Linear\n  cls: os.system\n", "config.yaml"),
], ids=["cls_token", "bert_processing", "special_tokens", "interpolated_token",
        "nemo_allowlisted", "beside_target"])
def test_nemo_convert_config_nested_cls_benign_configs_stay_clean(text: str,
                                                                   name: str) -> None:
    assert scan(text, name) == []


# -- OmegaConf: an aliased node is copied to each place, ${..x} resolves per place ------

ALIAS_REL = """\
b:
  cls: os.system
  opt: &o
    _target_: ${..cls}
    command: id
a:
  cls: torch.optim.Adam
  opt: *o
"""
ALIAS_REL_SWAPPED = """\
a:
  cls: torch.optim.Adam
  opt: &o
    _target_: ${..cls}
    command: id
b:
  cls: os.system
  opt: *o
"""
MERGE_REL = """\
base: &b
  opt:
    _target_: ${..cls}
    command: id
x:
  cls: os.system
  <<: *b
y:
  cls: torch.optim.Adam
  <<: *b
"""


@pytest.mark.parametrize("text,place", [
    (ALIAS_REL, "/b/opt/_target_: os.system (kwargs command)"),
    (ALIAS_REL_SWAPPED, "/b/opt/_target_: os.system (kwargs command)"),
    (MERGE_REL, "/x/opt/_target_: os.system (kwargs command)"),
], ids=["alias", "alias_anchor_at_benign_place", "merge_key"])
def test_omegaconf_alias_relative_interpolation_is_judged_at_every_place(
        text: str, place: str) -> None:
    found = scan(text)
    unsafe = evidence(found, "config.unsafe_target")
    assert place in unsafe, found
    # the benign place resolves to its own parent's class: nothing said there
    assert not [e for e in unsafe if "/opt/" in e and e != place], found
    assert worst(found) is Verdict.MALICIOUS


def test_omegaconf_alias_relative_interpolation_trust_remote_code_per_place() -> None:
    for text in ("x: {flag: true, tok: &t {trust_remote_code: '${..flag}'}}\n"
                 "y: {flag: false, tok: *t}\n",
                 "y: {flag: false, tok: &t {trust_remote_code: '${..flag}'}}\n"
                 "x: {flag: true, tok: *t}\n"):
        found = scan(text)
        assert evidence(found, "config.trust_remote_code") == [
            "/x/tok/trust_remote_code: True"], found


def test_omegaconf_alias_relative_interpolation_benign_places_stay_clean() -> None:
    text = ("b:\n  lr: 0.1\n  opt: &o {_target_: torch.optim.SGD, lr: '${..lr}'}\n"
            "a:\n  lr: 0.2\n  opt: *o\n"
            "c:\n  cls: torch.optim.Adam\n  opt: &p {_target_: '${..cls}'}\n"
            "d:\n  cls: torch.optim.AdamW\n  opt: *p\n")
    assert scan(text) == []


def test_omegaconf_alias_relative_interpolation_fan_out_is_bounded() -> None:
    """Copies per place are bounded: a 248-byte fan-out of 15,625 places of a relative
    interpolation (under the 2M expanded-node bound) is a limit finding (fail closed),
    never clean, and fast; 3,125 places are each judged (reported at the first 8)."""
    def fan_out(levels: int) -> str:
        return "l0: &l0 [{x: os.system, _target_: '${.x}'}]\n" + "".join(
            f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 5)}]\n" for i in range(1, levels + 1))

    start = time.perf_counter()
    found = scan(fan_out(6))
    assert time.perf_counter() - start < 10  # generous: 2 shared cores; ~0.01 s quiet
    assert [f.rule_id for f in found] == ["scanner.limit_exceeded"], found
    assert "max_yaml_alias_copies" in found[0].message
    assert worst(found) is not Verdict.CLEAN
    found = scan(fan_out(5))
    assert len(evidence(found, "config.unsafe_target")) == 8, found


# -- fiddle serialization: pyref objects (NeMo 2 context/io.json) --------------------------

def pyref(module: str, name: str) -> dict[str, str]:
    return {"type": "pyref", "module": module, "name": name}


def fiddle_json(fn_module: str, fn_name: str, arg: str, value: object) -> str:
    """What fiddle's ``serialization.dump_json(fdl.Config(fn, arg=value))`` writes (the
    layout of the red-team's NeMo 2 ``context/io.json``)."""
    meta = "fiddle._src.config"
    objects = {
        "tuple_1": {"type": pyref("builtins", "tuple"), "items": [["Index(index=0)", arg]],
                    "metadata": None},
        "dict_1": {"type": pyref("builtins", "dict"), "items": [],
                   "metadata": {"type": pyref("builtins", "tuple"), "items": [],
                                "metadata": None}},
        "meta_1": {"type": pyref(meta, "BuildableTraverserMetadata"),
                   "items": [["Attr(name='fn_or_cls')", pyref(fn_module, fn_name)],
                             ["Attr(name='argument_names')", {"type": "ref",
                                                              "key": "tuple_1"}],
                             ["Attr(name='argument_tags')", {"type": "ref",
                                                             "key": "dict_1"}]],
                   "metadata": pyref(meta, "BuildableTraverserMetadata")},
        "config_1": {"type": pyref(meta, "Config"),
                     "items": [[f"Attr(name='{arg}')", {"type": "leaf", "value": value,
                                                        "paths": [f"<root>.{arg}"]}]],
                     "metadata": {"type": "ref", "key": "meta_1"}, "paths": ["<root>"]},
    }
    return json.dumps({"root": {"type": "ref", "key": "config_1"}, "objects": objects,
                       "refcounts": {k: 1 for k in objects}, "version": "0.0.1"}, indent=1)


def test_fiddle_pyref_nemo2_io_json_is_a_target(tmp_path: Path) -> None:
    text = fiddle_json("subprocess", "getoutput", "cmd", "id")
    found = scan(text, "io.json")
    assert evidence(found, "config.unsafe_target") == [
        "/objects/meta_1/items/0/1: subprocess.getoutput (fiddle pyref)"], found
    assert worst(found) is Verdict.MALICIOUS
    # as NeMo 2 lays it out: a checkpoint folder's context/io.json
    (tmp_path / "context").mkdir()
    (tmp_path / "context" / "io.json").write_text(text)
    assert scan_paths([tmp_path]).targets[0].verdict is Verdict.MALICIOUS


@pytest.mark.parametrize("doc,rule_id", [
    ({"model": {"act": pyref("builtins", "eval")}}, "config.unsafe_target"),
    ([{"x": [pyref("os", "path.join")]}], "config.unsafe_target"),
    ({"fn": pyref("my_project.layers", "Block")}, "config.unknown_target"),
], ids=["nested", "dotted_name", "unknown"])
def test_fiddle_pyref_anywhere_in_any_config(doc: object, rule_id: str) -> None:
    assert rules(scan(json.dumps(doc), "config.json")) == {rule_id}


def test_fiddle_pyref_to_allowlisted_torch_class_stays_clean() -> None:
    assert scan(fiddle_json("torch.nn.modules.linear", "Linear", "in_features", 4),
                "io.json") == []
    # NeMo 2 LlamaConfig's activation_func: a pure tensor function, named as a value
    assert scan(json.dumps({"objects": {"cfg": {"items": [[
        "Attr(name='activation_func')", pyref("torch.nn.functional", "silu")]]}}}),
        "io.json") == []
    # a "module"/"name" pair that is not a pyref imports nothing
    assert scan(json.dumps({"type": "leaf", "module": "os", "name": "system"}),
                "config.json") == []


# -- Python logging.config.dictConfig: factories and classes (Hydra job_logging) ---------

HYDRA_LOGGING = """\
model:
  lr: 0.1
hydra:
  job_logging:
    version: 1
    formatters:
      f:
        (): os.system
        command: id
    handlers:
      h:
        class: subprocess.Popen
        args: [sh, -c, id]
    root:
      handlers: [h]
"""


def test_logging_dictconfig_factory_hydra_job_logging() -> None:
    found = scan(HYDRA_LOGGING)
    assert evidence(found, "config.unsafe_target") == [
        "/hydra/job_logging/formatters/f/(): os.system (logging.config.dictConfig)",
        "/hydra/job_logging/handlers/h/class: subprocess.Popen "
        "(logging.config.dictConfig)"], found
    assert worst(found) is Verdict.MALICIOUS


@pytest.mark.parametrize("doc,expected", [
    # a version-1 mapping anywhere is a dictConfig root; a network handler exfiltrates
    ({"logging": {"version": 1, "handlers": {"h": {
        "class": "logging.handlers.SocketHandler", "host": "x", "port": 9}}}},
     ("config.unsafe_target", "/logging/handlers/h/class: logging.handlers.SocketHandler")),
    ({"version": 1, "filters": {"f": {"()": "acme_logs.Filter"}}},
     ("config.unknown_target", "/filters/f/(): acme_logs.Filter")),
    ({"version": 1, "handlers": {"h": {"class": "logging.StreamHandler",
                                       "stream": "ext://subprocess.Popen"}}},
     ("config.unsafe_target", "/handlers/h/stream: subprocess.Popen")),
    ({"version": 1, "formatters": {"f": {"class": "builtins.eval"}}},
     ("config.unsafe_target", "/formatters/f/class: builtins.eval")),
    ({"version": 1, "handlers": {"h": {"()": "cfg://x.y"}}},
     ("config.dynamic_target", "/handlers/h/(): cfg://x.y")),
    # a () factory holding a dotted path is judged outside a root too
    ({"log": {"handlers": {"h": {"()": "os.system"}}}},
     ("config.unsafe_target", "/log/handlers/h/(): os.system")),
    # an ext:// value in a root with no factory or class key at all (version: 1 alone
    # makes the document worth walking)
    ({"version": 1, "formatters": {"f": {"format": "ext://subprocess.getoutput"}}},
     ("config.unsafe_target", "/formatters/f/format: subprocess.getoutput")),
], ids=["socket_handler", "filter_factory", "ext_value", "formatter_class", "cfg_ref",
        "factory_outside_root", "ext_value_alone"])
def test_logging_dictconfig_factory_json(doc: object, expected: tuple[str, str]) -> None:
    found = scan(json.dumps(doc), "logging.json")
    rule_id, place = expected
    assert [e.split(" (")[0] for e in evidence(found, rule_id)] == [place], found


@pytest.mark.parametrize("text", [
    # Hydra's own default job_logging (hydra/conf/hydra/job_logging/default.yaml)
    "hydra:\n  job_logging:\n    version: 1\n    formatters:\n      simple:\n"
    "        format: '[%(asctime)s][%(name)s][%(levelname)s] - %(message)s'\n"
    "    handlers:\n      console:\n        class: logging.StreamHandler\n"
    "        formatter: simple\n        stream: ext://sys.stdout\n      file:\n"
    "        class: logging.FileHandler\n        formatter: simple\n"
    "        filename: ${hydra.runtime.output_dir}/${hydra.job.name}.log\n"
    "    root:\n      level: INFO\n      handlers: [console, file]\n"
    "    disable_existing_loggers: false\n",
    # hydra_colorlog's job_logging
    "hydra:\n  job_logging:\n    version: 1\n    formatters:\n      colorlog:\n"
    "        (): colorlog.ColoredFormatter\n        format: '%(log_color)s%(message)s'\n"
    "    handlers:\n      console:\n        class: logging.StreamHandler\n"
    "        formatter: colorlog\n        stream: ext://sys.stderr\n"
    "      rot: {class: logging.handlers.RotatingFileHandler, filename: a.log}\n",
    # not a dictConfig: no version 1 (dictConfig refuses version 2), no () factory
    "version: 2\nhandlers:\n  h: {class: subprocess.Popen}\n",
    "css:\n  class: os.system\nwidget: {class: x.y.Z}\n",
], ids=["hydra_default", "hydra_colorlog", "version_2", "class_elsewhere"])
def test_logging_dictconfig_factory_benign_configs_stay_clean(text: str) -> None:
    assert scan(text) == []


def test_tokenizer_vocab_words_that_are_config_keys_do_not_make_it_walked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A tokenizer.json's vocab holds "class", "module", "cls", "()" and "version" as
    tokens (integer ids): the strict parse must not mark it as holding config callables,
    or every tokenizer (100k containers) is walked for nothing, on a fleet scan's critical
    path. The same keys with string values still do (the cases above)."""
    from scanner.formats import text

    walked: list[str] = []
    monkeypatch.setattr(text, "json_findings", lambda ctx, path, doc, prefix="": (
        walked.append(path) or []))
    vocab = {w: i for i, w in enumerate(
        ["class", "module", "cls", "()", "version", "_target", "type", "name"])}
    vocab.update({f"tok{i}": 100 + i for i in range(70_000)})
    doc = {"version": "1.0", "model": {"type": "BPE", "vocab": vocab,
                                        "merges": [["a", "b"]] * 100}}
    assert scan(json.dumps(doc), "tokenizer.json") == []
    assert walked == []
    assert scan(json.dumps({"version": 1, "root": {"level": "INFO"}}), "log.json") == []
    assert walked == ["log.json"]
