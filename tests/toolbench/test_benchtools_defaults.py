"""``appliance bench tools`` / ``bench raw-vllm`` default ``--policy`` to the shipped
cpu-demo.toml from ``appliance.resources`` (the wheel's ``appliance/data/``, else a
checkout's ``policies/``), never a path computed from the source tree, so a wheel install
works from any directory (the wheel itself: tests/deploy/test_package_data.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance import resources
from appliance.cli import build_parser

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [["bench", "tools"], ["bench", "raw-vllm"]])
def test_default_policy_is_the_shipped_cpu_demo(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.policy == resources.policy_path("cpu-demo.toml")
    assert args.policy.is_file()


@pytest.mark.parametrize("argv", [["bench", "tools"], ["bench", "raw-vllm"]])
def test_default_policy_follows_the_packaged_data_when_there_is_no_source_tree(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a wheel install: packaged ``appliance/data/`` present, no ``policies/`` beside
    the package. The default then names the packaged copy."""
    package = tmp_path / "site" / "appliance"
    (package / "data").mkdir(parents=True)
    (package / "data" / "cpu-demo.toml").write_bytes(
        (REPO / "policies" / "cpu-demo.toml").read_bytes())
    monkeypatch.setattr(resources, "files", lambda _name: package)
    monkeypatch.setattr(resources, "SOURCE_TREE", tmp_path / "no-checkout" / "policies")
    args = build_parser().parse_args(argv)
    assert args.policy == package / "data" / "cpu-demo.toml"
    assert "policies" not in args.policy.parts
