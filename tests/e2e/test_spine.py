"""End to end on the real vLLM CPU engine and the converted, signed built-in SmolLM2 model:
verify -> scan -> preflight -> vLLM -> gateway, driven by the official ``openai`` SDK."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from appliance.builtin.demo import WEATHER_PARAMETERS, WEATHER_TOOL
from appliance.builtin.model import PreparedModel, prepare
from appliance.config.policy import load_policy
from appliance.engine.launcher import engine_get
from appliance.serve import Appliance

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "policies" / "cpu-demo.toml"


@pytest.fixture(scope="module")
def model() -> PreparedModel:
    return prepare()


@pytest.fixture(scope="module")
def served(model: PreparedModel) -> Iterator[tuple[Appliance, str]]:
    key = secrets.token_urlsafe(24)
    app = Appliance(policy=load_policy(POLICY), model_dir=model.model_dir,
                    public_key=model.public_key, api_keys=[key], host="127.0.0.1", port=0)
    app.start()
    try:
        yield app, key
    finally:
        app.stop()


def _client(app: Appliance, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{app.port}/v1", api_key=key,
                              max_retries=0, timeout=300)


def _running_requests(app: Appliance) -> float:
    engine = app.runs[0].engine
    assert engine is not None
    status, body = engine_get(engine.spec.socket_path, "/metrics", engine.spec.api_key)
    assert status == 200
    match = re.search(rb"^vllm:num_requests_running\{[^}]*\} ([0-9.e+]+)$", body, re.M)
    assert match, "engine exposes vllm:num_requests_running"
    return float(match.group(1))


def test_16_concurrent_required_tool_calls_are_valid_and_overlap(
        served: tuple[Appliance, str]) -> None:
    app, key = served
    peak = [0.0]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _running_requests(app))
            time.sleep(0.02)

    async def one(client: openai.AsyncOpenAI, i: int) -> tuple[str, dict[str, object], int]:
        city = ["Paris", "Oslo", "Lima", "Pune"][i % 4]
        resp = await client.chat.completions.create(
            model="appliance-model", tools=[WEATHER_TOOL], tool_choice="required",
            messages=[{"role": "user", "content": f"What is the weather in {city}?"}],
            max_tokens=128, temperature=0.7)  # no seed: quirk seed-cpu-generator-offset
        calls = resp.choices[0].message.tool_calls or []
        assert len(calls) >= 1, resp
        args = json.loads(calls[0].function.arguments)
        return calls[0].function.name, args, resp.usage.completion_tokens

    async def run() -> list[tuple[str, dict[str, object], int]]:
        async with _client(app, key) as client:
            return await asyncio.gather(*(one(client, i) for i in range(16)))

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    t0 = time.monotonic()
    try:
        results = asyncio.run(run())
    finally:
        done.set()
        poller.join(timeout=5)
    elapsed = time.monotonic() - t0
    assert len(results) == 16
    for name, args, _ in results:
        assert name == "get_weather"
        jsonschema.validate(args, WEATHER_PARAMETERS)
    tokens = sum(r[2] for r in results)
    print(f"\n16 required tool calls: 16/16 valid in {elapsed:.2f} s, "
          f"{tokens} completion tokens ({tokens / elapsed:.0f} tok/s), "
          f"peak engine concurrency {peak[0]:.0f}")
    assert peak[0] > 1, "the engine never had more than one request in flight"


def test_tool_without_parameters_is_called_with_no_arguments_20_of_20(
        served: tuple[Appliance, str]) -> None:
    """Issue 26: the reproduction (``get_time_now`` declared without ``parameters``,
    ``tool_choice="required"``) returned made-up arguments in 2 of 4 runs and ran to
    ``max_tokens`` in the other 2; OpenAI's definition makes it a function of no arguments."""
    app, key = served
    tool = {"type": "function", "function": {
        "name": "get_time_now", "description": "The current time in UTC."}}

    async def one(client: openai.AsyncOpenAI, i: int) -> tuple[str, str, str | None]:
        resp = await client.chat.completions.create(
            model="appliance-model", tools=[tool], tool_choice="required", max_tokens=120,
            messages=[{"role": "user", "content": f"What time is it now? ({i})"}],
            temperature=0.7)
        calls = resp.choices[0].message.tool_calls or []
        assert len(calls) >= 1, resp
        return calls[0].function.name, calls[0].function.arguments, resp.choices[0].finish_reason

    async def run() -> list[tuple[str, str, str | None]]:
        async with _client(app, key) as client:
            return await asyncio.gather(*(one(client, i) for i in range(20)))

    results = asyncio.run(run())
    assert [(name, args) for name, args, _ in results] == [("get_time_now", "{}")] * 20
    assert {finish for _, _, finish in results} <= {"tool_calls", "stop"}  # never "length"


def test_request_without_key_gets_401(served: tuple[Appliance, str]) -> None:
    app, _ = served

    async def run() -> None:
        async with _client(app, "not-a-valid-key") as client:
            await client.models.list()

    with pytest.raises(openai.AuthenticationError) as info:
        asyncio.run(run())
    assert info.value.status_code == 401


def test_unique_items_schema_gets_400(served: tuple[Appliance, str]) -> None:
    app, key = served
    tool = json.loads(json.dumps(WEATHER_TOOL))
    tool["function"]["parameters"]["properties"]["tags"] = {
        "type": "array", "items": {"type": "string"}, "uniqueItems": True}

    async def run() -> None:
        async with _client(app, key) as client:
            await client.chat.completions.create(
                model="appliance-model", tools=[tool], tool_choice="required",
                messages=[{"role": "user", "content": "weather?"}], max_tokens=16)

    with pytest.raises(openai.BadRequestError) as info:
        asyncio.run(run())
    assert info.value.status_code == 400
    assert "uniqueItems" in str(info.value)


# ---- refusals: `appliance serve` must stop before the engine starts -------------------------

def _serve(model_dir: Path, public_key: Path, tmp_path: Path,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    keys = tmp_path / "keys.txt"
    keys.write_text(secrets.token_urlsafe(16) + "\n")
    return subprocess.run(
        [sys.executable, "-m", "appliance.cli", "serve", "--model", str(model_dir),
         "--policy", str(POLICY), "--public-key", str(public_key), "--api-key-file", str(keys),
         "--port", "0"],
        capture_output=True, text=True, timeout=300, env=env or dict(os.environ), cwd=REPO)


def _assert_refused(proc: subprocess.CompletedProcess[str], code: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert f"error[{code}]" in proc.stderr, proc.stderr
    assert "engine: starting" not in proc.stderr
    assert "Traceback" not in proc.stderr


def _copy(model: PreparedModel, tmp_path: Path) -> Path:
    dest = tmp_path / "model"
    shutil.copytree(model.model_dir, dest)
    return dest


def test_serve_refuses_unsigned_model(model: PreparedModel, tmp_path: Path) -> None:
    copy = _copy(model, tmp_path)
    (copy / "model.sig").unlink()
    _assert_refused(_serve(copy, model.public_key, tmp_path), "signature_missing")


def test_serve_refuses_tampered_model(model: PreparedModel, tmp_path: Path) -> None:
    copy = _copy(model, tmp_path)
    cfg = copy / "config.json"
    cfg.write_text(cfg.read_text().replace('"num_hidden_layers": 30', '"num_hidden_layers": 29'))
    _assert_refused(_serve(copy, model.public_key, tmp_path), "digest_mismatch")


def test_serve_refuses_folder_with_pickle_bin(model: PreparedModel, tmp_path: Path) -> None:
    from appliance import signing

    copy = _copy(model, tmp_path)
    (copy / "model.sig").unlink()
    # A harmless protocol-2 pickle of an empty dict, named like a PyTorch checkpoint.
    (copy / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    signing.sign(copy, model.private_key)  # signed by the trusted key: only the scan stops it
    _assert_refused(_serve(copy, model.public_key, tmp_path), "scan_refused")


def test_serve_refuses_vllm_below_floor(model: PreparedModel, tmp_path: Path) -> None:
    fake = tmp_path / "site"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text("raise SystemExit('never imported')\n")
    info = fake / "vllm-0.13.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.13.0\n")
    (info / "RECORD").write_text("vllm/__init__.py,,\n")
    env = {**os.environ, "PYTHONPATH": f"{fake}{os.pathsep}{REPO}"}
    proc = _serve(model.model_dir, model.public_key, tmp_path, env)
    _assert_refused(proc, "package_below_floor")
    assert "0.13.0" in proc.stderr and "GHSA-" in proc.stderr


# ---- engine-not-exposed (vllm-project/vllm#58144, #18892) -----------------------------------

def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                pids.append(int(entry.name))
    return pids


def _listening_tcp(pids: list[int]) -> list[str]:
    """Local addresses of TCP LISTEN sockets owned by ``pids`` (from /proc/net/tcp*)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in (Path("/proc") / str(pid) / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:
                found.append(cols[1])
    return found


def _is_loopback_hex(addr: str) -> bool:
    host = addr.split(":")[0]
    if len(host) == 8:  # IPv4, little-endian hex
        return bytes.fromhex(host)[::-1][0] == 127
    return host in ("00000000000000000000000001000000",)  # ::1


def test_engine_not_exposed(served: tuple[Appliance, str]) -> None:
    import urllib.error
    import urllib.request

    app, key = served
    assert app.runs[0].engine is not None and app.runs[0].engine.proc is not None
    listening = _listening_tcp(_group_pids(app.runs[0].engine.proc.pid))
    assert all(_is_loopback_hex(a) for a in listening), listening
    assert app.runs[0].engine.spec.socket_path.exists()
    assert (app.runs[0].engine.spec.socket_path.parent.stat().st_mode & 0o077) == 0
    paths = [("POST", p) for p in ("/invocations", "/tokenize", "/detokenize", "/pooling",
                                   "/score", "/rerank", "/collective_rpc", "/update_weights",
                                   "/sleep", "/reset_prefix_cache", "/v1/load_lora_adapter")]
    paths += [("GET", p) for p in ("/version", "/docs", "/redoc", "/load")]
    for method, path in paths:
        req = urllib.request.Request(f"http://127.0.0.1:{app.port}{path}", method=method,
                                     data=b"{}" if method == "POST" else None,
                                     headers={"Authorization": f"Bearer {key}",
                                              "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=10)
        assert info.value.code == 404, (path, info.value.code)
    # /openapi.json is the gateway's own document (appliance/gateway/http/openapi.py), not vLLM's.
    req = urllib.request.Request(f"http://127.0.0.1:{app.port}/openapi.json",
                                 headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        doc = json.loads(resp.read())
    assert doc["info"]["title"] == "model-appliance gateway"
    assert "/tokenize" not in doc["paths"] and "/v1/chat/completions" in doc["paths"]


# ---- automap-import-without-trust (GHSA-2pc9-4j83-qjmr) with the scan bypassed -------------

def test_automap_import_without_trust_engine_start_never_imports(tmp_path: Path) -> None:
    from appliance.engine.launcher import Engine, EngineSpec
    from appliance.errors import LaunchError

    sys.path.insert(0, str(REPO / "tests" / "engine"))
    try:
        from test_launcher_public_bugs import automap_canary_model
    finally:
        sys.path.pop(0)
    canary = tmp_path / "CANARY"
    model_dir = automap_canary_model(tmp_path, canary)
    (model_dir / "chat_template.jinja").write_text("{{ messages }}")
    policy = load_policy(POLICY)
    engine = Engine(EngineSpec(model_dir=model_dir, served_name="canary",
                               engine=policy.engine, runtime_dir=tmp_path / "run"))
    engine.start()  # scan deliberately bypassed: the engine itself must not trust the code
    try:
        with pytest.raises(LaunchError) as info:
            engine.wait_ready(timeout_s=240)
        assert info.value.code == "engine_exited"
    finally:
        engine.stop()
    assert not canary.exists(), canary.read_text()


def test_genai_metrics_move_by_the_engines_usage(served: tuple[Appliance, str]) -> None:
    """Issue 33 on the real engine: a plain and a streamed request move the token usage,
    time-to-first-token and time-per-output-token series by exactly their usage; the
    advisory list in force is exported for the stale-list alert."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    app, key = served
    base, auth = f"http://127.0.0.1:{app.port}", {"Authorization": f"Bearer {key}"}

    def series() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        text = httpx.get(base + "/metrics", headers=auth, timeout=30).text
        return {(s.name, frozenset(s.labels.items())): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}

    def moved(before: dict[Any, float], after: dict[Any, float], name: str,
              **labels: str) -> float:
        want = set(labels.items())
        return sum(v for (n, ls), v in after.items() if n == name and want <= ls) - sum(
            v for (n, ls), v in before.items() if n == name and want <= ls)

    body = {"model": "appliance-model", "max_tokens": 12, "temperature": 0,
            "messages": [{"role": "user", "content": "Count from one to twenty in words."}]}
    before = series()
    plain = httpx.post(base + "/v1/chat/completions", json=body, headers=auth, timeout=300)
    assert plain.status_code == 200
    usage = plain.json()["usage"]
    streamed = httpx.post(base + "/v1/chat/completions", headers=auth, timeout=300, json={
        **body, "stream": True, "stream_options": {"include_usage": True}})
    events = [json.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: {")]
    stream_usage = events[-1]["usage"]
    after = series()
    tokens = "gen_ai_client_token_usage_sum"
    assert moved(before, after, tokens, gen_ai_token_type="input") == \
        usage["prompt_tokens"] + stream_usage["prompt_tokens"]
    assert moved(before, after, tokens, gen_ai_token_type="output") == \
        usage["completion_tokens"] + stream_usage["completion_tokens"]
    for stream in ("true", "false"):
        for name in ("gen_ai_server_time_to_first_token_seconds_count",
                     "gen_ai_server_time_per_output_token_seconds_count"):
            assert moved(before, after, name, stream=stream) == 1, (name, stream)
        assert moved(before, after, "gen_ai_server_time_to_first_token_seconds_sum",
                     stream=stream) > 0
    assert after[("appliance_advisory_list_serial", frozenset())] >= 2026120300
