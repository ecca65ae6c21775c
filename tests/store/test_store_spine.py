"""`serve --model NAME`: the spine's check step takes the store folder itself (no staging
copy) and scans it there; the engine is not started here (tests/e2e covers the engine)."""

from __future__ import annotations

from pathlib import Path

from store_helpers import Signer, make_model

from appliance.config.policy import load_policy
from appliance.serve import Appliance
from appliance.signing import sign
from appliance.store import Store, import_model, is_store_ref

REPO = Path(__file__).resolve().parents[2]


def test_check_serves_store_folder_in_place(tmp_path: Path, signer: Signer) -> None:
    src = make_model(tmp_path, "tiny")
    (src / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    sign(src, signer.private)
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text((REPO / "policies" / "cpu-demo.toml").read_text().replace(
        'advisories = "advisories.json"', f'advisories = "{REPO / "policies" / "advisories.json"}"')
        + f'\n[store]\nroot = "{tmp_path / "store"}"\nallow_owner_serve = true\n')
    policy = load_policy(policy_file)
    done = import_model(Store(policy.store.root), src, signer.trust)
    app = Appliance(policy=policy, model_dir=Path("unused"), public_key=signer.trust,
                    api_keys=["k" * 32], store_ref="tiny")
    try:
        served = app.check()[0].staged
        assert served == done.path / "model"
        assert app.runtime_dir is not None and not (app.runtime_dir / "model").exists()
    finally:
        app.stop()
    assert served.is_dir()  # stop() never touches the store


def test_store_ref_or_folder() -> None:
    assert is_store_ref("qwen3-8b") and is_store_ref("m@0123abcd")
    assert not is_store_ref("./model") and not is_store_ref("/srv/models/m")
