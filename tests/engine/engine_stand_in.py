"""A stand-in engine for the process and supervisor tests: ``use_stand_in`` writes a
test's stand-in script and makes ``appliance.engine.launcher.build_argv`` start it
(``script socket_path marks_dir mode``) instead of vLLM; the stand-in leaves its marks in
the returned folder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from appliance.config.policy import load_policy
from appliance.engine import launcher
from appliance.engine.launcher import EngineSpec

REPO = Path(__file__).resolve().parents[2]


def use_stand_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, script_text: str,
                 mode: str) -> Path:
    """Start ``script_text`` in ``mode`` for every engine launched in this test; returns
    the marks folder (``tmp_path / "marks"``)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "stand_in.py"
    script.write_text(script_text)

    def argv(spec: EngineSpec) -> list[str]:
        return [sys.executable, str(script), str(spec.socket_path), str(marks), mode]

    monkeypatch.setattr(launcher, "build_argv", argv)
    return marks


def demo_spec(tmp_path: Path) -> EngineSpec:
    """An engine spec with the CPU demo policy's engine settings, under ``tmp_path``."""
    engine = load_policy(REPO / "policies" / "cpu-demo.toml").engine
    return EngineSpec(model_dir=tmp_path / "model", served_name="m", engine=engine,
                      runtime_dir=tmp_path / "run")
