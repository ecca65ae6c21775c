"""Built-in suite data: tool-calling tasks with known answers.

A suite is a list of case dicts in the shape ``appliance.toolbench.suite.load_cases`` reads
(the same shape a ``--suite FILE`` JSON holds, ``{"name": ..., "cases": [...]}``):

- ``kind: "tool"``  one request; ``tools``, ``tool_choice`` (``"required"``, ``"auto"`` or
  ``{"type": "function", "function": {"name": ...}}``), optional ``parallel_tool_calls``;
  ``expect.calls`` lists the known calls (name + a subset of the arguments) or
  ``expect.no_call`` says that the right answer is text;
- ``kind: "json"``  one request with ``response_format`` ``json_schema``; ``expect.content``
  is a subset of the known answer;
- ``kind: "chain"`` an agent loop of ``steps`` calls to one tool: each tool result is fed back
  (``role: tool``) and names the next counter value, which the next call must pass. Only the
  last ``window`` exchanges stay in the history, so a 50-step chain fits a 2k context.

Schemas stay inside what xgrammar enforces (``appliance.gateway.schema.subset``), and every
string has a ``maxLength`` so a constrained generation always terminates (a small model
under an xgrammar grammar can loop inside an unbounded string until ``max_tokens``).

Suites: ``smoke`` (one case of each kind and a 10-step chain: 16 constrained requests per
copy), ``standard`` (all cases, chains of 10 and 50: 68 per copy), ``formats``
(``data/formats.json``: 12 one-request cases whose dates, ranges and patterns the grammar
leaves to the gateway's validation; issue 34).
A chain's tool must take an integer ``step`` (its known answer, ``checks.judge``).
"""

from __future__ import annotations

import json
from typing import Any

CITY = {"type": "string", "minLength": 1, "maxLength": 40}

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city, in Celsius (c) or Fahrenheit (f).",
        "parameters": {
            "type": "object",
            "properties": {"city": CITY, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": CITY},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
THERMOSTAT: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "set_thermostat",
        "description": "Set the target temperature of a room, 10 to 30 degrees Celsius.",
        "parameters": {
            "type": "object",
            "properties": {
                "room": {"type": "string", "enum": ["kitchen", "bedroom", "office"]},
                "celsius": {"type": "integer", "minimum": 10, "maximum": 30},
            },
            "required": ["room", "celsius"],
            "additionalProperties": False,
        },
    },
}
EVENT: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "create_event",
        "description": "Create a calendar event.",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": 40},
                "when": {
                    "type": "object",
                    "properties": {
                        "month": {"type": "string", "enum": [
                            "jan", "feb", "mar", "apr", "may", "jun",
                            "jul", "aug", "sep", "oct", "nov", "dec"]},
                        "day": {"type": "integer", "minimum": 1, "maximum": 31},
                    },
                    "required": ["month", "day"],
                    "additionalProperties": False,
                },
                "attendees": {"type": "array", "items": CITY, "minItems": 1, "maxItems": 4},
                "location": {"type": "string", "maxLength": 40},
            },
            "required": ["title", "when", "attendees"],
            "additionalProperties": False,
        },
    },
}
SEARCH: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search_products",
        "description": "Search the shop. max_price (euros) and tags are optional filters.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 40},
                "max_price": {"type": "number", "minimum": 0, "maximum": 10000},
                "tags": {"type": "array", "maxItems": 3,
                         "items": {"type": "string", "enum": ["new", "sale", "eco"]}},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}
ADVANCE: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "advance",
        "description": "Advance the job to the given step number.",
        "parameters": {
            "type": "object",
            "properties": {"step": {"type": "integer", "minimum": 0, "maximum": 1000}},
            "required": ["step"],
            "additionalProperties": False,
        },
    },
}
PERSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "maxLength": 40},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


WEATHER_ENUM = {
    "id": "weather_enum_required", "kind": "tool", "tools": [WEATHER, TIME],
    "tool_choice": "required", "max_tokens": 96,
    "messages": _user("What is the weather in Paris right now, in Celsius?"),
    "expect": {"calls": [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}]},
}
THERMOSTAT_RANGE = {
    "id": "thermostat_range_named", "kind": "tool", "tools": [THERMOSTAT, WEATHER],
    "tool_choice": _named("set_thermostat"), "max_tokens": 96,
    "messages": _user("Set the bedroom to 21 degrees."),
    "expect": {"calls": [{"name": "set_thermostat",
                          "arguments": {"room": "bedroom", "celsius": 21}}]},
}
EVENT_NESTED = {
    "id": "event_nested_array", "kind": "tool", "tools": [EVENT],
    "tool_choice": "required", "max_tokens": 160,
    "messages": _user("Create an event titled Standup on March 3 with Ana and Bo."),
    "expect": {"calls": [{"name": "create_event",
                          "arguments": {"when": {"month": "mar", "day": 3}}}]},
}
SEARCH_OPTIONAL = {
    "id": "search_optional_named", "kind": "tool", "tools": [SEARCH],
    "tool_choice": _named("search_products"), "max_tokens": 96,
    "messages": _user("Find running shoes under 80 euros."),
    "expect": {"calls": [{"name": "search_products", "arguments": {"max_price": 80}}]},
}
TIME_AUTO = {
    "id": "time_auto", "kind": "tool", "tools": [WEATHER, TIME],
    "tool_choice": "auto", "max_tokens": 96,
    "messages": _user("What time is it in Tokyo? Use a tool."),
    "expect": {"calls": [{"name": "get_time", "arguments": {"city": "Tokyo"}}]},
}
NO_CALL_AUTO = {
    "id": "greeting_auto_no_call", "kind": "tool", "tools": [WEATHER, TIME],
    "tool_choice": "auto", "max_tokens": 48,
    "messages": _user("Just say hello to me. Do not call any tool."),
    "expect": {"no_call": True},
}
WEATHER_PARALLEL = {
    "id": "weather_parallel", "kind": "tool", "tools": [WEATHER],
    "tool_choice": "required", "parallel_tool_calls": True, "max_tokens": 192,
    "messages": _user("Get the weather in Paris and in Oslo, both in Celsius. "
                      "Make two calls."),
    "expect": {"calls": [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "get_weather", "arguments": {"city": "Oslo"}},
    ]},
}
PERSON_JSON = {
    "id": "person_json_schema", "kind": "json", "max_tokens": 96,
    "response_format": {"type": "json_schema",
                        "json_schema": {"name": "person", "schema": PERSON_SCHEMA}},
    "messages": _user("Extract the person as JSON: Maria is 34 years old and lives in Lisbon."),
    "expect": {"content": {"name": "Maria", "age": 34}},
}


def _chain(steps: int) -> dict[str, Any]:
    return {
        "id": f"agent_chain_{steps}", "kind": "chain", "tools": [ADVANCE],
        "tool_choice": "required", "steps": steps, "window": 2, "max_tokens": 48,
        "messages": [
            {"role": "system", "content": "You run a job step by step. After each tool "
             "result, call advance with the step number the result asks for."},
            {"role": "user", "content": "Start the job: call advance with step 1."},
        ],
    }


BUILTIN_SUITES: dict[str, list[dict[str, Any]]] = {
    "smoke": [WEATHER_ENUM, THERMOSTAT_RANGE, EVENT_NESTED, TIME_AUTO, WEATHER_PARALLEL,
              PERSON_JSON, _chain(10)],
    "standard": [WEATHER_ENUM, THERMOSTAT_RANGE, EVENT_NESTED, SEARCH_OPTIONAL, TIME_AUTO,
                 NO_CALL_AUTO, WEATHER_PARALLEL, PERSON_JSON, _chain(10), _chain(50)],
}


def _data_suite(name: str) -> list[dict[str, Any]]:
    """The cases of ``data/<name>.json`` (``{"name", "description", "cases"}``) beside this
    module."""
    from importlib import resources

    text = resources.files(__package__).joinpath("data", f"{name}.json").read_text("utf-8")
    cases: list[dict[str, Any]] = json.loads(text)["cases"]
    return cases


# ``formats`` (issue 34): schemas whose ``format: date``, ``minimum``/``maximum`` and
# ``pattern`` the grammar leaves to the gateway's validation, with prompts that invite
# impossible values (``2018-02-31``): how many refusals ``[gateway] regenerate_invalid`` saves.
BUILTIN_SUITES["formats"] = _data_suite("formats")
