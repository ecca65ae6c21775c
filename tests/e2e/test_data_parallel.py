"""``data_parallel_size = 2`` through the serving spine (verify -> scan -> preflight -> vLLM
with two data-parallel engine cores, one core each -> gateway): the demo's required tool
call is valid, and both engine cores serve (vLLM's ``/metrics`` labels its engine index).

Real CPU engine with two engine cores (2-6 minutes on the shared 2-core machine kind);
switched on with the cluster tests (``APPLIANCE_CLUSTER_TESTS=1``, .ci/run).
Throughput per core: ``bench/data_parallel.py`` (bench/README.md).
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from appliance.builtin.demo import WEATHER_PARAMETERS, weather_call
from appliance.builtin.model import prepare
from appliance.config.policy import load_policy
from appliance.engine.launcher import engine_get
from appliance.serve import Appliance

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Appliance, str]]:
    if os.environ.get("APPLIANCE_CLUSTER_TESTS") != "1":
        pytest.skip("scale test: set APPLIANCE_CLUSTER_TESTS=1 (.ci/run does; two engine "
                    "cores, minutes)")
    folder = tmp_path_factory.mktemp("dp")
    body = (REPO / "policies" / "cpu-demo.toml").read_text()
    body = body.replace('omp_threads_bind = "0-1"', 'omp_threads_bind = "0|1"')
    body = body.replace('advisories = "advisories.json"',
                        f'advisories = "{REPO / "policies" / "advisories.json"}"')
    body += f'\n[engine.parallel]\ndata_parallel_size = 2\n[supervisor]\nlog_dir = "{folder}"\n'
    (folder / "dp2.toml").write_text(body)
    model = prepare()
    key = secrets.token_urlsafe(24)
    app = Appliance(policy=load_policy(folder / "dp2.toml"), model_dir=model.model_dir,
                    public_key=model.public_key, api_keys=[key], host="127.0.0.1", port=0)
    app.start()
    try:
        yield app, key
    finally:
        app.stop()


def test_dp2_serves_the_demo_tool_call_on_both_engine_cores(
        served: tuple[Appliance, str]) -> None:
    app, key = served
    base = f"http://127.0.0.1:{app.port}/v1"

    async def calls() -> list[tuple[str, dict[str, object]]]:
        return await asyncio.gather(*[weather_call(base, key, "appliance-model")
                                      for _ in range(6)])

    for name, arguments in asyncio.run(calls()):
        assert name == "get_weather"
        jsonschema.validate(arguments, WEATHER_PARAMETERS)
    assert app.runs[0].engine is not None
    status, metrics = engine_get(app.runs[0].engine.spec.socket_path, "/metrics",
                                 app.runs[0].engine.spec.api_key)
    assert status == 200
    served_by = {m.group(1) for m in re.finditer(
        rb'^vllm:request_success_total\{[^}]*engine="(\d+)"[^}]*\} ([1-9][0-9.e+]*)$',
        metrics, re.M)}
    assert served_by == {b"0", b"1"}, metrics.decode()[:3000]
