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

Time-box: ``MAX_EXAMPLES`` per operation and phase, no deadline; about 60 s on 2 busy cores.
"""

from __future__ import annotations

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
from appliance.gateway.openapi import build_document

# Per operation and phase; APPLIANCE_FUZZ_EXAMPLES=500 for a longer campaign by hand.
MAX_EXAMPLES = int(os.environ.get("APPLIANCE_FUZZ_EXAMPLES", "40"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance, negative_data_rejection]
SEEN: Counter[tuple[str, int]] = Counter()




def fuzz_settings(upstream_url: str) -> GatewaySettings:
    return GatewaySettings(upstream_url=upstream_url, served_model_name=MODEL, api_keys=[KEY],
                           tools_enabled=True, vocab_size=32000, request_timeout_s=10.0,
                           max_tokens_cap=64)


# The document does not depend on the engine's address: built here at import, since
# schemathesis' lazy fixture loader does not work with pytest 9 (``Function._nodeid``); the
# gateway serves the same document (checked below).
DOCUMENT = build_document(fuzz_settings("http://127.0.0.1:9"))
schema = schemathesis.openapi.from_dict(DOCUMENT)


@pytest.fixture(scope="module")
def fuzz_gateway() -> Iterator[GatewayHandle]:
    engine = FakeEngine().start()
    engine.reply = honest_reply
    handle = start_in_thread(fuzz_settings(engine.url))
    yield handle
    handle.stop()
    engine.stop()


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_schemathesis_fuzz(case: Any, fuzz_gateway: GatewayHandle) -> None:
    response = case.call_and_validate(base_url=fuzz_gateway.url, headers=AUTH, checks=CHECKS,
                                      timeout=20)
    SEEN[(f"{case.method} {case.path}", response.status_code)] += 1


def test_schemathesis_ran_every_operation(fuzz_gateway: GatewayHandle) -> None:
    """The fuzzed document is the one served; the fuzz reached every documented operation and
    saw no 5xx (runs after it)."""
    served = httpx.get(fuzz_gateway.url + "/openapi.json", headers=AUTH, timeout=10.0)
    assert served.status_code == 200 and served.json() == DOCUMENT
    operations = {f"{op.ok().method.upper()} {op.ok().path}"
                  for op in schema.get_all_operations()}
    reached = {op for op, _status in SEEN}
    assert operations <= reached, f"not fuzzed: {sorted(operations - reached)}"
    assert not [k for k in SEEN if k[1] >= 500], SEEN
    print(f"\nschemathesis: {sum(SEEN.values())} cases", dict(sorted(SEEN.items())))
