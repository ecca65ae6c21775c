"""Regression tests for the engine-level public bugs (cases in public-bugs.jsonl).

* recursive-ref-schema-crash (mlc-ai/xgrammar#207): recursive ``$defs`` + patterns segfaulted
  xgrammar's schema-to-grammar step. Compiled here with the pinned xgrammar in a subprocess.
* regex-dfa-blowup (GHSA-rwxx-mrjm-wc2m / CVE-2026-55574, vllm PR#45172): exponential
  patterns stalled the compile step. The gateway pre-limit flags them; anything it accepts
  must compile within the engine's 5 s compile timeout.
* tool-parser-allowlist, parser fuzz (GHSA-79j6-g2m3-jgfw / CVE-2025-9141 eval of parameter
  values, GHSA-w6q7-j642-7c25 / CVE-2025-48887 parser ReDoS): the vetted parser (hermes, the
  policy default) is fed hostile model outputs.

The xgrammar checks use a small hand-made vocabulary (printable ASCII plus a few JSON
fragments), so nothing has to be downloaded or prepared. vLLM is imported once per module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _shared import regex_dfa_blowup_bodies

from appliance.gateway.schema.grammar_limits import check_pattern, check_schema_complexity

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

COMPILE_TIMEOUT_S = 5.0  # vLLM's VLLM_REGEX_COMPILATION_TIMEOUT_S default; the bug's budget
SUBPROCESS_TIMEOUT_S = 90.0  # interpreter + torch/xgrammar import on a loaded 2-core machine
PARSE_BUDGET_S = 1.0  # the case asks for 100 ms per input; slack for a loaded CI machine

# One worker per call: reads a job on stdin, compiles each item with xgrammar against a tiny
# vocabulary, optionally walks a GrammarMatcher over sample texts (one character per token,
# then the stop token), and prints one JSON line per item as soon as it is done.
XGRAMMAR_WORKER = r"""
import json, sys, time
import xgrammar as xgr

job = json.load(sys.stdin)
vocab = ["</s>"] + [chr(c) for c in range(32, 127)]
vocab += ['{"', '": ', '", ', '"}', '[]', '{}', 'ab', 'ba', 'label', 'kids', 'root']
index = {tok: i for i, tok in enumerate(vocab)}
info = xgr.TokenizerInfo(vocab, stop_token_ids=[0])
compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)

def accepts(grammar, text):
    matcher = xgr.GrammarMatcher(grammar)
    return all(matcher.accept_token(index[ch]) for ch in text) and matcher.accept_token(0)

for item in job:
    start = time.perf_counter()
    if "schema" in item:
        grammar = compiler.compile_json_schema(item["schema"], any_whitespace=False)
    else:
        grammar = compiler.compile_regex(item["regex"])
    seconds = time.perf_counter() - start
    verdicts = [accepts(grammar, text) for text in item.get("texts", [])]
    print(json.dumps({"name": item["name"], "seconds": seconds, "accepts": verdicts}), flush=True)
"""


def run_xgrammar(job: list[dict[str, Any]]) -> tuple[int, dict[str, dict[str, Any]], str]:
    """Run the worker in a fresh interpreter. Returns (exit code, results by name, stderr).

    A crash (SIGSEGV: exit code -11) or a hang (TimeoutExpired: partial results) is reported,
    never propagated into pytest's own process."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", XGRAMMAR_WORKER], input=json.dumps(job),
            capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
        )
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = -9
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = "timed out"
    results = {row["name"]: row for row in map(json.loads, filter(None, out.splitlines()))}
    return code, results, err[-2000:]


def compact(value: Any) -> str:
    """JSON as xgrammar emits it with any_whitespace=False (', ' and ': ' separators)."""
    return json.dumps(value, separators=(", ", ": "))


# ------------------------------------------------------------------ recursive-ref-schema-crash

LABEL = {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,15}$"}
BUG_TREE_SCHEMA = {
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/node"}},
    "required": ["root"],
    "additionalProperties": False,
    "$defs": {
        "node": {
            "type": "object", "additionalProperties": False, "required": ["label"],
            "properties": {"label": LABEL, "kids": {"$ref": "#/$defs/list"}},
        },
        "list": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 4},
    },
}
# The rest of the kind: self-reference through "#", mutual recursion through anyOf, draft-07
# "definitions", and degenerate cycles with no finite instance (must not crash either).
RECURSIVE_KIND: dict[str, dict[str, Any]] = {
    "root_self_ref": {
        "type": "object", "additionalProperties": False, "required": ["label"],
        "properties": {"label": LABEL, "kids": {"type": "array", "items": {"$ref": "#"}}},
    },
    "mutual_anyof": {
        "$defs": {
            "a": {"anyOf": [{"type": "string", "pattern": "^x+$"},
                            {"type": "array", "items": {"$ref": "#/$defs/b"}}]},
            "b": {"type": "object", "properties": {"v": {"$ref": "#/$defs/a"}}},
        },
        "$ref": "#/$defs/a",
    },
    "definitions_draft7": {
        "definitions": {"n": {"type": "object", "properties": {
            "c": {"type": "array", "items": {"$ref": "#/definitions/n"}, "maxItems": 2},
            "p": {"type": "string", "pattern": "^[0-9]{2}$"}}}},
        "type": "object", "properties": {"r": {"$ref": "#/definitions/n"}},
    },
    "required_cycle": {
        "$defs": {"n": {"type": "object", "properties": {"k": {"$ref": "#/$defs/n"}},
                        "required": ["k"]}},
        "$ref": "#/$defs/n",
    },
    "ref_loop": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                 "$ref": "#/$defs/a"},
}


def test_recursive_ref_schema_crash() -> None:
    good = {"root": {"label": "a", "kids": [{"label": "b_1", "kids": []}, {"label": "c-2"}]}}
    bad_label = {"root": {"label": "9bad"}}
    too_many = {"root": {"label": "a", "kids": [{"label": "k"}] * 5}}
    extra = {"root": {"label": "a", "x": 1}}
    job = [{"name": "bug", "schema": BUG_TREE_SCHEMA,
            "texts": [compact(v) for v in (good, bad_label, too_many, extra)]}]
    job += [{"name": name, "schema": schema} for name, schema in RECURSIVE_KIND.items()]

    code, results, err = run_xgrammar(job)

    assert code == 0, f"xgrammar worker exited with {code} (SIGSEGV is -11): {err}"
    assert set(results) == {item["name"] for item in job}
    for name, row in results.items():
        assert row["seconds"] < COMPILE_TIMEOUT_S, (name, row)
    # The grammar enforces the recursive schema: a valid tree passes; a label that breaks the
    # pattern, a fifth kid (maxItems 4) and an undeclared property are refused.
    assert results["bug"]["accepts"] == [True, False, False, False]
    # Recursion is fine by policy: the gateway's complexity pre-limit accepts all of these.
    for schema in [BUG_TREE_SCHEMA, *RECURSIVE_KIND.values()]:
        assert check_schema_complexity(schema) == []


# ------------------------------------------------------------------ regex-dfa-blowup

def test_regex_dfa_blowup() -> None:
    compile_job: list[dict[str, Any]] = []
    flagged: list[str] = []
    for i, body in enumerate(regex_dfa_blowup_bodies()):
        schemas = [tool["function"]["parameters"] for tool in body.get("tools", [])]
        if "response_format" in body:
            schemas.append(body["response_format"]["json_schema"]["schema"])
        for schema in schemas:
            pattern = schema["properties"]["s"]["pattern"]
            problems = check_schema_complexity(schema)
            if problems:  # the gateway answers 400 schema_too_complex
                assert [p for p, _ in problems] == ["/properties/s/pattern"]
                flagged.append(pattern)
            else:  # accepted: the engine must compile it without a stall
                compile_job.append({"name": f"body{i}", "schema": schema})
    assert flagged.count("[ab]*a[ab]{40}") == 2  # the response_format and the tool body

    # Measure the pinned xgrammar on the family n = 12..20 (and the case's n = 40), both as a
    # JSON-Schema pattern and as a bare regex. Whatever the gateway accepts (n <= 16) must
    # compile inside the engine's 5 s timeout; the rest is refused before the engine anyway.
    for n in [*range(12, 21), 40]:
        pattern = f"[ab]*a[ab]{{{n}}}"
        schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}},
                  "required": ["s"]}
        text = compact({"s": "ab" * 3 + "a" + "b" * n})
        compile_job.append({"name": f"schema n={n}", "schema": schema, "texts": [text]})
        compile_job.append({"name": f"regex n={n}", "regex": pattern})
    code, results, err = run_xgrammar(compile_job)
    print("\nxgrammar compile times (s):",
          {name: round(row["seconds"], 4) for name, row in results.items()})

    assert code == 0, err
    assert set(results) == {item["name"] for item in compile_job}
    for n in range(12, 21):
        accepted = check_pattern(f"[ab]*a[ab]{{{n}}}", "/p") is None
        assert accepted == (n <= 16)
        if accepted:
            assert results[f"schema n={n}"]["seconds"] < COMPILE_TIMEOUT_S
            assert results[f"regex n={n}"]["seconds"] < COMPILE_TIMEOUT_S
        assert results[f"schema n={n}"]["accepts"] == [True]


def test_regex_dfa_blowup_engine_keeps_its_compile_timeout(
        monkeypatch: pytest.MonkeyPatch, hermes: Hermes) -> None:
    """The pinned vLLM keeps VLLM_REGEX_COMPILATION_TIMEOUT_S enabled by default (not 0).

    (``hermes`` only shares the module's one vLLM import.)"""
    import vllm.envs as envs

    monkeypatch.delenv("VLLM_REGEX_COMPILATION_TIMEOUT_S", raising=False)
    assert envs.VLLM_REGEX_COMPILATION_TIMEOUT_S > 0
    assert envs.VLLM_REGEX_COMPILATION_TIMEOUT_S <= COMPILE_TIMEOUT_S


# ------------------------------------------------------------------ tool-parser-allowlist fuzz

class Hermes:
    """The vetted parser class plus what calling it needs."""

    def __init__(self) -> None:
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.tool_parsers import ToolParserManager

        from appliance.config.policy import EnginePolicy
        from appliance.engine.launcher import VETTED_TOOL_PARSERS

        self.name = EnginePolicy().tool_call_parser
        assert self.name in VETTED_TOOL_PARSERS
        self.cls = ToolParserManager.get_tool_parser(self.name)
        vocab = {"<unk>": 0, "<tool_call>": 1, "</tool_call>": 2}
        for code in range(32, 127):
            vocab.setdefault(chr(code), len(vocab))
        model = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        model.pre_tokenizer = pre_tokenizers.Split("", "isolated")
        fast: Any = PreTrainedTokenizerFast  # untyped constructor
        self.tokenizer: Any = fast(
            tokenizer_object=model, unk_token="<unk>",
            additional_special_tokens=["<tool_call>", "</tool_call>"],
        )
        # "a" is declared as an object: the qwen3_coder RCE eval()'d values whose declared
        # type was not string. The parser must still hand back the raw string.
        self.request = ChatCompletionRequest.model_validate({
            "model": "appliance-model", "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"a": {"type": "object"}}}}}],
        })

    def parser(self) -> Any:
        return self.cls(self.tokenizer)


@pytest.fixture(scope="module")
def hermes() -> Iterator[Hermes]:
    yield Hermes()


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


NEST = 50_000
FLOODS = {
    "[": "[" * NEST, "(": "(" * NEST, "{": "{" * NEST, "mixed": "[({" * (NEST // 3),
    "balanced": "[" * (NEST // 2) + "]" * (NEST // 2),
}
CALL = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'


def fuzz_outputs() -> dict[str, str]:
    outputs: dict[str, str] = {}
    for key, flood in FLOODS.items():
        outputs[f"bare {key}"] = flood
        outputs[f"in tag {key}"] = "<tool_call>" + flood
        outputs[f"closed tag {key}"] = "<tool_call>" + flood + "</tool_call>"
        outputs[f"in arguments {key}"] = '<tool_call>{"name": "f", "arguments": ' + flood
        outputs[f"tags {key}"] = ("<tool_call>" + key) * 2000
    # Every truncation of a call: unterminated, never a tool call (the case's input is one).
    body_end = CALL.index("</tool_call>")
    for cut in range(len("<tool_call>"), body_end - 1):
        outputs[f"truncated at {cut}"] = CALL[:cut]
    return outputs


def test_tool_parser_allowlist_fuzz(hermes: Hermes, tmp_path: Path) -> None:
    timings: dict[str, float] = {}
    parser = hermes.parser()

    # 50 KB floods and unterminated calls: bounded time, no tool call, output kept as content.
    for name, output in fuzz_outputs().items():
        result, seconds = timed(parser.extract_tool_calls, output, hermes.request)
        timings[name] = seconds
        assert seconds < PARSE_BUDGET_S, (name, seconds)
        assert result.tools_called is False and result.tool_calls == [], name
        assert result.content == output, name
        streamed, seconds = timed(hermes.parser().extract_tool_calls_streaming,
                                  "", output, output, [], [], [], hermes.request)
        timings[f"stream {name}"] = seconds
        assert seconds < PARSE_BUDGET_S, (name, seconds)
    case_input = '<tool_call>{"name": "f", "arguments": {"a": 1'
    assert case_input in fuzz_outputs().values()

    # A parameter value that is Python code stays the same string; nothing evaluates it.
    marker = tmp_path / "evaluated"
    payloads = ['__import__("os").getcwd()',
                f'__import__("pathlib").Path({str(marker)!r}).touch()']
    for payload in payloads:
        call = {"name": "f", "arguments": {"a": payload}}
        for output in ("<tool_call>" + json.dumps(call) + "</tool_call>",
                       "<tool_call>" + json.dumps(call)):  # complete JSON, end tag not yet sent
            result, seconds = timed(parser.extract_tool_calls, output, hermes.request)
            timings[f"payload {payload[:22]}"] = seconds
            assert seconds < PARSE_BUDGET_S
            assert result.tools_called is True and len(result.tool_calls) == 1
            function = result.tool_calls[0].function
            assert function.name == "f"
            assert json.loads(function.arguments) == {"a": payload}
            assert os.getcwd() not in function.arguments
    assert not marker.exists()

    slowest = sorted(timings.items(), key=lambda kv: -kv[1])[:5]
    print(f"\n{hermes.name} parser: {len(timings)} calls, slowest (ms):",
          [(name, round(s * 1000, 2)) for name, s in slowest])
