"""String ``format``s: every format the gateway calls enforced is really checked (issue 34).

Found while adding regeneration: the gateway accepted ``date-time``, ``time``, ``duration``,
``hostname``, ``uri``, ``uri-reference`` and ``uri-template`` as enforced, but with plain
``jsonschema`` installed its format checker has no checker for them, so an engine answer
``{"when": "not a date"}`` for a ``format: date-time`` field passed as valid. The checkers come
with jsonschema's ``format-nongpl`` extra (a dependency now); a format whose checker is missing
from an install is refused at request time (fail closed), never accepted unchecked.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from gw_fake_engine import FakeEngine, Reply, completion, tool_message
from gw_helpers import AUTH, WEATHER_TOOL, chat_body
from packaging.requirements import Requirement

from appliance.gateway.schema.subset import (
    FORMAT_CHECKER,
    WANTED_FORMATS,
    SchemaProblem,
    check_schema,
    enforced_formats,
)
from appliance.toolbench import checks as toolbench_checks

REPO = Path(__file__).resolve().parents[2]

# format -> (a valid value, an obviously invalid value)
TABLE: dict[str, tuple[str, str]] = {
    "email": ("ops@example.com", "not an email"),
    "date": ("2018-02-28", "2018-02-31"),
    "time": ("12:30:00Z", "25:61:00Z"),
    "date-time": ("2024-01-02T03:04:05Z", "not a date"),
    "duration": ("P1DT2H", "1 day"),
    "ipv4": ("192.0.2.1", "256.1.1.1"),
    "ipv6": ("2001:db8::1", "2001:db8::g"),
    "hostname": ("example.com", "not a host name"),
    "uuid": ("123e4567-e89b-12d3-a456-426614174000", "not-a-uuid"),
    "uri": ("https://example.com/a?b=c", "not a uri"),
    "uri-reference": ("/a/b?c=d", "a b"),
    "uri-template": ("https://example.com/{id}", "https://example.com/{id"),
    "json-pointer": ("/a/b", "a/b"),
    "relative-json-pointer": ("0/a", "/a"),
}


def _schema(fmt: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"v": {"type": "string", "format": fmt}},
            "required": ["v"], "additionalProperties": False}


def test_every_wanted_format_is_enforced_in_this_install() -> None:
    # the format-nongpl extra is a dependency: nothing wanted may be missing its checker
    assert enforced_formats() == WANTED_FORMATS == frozenset(TABLE)


@pytest.mark.parametrize("fmt", sorted(TABLE))
def test_format_refuses_invalid_and_accepts_valid_as_the_gateway_validates(fmt: str) -> None:
    valid, invalid = TABLE[fmt]
    validator = check_schema(_schema(fmt))  # what the gateway re-validates answers with
    assert list(validator.iter_errors({"v": valid})) == []
    errors = list(validator.iter_errors({"v": invalid}))
    assert [e.validator for e in errors] == ["format"], (fmt, invalid)


@pytest.mark.parametrize("fmt", sorted(TABLE))
def test_toolbench_judges_formats_with_the_same_checker(fmt: str) -> None:
    valid, invalid = TABLE[fmt]
    validator = toolbench_checks._validator(_schema(fmt))
    assert validator.format_checker is FORMAT_CHECKER
    assert validator.is_valid({"v": valid}) and not validator.is_valid({"v": invalid})


def test_a_format_whose_checker_is_missing_is_refused_not_passed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # an install without rfc3339-validator has no date-time checker: refuse the schema
    monkeypatch.delitem(FORMAT_CHECKER.checkers, "date-time")
    assert "date-time" not in enforced_formats()
    with pytest.raises(SchemaProblem) as info:
        check_schema(_schema("date-time"))
    assert info.value.code == "unsupported_schema_feature"
    assert info.value.pointer == "/properties/v/format"
    assert "format 'date-time' is not enforced" in str(info.value)
    check_schema(_schema("date"))  # the others still pass


def test_a_format_whose_checker_is_missing_is_400_over_http(
        monkeypatch: pytest.MonkeyPatch, client: httpx.Client, engine: FakeEngine) -> None:
    monkeypatch.delitem(FORMAT_CHECKER.checkers, "uri-template")
    rf = {"type": "json_schema", "json_schema": {"name": "t", "schema": _schema("uri-template")}}
    r = client.post("/v1/chat/completions", headers=AUTH, json=chat_body(response_format=rf))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "unsupported_schema_feature"
    assert err["param"].endswith("/properties/v/format") and "uri-template" in err["message"]
    assert engine.calls == []


_PLAIN = """
import sys
for lib in ("rfc3339_validator", "isoduration", "fqdn", "rfc3986_validator", "uri_template",
            "rfc3987", "rfc3987_syntax", "webcolors", "jsonpointer"):
    sys.modules[lib] = None  # as if jsonschema were installed without its format extra
from appliance.gateway.schema.subset import SchemaProblem, check_schema, enforced_formats
print(sorted(enforced_formats()))
try:
    check_schema({"type": "object", "properties": {"w": {"type": "string",
                                                          "format": "date-time"}}})
except SchemaProblem as exc:
    print(exc.code, exc.pointer)
"""


def test_plain_jsonschema_without_the_extra_refuses_the_unchecked_formats() -> None:
    out = subprocess.run([sys.executable, "-c", _PLAIN], capture_output=True, text=True,
                         check=True, cwd=REPO, timeout=60).stdout.splitlines()
    assert out == ["['date', 'email', 'ipv4', 'ipv6', 'uuid']",
                   "unsupported_schema_feature /properties/w/format"]


WHEN = {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}},
        "required": ["when"], "additionalProperties": False}


def test_not_a_date_for_date_time_is_refused_end_to_end(
        client: httpx.Client, engine: FakeEngine) -> None:
    # passed as valid before the checkers were installed (plain jsonschema has none)
    rf = {"type": "json_schema", "json_schema": {"name": "meeting", "schema": WHEN}}
    engine.reply = Reply(body=completion({"content": '{"when": "not a date"}'}))
    r = client.post("/v1/chat/completions", headers=AUTH, json=chat_body(response_format=rf))
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_structured_output" and "/when" in error["message"]

    engine.reply = Reply(body=completion({"content": '{"when": "2024-01-02T03:04:05Z"}'}))
    r = client.post("/v1/chat/completions", headers=AUTH, json=chat_body(response_format=rf))
    assert r.status_code == 200, r.text
    assert json.loads(r.json()["choices"][0]["message"]["content"]) == {
        "when": "2024-01-02T03:04:05Z"}


def test_not_a_date_in_tool_arguments_is_an_invalid_call(
        client: httpx.Client, engine: FakeEngine) -> None:
    tool = json.loads(json.dumps(WEATHER_TOOL))
    tool["function"]["parameters"] = WHEN
    engine.reply = Reply(body=completion(
        tool_message(("c1", "get_weather", '{"when": "not a date"}')), "tool_calls"))
    r = client.post("/v1/chat/completions", headers=AUTH,
                    json=chat_body(tools=[tool], tool_choice="required"))
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "invalid_tool_call"


def _locked() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements-gpu.lock").read_text().splitlines():
        m = re.match(r"^([a-z0-9-]+)==(\S+) --hash=sha256:[0-9a-f]{64}\b", line)
        if m:
            pins[m.group(1)] = m.group(2)
    return pins


def test_the_gpu_lock_pins_every_format_checker_library() -> None:
    # the GPU image installs the lock with --no-deps: a checker library missing there would
    # make the gateway refuse that format (fail closed, but a regression for users)
    pins = _locked()
    extra = [Requirement(r) for r in importlib.metadata.requires("jsonschema") or []]
    wanted = {re.sub(r"[-_.]+", "-", r.name).lower() for r in extra
              if r.marker is not None and r.marker.evaluate({"extra": "format-nongpl"})
              and not r.marker.evaluate({"extra": ""})}
    assert {"rfc3339-validator", "isoduration", "fqdn", "uri-template"} <= wanted
    assert wanted <= set(pins), sorted(wanted - set(pins))
    deps = {"arrow", "lark", "python-dateutil", "six", "tzdata"}  # of isoduration etc.
    assert deps <= set(pins), sorted(deps - set(pins))
