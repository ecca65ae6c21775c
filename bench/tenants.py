"""Cross-tenant prefix-cache timing on the real CPU engine (issue 31).

Rig: the built-in signed model served by ``Appliance`` under ``policies/cpu-demo.toml``
(vLLM CPU engine, prefix caching on, its default) with two plain API keys A and B, and its
gateway's ``[gateway] cache_isolation = "key"`` (the default); beside it, a second gateway in
front of the *same* engine (its Unix socket and key) with ``cache_isolation = "none"``, so
both modes are measured against one engine in one run.

Each request is a chat completion with ``max_tokens = 1`` whose ~1,000-token user message
starts with a fresh random nonce (no earlier prompt shares a block with it); its latency is
the time to the first (and only) token. Per round and per mode, alternating the order of the
modes from round to round:

* ``seed``: A sends a fresh prompt P (a cold prefill);
* ``other``: B sends P;
* ``own``: A sends P again (only with ``key``: A's own repeat keeps its hit);
* ``fresh``: A sends another fresh prompt (the cold baseline of this moment).

Reported: medians per kind and the ratios ``other / fresh`` and ``own / fresh`` per mode.
Expected: with ``key``, ``other / fresh`` about 1 (B gets no cache hit on A's prompt) and
``own / fresh`` well below 1; with ``none``, ``other / fresh`` well below 1 (the leak the
salt closes). Medians over rounds, ratios within one run: the machine's load moves both.

Usage::

    PYTHONPATH=. python bench/tenants.py [--rounds 5] [--words 900] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
POLICY = REPO / "policies" / "cpu-demo.toml"
WORDS = ("river stone garden window paper yellow market silver morning travel letter "
         "number forest candle winter orange pocket bridge summer engine harbor planet "
         "coffee island marble violin basket rocket shadow pillow").split()


@dataclass
class Rig:
    """The served appliance (isolating gateway) and the shared-cache gateway beside it."""

    isolated_url: str
    shared_url: str
    key_a: str
    key_b: str
    model: str


def prompt(words: int, rng: random.Random) -> str:
    """A fresh ~``words``-token prompt: a random nonce first, then common words."""
    return (f"Confidential memo {secrets.token_hex(8)}. " +
            " ".join(rng.choice(WORDS) for _ in range(words)) +
            "\nReply with one word.")


@contextmanager
def started() -> Iterator[Rig]:
    """Start the appliance (two keys) and the ``cache_isolation = "none"`` gateway beside
    it; stop both on exit."""
    from appliance.builtin.model import prepare
    from appliance.config.policy import load_policy
    from appliance.gateway import GatewaySettings, start_in_thread
    from appliance.serve import Appliance

    key_a, key_b = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    model = prepare()
    policy = load_policy(POLICY)
    app = Appliance(policy=policy, model_dir=model.model_dir, public_key=model.public_key,
                    api_keys=[key_a, key_b], host="127.0.0.1", port=0)
    app.start()
    shared = None
    try:
        engine = app.runs[0].engine
        assert engine is not None
        spec = engine.spec
        shared = start_in_thread(GatewaySettings(
            models=[{"name": spec.served_name, "upstream_uds": spec.socket_path,
                     "upstream_api_key": spec.api_key}],
            api_keys=[key_a, key_b], cache_isolation="none", request_timeout_s=300.0,
            max_tokens_cap=policy.gateway.max_tokens_cap))
        yield Rig(f"http://127.0.0.1:{app.port}", shared.url, key_a, key_b, spec.served_name)
    finally:
        if shared is not None:
            shared.stop()
        app.stop()


def timed(client: httpx.Client, url: str, key: str, model: str, text: str,
          usage: list[dict[str, Any]] | None = None) -> float:
    """Seconds to the first token of one ``max_tokens = 1`` chat completion (its ``usage``
    appended to ``usage`` when given)."""
    body = {"model": model, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": text}]}
    t0 = time.perf_counter()
    resp = client.post(url + "/v1/chat/completions", json=body,
                       headers={"Authorization": f"Bearer {key}"})
    elapsed = time.perf_counter() - t0
    if resp.status_code != 200:
        raise RuntimeError(f"{resp.status_code}: {resp.text[:300]}")
    if usage is not None:
        usage.append(resp.json().get("usage") or {})
    return elapsed


def one_round(rig: Rig, client: httpx.Client, mode: str, words: int,
              rng: random.Random, usage: list[dict[str, Any]]) -> dict[str, float]:
    """One round of ``mode`` (``"key"``: the isolating gateway, ``"none"``: the shared);
    the ``usage`` B's request returned is appended to ``usage``."""
    url = rig.isolated_url if mode == "key" else rig.shared_url
    text = prompt(words, rng)
    out = {"seed": timed(client, url, rig.key_a, rig.model, text),
           "other": timed(client, url, rig.key_b, rig.model, text, usage)}
    if mode == "key":
        out["own"] = timed(client, url, rig.key_a, rig.model, text)
    out["fresh"] = timed(client, url, rig.key_a, rig.model, prompt(words, rng))
    return out


def measure(rig: Rig, rounds: int = 5, words: int = 900, log: Any = None) -> dict[str, Any]:
    """``rounds`` alternating rounds of both modes; medians (s) and ratios per mode."""
    rng = random.Random(31)
    samples: dict[str, dict[str, list[float]]] = {"key": {}, "none": {}}
    usages: dict[str, list[dict[str, Any]]] = {"key": [], "none": []}
    first: list[dict[str, Any]] = []
    with httpx.Client(timeout=600.0) as client:
        timed(client, rig.isolated_url, rig.key_a, rig.model, prompt(words, rng), first)
        for index in range(rounds):
            for mode in (("key", "none") if index % 2 == 0 else ("none", "key")):
                got = one_round(rig, client, mode, words, rng, usages[mode])
                for kind, value in got.items():
                    samples[mode].setdefault(kind, []).append(value)
                if log is not None:
                    print(f"round {index + 1} {mode:4} " + " ".join(
                        f"{k} {v * 1000:7.0f} ms" for k, v in got.items()), file=log,
                        flush=True)
    result: dict[str, Any] = {"rounds": rounds, "words": words, "samples_s": samples,
                              "prompt_tokens": first[0].get("prompt_tokens"),
                              "other_usage": usages}
    for mode, kinds in samples.items():
        medians = {k: statistics.median(v) for k, v in kinds.items()}
        result[mode] = {"median_s": medians, "other_vs_fresh":
                        medians["other"] / medians["fresh"]}
        if "own" in medians:
            result[mode]["own_vs_fresh"] = medians["own"] / medians["fresh"]
    return result


def report(result: dict[str, Any]) -> str:
    """The result as a small table."""
    lines = [f"# {result['rounds']} rounds, {result['prompt_tokens']}-token prompts, "
             f"max_tokens 1; load {result.get('load', '?')}",
             "| cache_isolation | fresh ms | A's repeat ms | B on A's prompt ms | "
             "A repeat / fresh | B / fresh |", "|---|---|---|---|---|---|"]
    for mode in ("key", "none"):
        row = result[mode]
        med = row["median_s"]
        own = f"{med['own'] * 1000:.0f}" if "own" in med else "-"
        own_ratio = f"{row['own_vs_fresh']:.2f}" if "own_vs_fresh" in row else "-"
        lines.append(f"| {mode} | {med['fresh'] * 1000:.0f} | {own} | "
                     f"{med['other'] * 1000:.0f} | {own_ratio} | "
                     f"{row['other_vs_fresh']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--words", type=int, default=900)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with started() as rig:
        result = measure(rig, args.rounds, args.words, log=sys.stdout)
    result["load"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(report(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
