"""The endpoint under test, through the official async ``openai`` client (no retries).

``Endpoint.preflight(model)`` checks, before any measurement, that the endpoint answers
(``endpoint_unreachable``), accepts the key (``bad_api_key``), serves the model
(``unknown_model``, from ``GET /models`` or a 404 on a probe) and speaks OpenAI
(``garbage_response``, ``no_such_route``); all raise ``BenchError`` with the fix.

``Endpoint.attempt(payload, judge)`` sends one chat completion and returns an ``Attempt``:

- ``valid`` / ``invalid``: HTTP 200, judged by ``checks.judge`` (``reason`` = the check);
  ``truncated``: HTTP 200 with ``finish_reason: "length"`` (not valid, but flagged by the
  endpoint, so not *silently* invalid);
- ``refused``: the endpoint answered an error status (``reason`` = its ``error.code``, e.g.
  the appliance's ``invalid_tool_call`` / ``tool_call_truncated``, else ``http_<status>``):
  the agent gets no usable answer, but it is told so instead of getting a wrong one;
- ``error``: no usable HTTP answer (``timeout``, ``connection``, ``garbage``) or a fatal
  condition (``bad_api_key``, ``unknown_model``) that the runner turns into an abort.

Latency is wall time of the request in seconds; tokens come from ``usage``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.toolbench.checks import GarbageAnswer, Verdict, message_of, usage_of
from appliance.toolbench.errors import BenchError

FATAL = ("bad_api_key", "unknown_model", "no_such_route")
KEY_FIX = "pass the key the endpoint accepts in --api-key-file (first non-comment line)"


@dataclass
class Attempt:
    outcome: str  # valid | invalid | truncated | refused | error
    reason: str | None
    http_status: int | None
    latency_s: float
    verdict: Verdict | None = None
    detail: str | None = None


def _short(text: object, limit: int = 200) -> str:
    s = str(text).replace("\n", " ")
    return s if len(s) <= limit else s[:limit] + "…"


def _status_reason(status: int, body: Any) -> tuple[str, str]:
    """(reason, message) for an error status; fatal reasons are those in FATAL."""
    err = body.get("error", body) if isinstance(body, dict) else body
    code = err.get("code") if isinstance(err, dict) else None
    message = err.get("message") if isinstance(err, dict) else None
    text = _short(message if message is not None else body)
    if status in (401, 403):
        return "bad_api_key", text
    if status == 404:
        if code == "model_not_found" or "model" in text.lower():
            return "unknown_model", text
        return "no_such_route", text
    if isinstance(code, str) and code:
        return code, text
    return f"http_{status}", text


class Endpoint:
    """One OpenAI-compatible endpoint. ``base_url`` ends in ``/v1`` (as the SDK expects)."""

    def __init__(self, base_url: str, api_key: str, timeout_s: float = 120.0) -> None:
        try:
            from openai import AsyncOpenAI
        except ImportError:
            raise BenchError("the openai package is not installed", code="missing_dependency",
                             fix="pip install 'model-appliance[cpu]' (or: pip install openai)") \
                from None
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._client = AsyncOpenAI(base_url=self.base_url, api_key=api_key, max_retries=0,
                                   timeout=timeout_s)

    async def close(self) -> None:
        await self._client.close()

    async def _request(self, payload: dict[str, Any] | None) -> tuple[int, Any, float]:
        """(status, parsed JSON body or ``_Garbage`` text, latency in s); ``payload`` None
        means ``GET /models``. Raises ``_Transport`` when no HTTP answer came back."""
        import openai

        t0 = time.monotonic()
        try:
            if payload is None:
                raw = await self._client.models.with_raw_response.list()
            else:
                raw = await self._client.chat.completions.with_raw_response.create(**payload)
            status, text = raw.status_code, raw.text
        except openai.APITimeoutError:
            raise _Transport("timeout", f"no answer within {self.timeout_s:.0f} s") from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise _Transport("connection", _short(f"{type(cause).__name__}: {cause}")) \
                from None
        except openai.APIStatusError as exc:
            try:
                body: Any = exc.response.json()
            except ValueError:
                body = exc.response.text
            return exc.status_code, body, time.monotonic() - t0
        latency = time.monotonic() - t0
        try:
            return status, json.loads(text), latency
        except ValueError:
            return status, _Garbage(text), latency

    async def preflight(self, model: str | None) -> str:
        """The model to use (``model``, or the first one listed). Raises ``BenchError``."""
        where = self.base_url
        try:
            status, body, _ = await self._request(None)
        except _Transport as exc:
            raise BenchError(f"cannot reach the endpoint ({exc.kind}: {exc.detail})",
                             code="endpoint_unreachable", where=where,
                             fix="check --base-url (scheme, host, port, the /v1 suffix) and "
                                 "that the server is running") from None
        models: list[str] | None = None
        if status == 200:
            data = body.get("data") if isinstance(body, dict) else None
            if not isinstance(data, list) or not all(
                    isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
                raise BenchError(f"GET /models answered something that is not a model list: "
                                 f"{_short(body)}", code="garbage_response", where=where,
                                 fix="point --base-url at an OpenAI-compatible API (…/v1)")
            models = [m["id"] for m in data]
        elif status in (401, 403):
            raise BenchError(f"the endpoint refused the API key (HTTP {status})",
                             code="bad_api_key", where=where, fix=KEY_FIX)
        if model is None:
            if not models:
                raise BenchError("no model given and the endpoint lists none",
                                 code="unknown_model", where=where, fix="pass --model")
            model = models[0]
        elif models is not None and model not in models:
            raise BenchError(f"model {model!r} is not served here", code="unknown_model",
                             where=where, fix=f"pass --model one of: {', '.join(models)}")
        probe = {"model": model, "messages": [{"role": "user", "content": "Say OK."}],
                 "max_tokens": 2, "temperature": 0}
        try:
            status, body, _ = await self._request(probe)
        except _Transport as exc:
            raise BenchError(f"the probe request got no answer ({exc.kind}: {exc.detail})",
                             code="endpoint_unreachable", where=f"{where}/chat/completions",
                             fix="check that the server is up and not overloaded") from None
        if status != 200:
            reason, text = _status_reason(status, body)
            fixes = {"bad_api_key": KEY_FIX, "unknown_model": "pass --model with a served name",
                     "no_such_route": "--base-url must be the API root, e.g. http://host:8000/v1"}
            raise BenchError(f"the probe request was refused (HTTP {status}): {text}",
                             code=reason if reason in FATAL else "garbage_response",
                             where=f"{where}/chat/completions",
                             fix=fixes.get(reason, "check the server log"))
        if isinstance(body, _Garbage) or not isinstance(body, dict) or not isinstance(
                body.get("choices"), list):
            raise BenchError(f"the endpoint answered something that is not a chat completion: "
                             f"{_short(body)}", code="garbage_response",
                             where=f"{where}/chat/completions",
                             fix="point --base-url at an OpenAI-compatible API (…/v1)")
        return model

    async def attempt(self, payload: dict[str, Any],
                      judge: Callable[[Any], Verdict] | None) -> Attempt:
        """Send ``payload``; judge a 200 answer with ``judge`` (``None``: only check that it
        is a chat completion, outcome ``valid``)."""
        try:
            status, body, latency = await self._request(payload)
        except _Transport as exc:
            return Attempt("error", exc.kind, None, 0.0, detail=exc.detail)
        if status != 200:
            reason, text = _status_reason(status, body)
            outcome = "error" if reason in FATAL else "refused"
            return Attempt(outcome, reason, status, latency, detail=text)
        if isinstance(body, _Garbage):
            return Attempt("error", "garbage", status, latency,
                           detail=f"not JSON: {_short(body.text)}")
        try:
            if judge is None:
                _message, finish = message_of(body)
                verdict = Verdict(True, None, None, finish, [], *usage_of(body))
            else:
                verdict = judge(body)
        except GarbageAnswer as exc:
            return Attempt("error", "garbage", status, latency, detail=str(exc))
        outcome = "valid" if verdict.valid else (
            "truncated" if verdict.reason == "truncated" else "invalid")
        return Attempt(outcome, verdict.reason, status, latency, verdict)


class _Transport(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.detail = kind, detail


@dataclass
class _Garbage:
    text: str

    def __str__(self) -> str:
        return self.text
