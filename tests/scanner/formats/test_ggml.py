"""llamafile / native executables (scanner/formats/executable.py) and legacy GGML files
(scanner/formats/ggml.py), from bytes written here."""

from __future__ import annotations

import io
import pickle as P
import struct
import zipfile
from pathlib import Path

import pytest
from scanner_helpers import rules, scan

from scanner.api import scan_target
from scanner.core.context import Limits, ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.core.spec import Format
from scanner.scan.dispatch import analyze_blob
from scanner.scan.sniff import sniff

EVIL_PICKLE = P.PROTO + b"\x02" + P.GLOBAL + b"os\nsystem\n" + P.SHORT_BINUNICODE + b"\x02id" \
    + P.TUPLE1 + P.REDUCE + P.STOP


# --- llamafile and executables ------------------------------------------------------

APE_HEAD = b"MZqFpD='\n\n\x00\x10\x00\xf8\x00\x00\x00\x00\x00\x00\x00" + b"\x00" * 48 \
    + b"'\n#'\"\nexec 7<> \"$(command -v \"$0\")\" || exit 121\n" + b"\x00" * 200
ELF_HEAD = b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8 + struct.pack("<HHI", 2, 62, 1) \
    + b"\x00" * 40


def _gguf(template: str) -> bytes:
    key, value = b"tokenizer.chat_template", template.encode()
    return (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
            + struct.pack("<I", 8) + struct.pack("<Q", len(value)) + value)


def llamafile(members: dict[str, bytes], head: bytes = APE_HEAD) -> bytes:
    buf = io.BytesIO()
    buf.write(head)
    with zipfile.ZipFile(buf, "a", compression=zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_llamafile_is_an_executable_with_its_weights_analysed() -> None:
    data = llamafile({"model.gguf": _gguf("{{ messages[0]['content'] }}")})
    assert sniff(BytesBlob("mistral.llamafile", data)) is Format("executable")
    findings = scan("mistral.llamafile", data)
    assert worst(findings) is Verdict.POLICY, findings
    assert rules(findings) >= {"format.executable", "format.zip_not_allowed",
                               "format.gguf_not_allowed"}
    exe = [f for f in findings if f.rule_id == "format.executable"]
    assert len(exe) == 1 and "llamafile" in exe[0].message


def test_llamafile_with_a_template_escape_or_pickle_is_malicious() -> None:
    evil = llamafile({"model.gguf": _gguf("{{ ''.__class__.__mro__[1].__subclasses__() }}")})
    assert "template.sandbox_escape" in rules(scan("x.llamafile", evil))
    assert worst(scan("x.llamafile", llamafile({"data.pkl": EVIL_PICKLE}))) \
        is Verdict.MALICIOUS
    # after --assimilate the llamafile is an ELF, with the zip still appended
    assimilated = llamafile({"data.pkl": EVIL_PICKLE}, head=ELF_HEAD)
    assert worst(scan("llava", assimilated)) is Verdict.MALICIOUS


@pytest.mark.parametrize("head", [ELF_HEAD, b"\xcf\xfa\xed\xfe\x07\x00\x00\x01" + b"\0" * 24,
                                  b"MZ" + b"\x00" * 58 + struct.pack("<I", 64) + b"PE\0\0"
                                  + b"\0" * 20, b"\x7fELF"])
def test_native_executables_are_policy_never_clean(head: bytes, tmp_path: Path) -> None:
    assert sniff(BytesBlob("tool", head)) is Format("executable")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "helper").write_bytes(head)
    result = scan_target(tmp_path / "m")
    assert result.verdict is Verdict.POLICY
    assert rules(result.findings) == {"format.executable"}


def test_llamafile_zip_limits_are_findings() -> None:
    data = llamafile({"model.gguf": _gguf("hi"), "extra.txt": b"x", "more.txt": b"y"})
    findings = scan("x.llamafile", data, max_archive_members=1)
    assert "scanner.limit_exceeded" in rules(findings)
    assert worst(findings) is Verdict.MALFORMED


def test_text_starting_with_mz_is_not_an_executable() -> None:
    assert sniff(BytesBlob("notes.txt", b"MZ is a two-letter word " * 10)) is Format("text")


# --- legacy GGML --------------------------------------------------------------------


def _tensor(name: bytes, dims: list[int], gtype: int, data: bytes, pos: int,
            aligned: bool) -> bytes:
    rec = struct.pack("<iii", len(dims), len(name), gtype) + struct.pack(
        f"<{len(dims)}i", *dims) + name
    if aligned:
        rec += b"\x00" * (-(pos + len(rec)) & 31)
    return rec + data


def ggjt(version: int = 3, *, magic: bytes = b"tjgg", n_vocab: int = 2,
         gtype: int = 0, data: bytes | None = None, dims: tuple[int, ...] = (4, 2)) -> bytes:
    out = magic + struct.pack("<I", version)
    out += struct.pack("<7I", n_vocab, 8, 256, 2, 1, 8, 1)
    for token in (b"<s>", b"hello")[:n_vocab]:
        out += struct.pack("<I", len(token)) + token + struct.pack("<f", 0.0)
    data = b"\x00" * (4 * 2 * 4) if data is None else data
    return out + _tensor(b"tok_embeddings.weight", list(dims), gtype, data, len(out),
                         aligned=magic == b"tjgg")


def test_ggjt_and_ggmf_files_are_policy() -> None:
    for blob in (ggjt(3), ggjt(1), ggjt(1, magic=b"fmgg")):
        assert sniff(BytesBlob("ggml-model-q4_0.bin", blob)) is Format("ggml")
        findings = scan("ggml-model-q4_0.bin", blob)
        assert rules(findings) == {"format.ggml_not_allowed"}, findings
        assert "2 tensors" not in findings[0].message and "1 tensors" in findings[0].message
    # unversioned 'ggml' (also gpt-2/whisper examples): header only
    assert rules(scan("ggml-base.bin", b"lmgg" + b"\x01" * 40)) == {"format.ggml_not_allowed"}
    # a ggjt v1 Q4_0 tensor uses 20-byte blocks (float32 scale), v3 18-byte ones
    q4v1 = ggjt(1, gtype=2, data=b"\x00" * 20, dims=(32, 1))
    assert rules(scan("q4.bin", q4v1)) == {"format.ggml_not_allowed"}
    q4v3 = ggjt(3, gtype=2, data=b"\x00" * 18, dims=(32, 1))
    assert rules(scan("q4.bin", q4v3)) == {"format.ggml_not_allowed"}
    assert "ggml.malformed" in rules(scan("q4.bin", q4v3 + b"\x00\x00"))


@pytest.mark.parametrize("blob, why", [
    (ggjt(3)[:-5], "runs past the end"),
    (ggjt(3, gtype=99), "unknown ggml type"),
    (ggjt(4), "version 4"),
    (ggjt(3)[:30], "runs past the end"),
    (b"tjgg\x03\x00", "no version"),
    (ggjt(3, n_vocab=2)[:8] + struct.pack("<7I", 1 << 20, 1, 1, 1, 1, 1, 1), "cannot fit"),
    (b"lmgg\x00", "shorter"),
])
def test_malformed_ggml_is_never_clean(blob: bytes, why: str) -> None:
    findings = scan("model.bin", blob)
    assert worst(findings) is Verdict.MALFORMED, findings
    assert any(why in f.message for f in findings if f.rule_id == "ggml.malformed"), findings


def test_ggml_vocabulary_over_the_limit_is_a_finding() -> None:
    blob = b"tjgg" + struct.pack("<I", 3) + struct.pack("<7I", 1 << 23, 1, 1, 1, 1, 1, 1)
    findings = scan("model.bin", blob)
    assert "scanner.limit_exceeded" in rules(findings)
    assert worst(findings) is Verdict.MALFORMED


class _Sparse:
    """A blob of ``size`` bytes: ``data`` then zeros, counting the bytes read."""

    def __init__(self, name: str, data: bytes, size: int) -> None:
        self.name, self.data, self.size, self.read = name, data, size, 0

    def read_at(self, offset: int, length: int) -> bytes:
        length = max(0, min(length, self.size - offset))
        self.read += length
        out = self.data[offset:offset + length]
        return out + b"\x00" * (length - len(out))


def test_ggml_tensor_data_is_skipped_not_read() -> None:
    dims, n = (8192, 8192), 8192 * 8192 * 4  # one 256 MiB F32 tensor
    head = ggjt(3, dims=dims, data=b"")
    blob = _Sparse("big.bin", head, len(head) + n)
    findings = analyze_blob(ScanContext(Limits()), blob)
    assert rules(findings) == {"format.ggml_not_allowed"}, findings
    assert blob.read < 1 << 20  # the sniffer's head plus a few header windows
