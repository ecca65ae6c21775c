"""Hugging Face cache folders as ``huggingface_hub`` lays them out (``hub/models--org--name/
{blobs/<hash>, refs/main, snapshots/<rev>/<path> -> ../../blobs/<hash>}``) are scanned
clean from any of their levels: the cache root, a repository, ``snapshots`` or one
revision. A link is the layout only when it stays in its own repository's ``blobs/``;
every other link keeps its ``fs.symlink*`` finding. Built here from the documented layout
(huggingface_hub "Manage the cache" guide)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from scanner.api import scan_paths
from scanner.core.model import Verdict

REV = "0123456789abcdef0123456789abcdef01234567"
CONFIG = b'{"model_type": "llama", "hidden_size": 8}\n'
EVIL = b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00true\x85R."


def _repo(hub: Path, name: str, files: dict[str, bytes]) -> Path:
    repo = hub / name
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REV)
    snap = repo / "snapshots" / REV
    for rel, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / digest).write_bytes(data)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        up = "../" * (rel.count("/") + 2)
        link.symlink_to(f"{up}blobs/{digest}")
    return repo


@pytest.fixture
def hub(tmp_path: Path) -> Path:
    hub = tmp_path / "hub"
    _repo(hub, "models--org--tiny", {"config.json": CONFIG, "sub/README.md": b"hello\n"})
    _repo(hub, "models--org--other", {"config.json": CONFIG})
    (hub / "version.txt").write_text("1")
    return hub


def _verdict(path: Path) -> tuple[Verdict | None, list[str]]:
    (result,) = scan_paths([path]).targets
    return result.verdict, [f"{f.rule_id} {f.path}" for f in result.findings]


@pytest.mark.parametrize("level", ["", "models--org--tiny", "models--org--tiny/snapshots",
                                   f"models--org--tiny/snapshots/{REV}"])
def test_cache_is_clean_from_every_level(hub: Path, level: str) -> None:
    assert _verdict(hub / level) == (Verdict.CLEAN, [])


def test_blob_content_is_judged_through_the_link(hub: Path) -> None:
    _repo(hub, "models--evil--m", {"pytorch_model.bin": EVIL})
    verdict, found = _verdict(hub)
    assert verdict is Verdict.MALICIOUS
    assert any("pytorch_model.bin" in f for f in found), found


@pytest.mark.parametrize("target", [
    "../../../models--org--other/blobs/{digest}",  # another repository's blob
    "../../refs/main",  # not a blob
    "../../../../outside.txt",  # leaves the cache root
])
def test_links_outside_their_own_blobs_are_not_the_layout(hub: Path, target: str) -> None:
    (hub.parent / "outside.txt").write_text("x")
    digest = hashlib.sha256(CONFIG).hexdigest()
    link = hub / "models--org--tiny" / "snapshots" / REV / "extra.json"
    link.symlink_to(target.format(digest=digest))
    verdict, found = _verdict(hub)
    assert verdict is not None and verdict >= Verdict.POLICY, found
    assert any(f.startswith("fs.symlink") and "extra.json" in f for f in found), found


def test_absolute_link_into_blobs_is_malicious(hub: Path) -> None:
    digest = hashlib.sha256(CONFIG).hexdigest()
    link = hub / "models--org--tiny" / "snapshots" / REV / "abs.json"
    link.symlink_to(hub / "models--org--tiny" / "blobs" / digest)
    assert _verdict(hub)[0] is Verdict.MALICIOUS


def test_layout_outside_a_cache_is_not_recognised(tmp_path: Path) -> None:
    """The same links in a folder neither named models--* nor shaped like a repository
    (no ``blobs/`` directory: the targets sit in a ``store/`` folder): reported as links.
    A folder shaped like one (``blobs/`` + ``snapshots/``) is the layout (issue 30,
    tests/scanner/core/test_evidence_verdicts.py)."""
    repo = _repo(tmp_path / "x", "weights", {"config.json": CONFIG})
    (repo / "blobs").rename(repo / "store")
    for link in (repo / "snapshots" / REV).iterdir():
        link.unlink()
        link.symlink_to(f"../../store/{hashlib.sha256(CONFIG).hexdigest()}")
    verdict, found = _verdict(repo.parent)
    assert verdict is not None and verdict >= Verdict.POLICY
    assert any(f.startswith("fs.symlink") for f in found)
    assert os.path.islink(repo / "snapshots" / REV / "config.json")
