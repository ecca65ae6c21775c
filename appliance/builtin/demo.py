"""``appliance demo``: the whole spine on the built-in model, then one real tool call.

Prints ``base_url=...`` and ``api_key=...`` (for scripts) before the first request, then the
validated ``get_weather`` call; keeps serving until interrupted unless ``once``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import jsonschema

from appliance.builtin.model import prepare
from appliance.config.policy import load_policy
from appliance.engine.stopping import SIGNALS, signal_name
from appliance.serve import Appliance, say

_T = TypeVar("_T")

WEATHER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 40},
        "unit": {"type": "string", "enum": ["c", "f"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city, in Celsius (c) or Fahrenheit (f).",
        "parameters": WEATHER_PARAMETERS,
    },
}


async def weather_call(
    base_url: str, api_key: str, model: str, question: str = "What is the weather in Paris?",
) -> tuple[str, dict[str, Any]]:
    """One ``tool_choice="required"`` request through the official ``openai`` SDK.

    Returns (function name, parsed arguments) after validating them against the schema."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        response = await client.chat.completions.create(  # type: ignore[call-overload]
            model=model, messages=[{"role": "user", "content": question}],
            tools=[WEATHER_TOOL], tool_choice="required", max_tokens=128, temperature=0,
        )
    calls = response.choices[0].message.tool_calls or []
    if not calls:
        raise RuntimeError(f"no tool call returned: {response.choices[0].message.content!r}")
    function = calls[0].function
    arguments = json.loads(function.arguments)
    jsonschema.validate(arguments, WEATHER_PARAMETERS)
    return function.name, arguments


async def _unless_stopped(call: Coroutine[Any, Any, _T]) -> _T | None:
    """Await ``call`` unless a stop signal comes first (then cancel it, return None):
    the demo's first call polls the stop request instead of having it raised inside the
    event loop, where the SDK's cancellation handling could lose it."""
    task = asyncio.ensure_future(call)
    while not task.done():
        if SIGNALS.requested:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return None
        await asyncio.wait({task}, timeout=0.1)
    return task.result()


def run_demo(policy_path: Path, port: int = 0, once: bool = False) -> int:
    """The demo (see the module docstring). A stop signal in any phase raises
    :class:`~appliance.engine.stopping.Stopped` after everything started is stopped."""
    start = time.monotonic()
    model = prepare()
    say(f"built-in model {'cached' if model.cached else 'prepared'} in {model.seconds:.1f} s: "
        f"{model.model_dir}")
    policy = load_policy(policy_path)
    api_key = secrets.token_urlsafe(32)
    app = Appliance(policy=policy, model_dir=model.model_dir, public_key=model.public_key,
                    api_keys=[api_key], host="127.0.0.1", port=port)
    app.start()
    try:
        base_url = f"http://127.0.0.1:{app.port}/v1"
        print(f"base_url={base_url}", flush=True)
        print(f"api_key={api_key}", flush=True)
        t0 = time.monotonic()
        with SIGNALS.critical():  # a stop signal during the call is raised after it
            result = asyncio.run(_unless_stopped(
                weather_call(base_url, api_key, policy.model.served_name)))
        if result is None:  # pragma: no cover - critical() raised Stopped
            raise RuntimeError("first call cancelled")
        name, arguments = result
        print(f"tool_call={name} {json.dumps(arguments, sort_keys=True)}", flush=True)
        say(f"tool call valid against its schema ({time.monotonic() - t0:.2f} s); "
            f"demo wall time to first call {time.monotonic() - start:.1f} s "
            f"(engine ready after {app.timings.engine_ready_s:.1f} s)")
        if once:
            app.stop()
            return 0
        with SIGNALS.polled():  # a stop signal from the line on: wait() drains
            say("serving until interrupted (Ctrl-C)")
            return app.wait()
    except BaseException as exc:  # a stop signal in any phase (Stopped) included
        if SIGNALS.caught(exc):
            say(f"received {signal_name(exc.signum)}: stopping")
        app.stop()
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_demo(Path(sys.argv[1])))
