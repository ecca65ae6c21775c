"""The ``formats`` suite (issue 34): schemas whose formats and ranges the grammar leaves to the
gateway's validation, scored as the gateway validates them."""

from __future__ import annotations

import json
from typing import Any

from appliance.gateway.schema.subset import check_schema
from appliance.toolbench.checks import judge
from appliance.toolbench.suite import Case, load_suite

LEFT_TO_VALIDATION = ("format", "minimum", "maximum", "pattern")


def _schemas(case: Case) -> list[dict[str, Any]]:
    return [case.response_schema] if case.response_schema is not None else \
        list(case.tool_parameters.values())


def test_every_case_is_one_request_the_gateway_accepts_with_a_check_the_grammar_leaves() -> None:
    suite = load_suite("formats")
    assert len(suite.cases) >= 10 and suite.requests_per_repeat == len(suite.cases)
    assert {c.kind for c in suite.cases} == {"json", "tool"}
    for case in suite.cases:
        for schema in _schemas(case):
            check_schema(schema)  # raises SchemaProblem if the gateway would refuse it
            assert any(f'"{k}"' in json.dumps(schema) for k in LEFT_TO_VALIDATION), case.id
    assert any(c.id == "sdk_parse_date_2018_02_31" for c in suite.cases)


def _json_body(content: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}]}


def _tool_body(name: str, arguments: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": name, "arguments": arguments}}]}}]}


def test_the_scorer_checks_formats_as_the_gateway_does() -> None:
    cases = {c.id: c for c in load_suite("formats").cases}
    sdk = cases["sdk_parse_date_2018_02_31"]
    bad = judge(sdk, _json_body('{"due": "2018-02-31"}'), 1)
    assert (bad.valid, bad.reason) == (False, "schema_mismatch")
    assert judge(sdk, _json_body('{"due": "2018-02-28"}'), 1).valid
    control = cases["valid_date_control"]
    right = judge(control, _json_body('{"birthday": "1990-03-03"}'), 1)
    assert right.valid and right.correct
    book = cases["book_feb_30_20_nights"]
    assert not judge(book, _tool_body("book_room", '{"check_in": "2025-02-30", "nights": 2}'),
                     1).valid
    assert not judge(book, _tool_body("book_room", '{"check_in": "2025-03-01", "nights": 20}'),
                     1).valid
    assert judge(book, _tool_body("book_room", '{"check_in": "2025-03-01", "nights": 14}'),
                 1).valid
