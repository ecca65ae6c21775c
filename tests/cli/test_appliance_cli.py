"""`appliance` command line: exit statuses and error shape (no tracebacks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.cli import main

REPO = Path(__file__).resolve().parents[2]


def _model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    return model


def test_keygen_sign_verify_and_tamper(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    priv, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    assert main(["keygen", "--private-key", str(priv), "--public-key", str(pub)]) == 0
    assert (priv.stat().st_mode & 0o777) == 0o600
    model = _model(tmp_path)
    assert main(["sign", str(model), "--private-key", str(priv)]) == 0
    assert main(["verify", str(model), "--public-key", str(pub)]) == 0
    (model / "config.json").write_text('{"model_type": "llama", "x": 1}')
    assert main(["verify", str(model), "--public-key", str(pub)]) == 1
    err = capsys.readouterr().err
    assert "error[digest_mismatch]" in err and "config.json" in err and "fix:" in err
    assert "Traceback" not in err
    assert main(["keygen", "--private-key", str(priv), "--public-key", str(pub)]) == 1
    assert "error[key_exists]" in capsys.readouterr().err


def test_scan_exit_codes(tmp_path: Path) -> None:
    model = _model(tmp_path)
    assert main(["scan", "--quiet", str(model)]) == 0
    (model / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    assert main(["scan", "--quiet", str(model)]) == 1
    assert main(["scan", "--quiet", str(tmp_path / "missing")]) == 2


def test_bad_policy_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text("[engine]\nunknown = 1\n")
    assert main(["check", "--policy", str(bad)]) == 2
    assert "error[policy_invalid]" in capsys.readouterr().err


def test_check_prints_versions_and_floors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--policy", str(REPO / "policies" / "cpu-demo.toml")]) == 0
    out = capsys.readouterr().out
    assert "vllm: vllm" in out and "floor >= " in out and "preflight: ok" in out


def test_serve_without_api_key_is_refused_before_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPLIANCE_API_KEYS", raising=False)
    model = _model(tmp_path)
    code = main(["serve", "--model", str(model), "--policy",
                 str(REPO / "policies" / "cpu-demo.toml"), "--public-key", str(tmp_path / "x")])
    assert code == 1
    assert "error[no_api_key]" in capsys.readouterr().err


def test_appliance_usage_errors_use_the_same_format(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["scan", str(tmp_path), "--format", "xml"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error[usage]: argument --format: invalid choice: 'xml'" in err
    assert "fix: see 'appliance scan --help'" in err


def test_unknown_option_names_the_subcommand_usage(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["scan", str(tmp_path), "--bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: appliance scan ")
    assert "error[usage]: unrecognized arguments: --bogus\n  fix: see 'appliance scan --help'" \
        in err


@pytest.mark.parametrize("before", [True, False])
def test_importing_the_cli_leaves_the_collector_as_it_found_it(before: bool) -> None:
    """The CLI pauses the cyclic collector while its imports run (the scanner's model among
    them) and leaves it on or off as it was: a caller's own setting is never changed."""
    import subprocess
    import sys

    code = ("import gc\n"
            f"{'gc.enable()' if before else 'gc.disable()'}\n"
            "import appliance.cli\n"
            "print(gc.isenabled())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    assert out.strip() == str(before)
