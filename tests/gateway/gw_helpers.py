"""Shared constants and helpers for the gateway tests."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from gw_fake_engine import MODEL, FakeEngine

from appliance.config.auth import AuthPolicy, OidcPolicy
from appliance.config.keys import KeyLimits
from appliance.gateway import GatewaySettings

KEY = "sk-test-gateway-key-0001"
OTHER_KEY = "sk-test-gateway-key-0002"
AUTH = {"Authorization": f"Bearer {KEY}"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"},
                           "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def chat_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    body.update(extra)
    return body


def sse_payloads(text: str) -> list[str]:
    """``data:`` payloads of an SSE body, in order (``[DONE]`` included)."""
    out = []
    for event in text.split("\n\n"):
        lines = [ln[5:].lstrip(" ") for ln in event.split("\n") if ln.startswith("data:")]
        if lines:
            out.append("\n".join(lines))
    return out


def sse_json(text: str) -> tuple[list[dict[str, Any]], bool]:
    """(parsed JSON events, ended with [DONE] as the last event)."""
    payloads = sse_payloads(text)
    done = bool(payloads) and payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads if p != "[DONE]"], done


def make_settings(engine: FakeEngine, **overrides: Any) -> GatewaySettings:
    values: dict[str, Any] = {
        "upstream_url": engine.url, "served_model_name": MODEL, "api_keys": [KEY, OTHER_KEY],
        "tools_enabled": True, "vocab_size": 32000, "request_timeout_s": 10.0,
    }
    values.update(overrides)
    return GatewaySettings(**values)


class GroupIssuer:
    """A test OIDC issuer: an ES256 key (``kid`` "k"), its JWKS file in ``folder``,
    issuer ``https://idp.test``, audience ``a``. :meth:`policy` maps groups to limits;
    :meth:`token` is a token for subject ``u1`` in one group, valid 60 s."""

    def __init__(self, folder: Path) -> None:
        import jwt
        from cryptography.hazmat.primitives.asymmetric import ec

        self.key = ec.generate_private_key(ec.SECP256R1())
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = folder / "jwks.json"
        self.jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k"}]}))

    def policy(self, groups: dict[str, KeyLimits]) -> AuthPolicy:
        return AuthPolicy(oidc=OidcPolicy(issuer="https://idp.test", audience="a",
                                          jwks_file=self.jwks), groups=groups)

    def token(self, group: str) -> str:
        import jwt

        return jwt.encode({"iss": "https://idp.test", "aud": "a", "sub": "u1",
                           "groups": [group], "exp": int(time.time()) + 60}, self.key,
                          algorithm="ES256", headers={"kid": "k"})
