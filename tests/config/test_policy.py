from pathlib import Path

import pytest

from appliance.config.policy import load_policy
from appliance.errors import PolicyError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["default.toml", "cpu-demo.toml"])
def test_shipped_policies_load(name: str) -> None:
    policy = load_policy(REPO / "policies" / name)
    assert policy.preflight.advisories.is_file()
    assert len(policy.sha256) == 64
    assert policy.engine.tool_call_parser == "hermes"


def test_cpu_demo_policy_is_cpu() -> None:
    assert load_policy(REPO / "policies" / "cpu-demo.toml").engine.device == "cpu"


def test_relative_paths_resolve_against_policy_folder(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text('[preflight]\nadvisories = "adv.json"\n'
                                     '[model]\npublic_key = "k.pub"\n')
    policy = load_policy(tmp_path / "p.toml")
    assert policy.preflight.advisories == tmp_path.resolve() / "adv.json"
    assert policy.model.public_key == tmp_path.resolve() / "k.pub"


@pytest.mark.parametrize("body, field", [
    ("[engine]\ntrust_remote_code = true\n", "engine.trust_remote_code"),
    ("[engine]\ndevice = \"tpu\"\n", "engine.device"),
    ("[engine]\nchat_template = \"../evil.jinja\"\n", "engine.chat_template"),
    ("[gateway]\nport = 70000\n", "gateway.port"),
    ("schema_version = 2\n", "schema_version"),
    ("sha256 = \"x\"\n", "sha256"),
])
def test_invalid_policy_names_the_field(tmp_path: Path, body: str, field: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(body)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert field in (info.value.where or "")
    assert info.value.code == "policy_invalid"


def test_unparseable_and_missing_policy(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[engine\n")
    with pytest.raises(PolicyError, match="not valid TOML"):
        load_policy(bad)
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.toml")
