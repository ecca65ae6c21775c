"""Validation of what the engine returns, before the client sees it.

No vLLM tool parser re-validates generated arguments against the tool's schema
(vLLM 0.33 ``parser/abstract_parser.py`` passes the generated text through as
``arguments``), grammars cannot force completion when ``max_tokens`` cuts a generation
(vllm-project/vllm#8350), and ``parallel_tool_calls=false`` is honoured only where a grammar
applies (sgl-project/sglang PR#37157). So every returned tool call is checked here:

* the engine may only call tools when tools were offered and ``tool_choice`` is not
  ``"none"``; with ``parallel_tool_calls=false`` at most one call; with a named
  ``tool_choice`` only that function; with ``required``/named at least one call;
* each call has a non-empty unique ``id`` and the name of an offered function;
* ``arguments`` is strict JSON (no duplicate keys, no NaN), an object, and valid against
  the function's ``parameters`` schema (``jsonschema``).

Failures are ``502 invalid_tool_call`` with ``reason`` one of ``calls_not_allowed``,
``parallel_disabled``, ``missing_id``, ``duplicate_id``, ``unknown_function``,
``wrong_function``, ``missing_call``, ``bad_json``, ``schema_mismatch``, ``malformed``,
``too_large``.

Truncation is answered as OpenAI answers it, 200 with ``finish_reason: "length"``, so each
SDK raises its own exception (openai ``parse()`` / ``.stream()`` and LangChain's
``with_structured_output`` json_schema / json_mode, which use ``parse()``:
``LengthFinishReasonError``; litellm returns the answer as is), and a cut tool call is never
returned as a call: a ``length`` choice that holds tool calls, or that had to
call a tool (``tool_choice`` required / named), is answered as
``{"role": "assistant", "content": null, ...}`` with no ``tool_calls`` (vLLM leaves the
partial ``<tool_call>`` markup in ``content``; it is withheld as well). A cut
``response_format`` answer keeps its partial ``content``; ``finish_reason: "length"`` says it
is incomplete and it is never validated as a result. Plain text cut by ``length`` is
unchanged. The withheld calls count as invalid in the metrics and audit log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .. import fastjson
from ..errors import GatewayError
from .request_checks import ChatRequest, loads_strict, tool_call_parts


@dataclass(slots=True)
class CallParts:
    """One tool call as returned (non-stream) or reassembled from deltas (stream)."""

    index: int
    id: str | None
    name: str | None
    arguments: str


def invalid_call(reason: str, message: str) -> GatewayError:
    """``502 invalid_tool_call`` with ``reason``."""
    return GatewayError.of("invalid_tool_call", message, reason=reason)


def cuts_call(req: ChatRequest, has_calls: bool) -> bool:
    """True when a ``finish_reason="length"`` choice holds (or had to hold) a tool call,
    which must then be withheld."""
    return has_calls or req.forced_tool


def check_calls(calls: list[CallParts], req: ChatRequest, max_args: int,
                choice: int = 0) -> int:
    """Validate the calls of choice ``choice`` (in index order); return how many were valid
    (all). Raises :class:`GatewayError` 502 ``invalid_tool_call`` on the first problem.
    """
    if not calls:
        if req.forced_tool:
            raise invalid_call("missing_call", "tool_choice requires a tool call but the "
                               "engine returned none")
        return 0
    if not req.tools or req.tool_choice == "none":
        raise invalid_call("calls_not_allowed", "the engine returned a tool call although "
                           "no tool may be called (no tools or tool_choice \"none\")")
    if not req.parallel_tool_calls and len(calls) > 1:
        raise invalid_call("parallel_disabled", f"the engine returned {len(calls)} tool calls "
                           "but parallel_tool_calls is false")
    seen: set[str] = set()
    for call in calls:
        where = f"choice {choice} tool call {call.index}" if req.n > 1 else \
            f"tool call {call.index}"
        if not call.id:
            raise invalid_call("missing_id", f"{where} has no id")
        if call.id in seen:
            raise invalid_call("duplicate_id", f"{where} repeats id {call.id!r}")
        seen.add(call.id)
        validator = req.tools.get(call.name or "")
        if validator is None:
            raise invalid_call("unknown_function", f"{where} calls {call.name!r}, which is "
                               "not an offered tool")
        if req.named_tool is not None and call.name != req.named_tool:
            raise invalid_call("wrong_function", f"{where} calls {call.name!r} but "
                               f"tool_choice names {req.named_tool!r}")
        if len(call.arguments) > max_args:
            raise invalid_call("too_large", f"{where} arguments exceed {max_args} characters")
        try:
            args = loads_strict(call.arguments)
        except (ValueError, RecursionError) as exc:
            raise invalid_call("bad_json", f"{where} ({call.name}) arguments are not valid "
                               f"JSON: {str(exc)[:200]}") from None
        if not isinstance(args, dict):
            raise invalid_call("bad_json", f"{where} ({call.name}) arguments must be a JSON "
                               "object")
        error = next(iter(validator.iter_errors(args)), None)
        if error is not None:
            pointer = "".join(f"/{p}" for p in error.absolute_path)
            raise invalid_call("schema_mismatch", f"{where} ({call.name}) arguments{pointer} "
                               f"violate the tool schema: {error.message[:300]}")
    return len(calls)


def check_structured(content: Any, req: ChatRequest) -> None:
    """Validate a ``response_format`` JSON answer; raise 502 ``invalid_structured_output``.

    ``json_schema``: strict JSON (no repeated key: whether the schema holds would depend on
    which value a reader keeps) valid against the schema. ``json_object``: strict JSON and
    an object, repeated keys allowed. The grammar cannot forbid them (xgrammar's JSON
    grammar is context-free), the small models repeat keys under a negative
    ``frequency_penalty`` (chaos campaign, issue 7: 1 in 32 answers at -1 and -1.99), and
    RFC 8259 allows them; nothing here reads a member, so every reader agrees the answer
    is a JSON object. The answer is relayed unchanged."""
    if not req.structured:
        return
    problem: str | None = None
    value: Any = None
    if not isinstance(content, str):
        problem = "has no text content"
    else:
        try:
            value = loads_strict(content, duplicate_keys=req.response_validator is None)
        except (ValueError, RecursionError) as exc:
            problem = f"is not valid JSON: {str(exc)[:200]}"
    if problem is None and req.response_format == "json_object" and not isinstance(value, dict):
        problem = "is not a JSON object"
    if problem is None and req.response_validator is not None:
        first = next(iter(req.response_validator.iter_errors(value)), None)
        if first is not None:
            pointer = "".join(f"/{p}" for p in first.absolute_path)
            problem = f"violates the response_format schema at '{pointer}': {first.message[:300]}"
    if problem is not None:
        raise GatewayError.of("invalid_structured_output", f"the engine's answer {problem}")


def _calls_of(message: dict[str, Any], choice_index: int) -> list[CallParts]:
    raw = message.get("tool_calls") or []
    if not isinstance(raw, list):
        raise invalid_call("malformed", f"choice {choice_index}: tool_calls is not an array")
    calls = []
    for i, item in enumerate(raw):
        parts = tool_call_parts(item)
        if parts is None:
            raise invalid_call("malformed", f"choice {choice_index}: tool call {i} is not "
                               "{id, type: function, function: {name, arguments: str}}")
        ident = item.get("id")
        calls.append(CallParts(i, ident if isinstance(ident, str) else None, *parts))
    return calls


@dataclass(slots=True)
class Checked:
    """A checked completion: ``body`` to send (re-serialised only if a cut call was
    withheld), ``valid`` calls passed, ``withheld`` calls cut by ``max_tokens``."""

    body: bytes
    valid: int = 0
    withheld: int = 0
    cut_choices: list[int] = field(default_factory=list)
    usage: Any = None  # the engine's "usage" object, as sent (audit log, traces)


def check_completion(raw: bytes, req: ChatRequest, max_args: int) -> Checked:
    """Check a non-stream ``chat.completion`` body from the engine.

    Raises :class:`GatewayError`: 502 ``upstream_error`` when the body is not a completion
    object (no choices, a choice index outside ``[0, n)`` or repeated), 502
    ``invalid_tool_call`` / ``invalid_structured_output``. The caller counts the calls of a
    refused answer as invalid via :func:`count_calls`.
    """
    try:
        obj = fastjson.loads(raw)
    except (ValueError, RecursionError):
        raise GatewayError.of("upstream_error", "the engine returned invalid JSON") from None
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not isinstance(choices, list) or not choices or len(choices) > req.n:
        raise GatewayError.of("upstream_error", "the engine's answer has no choices or "
                              "more than n")
    out = Checked(raw, usage=obj.get("usage"))
    seen: set[int] = set()
    cut_positions: list[int] = []
    for ci, choice in enumerate(choices):
        message = choice.get("message") if isinstance(choice, dict) else None
        index = choice.get("index", ci) if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise GatewayError.of("upstream_error", f"choice {ci} has no message")
        if type(index) is not int or not 0 <= index < req.n or index in seen:
            raise GatewayError.of("upstream_error", f"choice {ci} has a bad index")
        seen.add(index)
        calls = _calls_of(message, ci)
        if choice.get("finish_reason") == "length":
            if cuts_call(req, bool(calls)):
                out.withheld += len(calls) or 1
                out.cut_choices.append(index)
                cut_positions.append(ci)
            continue
        out.valid += check_calls(calls, req, max_args, index)
        if not calls:
            check_structured(message.get("content"), req)
    if out.cut_choices:
        try:
            out.body = fastjson.dumps(_withhold(raw, cut_positions))
        except (ValueError, RecursionError):  # orjson parses deeper than the stdlib
            raise GatewayError.of("upstream_error", "the engine's answer nests too "
                                  "deeply") from None
    return out


def _withhold(raw: bytes, positions: list[int]) -> Any:
    """The answer re-parsed exactly (stdlib: no integer rounded) with the tool calls and
    content of the choices at ``positions`` withheld."""
    obj = fastjson.reparse_exact(raw)
    for ci in positions:
        message = obj["choices"][ci]["message"]
        message.pop("tool_calls", None)
        message["content"] = None
    return obj


def count_calls(raw: bytes) -> int:
    """Number of tool calls in a completion body (0 when unparsable); for the audit log."""
    try:
        obj = json.loads(raw)
        return sum(len(c["message"].get("tool_calls") or []) for c in obj["choices"])
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return 0
