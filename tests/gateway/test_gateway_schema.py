"""JSON-Schema subset (xgrammar-enforceable keywords) for tools and response_format."""

from __future__ import annotations

import copy

import pytest
from _shared import regex_dfa_blowup_bodies
from gw_helpers import AUTH, WEATHER_TOOL, chat_body

from appliance.gateway.schema.subset import SchemaCache, SchemaProblem, check_schema


def obj(**props):
    return {"type": "object", "properties": props}


ACCEPTED = [
    obj(city={"type": "string"}),
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                               "minItems": 1, "maxItems": 3}},
     "required": ["tags"], "additionalProperties": False},
    obj(when={"type": "string", "format": "date-time"}, mail={"type": "string",
                                                             "format": "email"}),
    obj(zip={"type": "string", "pattern": "^[0-9]{5}$"}),
    obj(n={"type": "integer", "minimum": 0, "exclusiveMaximum": 10}),
    obj(x={"anyOf": [{"type": "string"}, {"type": "null"}]}, y={"oneOf": [{"const": 1},
                                                                          {"enum": [2, 3]}]}),
    obj(p={"allOf": [{"type": "string"}]}),
    {"type": "object", "properties": {"node": {"$ref": "#/$defs/node"}},
     "$defs": {"node": {"type": "object", "properties": {
         "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}},
    {"type": "object", "properties": {"a": {"$ref": "#/definitions/a"}},
     "definitions": {"a": {"type": "string", "title": "A", "description": "d",
                           "default": "x", "examples": ["x"]}}},
    obj(t={"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]}),
    obj(s={"type": ["string", "null"], "maxLength": 10}),
]


@pytest.mark.parametrize("schema", ACCEPTED)
def test_supported_subset_is_accepted_and_compiles(schema):
    validator = check_schema(schema)
    assert validator.is_valid({}) in (True, False)


UNSUPPORTED = [
    (obj(tags={"type": "array", "uniqueItems": True}), "/properties/tags/uniqueItems"),
    (obj(a={"not": {"type": "string"}}), "/properties/a/not"),
    (obj(a={"if": {"type": "string"}, "then": {"minLength": 1}}), "/properties/a/if"),
    ({"type": "object", "dependentRequired": {"a": ["b"]}}, "/dependentRequired"),
    ({"type": "object", "dependentSchemas": {"a": {}}}, "/dependentSchemas"),
    (obj(a={"type": "array", "contains": {"type": "string"}}), "/properties/a/contains"),
    ({"type": "object", "patternProperties": {"^x": {}}}, "/patternProperties"),
    ({"type": "object", "propertyNames": {"pattern": "^a"}}, "/propertyNames"),
    (obj(n={"type": "number", "multipleOf": 2}), "/properties/n/multipleOf"),
    (obj(c={"type": "string", "format": "credit-card"}), "/properties/c/format"),
    (obj(r={"$ref": "https://example.com/schema.json"}), "/properties/r/$ref"),
    (obj(a={"allOf": [{"type": "string"}, {"minLength": 1}]}), "/properties/a/allOf"),
    (obj(z={"type": "string", "pattern": "^[0-9]+$", "maxLength": 5}), "/properties/z"),
    (obj(z={"type": "string", "format": "email", "minLength": 3}), "/properties/z"),
    (obj(z={"type": "string", "pattern": "(?=a)a"}), "/properties/z/pattern"),
    (obj(z={"type": "string", "pattern": "(a)\\1"}), "/properties/z/pattern"),
    (obj(z={"type": "string", "nullable": True}), "/properties/z/nullable"),
    ({"type": "object", "minProperties": 1}, "/minProperties"),
]


@pytest.mark.parametrize("schema,pointer", UNSUPPORTED)
def test_unsupported_features_are_refused_with_pointer(schema, pointer):
    with pytest.raises(SchemaProblem) as info:
        check_schema(schema)
    assert info.value.code == "unsupported_schema_feature"
    assert info.value.pointer == pointer


INVALID = [
    (obj(city={"type": "txt"}), "/properties/city/type"),
    ({"type": ["string", "weird"]}, "/type/1"),
    (obj(zip={"type": "string", "pattern": "([0-9]{5}"}), "/properties/zip/pattern"),
    (obj(note="free text"), "/properties/note"),
    (obj(r={"$ref": "#/$defs/missing"}), "/properties/r/$ref"),
    ({"type": "object", "required": "city"}, "/required"),
    ({"type": "object", "properties": {}, "required": ["ghost"]}, "/required/0"),
    (obj(n={"type": "integer", "minimum": 5, "maximum": 1}), "/properties/n/minimum"),
    (obj(n={"type": "string", "minLength": -1}), "/properties/n/minLength"),
    (obj(e={"enum": []}), "/properties/e/enum"),
    (obj(a={"anyOf": []}), "/properties/a/anyOf"),
    ([1, 2], ""),
]


@pytest.mark.parametrize("schema,pointer", INVALID)
def test_invalid_schemas_are_refused_with_pointer(schema, pointer):
    with pytest.raises(SchemaProblem) as info:
        check_schema(schema)
    assert info.value.code == "invalid_schema"
    assert info.value.pointer == pointer


def test_depth_and_size_limits():
    deep: dict = {"type": "string"}
    for _ in range(200):
        deep = {"type": "array", "items": deep}
    with pytest.raises(SchemaProblem) as info:
        check_schema(deep, max_depth=32)
    assert info.value.code == "invalid_schema"
    wide = obj(**{f"p{i}": {"type": "string"} for i in range(100)})
    with pytest.raises(SchemaProblem):
        check_schema(wide, max_nodes=50)


def test_cache_returns_same_validator_and_caches_refusals():
    cache = SchemaCache()
    a = cache.get(obj(x={"type": "string"}))
    assert cache.get({"properties": {"x": {"type": "string"}}, "type": "object"}) is a
    for _ in range(2):
        with pytest.raises(SchemaProblem) as info:
            cache.get(obj(x={"type": "array", "uniqueItems": True}))
        assert info.value.pointer == "/properties/x/uniqueItems"


def _tool_with(params):
    tool = copy.deepcopy(WEATHER_TOOL)
    tool["function"]["parameters"] = params
    return tool


def test_unique_items_in_tool_schema_is_400_over_http(client, engine):
    params = obj(days={"type": "array", "items": {"type": "string"}, "uniqueItems": True})
    r = client.post("/v1/chat/completions", headers=AUTH,
                    json=chat_body(tools=[_tool_with(params)], tool_choice="required"))
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "unsupported_schema_feature"
    assert err["param"] == "/tools/0/function/parameters/properties/days/uniqueItems"
    assert engine.calls == []


def test_tool_parameters_must_be_object_schema(client, engine):
    r = client.post("/v1/chat/completions", headers=AUTH,
                    json=chat_body(tools=[_tool_with({"type": "string"})]))
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_schema"
    assert engine.calls == []


def test_invalid_tool_schema_crash(client, engine):
    """Public bug invalid-tool-schema-crash (GHSA-vrq3-r879-7m65, CVE-2025-48942)."""
    bad_tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object",
        "properties": {"city": {"type": "txt"},
                       "zip": {"type": "string", "pattern": "([0-9]{5}"},
                       "note": "free text"},
        "required": ["city"]}}}
    q = [{"role": "user", "content": "What is the weather in Oslo?"}]
    requests = [
        (chat_body(messages=q, tool_choice="required", tools=[bad_tool]),
         "/tools/0/function/parameters/properties/city/type"),
        (chat_body(messages=q, response_format={"type": "json_schema", "json_schema": {
            "name": "car", "schema": {"type": "object", "properties": {
                "brand": {"type": "string"}, "extra": "oops"}, "required": ["brand"]}}}),
         "/response_format/json_schema/schema/properties/extra"),
        (chat_body(messages=q, response_format={"type": "json_schema", "json_schema": {
            "name": "t", "schema": {"type": ["string", "weird"]}}}),
         "/response_format/json_schema/schema/type/1"),
    ]
    for body, pointer in requests:
        r = client.post("/v1/chat/completions", headers=AUTH, json=body)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == "invalid_schema"
        assert err["param"] == pointer
        assert pointer in err["message"]
    # each bad node on its own is caught too (the whole kind, not the first node)
    for prop, pointer_tail in (({"type": "string", "pattern": "([0-9]{5}"}, "pattern"),
                               ("free text", None)):
        params = {"type": "object", "properties": {"zip": prop}}
        r = client.post("/v1/chat/completions", headers=AUTH,
                        json=chat_body(tools=[_tool_with(params)]))
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_schema"
        expected = "/tools/0/function/parameters/properties/zip"
        assert r.json()["error"]["param"] == (f"{expected}/{pointer_tail}" if pointer_tail
                                              else expected)
    assert engine.calls == []
    assert client.get("/health/ready").status_code == 200


def test_regex_dfa_blowup_refused_before_the_engine(client, engine):
    """Public bug regex-dfa-blowup (GHSA-rwxx-mrjm-wc2m): exponential-automaton patterns
    get 400 schema_too_complex from the gateway; the engine never sees them."""
    pointers = ["/response_format/json_schema/schema/properties/s/pattern"] * 2 + [
        "/tools/0/function/parameters/properties/s/pattern"]
    bodies = regex_dfa_blowup_bodies()
    for body, pointer in zip(bodies, pointers, strict=True):
        r = client.post("/v1/chat/completions", headers=AUTH, json=body)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == pointer
        assert err["code"] in ("schema_too_complex", "invalid_schema"), err
    assert engine.calls == []
    ordinary = dict(bodies[0])
    ordinary["response_format"] = {"type": "json_schema", "json_schema": {"name": "r", "schema": {
        "type": "object", "properties": {"s": {"type": "string",
                                               "pattern": "^[a-z][a-z0-9_-]{0,15}$"}},
        "required": ["s"]}}}
    r = client.post("/v1/chat/completions", headers=AUTH, json=ordinary)
    assert r.status_code != 400, r.text  # an ordinary pattern reaches the engine
    assert len(engine.calls) == 1


def test_schema_problem_is_a_diagnostic_with_the_pointer() -> None:
    """SchemaProblem carries the shared Diagnostic (issue 11: one error type)."""

    problem = SchemaProblem("unsupported_schema_feature", "/properties/a/not", "no 'not'")
    assert problem.diagnostic.to_json() == {
        "code": "unsupported_schema_feature", "message": "no 'not'",
        "at": "/properties/a/not", "fix": None}
    assert SchemaProblem("invalid_schema", "", "root").diagnostic.at is None
    with pytest.raises(ValueError):
        SchemaProblem("not_a_gateway_code", "", "x")


def test_one_walker_for_both_schema_checks(monkeypatch):
    """Issue 11: the subset check and the grammar pre-limits walked JSON Schema two ways;
    both now go through ``schema.walk.walk`` with one keyword vocabulary."""
    from appliance.gateway.schema import check_schema_complexity, walk

    seen = []
    real = walk.walk

    def spy(schema, visit):
        seen.append(visit)
        real(schema, visit)

    monkeypatch.setattr(walk, "walk", spy)
    schema = obj(a={"type": "string", "pattern": "^a$"})
    check_schema(schema)
    check_schema_complexity(schema)
    assert len(seen) == 2


def test_walker_roles_and_order():
    from appliance.gateway.schema import walk

    schema = {"properties": {"p": {"items": [{"enum": [{"type": 1}]}], "not": True}},
              "patternProperties": {"^x": {}}, "anyOf": [{"const": {"pattern": "x"}}],
              "title": {"type": "t"}}
    visits = []

    def visit(value, path, role):
        visits.append((walk.pointer(path), role))
        return True

    walk.walk(schema, visit)
    S, M, L, P, D = (walk.SCHEMA, walk.SCHEMA_MAP, walk.SCHEMA_LIST, walk.PATTERN_MAP,
                     walk.DATA)
    assert visits == [
        ("", S), ("/properties", M), ("/properties/p", S), ("/properties/p/items", L),
        ("/properties/p/items/0", S), ("/properties/p/items/0/enum", D),
        ("/properties/p/items/0/enum/0", D), ("/properties/p/items/0/enum/0/type", D),
        ("/properties/p/not", S), ("/patternProperties", P), ("/patternProperties/^x", S),
        ("/anyOf", L), ("/anyOf/0", S), ("/anyOf/0/const", D), ("/anyOf/0/const/pattern", D),
        ("/title", D), ("/title/type", D)]
    pruned = []
    walk.walk(schema, lambda v, p, r: pruned.append(p) or r != walk.SCHEMA_MAP)
    assert ("properties", "p") not in pruned and ("anyOf", "0") in pruned
