"""Image manifests met outside an OCI layout are recognised by content (registry manifests
such as an Ollama store's per-tag files, ``docker save``'s ``manifest.json``): policy as
container images, ``oci.malformed`` when invalid, and ``oci.path_escape`` (malicious) for
absolute or ``..`` paths a puller or loader follows: docker-archive ``Config``/``Layers``,
``org.opencontainers.image.title`` (the file ``oras pull`` writes), and digests holding
path characters (CVE-2024-37032). Documents are written here from the OCI image-spec and
moby's ``image/tarexport`` layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scanner.api import scan_paths
from scanner.core.model import Verdict

SHA = "sha256:" + "a" * 64
DIGEST_OK = {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": SHA, "size": 3}


def _manifest(layer: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": SHA, "size": 2},
            "layers": [layer or DIGEST_OK], **extra}


def _scan(tmp_path: Path, name: str, doc: object) -> tuple[Verdict | None, set[str]]:
    folder = tmp_path / "m"
    folder.mkdir(parents=True)
    (folder / name).write_text(json.dumps(doc))
    (result,) = scan_paths([folder]).targets
    return result.verdict, {f.rule_id for f in result.findings}


@pytest.mark.parametrize("name", ["latest", "manifest.json", "7b-q4"])
def test_registry_manifest_outside_a_layout_is_policy(tmp_path: Path, name: str) -> None:
    verdict, rules = _scan(tmp_path, name, _manifest())
    assert verdict is Verdict.POLICY and "format.oci_not_allowed" in rules, rules


@pytest.mark.parametrize("title", ["/etc/cron.d/x", "../../.bashrc", "a/../../b",
                                   "C:\\\\Windows\\\\x"])
def test_title_annotation_escaping_is_malicious(tmp_path: Path, title: str) -> None:
    layer = dict(DIGEST_OK, annotations={"org.opencontainers.image.title": title})
    verdict, rules = _scan(tmp_path, "latest", _manifest(layer))
    assert verdict is Verdict.MALICIOUS and "oci.path_escape" in rules, rules


def test_title_annotation_inside_is_fine(tmp_path: Path) -> None:
    layer = dict(DIGEST_OK, annotations={"org.opencontainers.image.title": "model/w.gguf"})
    assert _scan(tmp_path, "latest", _manifest(layer))[0] is Verdict.POLICY


@pytest.mark.parametrize("digest", ["sha256:../../../../etc/passwd",
                                    "sha256:/root/.ssh/authorized_keys"])
def test_digest_with_path_characters_is_malicious(tmp_path: Path, digest: str) -> None:
    verdict, rules = _scan(tmp_path, "latest", _manifest(dict(DIGEST_OK, digest=digest)))
    assert verdict is Verdict.MALICIOUS and "oci.path_escape" in rules, rules


@pytest.mark.parametrize("doc", [
    _manifest(schemaVersion=1), dict(_manifest(), layers={"not": "a list"}),
    _manifest({"mediaType": "x", "digest": "md5:abc", "size": -1}),
], ids=["schema1", "layers_not_list", "bad_descriptor"])
def test_invalid_manifest_is_malformed(tmp_path: Path, doc: dict[str, Any]) -> None:
    verdict, rules = _scan(tmp_path, "latest", doc)
    assert verdict is Verdict.MALFORMED and "oci.malformed" in rules, rules


def _docker(config: str, layers: list[str]) -> list[dict[str, Any]]:
    return [{"Config": config, "RepoTags": ["m:latest"], "Layers": layers}]


@pytest.mark.parametrize("doc", [
    _docker("/etc/shadow", ["abc/layer.tar"]), _docker("c.json", ["../../x/layer.tar"]),
    _docker("c.json", ["ok/layer.tar", "/var/lib/docker/x.tar"]),
], ids=["abs_config", "dotdot_layer", "abs_layer"])
def test_docker_archive_paths_escaping_are_malicious(tmp_path: Path, doc: object) -> None:
    verdict, rules = _scan(tmp_path, "manifest.json", doc)
    assert verdict is Verdict.MALICIOUS and "oci.path_escape" in rules, rules


def test_docker_archive_manifest_inside_is_policy_and_invalid_is_malformed(
        tmp_path: Path) -> None:
    ok = _docker("blobs/sha256/" + "b" * 64, ["blobs/sha256/" + "c" * 64])
    assert _scan(tmp_path / "a", "manifest.json", ok)[0] is Verdict.POLICY
    bad = [{"Config": 3, "Layers": "x", "RepoTags": []}]
    verdict, rules = _scan(tmp_path / "b", "manifest.json", bad)
    assert verdict is Verdict.MALFORMED and "oci.malformed" in rules


def test_ordinary_json_is_not_a_manifest(tmp_path: Path) -> None:
    config = {"model_type": "llama", "layers": 2, "schemaVersion": "x"}
    assert _scan(tmp_path, "config.json", config)[0] is Verdict.CLEAN
