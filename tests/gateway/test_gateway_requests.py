"""Request admission: field allow-list, bounds, stream_options, Host header, size limits."""

from __future__ import annotations

import json
import socket
import time

import pytest
from gw_fake_engine import Reply, chunk, text_stream
from gw_helpers import AUTH, chat_body, sse_json


def post(client, body, **kw):
    return client.post("/v1/chat/completions", headers=AUTH, json=body, **kw)


def _raw(port: int, data: bytes, *, timeout: float = 5.0) -> bytes:
    """Send raw bytes, return whatever the server answers before closing/timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except OSError:
            pass
        return _read_response(s)


def _read_response(s: socket.socket) -> bytes:
    buf = b""
    try:
        while True:
            part = s.recv(65536)
            if not part:
                break
            buf += part
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if sep:
                length = [int(v) for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n"))
                          if k.strip().lower() == b"content-length"]
                if length and len(rest) >= length[0]:
                    break
    except OSError:
        pass
    return buf


def _status(response: bytes) -> int | None:
    if not response.startswith(b"HTTP/1.1 "):
        return None
    return int(response[9:12])


SAMPLING_VARIANTS = [
    ("n", {"n": 100000000}), ("n", {"n": 0}), ("n", {"n": -1}), ("n", {"n": True}),
    ("max_tokens", {"max_tokens": -186}), ("max_completion_tokens", {"max_completion_tokens": 0}),
    ("max_tokens", {"max_tokens": 1000000000000}), ("max_tokens", {"max_tokens": 1.5}),
    ("logit_bias", {"logit_bias": {"999999999": 5}}), ("logit_bias", {"logit_bias": {"-1": 1}}),
    ("logit_bias", {"logit_bias": {"12": 1000000000.0}}),
    ("logit_bias", {"logit_bias": {"abc": 1}}),
    ("logit_bias", {"logit_bias": {str(i): -1 for i in range(2000)}}),
    ("logit_bias", {"logit_bias": {"32000": 1}}),
    ("top_logprobs", {"top_logprobs": 1000, "logprobs": True}),
    ("top_logprobs", {"top_logprobs": 2}),
    ("temperature", {"temperature": -1}), ("temperature", {"temperature": "hot"}),
    ("top_p", {"top_p": 0}), ("top_p", {"top_p": 1.5}),
    ("presence_penalty", {"presence_penalty": 9}),
    ("seed", {"seed": 1180591620717411303424}),
    ("stop", {"stop": ["a", "b", "c", "d", "e"]}), ("top_k", {"top_k": -5}),
]


@pytest.mark.parametrize("param,variant", SAMPLING_VARIANTS)
def test_sampling_param_bounds(client, engine, param, variant):
    """Public bug sampling-param-bounds (GHSA-3mwp-wvh9-7528, vllm#4667, PR#16529)."""
    r = post(client, chat_body(**variant))
    assert not engine.chat_calls  # answered locally: the engine never saw it
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_parameter" and err["param"] == param
    assert engine.calls == []


def test_sampling_values_inside_bounds_are_forwarded(client, engine):
    ok = {"n": 1, "max_tokens": 4096, "logit_bias": {"0": -100, "31999": 100}, "seed": -5,
          "temperature": 0, "top_p": 1, "logprobs": True, "top_logprobs": 20, "stop": "x",
          "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "user": "u1"}
    r = post(client, chat_body(**ok))
    assert r.status_code == 200, r.text
    assert engine.chat_calls[0]["body"]["logit_bias"] == ok["logit_bias"]


def test_forbidden_engine_extensions(client, engine):
    """Public bug forbidden-engine-extensions (CVE-2025-61620, -62426, -62164)."""
    grammar = "root ::= " + "(" * 20000 + '"a"' + ")" * 20000
    refused = [
        ("chat_template", {"chat_template": "{% for i in range(999999999) %}x{% endfor %}"}),
        ("chat_template_kwargs.tokenize", {"chat_template_kwargs": {"tokenize": True}}),
        ("chat_template_kwargs.chat_template",
         {"chat_template_kwargs": {"chat_template": "{{ 7*7 }}"}}),
        ("chat_template_kwargs.enable_thinking",
         {"chat_template_kwargs": {"enable_thinking": "yes"}}),
        ("guided_grammar", {"guided_grammar": grammar}),
        ("structured_outputs", {"structured_outputs": {"grammar": grammar}}),
        ("custom_generate", {"custom_generate": "./custom_generate"}),
        ("prompt_embeds", {"prompt_embeds": "UEsDBAAAAAAAAAAAAAA="}),
        ("mm_processor_kwargs", {"mm_processor_kwargs": {}}),
        ("media_io_kwargs", {"media_io_kwargs": {}}),
        ("guided_json", {"guided_json": {"type": "object"}}),
        ("functions", {"functions": []}),
        ("kv_transfer_params", {"kv_transfer_params": {}}),
        ("response_format.type", {"response_format": {"type": "structural_tag"}}),
        ("messages[0].content[0].type", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://169.254.169.254/"}}]}]}),
    ]
    for param, extra in refused:
        r = post(client, chat_body(**extra))
        assert r.status_code == 400, (param, r.text)
        err = r.json()["error"]
        assert err["code"] == "forbidden_parameter" and err["param"] == param, err
    assert engine.calls == []
    # prompt_embeds on /v1/completions: that route is not exposed at all
    r = client.post("/v1/completions", headers=AUTH,
                    json={"model": "appliance-model", "prompt_embeds": "UEsD", "max_tokens": 4})
    assert r.status_code == 404
    assert engine.calls == []
    # a vetted chat_template_kwargs key with a boolean is forwarded
    r = post(client, chat_body(chat_template_kwargs={"enable_thinking": False}))
    assert r.status_code == 200
    assert engine.chat_calls[0]["body"]["chat_template_kwargs"] == {"enable_thinking": False}


def test_body_must_be_strict_json_object(client, engine):
    surrogate = b'{"messages": [{"role": "user", "content": "\\ud800"}]}'
    for raw, code in ((b"[1]", "invalid_request"), (b"{", "invalid_json"),
                      (b'{"model": "appliance-model", "model": "x"}', "invalid_json"),
                      (b'{"messages": [], "temperature": NaN}', "invalid_json"),
                      (surrogate, "invalid_json"), (b"\xff\xfe{}", "invalid_json"),
                      (b"1e999", "invalid_json"), (b"", "invalid_json")):
        r = client.post("/v1/chat/completions", headers=AUTH, content=raw)
        assert r.status_code == 400, raw
        assert r.json()["error"]["code"] == code, raw
    assert engine.calls == []


def test_stream_options_usage(client, engine):
    """Public bug stream-options-usage (Arthur-Ficial/apfel#100)."""
    usage = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
             "model": "appliance-model", "choices": [],
             "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    # the engine sends the usage chunk whether asked or not; the gateway decides
    engine.reply = Reply(events=[*text_stream("hi"), usage])
    events, done = sse_json(post(client, chat_body(stream=True)).text)
    assert done and events and all(e["choices"] for e in events)
    r = post(client, chat_body(stream=True, stream_options={"include_usage": True}))
    events, done = sse_json(r.text)
    assert done
    empties = [i for i, e in enumerate(events) if e["choices"] == []]
    assert empties == [len(events) - 1]
    assert set(events[-1]["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert engine.chat_calls[-1]["body"]["stream_options"] == {"include_usage": True}
    calls_before = len(engine.calls)
    for body, param in (
        (chat_body(stream=True, stream_options={"include_usage": "yes"}), "stream_options"),
        (chat_body(stream=False, stream_options={"include_usage": True}), "stream_options"),
        (chat_body(stream=True, stream_options={"include_usage": True,
                                                "continuous_usage_stats": True}),
         "stream_options.continuous_usage_stats"),
    ):
        r = post(client, body)
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "invalid_parameter"
        assert r.json()["error"]["param"] == param
    assert len(engine.calls) == calls_before


HOST_VARIANTS = [
    ("/v1/chat/completions", "gw.local/health?x=", {}, 400),
    ("/v1/chat/completions", "gw.local?", {}, 400),
    ("/v1/chat/completions", "gw.local#", {}, 400),
    ("/v1/chat/completions", "gw.local/v2", {}, 400),
    ("/v1/chat/completions", "gw.local\\x", {}, 400),
    ("/v1/chat/completions", "user@gw.local", {}, 400),
    ("//v1/chat/completions", "gw.local", {}, 404),
    ("/v1/../v1/chat/completions", "gw.local", {}, 404),
    ("/V1/chat/completions", "gw.local", {}, 404),
    ("/v1/chat/completions", "gw.local", {"X-Forwarded-Prefix": "/health"}, 401),
    ("/v1/chat/completions", "gw.local", {"X-Forwarded-Host": "gw.local/health/live",
                                          "X-Original-URL": "/health/live"}, 401),
    ("/health/live/../../v1/chat/completions", "gw.local", {}, 404),
]


@pytest.mark.parametrize("target,host,extra,expected", HOST_VARIANTS)
def test_host_header_auth_bypass(gateway, engine, target, host, extra, expected):
    """Public bug host-header-auth-bypass (GHSA-94f4-hr76-p5j6, CVE-2026-48746)."""
    body = b'{"model":"appliance-model","messages":[{"role":"user","content":"hi"}]}'
    head = [f"POST {target} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in extra.items()]
    response = _raw(gateway.port, ("\r\n".join(head) + "\r\n\r\n").encode() + body)
    assert _status(response) == expected, response[:300]
    payload = json.loads(response.partition(b"\r\n\r\n")[2])
    code = {400: "invalid_host", 401: "unauthorized", 404: "not_found"}[expected]
    assert payload["error"]["code"] == code
    assert engine.calls == []


def test_too_many_headers_is_431(gateway, engine):
    extra = b"".join(b"X-N%d: v\r\n" % i for i in range(150))  # small block, many headers
    req = b"GET /health/live HTTP/1.1\r\nHost: gw\r\n" + extra + b"\r\n"
    assert _status(_raw(gateway.port, req)) == 431
    fifty = b"".join(b"X-N%d: v\r\n" % i for i in range(50))
    ok = b"GET /health/live HTTP/1.1\r\nHost: gw\r\n" + fifty + b"Connection: close\r\n\r\n"
    assert _status(_raw(gateway.port, ok)) == 200


def test_two_host_headers_are_refused(gateway, engine):
    req = (b"GET /v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\n"
           b"Authorization: Bearer sk-test-gateway-key-0001\r\nConnection: close\r\n\r\n")
    assert _status(_raw(gateway.port, req)) == 400


def test_oversize_request(make_gateway, engine, client):
    """Public bug oversize-request (GHSA-rxc4-3w6r-4v47, CVE-2025-48956)."""
    gw = make_gateway(max_body_bytes=64 * 1024)
    # 1. one 2 MiB header value -> 431 (or closed); nothing reaches the engine
    big = b"GET /health/live HTTP/1.1\r\nHost: gw\r\nX-Pad: " + b"a" * (2 << 20) + b"\r\n\r\n"
    assert _status(_raw(gw.port, big)) in (431, None)
    # 2. 50 000 headers of 1 KiB -> 431 (or closed); nothing reaches the engine
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")
        line = b"X-H: " + b"b" * 1019 + b"\r\n"
        try:
            for _ in range(50):
                s.sendall(line * 1000)
        except OSError:
            pass
        assert _status(_read_response(s)) in (431, None)
    assert not engine.chat_calls
    # 3a. declared 200 MiB body -> 413 before any body byte is read
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "
            b"sk-test-gateway-key-0001\r\nContent-Type: application/json\r\n")
    response = _raw(gw.port, head + b"Content-Length: 209715200\r\n\r\n{\"messages\": [")
    assert _status(response) == 413
    assert json.loads(response.partition(b"\r\n\r\n")[2])["error"]["code"] == \
        "request_too_large"
    # 3b. chunked body streamed slowly past the limit -> 413 once the limit is crossed
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as s:
        s.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
        piece = b"a" * 16384
        sent = 0
        try:
            for _ in range(64):  # up to 1 MiB; the gateway answers after ~64 KiB
                s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
                sent += len(piece)
                time.sleep(0.005)
        except OSError:
            pass
        assert _status(_read_response(s)) == 413
    # 4. 100 000 tiny messages (fits the default 8 MiB body) -> 400 param messages
    body = chat_body(messages=[{"role": "user", "content": ""}] * 100_000)
    r = post(client, body)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_parameter"
    assert r.json()["error"]["param"] == "messages"
    assert engine.calls == []
    # the gateway keeps serving
    assert post(client, chat_body()).status_code == 200


def test_stream_relays_engine_error_event(client, engine):
    engine.reply = Reply(events=[chunk({"delta": {"role": "assistant", "content": ""}}),
                                 {"error": {"message": "engine died", "code": 500}}])
    events, done = sse_json(post(client, chat_body(stream=True)).text)
    assert done and events[-1]["error"]["code"] == "upstream_error"
