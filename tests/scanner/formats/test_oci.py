"""OCI image layouts (scanner/formats/oci.py), from bytes written here: a folder layout and the
same layout as a tar (``docker save`` / ``skopeo copy oci-archive:``), layers walked like
any tar.gz, digests checked against blob names, descriptors checked."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pickle as P
import tarfile
from pathlib import Path

from scanner_helpers import rules, scan

from scanner.api import scan_target
from scanner.core.context import Limits
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.core.spec import Format
from scanner.scan.sniff import sniff

EVIL_PICKLE = P.PROTO + b"\x02" + P.GLOBAL + b"os\nsystem\n" + P.SHORT_BINUNICODE + b"\x02id" \
    + P.TUPLE1 + P.REDUCE + P.STOP


def _tar(members: dict[str, bytes], gz: bool = False) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0) if gz else raw


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _desc(media: str, data: bytes, **extra: object) -> dict[str, object]:
    return {"mediaType": media, "digest": f"sha256:{_sha(data)}", "size": len(data), **extra}


def layout(layer_files: dict[str, bytes], *, layer_extra: dict[str, object] | None = None,
           index_extra: dict[str, object] | None = None) -> dict[str, bytes]:
    """The files of an OCI image layout: path -> bytes."""
    layer = _tar(layer_files, gz=True)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": _desc("application/vnd.oci.image.config.v1+json", config),
        "layers": [_desc("application/vnd.oci.image.layer.v1.tar+gzip", layer,
                         **(layer_extra or {}))],
    }).encode()
    index = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [_desc("application/vnd.oci.image.manifest.v1+json", manifest)],
        **(index_extra or {}),
    }).encode()
    files = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}', "index.json": index}
    for blob in (layer, config, manifest):
        files[f"blobs/sha256/{_sha(blob)}"] = blob
    return files


def write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


BENIGN = {"model/config.json": b'{"model_type": "llama"}', "model/vocab.dat": b"\x00\xff\x00\xfe"}


def test_oci_layout_files_are_recognised_by_place_and_content() -> None:
    files = layout(BENIGN)
    assert sniff(BytesBlob("img/oci-layout", files["oci-layout"])) is Format("oci")
    assert sniff(BytesBlob("index.json", files["index.json"])) is Format("oci")
    blob = next(k for k in files if k.startswith("blobs/"))
    assert sniff(BytesBlob(f"img.tar!./{blob}", files[blob])) is Format("oci")
    # not a layout: an ordinary index.json, a short hex name, a file named like a marker
    assert sniff(BytesBlob("index.json", b'{"weight_map": {}}')) is Format("json")
    assert sniff(BytesBlob("blobs/sha256/abc", b"x")) is not Format("oci")
    assert sniff(BytesBlob("blobs/sha256/" + "A" * 64, b"x")) is not Format("oci")
    # the Hugging Face cache keeps blobs/<sha> without an algorithm folder
    assert sniff(BytesBlob("models--o--m/blobs/" + "a" * 64, b"{}")) is Format("json")


def test_oci_folder_layout_is_policy_with_layers_walked(tmp_path: Path) -> None:
    result = scan_target(write(tmp_path / "img", layout(BENIGN)))
    assert result.verdict is Verdict.POLICY, result.findings
    found = rules(result.findings)
    assert "format.oci_not_allowed" in found
    # the gzip layer was decompressed and its tar members analysed
    assert "format.tar_not_allowed" in found and "format.compressed_not_allowed" in found
    assert any(f.path.endswith("!model/vocab.dat") for f in result.findings)
    assert not found & {"oci.digest_mismatch", "oci.malformed"}


def test_oci_layer_carrying_a_payload_pickle_is_malicious(tmp_path: Path) -> None:
    files = layout({"model/weights.pkl": EVIL_PICKLE})
    result = scan_target(write(tmp_path / "img", files))
    assert result.verdict is Verdict.MALICIOUS
    bad = [f for f in result.findings if f.verdict is Verdict.MALICIOUS]
    assert bad and all("!model/weights.pkl" in f.path for f in bad)
    # a layer member escaping the extraction folder is judged as in any tar
    escaping = scan_target(write(tmp_path / "esc", layout({"../../etc/cron.d/x": b"* * *"})))
    assert "archive.path_traversal" in rules(escaping.findings)
    assert escaping.verdict is Verdict.MALICIOUS
    # the same layout shipped as one tar (oci-archive)
    archive = _tar({f"./{k}": v for k, v in files.items()})
    findings = scan("img.tar", archive)
    assert worst(findings) is Verdict.MALICIOUS
    assert "format.oci_not_allowed" in rules(findings)


def test_oci_blob_whose_content_does_not_match_its_name_is_malformed(tmp_path: Path) -> None:
    files = layout(BENIGN)
    blob = next(k for k in files if k.startswith("blobs/") and files[k].startswith(b"{"))
    files[blob] = files[blob].replace(b"amd64", b"arm64")
    result = scan_target(write(tmp_path / "img", files))
    assert result.verdict is Verdict.MALFORMED
    assert [f.path for f in result.findings if f.rule_id == "oci.digest_mismatch"] == [blob]


def test_oci_malformed_documents_and_descriptors() -> None:
    assert "oci.malformed" in rules(scan("oci-layout", b'{"imageLayoutVersion": 1}'))
    assert "oci.malformed" in rules(scan("oci-layout", b'{"imageLayoutVersion": "1", '))
    bad_index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "x", "digest": "md5:abcd", "size": 3},
        {"mediaType": "x", "digest": "sha256:" + "0" * 64, "size": -1},
        "not a descriptor"]}).encode()
    findings = scan("index.json", bad_index)
    assert worst(findings) is Verdict.MALFORMED
    assert [f.evidence for f in findings if f.rule_id == "oci.malformed"] == [
        "/manifests/0/digest", "/manifests/1/size", "/manifests/2"]
    # truncated: an index cut short is json.invalid, never clean
    assert worst(scan("index.json", bad_index[:40])) is Verdict.MALFORMED


def test_oci_foreign_layer_urls_are_policy_and_inline_data_is_analysed(tmp_path: Path) -> None:
    files = layout(BENIGN, layer_extra={"urls": ["https://example.invalid/layer"]})
    result = scan_target(write(tmp_path / "a", files))
    assert "oci.external_blob" in rules(result.findings)
    assert result.verdict is Verdict.POLICY
    inline = {"mediaType": "application/octet-stream", "digest": f"sha256:{_sha(EVIL_PICKLE)}",
              "size": len(EVIL_PICKLE), "data": __import__("base64").b64encode(
                  EVIL_PICKLE).decode()}
    files = layout(BENIGN, index_extra={"subject": inline})
    result = scan_target(write(tmp_path / "b", files))
    assert result.verdict is Verdict.MALICIOUS
    assert any(f.path == "index.json#/subject/data" and f.verdict is Verdict.MALICIOUS
               for f in result.findings)


def test_oci_limits_are_findings_not_passes(tmp_path: Path) -> None:
    files = layout(BENIGN)
    findings = scan("index.json", files["index.json"], max_json_bytes=16)
    assert "scanner.limit_exceeded" in rules(findings)
    result = scan_target(write(tmp_path / "img", files), Limits(max_nesting_depth=1))
    assert "scanner.limit_exceeded" in rules(result.findings)
    assert result.verdict is Verdict.MALFORMED
