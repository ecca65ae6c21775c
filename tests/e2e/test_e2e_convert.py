"""End to end: the built-in model written as a PyTorch checkpoint folder (torch.save of its
tensors, its config and tokenizer files beside), converted by ``appliance convert`` (never
unpickled), signed, and served on the real vLLM CPU engine, which answers a tool call."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
from pathlib import Path

import jsonschema
import openai
import pytest
import torch
from safetensors.torch import load_file

from appliance.builtin.demo import WEATHER_PARAMETERS, WEATHER_TOOL
from appliance.builtin.model import PreparedModel, prepare
from appliance.config.policy import load_policy
from appliance.convert import convert
from appliance.serve import Appliance
from appliance.signing import sign

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "policies" / "cpu-demo.toml"


@pytest.fixture(scope="module")
def model() -> PreparedModel:
    return prepare()


def test_converted_checkpoint_serves_a_tool_call(model: PreparedModel, tmp_path: Path) -> None:
    src = tmp_path / "torch-model"
    src.mkdir()
    original = load_file(model.model_dir / "model.safetensors")
    torch.save(original, src / "pytorch_model.bin")  # writing a checkpoint; never loaded
    for path in model.model_dir.iterdir():
        if path.name not in ("model.safetensors", "model.sig"):
            shutil.copy(path, src / path.name)
    out = tmp_path / "converted"
    result = convert(src, out)
    assert result.tensors == len(original)
    converted = load_file(out / "model.safetensors")
    for name, t in original.items():
        assert torch.equal(converted[name].view(torch.uint8), t.view(torch.uint8)), name
    record = json.loads((out / "conversion.json").read_text())
    assert {f["path"] for f in record["source"]["files"]} >= {"pytorch_model.bin",
                                                              "config.json"}
    sign(out, model.private_key)

    key = secrets.token_urlsafe(24)
    app = Appliance(policy=load_policy(POLICY), model_dir=out, public_key=model.public_key,
                    api_keys=[key], host="127.0.0.1", port=0)
    app.start()
    try:
        async def ask() -> openai.types.chat.ChatCompletion:
            async with openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{app.port}/v1",
                                          api_key=key, max_retries=0, timeout=300) as client:
                return await client.chat.completions.create(
                    model="appliance-model", tools=[WEATHER_TOOL], tool_choice="required",
                    messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
                    max_tokens=128, temperature=0)

        resp = asyncio.run(ask())
    finally:
        app.stop()
    calls = resp.choices[0].message.tool_calls or []
    assert calls and calls[0].function.name == "get_weather"
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER_PARAMETERS)
