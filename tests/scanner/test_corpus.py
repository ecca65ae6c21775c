"""Every case of the scanner corpus (tests/fixtures/corpus) through ``scan_paths``, the
loader's code path.

Kind -> verdict: benign -> clean (and no findings at all), policy -> policy,
malicious -> malicious, malformed -> malformed. Cases with a ``recipe`` (FIFO, character
device, 16 GiB sparse file) are built here; cases whose technique is a symlink are
rebuilt with real links when the shipped copy holds the link target as a text
placeholder (copies made without symlink support do that).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _shared import CORPUS as _CORPUS
from _shared import deadline_hits

from scanner.api import TargetResult, scan_paths
from scanner.core.model import Verdict

CORPUS = _CORPUS
FILES = CORPUS / "files"
CASES: list[dict[str, Any]] = json.loads((CORPUS / "cases.json").read_text())["cases"]
EXPECTED = {"benign": Verdict.CLEAN, "policy": Verdict.POLICY,
            "malicious": Verdict.MALICIOUS, "malformed": Verdict.MALFORMED}
SPARSE_SIZE = 16 << 30


def _writable_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copyfile)
    for root, dirs, _ in os.walk(dst):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
    os.chmod(dst, 0o755)
    return dst


def _hf_folder(case: dict[str, Any], tmp_path: Path) -> tuple[Path, Path]:
    """A writable benign HF folder at the case's path; returns (folder, weights path)."""
    folder = _writable_copy(FILES / "benign" / "hf_llama_tiny", tmp_path / case["path"])
    weights = folder / "model.safetensors"
    weights.unlink()
    return folder, weights


def _fifo(case: dict[str, Any], tmp_path: Path) -> Path:
    folder, weights = _hf_folder(case, tmp_path)
    os.mkfifo(weights)
    return folder


def _chardev(case: dict[str, Any], tmp_path: Path) -> Path:
    folder, weights = _hf_folder(case, tmp_path)
    try:
        os.mknod(weights, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("mknod of a character device is not permitted here")
    return folder


def sparse_safetensors(path: Path, size: int) -> None:
    """A valid safetensors file of ``size`` bytes: one U8 tensor whose data region is a
    hole (zeros, no disk blocks). Header padded with spaces to 8 bytes, as writers do."""
    data_len = size
    for _ in range(3):  # the header's own length feeds back into data_len
        header = json.dumps({"model.embed_tokens.weight": {
            "dtype": "U8", "shape": [data_len], "data_offsets": [0, data_len]}},
            separators=(",", ":")).encode()
        header += b" " * (-len(header) % 8)
        data_len = size - 8 - len(header)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(size)


def _sparse(case: dict[str, Any], tmp_path: Path) -> Path:
    folder, weights = _hf_folder(case, tmp_path)
    sparse_safetensors(weights, SPARSE_SIZE)
    assert os.stat(weights).st_blocks * 512 < 1 << 20, "filesystem did not keep the holes"
    return folder


RECIPES: dict[str, Callable[[dict[str, Any], Path], Path]] = {
    "fs_fifo": _fifo, "fs_chardev": _chardev, "fs_sparse_huge": _sparse,
}


def _placeholder_target(path: Path) -> str | None:
    """The link target when ``path`` is a flattened symlink (one line naming a path)."""
    if path.is_symlink() or not path.is_file() or path.stat().st_size > 1024:
        return None
    text = path.read_bytes().decode("utf-8", "replace").strip()
    if "\n" in text or not (text.startswith("/") or text.startswith("../")):
        return None
    return text


def _with_real_symlinks(case: dict[str, Any], tmp_path: Path) -> Path:
    root = tmp_path / "files"
    folder = _writable_copy(FILES / case["path"], root / case["path"])
    if (FILES / "_outside").exists():
        _writable_copy(FILES / "_outside", root / "_outside")
    links = 0
    for item in sorted(folder.rglob("*")):
        target = _placeholder_target(item)
        if target is not None:
            item.unlink()
            item.symlink_to(target)
        links += item.is_symlink()
    assert links, f"{case['id']}: no symlink in the case folder"
    return folder


def _target(case: dict[str, Any], tmp_path: Path) -> Path:
    if "recipe" in case:
        builder = RECIPES.get(case["id"])
        assert builder is not None, f"recipe case {case['id']} has no builder in this test"
        return builder(case, tmp_path)
    if "symlink" in case["technique"]:
        return _with_real_symlinks(case, tmp_path)
    return FILES / case["path"]


def _describe(result: TargetResult) -> str:
    lines = [f"verdict={result.verdict} error={result.error}"]
    lines += [f"  {f.verdict.label} {f.rule_id} {f.path}: {f.evidence[:120]}"
              for f in result.findings]
    return "\n".join(lines)


def test_corpus_is_complete() -> None:
    assert len(CASES) >= 90
    assert {c["kind"] for c in CASES} == set(EXPECTED)
    assert len({c["id"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_corpus_case(case: dict[str, Any], tmp_path: Path) -> None:
    target = _target(case, tmp_path)
    report = scan_paths([target])
    (result,) = report.targets
    expected = EXPECTED[case["kind"]]
    assert result.verdict is expected, (
        f"{case['id']} ({case['technique']}): expected {expected.label}\n{_describe(result)}")
    if expected is Verdict.CLEAN:
        assert result.findings == [], _describe(result)  # zero false positives on benign
    # Finished its work: the scanner's own per-target deadline never fired (a FIFO or a
    # device that blocked a read would end there, or hang this test).
    assert deadline_hits(result.findings) == [], _describe(result)
