"""End to end on the real vLLM CPU engine (issue 23): ``appliance serve`` with ``[auth.oidc]``
(a test IdP's JWKS file), a signed ``[audit]`` log and ``[telemetry]`` to a local OTLP
receiver. A token of a listed group is served through the official ``openai`` SDK with the
group's limits, a wrong-audience token is refused with its own code, the audit log verifies
and names the principal and the engine's token counts, and the trace carries the GenAI
attributes with the real engine's usage."""

from __future__ import annotations

import json
import secrets
import sys
import time
from pathlib import Path

import jwt
import openai
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from appliance.builtin.model import prepare
from appliance.cli import main
from appliance.config.audit import AuditPolicy
from appliance.config.auth import AuthPolicy, OidcPolicy
from appliance.config.keys import KeyLimits
from appliance.config.policy import load_policy
from appliance.config.telemetry import TelemetryPolicy
from appliance.serve import Appliance
from appliance.signing import keygen

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))
from otlp_receiver import OtlpReceiver, attributes  # noqa: E402

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
ISSUER, AUDIENCE = "https://idp.test/realms/corp", "appliance"


def test_sso_audit_and_traces_on_the_real_engine(tmp_path: Path) -> None:
    model = prepare()
    idp = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(idp.public_key()))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "idp1"}]}))
    keygen(tmp_path / "audit.key", tmp_path / "audit.pub", "p256", None)
    receiver = OtlpReceiver().start()
    base = load_policy(REPO / "policies" / "cpu-demo.toml")
    served_name = base.model.served_name
    policy = base.model_copy(update={
        "gateway": base.gateway.model_copy(update={"audit_log": tmp_path / "audit.jsonl"}),
        "auth": AuthPolicy(oidc=OidcPolicy(issuer=ISSUER, audience=AUDIENCE,
                                           jwks_file=tmp_path / "jwks.json"),
                           groups={"eng": KeyLimits(max_tokens=32, models=(served_name,))}),
        "audit": AuditPolicy(signing_key=tmp_path / "audit.key"),
        "telemetry": TelemetryPolicy(otlp_endpoint=receiver.url, schedule_delay_s=0.2)})
    app = Appliance(policy=policy, model_dir=model.model_dir, public_key=model.public_key,
                    api_keys=[secrets.token_urlsafe(24)], host="127.0.0.1", port=0)

    def token(**over: object) -> str:
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "groups": ["eng"],
                  "exp": int(time.time()) + 600, **over}
        return jwt.encode(claims, idp, algorithm="ES256", headers={"kid": "idp1"})

    app.start()
    try:
        url = f"http://127.0.0.1:{app.port}/v1"
        client = openai.OpenAI(base_url=url, api_key=token(), max_retries=0, timeout=300)
        answer = client.chat.completions.create(
            model=served_name, max_tokens=16,
            messages=[{"role": "user", "content": "Say hello."}])
        assert answer.choices[0].message.content
        with pytest.raises(openai.BadRequestError) as capped:  # the group's max_tokens 32
            client.chat.completions.create(model=served_name, max_tokens=64,
                                           messages=[{"role": "user", "content": "hi"}])
        assert capped.value.code == "invalid_parameter"
        wrong = openai.OpenAI(base_url=url, api_key=token(aud="other"), max_retries=0)
        with pytest.raises(openai.AuthenticationError) as refused:
            wrong.models.list()
        assert refused.value.code == "token_wrong_audience"
    finally:
        app.stop()
    spans = receiver.wait_for(5)
    receiver.stop()
    call = next(s for s in spans if s.name == f"chat {served_name}")
    attrs = attributes(call)
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.max_tokens"] == 16
    assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
    log = tmp_path / "audit.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    chat = next(r for r in records if r.get("route") == "/v1/chat/completions"
                and r.get("status") == 200)
    assert chat["key_id"] == "oidc:eng:alice"
    assert chat["input_tokens"] == attrs["gen_ai.usage.input_tokens"]
    assert "Say hello" not in log.read_text()
    assert main(["audit", "verify", str(log), "--public-key",
                 str(tmp_path / "audit.pub")]) == 0
