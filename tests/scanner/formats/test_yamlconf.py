"""YAML and Hydra/OmegaConf configs (scanner.formats.yamlconf, scanner.formats.targets) and
.nemo archives: every test is named after its public source. Configs are written here from
the loaders' published formats (Hydra instantiate, OmegaConf interpolation grammar, NeMo
save_restore_connector); nothing is loaded, instantiated or imported."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import tarfile

import pytest
from scanner_helpers import rules

from scanner.core.allowlist import classify_target
from scanner.core.context import Limits, ScanContext
from scanner.core.model import BytesBlob, Finding, Verdict, worst
from scanner.scan.dispatch import analyze_blob
from scanner.scan.sniff import sniff


def scan(text: str | bytes, name: str = "config.yaml") -> list[Finding]:
    data = text.encode() if isinstance(text, str) else text
    return analyze_blob(ScanContext(), BytesBlob(name, data))


def evidence(found: list[Finding], rule_id: str) -> list[str]:
    return [f.evidence for f in found if f.rule_id == rule_id]


# -- NVIDIA NeMo CVE-2025-23304: .nemo archives ------------------------------------------

NEMO_CONFIG = """\
target: nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE
sample_rate: 16000
preprocessor:
  _target_: nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor
  sample_rate: ${sample_rate}
encoder:
  _target_: nemo.collections.asr.modules.ConformerEncoder
  feat_in: 80
decoder:
  _target_: nemo.collections.asr.modules.ConvASRDecoder
optim:
  _target_: torch.optim.AdamW
  lr: 0.001
  sched:
    _target_: torch.optim.lr_scheduler.CosineAnnealingLR
    T_max: 1000
"""
NEMO_PAYLOAD = """\
spec_augment:
  _target_: builtins.exec
  _args_: ["__import__('os').system('id')"]
"""


def nemo(config: str, gz: bool = False) -> bytes:
    weights = pickle.dumps({"encoder.weight": [0.0, 1.0]}, protocol=2)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("./model_config.yaml", config.encode()),
                           ("./model_weights.ckpt", weights)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return gzip.compress(raw) if gz else raw


@pytest.mark.parametrize("gz", [False, True], ids=["tar", "tar.gz"])
def test_nemo_hydra_target_cve_2025_23304(gz: bool) -> None:
    found = scan(nemo(NEMO_CONFIG + NEMO_PAYLOAD, gz), "model.nemo")
    assert worst(found) is Verdict.MALICIOUS
    unsafe = [f for f in found if f.rule_id == "config.unsafe_target"]
    assert len(unsafe) == 1, found
    # the finding names the member and the payload, not only "tar not allowed"
    assert unsafe[0].path.startswith("model.nemo!") and unsafe[0].path.endswith(
        "model_config.yaml")
    assert "/spec_augment/_target_: builtins.exec" in unsafe[0].evidence
    assert "os').system" in unsafe[0].evidence
    # the weights member is judged by its own analyser
    assert any(f.path.endswith("model_weights.ckpt") and f.rule_id.startswith(
        ("format.pickle", "pickle.")) for f in found)


@pytest.mark.parametrize("gz", [False, True], ids=["tar", "tar.gz"])
def test_nemo_hydra_target_cve_2025_23304_benign_nemo_is_not_malicious(gz: bool) -> None:
    found = scan(nemo(NEMO_CONFIG, gz), "model.nemo")
    assert worst(found) is Verdict.POLICY, found
    assert not any(f.rule_id.startswith(("config.", "yaml.")) for f in found)


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_nemo_hydra_target_cve_2025_23304_tar_gz_is_streamed_member_by_member() -> None:
    """A .nemo tar.gz larger than one member may be is still read member by member: each
    member is judged (one over the limit is a limit finding and skipped), and memory holds
    one member at a time (a few times its size), never the whole archive."""
    import os
    import tracemalloc

    big = [(f"./shard{i}.bin", os.urandom(3 << 20)) for i in range(10)]
    data = gzip.compress(_tar([("./model_config.yaml", (NEMO_CONFIG + NEMO_PAYLOAD).encode()),
                               *big]), compresslevel=1)
    blob = BytesBlob("model.nemo", data)
    tracemalloc.start()
    try:
        found = analyze_blob(ScanContext(Limits(max_member_bytes=5 << 20)), blob)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak  # the archive holds 30 MiB
    assert any(f.rule_id == "config.unsafe_target" and f.path.endswith("model_config.yaml")
               for f in found)
    assert len({f.path for f in found if f.path.endswith(".bin")}) == 10  # every shard judged
    small = analyze_blob(ScanContext(Limits(max_member_bytes=1 << 20)), blob)
    assert "config.unsafe_target" in rules(small)
    assert sum(f.rule_id == "scanner.limit_exceeded" for f in small) == 10


def test_nemo_hydra_target_cve_2025_23304_truncated_tar_gz_keeps_what_was_read() -> None:
    raw = _tar([("./model_config.yaml", (NEMO_CONFIG + NEMO_PAYLOAD).encode()),
                ("./model_weights.ckpt", bytes(range(256)) * 4000)])
    data = gzip.compress(raw)[: len(gzip.compress(raw)) // 2]
    found = scan(data, "model.nemo")
    assert {"config.unsafe_target", "archive.malformed"} <= rules(found), found


def test_nemo_hydra_target_cve_2025_23304_root_target_is_judged() -> None:
    """NeMo's from_config_dict imports a root ``target`` itself (no underscores)."""
    found = scan("target: evil_pkg.models.Backdoor\nsample_rate: 16000\n",
                 "model_config.yaml")
    assert evidence(found, "config.unknown_target") == ["/target: evil_pkg.models.Backdoor"]
    assert scan("target: 0.5\nname: out.layer\n") == []


# -- Salesforce Uni2TS CVE-2026-22584: nested and partial targets --------------------------

def test_uni2ts_hydra_target_cve_2026_22584() -> None:
    found = scan("""\
module:
  _target_: torch.nn.Sequential
  _args_:
    - _target_: torch.nn.Linear
      in_features: 4
      out_features: 4
    - _target_: subprocess.Popen
      args: [sh, -c, id]
optim:
  _target_: os.system
  _partial_: true
callbacks:
  - {_target_: torch.optim.Adam, params: []}
  - {_call_: posix.system, command: id}
""")
    assert worst(found) is Verdict.MALICIOUS
    assert sorted(evidence(found, "config.unsafe_target")) == [
        "/callbacks/1/_call_: posix.system (kwargs command)",
        "/module/_args_/1/_target_: subprocess.Popen (kwargs args)",
        "/optim/_target_: os.system (_partial_)",
    ]


# -- SapienzaNLP/relik PR 40: targets hidden by YAML and OmegaConf features ---------------

@pytest.mark.parametrize("text,target", [
    ('reader:\n  "\\x5ftarget\\x5f": builtins.eval\n', "/reader/_target_: builtins.eval"),
    ('reader: {_target_: "os\\x2esys\\u0074em"}\n', "/reader/_target_: os.system"),
    ("base: &b {_target_: torch.optim.Adam}\nreader:\n  <<: *b\n  _target_: shutil.rmtree\n",
     "/reader/_target_: shutil.rmtree"),
    ("evil: &e {_target_: os.execv}\nreader: {<<: [*e]}\n", "/evil/_target_: os.execv"),
    ("cls: builtins.exec\nreader:\n  _target_: ${cls}\n", "/reader/_target_: builtins.exec"),
    ("reader:\n  name: runpy.run_path\n  _target_: ${.name}\n",
     "/reader/_target_: runpy.run_path (kwargs name)"),
    ("a: {b: [x, importlib.import_module]}\nreader: {_target_: '${a.b[1]}'}\n",
     "/reader/_target_: importlib.import_module"),
    ("reader: {_target_: logging.os.system}\n", "/reader/_target_: logging.os.system"),
    ("? _target_\n: os.system\n", "/_target_: os.system"),
    ("t: &t os.popen\nreader: {_target_: *t}\n", "/reader/_target_: os.popen"),
], ids=["escaped_key", "escaped_value", "merge_key_override", "merge_list", "interpolation",
        "relative", "list_index", "module_alias", "complex_key", "scalar_alias"])
def test_relik_hydra_target_issue_40(text: str, target: str) -> None:
    found = scan(text)
    assert worst(found) is Verdict.MALICIOUS
    assert target in evidence(found, "config.unsafe_target"), found


@pytest.mark.parametrize("value", ["${oc.env:TARGET}", '${oc.decode:"os.system"}',
                                   "builtins.${name}", "${missing.key}", "${${k}}"])
def test_relik_hydra_target_issue_40_dynamic_targets_are_refused(value: str) -> None:
    found = scan(f"reader:\n  _target_: '{value}'\n")
    assert rules(found) == {"config.dynamic_target"}, found
    assert worst(found) is Verdict.MALICIOUS


def test_relik_hydra_target_issue_40_alias_bomb_is_a_limit_finding() -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    found = scan("\n".join(lines) + "\nz: {_target_: os.system}\n")
    assert "scanner.limit_exceeded" in rules(found)
    assert worst(found) is not Verdict.CLEAN


def test_relik_hydra_target_issue_40_repeated_aliases_report_the_shared_node_once() -> None:
    lines = ["a: &a {_target_: os.system}", "b: &b [" + ",".join(["*a"] * 30) + "]",
             "c: [" + ",".join(["*b"] * 30) + "]", "d: {_target_: posix.system}"]
    found = scan("\n".join(lines) + "\n")
    # an alias repeats the anchored node itself: judged once, at its first place
    assert evidence(found, "config.unsafe_target") == [
        "/a/_target_: os.system", "/d/_target_: posix.system"]


def fan_out(levels: int, width: int, head: str = "[_target_: os.system]") -> str:
    """``l0: &l0 HEAD``, then ``levels`` levels each a list of ``width`` aliases of the
    level before (issue 30's fuzzing campaign: 8 x 5 is 302 bytes, 390,625 expanded
    targets; its timing is in bench/README.md's fuzz section)."""
    return f"l0: &l0 {head}\n" + "".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]\n" for i in range(1, levels + 1))


def test_issue_30_fuzz_alias_fan_out_is_refused_and_judged_once() -> None:
    text = fan_out(8, 5)
    assert len(text) == 302
    found = scan(text)
    assert "scanner.limit_exceeded" not in rules(found), found  # under the 2M-node bound
    assert evidence(found, "config.unsafe_target") == ["/l0/0/_target_: os.system"]
    assert worst(found) is Verdict.MALICIOUS


def test_issue_30_fuzz_alias_fan_out_of_code_keys_is_reported_once() -> None:
    found = scan(fan_out(7, 5, "[a--b]") + "auto_map: *l7\n_attn_implementation: *l7\n")
    assert evidence(found, "config.auto_map_cross_repo") == ["/auto_map/0/0/0/0/0/0/0/0: a--b"]
    assert evidence(found, "config.attn_implementation_unknown") == [
        "/_attn_implementation/0/0/0/0/0/0/0/0: a--b"]
    trust = scan(fan_out(7, 5, "[x]") + "trust_remote_code: *l7\n")
    assert [len(f.message) < 400 for f in trust] == [True]  # the value is shown cut


@pytest.mark.parametrize("text,expected", [
    # the anchored node is a mapping key (PyYAML refuses it; the alias still carries it)
    ("? &p {_target_: os.system}\n: 1\nb: *p\n", "/b/_target_: os.system"),
    # the anchored value is overridden by a duplicate key: only the alias keeps it
    ("a: &p {_target_: os.system}\na: 1\nb: [*p]\n", "/b/0/_target_: os.system"),
    # the anchor is on a merge source: the merged copy and the alias both hold it
    ("m: {<<: &p {x: {_target_: os.system}}}\nb: *p\n", "/m/x/_target_: os.system"),
    # an interpolation inside a shared node resolves before the walk
    ("t: &t {_target_: '${cls}'}\ncls: os.system\nuse: [*t, *t]\n",
     "/t/_target_: os.system"),
    # first reached through an alias, deep in another node
    ("lib: &l [{net: {_target_: os.system}}]\nmodel: {layers: *l}\n",
     "/lib/0/net/_target_: os.system"),
], ids=["key_anchor", "shadowed_anchor", "merge_source", "interpolation", "nested"])
def test_issue_30_fuzz_a_target_behind_an_alias_is_found(text: str, expected: str) -> None:
    found = scan(text)
    assert expected in evidence(found, "config.unsafe_target"), found
    assert worst(found) is Verdict.MALICIOUS


def test_issue_30_fuzz_a_merge_sees_the_aliased_values_it_overrides() -> None:
    found = scan("base: &b {_target_: torch.nn.Linear, inner: {_target_: os.system}}\n"
                 "m: {<<: *b, _target_: posix.system}\n")
    assert evidence(found, "config.unsafe_target") == [
        "/base/inner/_target_: os.system", "/m/_target_: posix.system (kwargs inner)"]

@pytest.mark.parametrize("text,rule_id", [
    ("a: [1, 2\n", "yaml.invalid"),
    ("a: *nowhere\n", "yaml.invalid"),
    ("a: &x [*x]\n", "yaml.invalid"),
    ("{[1]: 2}\n", "yaml.invalid"),
    ("a: " + "[" * 300 + "]" * 300 + "\n", "scanner.limit_exceeded"),
    ("a: !!binary \xff\n", "yaml.invalid"),
], ids=["syntax", "undefined_alias", "recursive_alias", "unhashable_key", "depth",
        "not_utf8"])
def test_relik_hydra_target_issue_40_unreadable_yaml_fails_closed(text: str,
                                                                    rule_id: str) -> None:
    found = scan(text.encode("latin-1"))
    assert rule_id in rules(found)
    assert worst(found) >= Verdict.MALFORMED


@pytest.mark.parametrize("text", [
    "reader: {_target_: os.system}\nreader: {_target_: torch.optim.Adam}\n",
    "reader:\n  _target_: os.system\n  _target_: torch.optim.Adam\n",
])
def test_relik_hydra_target_issue_40_duplicate_keys_walk_both_values(text: str) -> None:
    found = scan(text)
    assert "yaml.invalid" in rules(found)
    assert evidence(found, "config.unsafe_target") == ["/reader/_target_: os.system"]


@pytest.mark.parametrize("text,rule_id,verdict", [
    ('a: !!python/object/apply:os.system ["id"]\n', "yaml.python_tag", Verdict.MALICIOUS),
    ("a: !!python/name:builtins.eval ''\n", "yaml.python_tag", Verdict.MALICIOUS),
    ("%TAG !p! tag:yaml.org,2002:python/\n---\na: !p!object/new:subprocess.Popen [id]\n",
     "yaml.python_tag", Verdict.MALICIOUS),
    ("a: !<tag:yaml.org,2002:python/module:os> ''\n", "yaml.python_tag", Verdict.MALICIOUS),
    ("a: !include other.yaml\n", "yaml.custom_tag", Verdict.POLICY),
], ids=["object_apply", "name", "tag_handle", "verbatim_module", "custom"])
def test_relik_hydra_target_issue_40_tags(text: str, rule_id: str, verdict: Verdict) -> None:
    found = scan(text)
    assert rule_id in rules(found) and worst(found) is verdict, found


def test_relik_hydra_target_issue_40_resolvers() -> None:
    found = scan("a: ${eval:'__import__(\"os\").system(\"id\")'}\nb: ${oc.create:x}\n"
                 "c: ${oc.env:HOME}\nd: ${model.x}\ne: \\${eval:1}\nmodel: {x: 1}\n"
                 "f: ${hydra:runtime.cwd}/out\n")
    assert sorted(evidence(found, "config.interpolation_resolver")) == [
        "/a: ${eval:'__import__(\"os\").system(\"id\")'}", "/b: ${oc.create:x}"]
    assert worst(found) is Verdict.POLICY


# -- NVIDIA-NeMo/Speech issue 15598: trust_remote_code in YAML ----------------------------

def test_nemo_speech_trust_remote_code_yaml_15598() -> None:
    found = scan("""\
model:
  train_ds:
    hf_data_cfg:
      path: some/dataset
      trust_remote_code: true
  tokenizer:
    library: huggingface
    trust_remote_code: yes
  other: {trust_remote_code: "false"}
""", "model_config.yaml")
    assert worst(found) is Verdict.POLICY
    assert sorted(evidence(found, "config.trust_remote_code")) == [
        "/model/other/trust_remote_code: 'false'",
        "/model/tokenizer/trust_remote_code: True",
        "/model/train_ds/hf_data_cfg/trust_remote_code: True",
    ]


@pytest.mark.parametrize("value", ["false", "no", "null", "0", "''", "${flags.trc}"])
def test_nemo_speech_trust_remote_code_yaml_15598_off_is_clean(value: str) -> None:
    assert scan(f"flags: {{trc: false}}\ntokenizer:\n  trust_remote_code: {value}\n") == []


@pytest.mark.parametrize("value", ["${flags.trc}", "${oc.env:TRC}", "x${flags.off}"])
def test_nemo_speech_trust_remote_code_yaml_15598_interpolated_on_is_found(value: str) -> None:
    found = scan(f"flags: {{trc: true, off: false}}\ntokenizer:\n  trust_remote_code: "
                 f"'{value}'\n")
    assert rules(found) == {"config.trust_remote_code"}, found


def test_nemo_speech_trust_remote_code_yaml_15598_json_configs_too() -> None:
    found = scan(json.dumps({"tokenizer_class": "X", "trust_remote_code": True}),
                 "tokenizer_config.json")
    assert rules(found) == {"config.trust_remote_code"}
    serve = scan("model: ./m\ntrust-remote-code: true\n", "serve.yaml")
    assert evidence(serve, "config.trust_remote_code") == ["/trust-remote-code: True"]


# -- benign configs, sniffing, tiers --------------------------------------------------------

@pytest.mark.parametrize("text", [
    NEMO_CONFIG,
    "optimizer:\n  _target_: torch.optim.Adam\n  _partial_: true\n  lr: 3e-4\n",
    "model:\n  _target_: torch.nn.Sequential\n  _args_:\n    - {_target_: torch.nn.ReLU}\n",
    "data: {_target_: torch.utils.data.DataLoader, batch_size: 8}\n"
    "od: {_target_: collections.OrderedDict}\n",
    "defaults:\n  - _self_\nname: run\npaths: {out: '${hydra:runtime.cwd}/out'}\n",
    "---\na: 1\n---\nb: [1, 2]\n",
    "base: &b {lr: 1}\nx: {<<: *b, wd: 0}\n",
    # NeMo 2 checkpoint context/model.yaml (fiddle): _call_ is a flag, dtypes are values
    "_target_: nemo.collections.llm.gpt.model.llama.LlamaModel\n_call_: true\nconfig:\n"
    "  _target_: nemo.collections.llm.gpt.model.llama.Llama31Config8B\n  _call_: true\n"
    "  params_dtype: {_target_: torch.bfloat16, _call_: false}\n"
    "trainer: {_target_: nemo.lightning.io.pl.TrainerContext}\n"
    "tc: {_target_: megatron.core.transformer.transformer_config.TransformerConfig}\n",
], ids=["nemo", "partial", "nested", "data", "hydra_main", "multi_doc", "merge", "nemo2"])
def test_benign_hydra_configs_stay_clean(text: str) -> None:
    assert scan(text) == []


def test_config_targets_use_the_pickle_tiers_and_the_config_tier() -> None:
    assert classify_target("torch.optim.Adam") is None
    assert classify_target("nemo.collections.asr.modules.ConformerEncoder") is None
    assert classify_target("torch.nn.modules.linear.Linear") is None  # framework tier
    assert classify_target("builtins.dict") is None  # plain tier
    for unsafe in ("os.system", "torch.load", "torch.hub.load",
                   "transformers.AutoModel.from_pretrained",
                   "nemo.collections.asr.parts.subprocess.Popen",  # alias of a stdlib module
                   "nemo.collections.asr.parts.logging.handlers.FileHandler",
                   "nemo.lightning.io.FileIO", "megatron.core.http.server.HTTPServer",
                   "torch.nn.Module.__init__", "builtins.set", "a..b", "torch.nn.modules"):
        assert classify_target(unsafe) is not None, unsafe


@pytest.mark.parametrize("name,text,fmt", [
    ("config.yaml", "a: 1\n", "yaml"),
    ("conf.yml", '{"_target_": "os.system"}', "yaml"),
    ("hparams", "model:\n  _target_: x.Y\n", "yaml"),
    ("README.md", "```yaml\nmodel:\n  _target_: x.Y\n```\n", "text"),
    ("config.json", '{"a": 1}', "json"),
])
def test_yaml_is_sniffed_by_name_and_by_hydra_keys(name: str, text: str, fmt: str) -> None:
    assert sniff(BytesBlob(name, text.encode())) == fmt


def test_mutated_hydra_configs_never_crash_the_reader() -> None:
    """Seeded mutations of the configs above (aliases, merges, tags, interpolations,
    empty documents): every one gets findings or none, never an exception or an
    internal error."""
    import random

    from scanner.formats.yamlconf import analyze_yaml

    seeds = [NEMO_CONFIG + NEMO_PAYLOAD,
             "base: &b {_target_: torch.optim.Adam}\nx:\n  <<: [*b]\n  _target_: ${a.b}\n",
             "%TAG !p! tag:yaml.org,2002:python/\n---\na: !p!object/new:os.system [id]\n",
             "a: ${eval:'x'}\nb: ${..c}\n? [a]\n: b\n---\n...\n- - ${a[0]}\n"]
    pieces = list("&*<>:{}[],-?!|'\"\\$.#%\n \t") + ["${", "<<", "_target_", "!!python/name:"]
    rng = random.Random(30)
    for _ in range(3000):
        text = list(rng.choice(seeds))
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(text))
            if rng.random() < 0.5:
                text.insert(at, rng.choice(pieces))
            else:
                text[at] = rng.choice(pieces)
        found = analyze_yaml(ScanContext(), BytesBlob("c.yaml", "".join(text).encode()))
        assert "scanner.internal_error" not in rules(found)


def test_uni2ts_hydra_target_cve_2026_22584_json_and_zip_configs_too() -> None:
    """The same walk reads JSON configs, and configs inside any container."""
    import zipfile

    doc = {"model": {"_target_": "torch.nn.Sequential",
                     "_args_": [{"_target_": "builtins.exec", "_args_": ["print(1)"]}]}}
    found = scan(json.dumps(doc), "config.json")
    assert evidence(found, "config.unsafe_target") == [
        "/model/_args_/0/_target_: builtins.exec (args ['print(1)'])"]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("ckpt/config.yaml", "optim: {_target_: os.system, _partial_: true}\n")
    found = scan(buf.getvalue(), "bundle.zip")
    hits = [f for f in found if f.rule_id == "config.unsafe_target"]
    assert [(f.path, f.evidence) for f in hits] == [
        ("bundle.zip!ckpt/config.yaml", "/optim/_target_: os.system (_partial_)")]


@pytest.mark.parametrize("target,rule_id", [
    ("my_project.models.Net", "config.unknown_target"),  # a project's own class: policy
    ("acme.nn.Encoder", "config.unknown_target"),
    ("os.system", "config.unsafe_target"),  # known-dangerous: malicious
    ("my_project.utils.subprocess.Popen", "config.unsafe_target"),  # stdlib re-export
    ("torch.load", "config.unsafe_target"),
])
def test_unknown_target_is_policy_and_dangerous_is_malicious(target: str, rule_id: str) -> None:
    found = [f.rule_id for f in scan(f"model:\n  _target_: {target}\n")]
    assert found == [rule_id], found
