"""Two models on one appliance (``[[models]]``, issue 23), on the real vLLM CPU engine: the
built-in SmolLM2 (a signed folder) and a small random-weight model built here
(``tiny_model.py``), signed and imported into the appliance's store. Each is verified,
scanned and served by its own supervised engine bound to its own core; one gateway routes
by ``model``, lists both in ``/v1/models``, enforces a key's model allow-list, and keeps
serving one model while the other's engine is killed and restarted.

Two CPU engines, one after the other (~1-3 minutes on the shared 2-core machine kind).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from appliance.builtin.model import prepare
from appliance.config.keys import KeyLimits, add_key
from appliance.config.policy import load_policy
from appliance.serve import Appliance
from appliance.signing import sign
from appliance.store import Store, import_model

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    app: Appliance
    url: str
    everyone: str  # a key that may use both models
    tiny_only: str  # a key whose models list is ["tiny"]
    logs: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from tiny_model import build  # tests/e2e (module of this folder)

    root = tmp_path_factory.mktemp("models")
    model = prepare()
    tiny = build(model.model_dir, root / "tiny-src", seed=3)
    sign(tiny, model.private_key)
    import_model(Store(root / "store"), tiny, model.public_key, name="tiny")
    keys = root / "keys.json"
    everyone = add_key(keys, "everyone", KeyLimits())
    tiny_only = add_key(keys, "tiny-only", KeyLimits(models=("tiny",)))
    logs = root / "logs"
    (root / "policy.toml").write_text(f"""\
schema_version = 1
[engine]
device = "cpu"
tool_call_parser = "hermes"
chat_template = "chat_template.jinja"
max_model_len = 2048
dtype = "bfloat16"
max_num_seqs = 8
startup_timeout_s = 600
enforce_eager = true
[engine.cpu]
kvcache_space_gib = 1

[[models]]
served_name = "smol"
model = "{model.model_dir}"
[models.engine.cpu]
omp_threads_bind = "0"

[[models]]
served_name = "tiny"
model = "tiny"
[models.engine]
max_model_len = 1024
[models.engine.cpu]
omp_threads_bind = "1"

[preflight]
advisories = "{REPO / 'policies' / 'advisories.json'}"
packages = ["vllm", "torch", "transformers", "xgrammar"]
[gateway]
max_tokens_cap = 64
request_timeout_s = 300
[store]
root = "{root / 'store'}"
allow_owner_serve = true
[supervisor]
log_dir = "{logs}"
restart_backoff_initial_s = 1.0
[admission]
keys_file = "{keys}"
""")
    app = Appliance(policy=load_policy(root / "policy.toml"), model_dir=Path("unused"),
                    public_key=model.public_key, api_keys=[], host="127.0.0.1", port=0)
    started = time.monotonic()
    app.start()
    print(f"\ntwo engines ready after {time.monotonic() - started:.1f} s "
          f"(engines {app.timings.engine_ready_s:.1f} s)")
    try:
        yield Served(app, f"http://127.0.0.1:{app.port}", everyone, tiny_only, logs)
    finally:
        app.stop()


def _client(served: Served, key: str) -> httpx.Client:
    return httpx.Client(base_url=served.url, timeout=300,
                        headers={"Authorization": f"Bearer {key}"})


def _chat(model: str) -> dict[str, object]:
    return {"model": model, "max_tokens": 8,
            "messages": [{"role": "user", "content": "Say hello."}]}


def test_two_models_routed_by_model_with_allow_lists(served: Served) -> None:
    with _client(served, served.everyone) as c:
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["smol", "tiny"]
        assert c.get("/health/ready").json() == {
            "status": "ready", "models": {"smol": "ready", "tiny": "ready"}}
        for name in ("smol", "tiny"):
            r = c.post("/v1/chat/completions", json=_chat(name))
            assert r.status_code == 200, r.text
            assert r.json()["model"] == name  # the engine of that model answered
        r = c.post("/v1/chat/completions", json=_chat("nope"))
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    with _client(served, served.tiny_only) as c:
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["tiny"]
        r = c.post("/v1/chat/completions", json=_chat("smol"))
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "model_not_allowed"
        assert "'smol'" in r.json()["error"]["message"]
        assert c.post("/v1/chat/completions", json=_chat("tiny")).status_code == 200
    runs = {run.served.served_name: run for run in served.app.runs}
    assert runs["tiny"].staged.is_relative_to(served.app.policy.store.root)  # in place
    assert runs["smol"].spec is not None and runs["tiny"].spec is not None
    assert runs["smol"].spec.socket_path != runs["tiny"].spec.socket_path
    assert {p.name for p in served.logs.iterdir()} >= {"engine-smol.log", "engine-tiny.log"}


def test_concurrent_requests_to_both_models_each_answered_by_its_engine(
        served: Served) -> None:
    """24 requests at once, half per model, streamed and not: every one 200 from the
    engine of its model, and neither engine died or restarted under the mixed load."""

    async def one(client: httpx.AsyncClient, model: str, stream: bool) -> tuple[int, str]:
        body = {**_chat(model), "stream": stream}
        if not stream:
            r = await client.post("/v1/chat/completions", json=body)
            return r.status_code, r.json().get("model", "") if r.status_code == 200 else r.text
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            named = ""
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    named = named or json.loads(line[6:]).get("model", "")
            return r.status_code, named

    async def burst() -> list[tuple[int, str]]:
        async with httpx.AsyncClient(base_url=served.url, timeout=300, headers={
                "Authorization": f"Bearer {served.everyone}"}) as client:
            return list(await asyncio.gather(*(
                one(client, ("smol", "tiny")[i % 2], i % 4 >= 2) for i in range(24))))

    restarts = {r.served.served_name: r.supervisor.status.restarts
                for r in served.app.runs if r.supervisor is not None}
    answers = asyncio.run(burst())
    assert answers == [(200, ("smol", "tiny")[i % 2]) for i in range(24)], answers
    assert {r.served.served_name: r.supervisor.status.restarts
            for r in served.app.runs if r.supervisor is not None} == restarts
    assert all(r.supervisor is not None and r.supervisor.status.ready
               for r in served.app.runs)


def test_killed_engine_refuses_its_model_only_and_comes_back(served: Served) -> None:
    run = next(r for r in served.app.runs if r.served.served_name == "tiny")
    sup = run.supervisor
    assert sup is not None and sup.engine is not None
    os.kill(sup.engine.proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    while sup.status.ready:
        assert time.monotonic() - killed < 10, "tiny still ready 10 s after the kill"
        time.sleep(0.05)
    with _client(served, served.everyone) as c:
        r = c.post("/v1/chat/completions", json=_chat("tiny"))
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_restarting"
        assert "retry-after" in r.headers
        assert c.post("/v1/chat/completions", json=_chat("smol")).status_code == 200
        ready = c.get("/health/ready")
        assert ready.status_code == 200 and ready.json()["status"] == "degraded"
        assert ready.json()["models"]["smol"] == "ready"
        while not sup.status.ready:
            assert time.monotonic() - killed < 300, "tiny not back within 300 s"
            time.sleep(0.5)
        back = time.monotonic() - killed
        r = c.post("/v1/chat/completions", json=_chat("tiny"))
        assert r.status_code == 200, r.text
    log = (served.logs / "engine-tiny.log").read_text(errors="replace")
    assert "engine start #2" in log
    assert "engine start #2" not in (served.logs / "engine-smol.log").read_text(
        errors="replace")
    print(f"\ntiny killed: smol kept serving; tiny back after {back:.1f} s")
