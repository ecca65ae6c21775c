"""The gateway's audit records (issue 23, docs/audit.md): who, which model, which tools,
sizes, token counts, verdicts, never the prompt unless ``[audit] include_prompts``; the file
is chained and signed, rotated on SIGHUP without breaking the chain, and verifies."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from gw_fake_engine import MODEL, FakeEngine, Reply, completion
from gw_helpers import AUTH, WEATHER_TOOL, chat_body

from appliance.cli import main
from appliance.config.audit import AuditPolicy
from appliance.gateway import GatewayHandle
from appliance.signing import keygen

SECRET_PROMPT = "the merger closes on friday"


def _policy(tmp_path: Path, **extra: object) -> tuple[AuditPolicy, Path]:
    keygen(tmp_path / "audit.key", tmp_path / "audit.pub", "p256", None)
    return AuditPolicy(signing_key=tmp_path / "audit.key", checkpoint_every=2,
                       **extra), tmp_path / "audit.pub"


def _records(*paths: Path) -> list[dict[str, object]]:
    return [json.loads(x) for p in paths for x in p.read_text().splitlines()]


def _ask(gw: GatewayHandle) -> None:
    with httpx.Client(base_url=gw.url, headers=AUTH, timeout=10) as c:
        body = chat_body(tools=[WEATHER_TOOL], tool_choice="required",
                         messages=[{"role": "user", "content": SECRET_PROMPT}])
        assert c.post("/v1/chat/completions", json=body).status_code == 200


def _tool_reply(engine: FakeEngine) -> None:
    engine.reply = Reply(body=completion({"content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        "tool_calls"))


def test_records_say_who_what_and_how_much_never_the_prompt_and_verify(
        make_gateway: Callable[..., GatewayHandle], engine: FakeEngine,
        tmp_path: Path) -> None:
    policy, pub = _policy(tmp_path)
    log = tmp_path / "audit.jsonl"
    gw = make_gateway(audit_log=log, audit=policy)
    _tool_reply(engine)
    _ask(gw)
    _ask(gw)
    log.rename(tmp_path / "audit.jsonl.1")  # logrotate, then SIGHUP
    gw.state.reload_threadsafe()
    time.sleep(0.2)
    _ask(gw)
    gw.stop()
    old, new = tmp_path / "audit.jsonl.1", log
    requests = [r for r in _records(old, new) if "request_id" in r]
    assert len(requests) == 3
    first = requests[0]
    assert first["model"] == MODEL and first["status"] == 200
    assert first["tools"] == ["get_weather"] and first["tool_calls_valid"] == 1
    assert first["input_tokens"] == 10 and first["output_tokens"] == 5
    assert isinstance(first["request_bytes"], int) and first["request_bytes"] > 100
    assert isinstance(first["response_bytes"], int) and first["response_bytes"] > 100
    assert "messages" not in first
    assert SECRET_PROMPT not in old.read_text() + new.read_text()
    assert main(["audit", "verify", str(old), str(new), "--public-key", str(pub)]) == 0
    # an edit anywhere is found
    lines = old.read_text().splitlines()
    lines[0] = lines[0].replace('"status":200', '"status":201')
    old.write_text("\n".join(lines) + "\n")
    assert main(["audit", "verify", str(old), str(new), "--public-key", str(pub)]) == 1


def test_prompts_are_recorded_only_when_the_policy_says_so(
        make_gateway: Callable[..., GatewayHandle], engine: FakeEngine,
        tmp_path: Path) -> None:
    policy, pub = _policy(tmp_path, include_prompts=True)
    log = tmp_path / "audit.jsonl"
    gw = make_gateway(audit_log=log, audit=policy)
    _tool_reply(engine)
    _ask(gw)
    gw.stop()
    request = next(r for r in _records(log) if "request_id" in r)
    assert request["messages"] == [{"role": "user", "content": SECRET_PROMPT}]
    assert main(["audit", "verify", str(log), "--public-key", str(pub)]) == 0


def test_an_idle_gateway_signs_its_last_records(make_gateway: Callable[..., GatewayHandle],
                                                engine: FakeEngine, tmp_path: Path) -> None:
    policy, pub = _policy(tmp_path)
    policy = policy.model_copy(update={"checkpoint_every": 1000, "checkpoint_interval_s": 0.2})
    log = tmp_path / "audit.jsonl"
    gw = make_gateway(audit_log=log, audit=policy)
    _tool_reply(engine)
    _ask(gw)
    deadline = time.monotonic() + 5
    while not (_records(log) and _records(log)[-1].get("event") == "audit_checkpoint"):
        # signed with no further traffic and no shutdown
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert main(["audit", "verify", str(log), "--public-key", str(pub)]) == 0
    gw.stop()
