"""Names that tools turn into paths (``scanner.core.pathnames``). Public source:
google-ai-edge/mediapipe issue 6278 -- a converter writes each tensor to a file named after
the tensor, so a tensor named ``../../x`` writes outside its output folder. Tensor names,
``weight_map`` keys and file names, and archive member names are judged after unescaping
(the JSON parser undoes ``\\u002e``); headers are written here as raw bytes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from scanner.api import scan_paths
from scanner.core import archive
from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.core.pathnames import escapes, reference_escapes
from scanner.formats.safetensors import SafetensorsError, analyze_safetensors, read_header

ESCAPING = [
    "../x", "../../etc/cron.d/x", "a/../../b", "..\\\\x", "a\\\\..\\\\..\\\\b", "/etc/passwd",
    "\\\\\\\\server\\\\share\\\\x", "C:\\\\Windows\\\\x", "c:x", "C:/x",
    "\\u002e\\u002e/x",  # JSON-escaped dots
    "\\u002e\\u002e\\u005cx",  # escaped dots and backslash
    "\\u002fetc\\u002fpasswd",  # escaped leading slash
    "w\\u0000/../../x",  # a NUL does not hide what follows from Python writers
]
PLAIN = ["model.layers.0.weight", "dense/kernel:0", "a..b", "x/...", "..a", "lm_head.weight"]


def _file(names_json: list[str]) -> bytes:
    """One-byte U8 tensors whose names are the given JSON source texts."""
    entries = [f'"{name}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}'
               for i, name in enumerate(names_json)]
    header = ("{" + ",".join(entries) + "}").encode("utf-8")
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + bytes(len(names_json))


@pytest.mark.parametrize("name", ESCAPING)
def test_tensor_name_path_escape_mediapipe_6278_names_that_are_paths_are_refused(name: str) -> None:
    data = _file(["ok.weight", name])
    findings = analyze_safetensors(ScanContext(), BytesBlob("m.safetensors", data))
    assert [f.rule_id for f in findings] == ["name.path_escape"], findings
    assert worst(findings) is Verdict.MALICIOUS
    with pytest.raises(SafetensorsError) as err:  # the loader's reader refuses it too
        read_header(BytesBlob("m.safetensors", data), ScanContext().limits)
    assert err.value.rule_id == "name.path_escape"


@pytest.mark.parametrize("name", PLAIN)
def test_tensor_names_that_stay_inside_are_clean(name: str) -> None:
    assert analyze_safetensors(ScanContext(), BytesBlob("m.safetensors", _file([name]))) == []


def test_escaped_tensor_name_is_judged_unescaped_old_corpus_case() -> None:
    """The old corpus case: a ``\\u``-escaped tensor name scanned clean because the byte
    level never saw ``..``; the check now runs on the parsed (unescaped) name."""
    raw = "\\u002e\\u002e/\\u002e\\u002e/\\u002e\\u002e/tmp/evil"
    assert b".." not in _file([raw])
    assert json.loads(f'"{raw}"') == "../../../tmp/evil"
    findings = analyze_safetensors(ScanContext(), BytesBlob("m.safetensors", _file([raw])))
    assert [f.rule_id for f in findings] == ["name.path_escape"]
    assert findings[0].evidence == "../../../tmp/evil"


def _index_folder(tmp_path: Path, weight_map_json: str) -> Path:
    tensor = _file(["w"])
    (tmp_path / "model-00001-of-00001.safetensors").write_bytes(tensor)
    (tmp_path / "model.safetensors.index.json").write_text(
        '{"metadata": {}, "weight_map": ' + weight_map_json + "}")
    return tmp_path


def test_mediapipe_6278_weight_map_keys_that_are_paths_are_refused(tmp_path: Path) -> None:
    folder = _index_folder(
        tmp_path, '{"\\u002e\\u002e\\u005c\\u002e\\u002e\\u005cx": '
                  '"model-00001-of-00001.safetensors"}')
    [result] = scan_paths([str(folder)]).targets
    rules = {(f.rule_id, f.path) for f in result.findings}
    assert ("name.path_escape", "model.safetensors.index.json") in rules, rules
    assert result.verdict is Verdict.MALICIOUS


@pytest.mark.parametrize("target", ["\\u002e\\u002e/x.safetensors", "..\\\\x.safetensors",
                                    "C:\\\\x.safetensors", "\\u002fx.safetensors"])
def test_weight_map_files_escaping_after_unescaping_are_path_escape(
        tmp_path: Path, target: str) -> None:
    folder = _index_folder(tmp_path, '{"w": "' + target + '"}')
    [result] = scan_paths([str(folder)]).targets
    assert {f.rule_id for f in result.findings if f.verdict is Verdict.MALICIOUS} == {
        "path.escape"}, result.findings


def test_archive_member_checks_are_the_one_shared_check() -> None:
    assert archive.escapes is escapes and archive.reference_escapes is reference_escapes
    for name in ("../x", "..\\x", "/x", "\\x", "C:x", "a/\x00b"):
        assert escapes(name) is not None, name
    assert escapes("w\x00", nul=False) is None and escapes("w\x00/../x", nul=False)
    assert reference_escapes("sub/../x.bin") is None
    assert reference_escapes("sub/../../x.bin") is not None


def test_zip_unicode_path_extra_field_names_are_checked_too() -> None:
    """unzip and 7-Zip extract to the Info-ZIP Unicode Path name (extra field 0x7075)
    instead of the header name; Python's zipfile ignores it. Its escapes count."""
    import io
    import zipfile
    import zlib

    from scanner.formats.zip import analyze_zip

    def zip_with(unicode_name: bytes) -> bytes:
        info = zipfile.ZipInfo("safe.txt")
        body = b"\x01" + struct.pack("<I", zlib.crc32(b"safe.txt")) + unicode_name
        info.extra = struct.pack("<HH", 0x7075, len(body)) + body
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as archive_:
            archive_.writestr(info, b"hello")
        return buf.getvalue()

    bad = analyze_zip(ScanContext(), BytesBlob("a.zip", zip_with(b"../../evil.sh")))
    assert "archive.path_traversal" in {f.rule_id for f in bad}, bad
    good = analyze_zip(ScanContext(), BytesBlob("a.zip", zip_with(b"safe.txt")))
    assert "archive.path_traversal" not in {f.rule_id for f in good}, good


def test_tensor_name_path_escape_in_gguf_tensor_infos() -> None:
    from test_formats import gguf, kv_str, tensor

    from scanner.formats.gguf import analyze_gguf

    def names(*tensor_names: str) -> set[str]:
        data = gguf([kv_str("general.architecture", "llama")],
                    [tensor(n, [32], 0, 128 * i) for i, n in enumerate(tensor_names)],
                    b"\x00" * (128 * len(tensor_names)))
        return {f.rule_id for f in analyze_gguf(ScanContext(), BytesBlob("m.gguf", data))}

    assert names("blk.0.attn_q.weight", "a..b") == {"format.gguf_not_allowed"}
    assert names("ok", "..\\..\\x") == {"format.gguf_not_allowed", "name.path_escape"}
    assert names("/etc/x") == {"format.gguf_not_allowed", "name.path_escape"}
