"""Per-key and per-group model allow-lists (issue 23): a key or an OIDC group whose
``models`` leaves out the served model is refused 403 ``model_not_allowed`` naming the model
(before the engine is asked and before its tpm is charged) and sees an empty ``/v1/models``;
``appliance keys add --models`` writes the list."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from gw_fake_engine import MODEL, FakeEngine
from gw_helpers import GroupIssuer, chat_body

from appliance.cli import main
from appliance.config.keys import KeyLimits, add_key, load_keys
from appliance.gateway import GatewayHandle


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_keys_see_and_use_only_their_models(make_gateway: Callable[..., GatewayHandle],
                                            engine: FakeEngine, tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    barred = add_key(path, "barred", KeyLimits(models=("code-model",)))
    listed = add_key(path, "listed", KeyLimits(models=(MODEL, "code-model")))
    everyone = add_key(path, "everyone", KeyLimits())
    gw = make_gateway(keys_file=path)
    with httpx.Client(base_url=gw.url, timeout=10) as c:
        r = c.post("/v1/chat/completions", json=chat_body(), headers=_bearer(barred))
        assert r.status_code == 403
        err = r.json()["error"]
        assert err["code"] == "model_not_allowed" and err["param"] == "model"
        assert repr(MODEL) in err["message"] and "'barred'" in err["message"]
        assert err["type"] == "permission_error"
        assert not engine.chat_calls
        assert c.get("/v1/models", headers=_bearer(barred)).json()["data"] == []
        assert c.get(f"/v1/models/{MODEL}", headers=_bearer(barred)).status_code == 403
        for key in (listed, everyone):
            assert c.post("/v1/chat/completions", json=chat_body(),
                          headers=_bearer(key)).status_code == 200
            ids = [m["id"] for m in c.get("/v1/models", headers=_bearer(key)).json()["data"]]
            assert ids == [MODEL]
        # an unknown model is still 404, whatever the list says
        r = c.post("/v1/chat/completions", json=chat_body(model="nope"),
                   headers=_bearer(listed))
        assert r.status_code == 404


def test_oidc_groups_have_model_allow_lists(make_gateway: Callable[..., GatewayHandle],
                                            tmp_path: Path) -> None:
    idp = GroupIssuer(tmp_path)
    gw = make_gateway(auth=idp.policy({"interns": KeyLimits(models=("small-model",)),
                                       "staff": KeyLimits(models=(MODEL,))}))
    token = idp.token

    intern = httpx.post(gw.url + "/v1/chat/completions", json=chat_body(), timeout=10,
                        headers=_bearer(token("interns")))
    assert intern.status_code == 403
    assert intern.json()["error"]["code"] == "model_not_allowed"
    assert "oidc:interns:u1" in intern.json()["error"]["message"]
    staff = httpx.post(gw.url + "/v1/chat/completions", json=chat_body(), timeout=10,
                       headers=_bearer(token("staff")))
    assert staff.status_code == 200


def test_keys_add_writes_the_model_list(tmp_path: Path, capsys: object) -> None:
    path = tmp_path / "keys.json"
    assert main(["keys", "add", "--file", str(path), "--id", "coder",
                 "--models", "code-model, appliance-model"]) == 0
    record = load_keys(path).keys[0]
    assert record.limits.models == ("code-model", "appliance-model")
    assert main(["keys", "list", "--file", str(path)]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "models=code-model,appliance-model" in out
