"""Loader-aware verdicts (``scanner.scan.loaders``): a file is judged as every loader that
may read it. Public source: promptfoo/modelaudit issue 1612 -- bytes that are a valid
safetensors file and, read from offset 0, a pickle reaching ``os.system``; named
``pytorch_model.bin``, transformers hands it to ``torch.load``, which unpickles it.

The polyglots here are written byte by byte (pickle opcodes by hand) and checked with
``pickletools.genops`` and the safetensors library's parser; nothing is ever unpickled.
"""

from __future__ import annotations

import io
import json
import pickletools
import struct
from pathlib import Path

import pytest
import safetensors.numpy

from scanner.api import scan_paths
from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.formats.safetensors import analyze_safetensors
from scanner.scan.dispatch import analyze_blob
from scanner.scan.loaders import ALSO, LOADERS, loaders_for, readings
from scanner.scan.registry import BY_FORMAT
from scanner.scan.sniff import sniff

BINBYTES, SHORT_BINBYTES = b"B", b"C"
_QUOTES = (0x22, 0x5C)  # '"' and '\\' cannot be hop lengths inside a JSON string


def polyglot(command: bytes = b"true") -> bytes:
    """A valid safetensors file (one U8 tensor) whose bytes from offset 0 are a pickle
    calling ``os.system(command)``.

    Byte 0 of the u64 header length is ``B`` (BINBYTES) and bytes 1-4 its length, so the
    length prefix swallows the start of the JSON header; the pickle lands inside a
    ``__metadata__`` string, which is a chain of SHORT_BINBYTES hops (``C`` + a printable
    length) whose last hop skips the end of the header; the data section (the tensor's
    bytes) holds ``os.system(command)`` as protocol-4 opcodes and STOP."""
    tail = (b"\x8c\x02os\x8c\x06system\x93"  # SHORT_BINUNICODE x2, STACK_GLOBAL
            + b"\x8c" + bytes([len(command)]) + command + b"\x85R.")  # TUPLE1 REDUCE STOP
    size = len(tail)
    prefix = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}},
                        separators=(",", ":"))[:-1].encode() + b',"__metadata__":{"p":"'
    close = b'"}}'
    swallow = 80
    while 5 + swallow < 8 + len(prefix) + 4:
        swallow += 1
    n = BINBYTES[0] | (swallow << 8)  # header length; its bytes 1-4 are BINBYTES' length
    s_start, s_end, data = 8 + len(prefix), 8 + n - len(close), 8 + n
    body = bytearray(b"A" * (s_end - s_start))
    pos = 5 + swallow
    while True:
        remaining = data - (pos + 2)
        last = 32 <= remaining <= 126 and remaining not in _QUOTES
        hop = remaining if last else 63 if remaining - 66 in _QUOTES else 64
        assert pos + 1 < s_end
        body[pos - s_start:pos - s_start + 2] = SHORT_BINBYTES + bytes([hop])
        pos += 2 + hop
        if last:
            break
    header = prefix + bytes(body) + close
    assert len(header) == n
    return struct.pack("<Q", n) + header + tail


def benign_safetensors(first_byte: int) -> bytes:
    """A plain safetensors file whose header length's low byte is ``first_byte``."""
    text = b'{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}'
    n = len(text) + (first_byte - len(text)) % 256 + 256
    return struct.pack("<Q", n) + text + b" " * (n - len(text)) + b"\x01\x02"


def test_the_polyglot_is_valid_safetensors_and_a_pickle_reaching_os_system() -> None:
    data = polyglot()
    assert safetensors.numpy.load(data)["w"].tobytes().endswith(b"R.")  # parser only
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(io.BytesIO(data))]
    assert ops[0][0] == "BINBYTES" and ops[-1][0] == "STOP"
    assert ("SHORT_BINUNICODE", "system") in ops and ("STACK_GLOBAL", None) in ops
    # as safetensors alone it is clean: the bypass
    assert analyze_safetensors(ScanContext(), BytesBlob("m.safetensors", data)) == []
    assert sniff(BytesBlob("pytorch_model.bin", data)) == "safetensors"


def test_safetensors_pickle_polyglot_modelaudit_1612_as_pytorch_model_bin_names_torch_load(
        tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(polyglot())
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    [result] = scan_paths([str(tmp_path)]).targets
    assert result.verdict is Verdict.MALICIOUS
    bad = [f for f in result.findings if f.verdict is Verdict.MALICIOUS]
    assert bad and all(f.path == "pytorch_model.bin" for f in bad)
    assert any(f.message.startswith("read by torch.load as pickle:")
               and "os.system" in f.evidence for f in bad), bad


def test_modelaudit_1612_polyglot_is_malicious_under_any_name(tmp_path: Path) -> None:
    """Content valid as two formats is analysed as both: named model.safetensors the
    same bytes still carry the pickle any pickle loader runs."""
    for name in ("model.safetensors", "weights", "x.ckpt"):
        found = analyze_blob(ScanContext(), BytesBlob(name, polyglot(b"id")))
        assert any(f.verdict is Verdict.MALICIOUS and "os.system" in f.evidence
                   for f in found), (name, found)


def test_plain_safetensors_stay_clean_whatever_their_first_byte_or_name() -> None:
    """Every header-length low byte (BINBYTES, BINUNICODE, PROTO, MARK, GLOBAL, FRAME ...):
    a pickle loader fails on such a file, so the extra reading adds nothing (its
    malformed findings are dropped)."""
    for first in range(256):
        data = benign_safetensors(first)
        assert data[0] == first
        for name in ("model.safetensors", "pytorch_model.bin", "optimizer.pt"):
            assert analyze_blob(ScanContext(), BytesBlob(name, data)) == [], (name, first)


def test_the_common_files_get_no_extra_reading() -> None:
    pickled = b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00}\x94."
    assert readings(BytesBlob("pytorch_model.bin", pickled), sniff(
        BytesBlob("pytorch_model.bin", pickled))) == []
    plain = benign_safetensors(0x10)
    assert readings(BytesBlob("model.safetensors", plain), sniff(
        BytesBlob("model.safetensors", plain))) == []
    config = b'{"a": 1}'
    assert readings(BytesBlob("config.json", config), sniff(BytesBlob("c.json", config))) == []


def test_loader_table_names_registered_formats_and_matches_members() -> None:
    for row in LOADERS:
        assert row.patterns and all(p == p.lower() for p in row.patterns)
        assert all(f in BY_FORMAT for f in row.accepts)
    assert all(a.sniffed in BY_FORMAT and a.reads_as in BY_FORMAT for a in ALSO)
    assert [r.name for r in loaders_for("sub/PYTORCH_MODEL.BIN")] == ["torch.load"]
    assert [r.name for r in loaders_for("m.nemo!./model_weights.ckpt")] == ["torch.load"]
    assert [r.name for r in loaders_for("arr.npy")] == ["numpy.load"]
    assert loaders_for("README") == () and loaders_for("config.json") == ()


def test_a_tar_whose_first_member_name_is_a_pickle_is_analysed_as_both() -> None:
    """Content valid as two formats is analysed as both: the tar header's name field is
    the first bytes of the file, so ``pickle.load`` of the archive runs a name that is
    a protocol-0 pickle (written by hand)."""
    import tarfile

    name = "cos\nsystem\n(S'true'\ntR."
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    blob = BytesBlob("weights.tar", buf.getvalue())
    assert sniff(blob) == "tar"
    found = analyze_blob(ScanContext(), blob)
    assert any(f.verdict is Verdict.MALICIOUS and "os.system" in f.evidence
               and f.message.startswith("read by any pickle loader") for f in found), found
    # a plain tar of the same shape adds nothing
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("model_config.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    plain = BytesBlob("weights.tar", buf.getvalue())
    assert readings(plain, sniff(plain)) == []


def test_an_extra_reading_keeps_evidence_and_fail_closed_findings_only() -> None:
    from scanner.core.model import Finding, Severity
    from scanner.scan.loaders import PICKLE, extra_findings

    def make(rule_id: str, verdict: Verdict) -> Finding:
        return Finding(rule_id, Severity.HIGH, verdict, "m.bin", "msg", "ev")

    found = [make("pickle.unsafe_global", Verdict.MALICIOUS),
             make("format.pickle_not_allowed", Verdict.POLICY),  # the reading's own policy
             make("pickle.malformed", Verdict.MALFORMED),  # the loader fails: nothing runs
             make("pickle.unknown_global", Verdict.POLICY),
             make("scanner.limit_exceeded", Verdict.MALFORMED),
             make("scanner.internal_error", Verdict.MALFORMED)]
    kept = extra_findings(found, PICKLE, "torch.load")
    assert [f.rule_id for f in kept] == ["pickle.unsafe_global", "pickle.unknown_global",
                                         "scanner.limit_exceeded", "scanner.internal_error"]
    assert all(f.message == "read by torch.load as pickle: msg" for f in kept)


MAGIC_KEYS = [b"lmgg", b"GGUF", b"xxxxTFL3", b"BZh91AY&SY", b"tjgg", b"xxxxPTMF", b"ftrt"]


@pytest.mark.parametrize("magic", MAGIC_KEYS, ids=[m.decode() for m in MAGIC_KEYS])
@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_yaml_named_file_with_binary_magic_read_as_yaml(magic: bytes, suffix: str) -> None:
    """Red-team label issue: a ``*.yaml`` whose first key spells a binary magic was judged
    only as that binary format (malformed), its ``_target_: os.system`` never named. YAML
    loaders (yaml.safe_load, OmegaConf.load, Hydra) read such a file by its name."""
    data = magic + b": 1\n_target_: os.system\ncommand: id\n"
    name = "conf/model_config" + suffix
    blob = BytesBlob(name, data)
    assert sniff(blob) not in ("yaml", "text")  # the bytes sniff as the binary format
    found = analyze_blob(ScanContext(), blob)
    unsafe = [f for f in found if f.rule_id == "config.unsafe_target"]
    assert unsafe and all(f.message.startswith("read by yaml loader") for f in unsafe), found
    assert "os.system" in unsafe[0].message
    assert worst(found) is Verdict.MALICIOUS


def test_yaml_named_file_with_binary_magic_benign_adds_nothing() -> None:
    """A benign config behind the same magic key keeps its binary-format verdict only
    (the YAML reading finds nothing), and a plain YAML file gets no second reading."""
    data = b"GGUF: 1\n_target_: torch.optim.Adam\nlr: 0.1\n"
    found = analyze_blob(ScanContext(), BytesBlob("config.yaml", data))
    assert not any(f.message.startswith("read by") for f in found), found
    plain = BytesBlob("config.yaml", b"_target_: torch.optim.Adam\nlr: 0.1\n")
    assert sniff(plain) == "yaml" and readings(plain, sniff(plain)) == []
    assert analyze_blob(ScanContext(), plain) == []
