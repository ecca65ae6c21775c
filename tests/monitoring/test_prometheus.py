"""The shipped Prometheus rules and Grafana dashboard (issue 33, docs/metrics.md), checked
with Debian's ``prometheus`` package: ``promtool check rules``, ``promtool test rules`` with
fixtures (``rules_test.yml``), a real Prometheus scraping a running gateway on loopback and
evaluating the rules, and every series a dashboard query or rule names is one the appliance
exports (or a recording rule of the shipped file).

``promtool`` / ``prometheus`` missing: these tests skip with the reason, unless
``APPLIANCE_REQUIRE_PROMETHEUS=1`` (``.ci/run`` sets it once it installed the package), then
they fail.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))

from gw_fake_engine import FakeEngine, Reply, completion  # noqa: E402
from gw_helpers import AUTH, KEY, chat_body, make_settings  # noqa: E402
from gw_tls import Pki  # noqa: E402

from appliance.gateway import GatewayHandle, start_in_thread  # noqa: E402
from appliance.resources import policy_path  # noqa: E402

HERE = Path(__file__).resolve().parent
RULES = policy_path("prometheus-rules.yml")
DASHBOARD = policy_path("grafana-dashboard.json")
RULES_TEST = HERE / "rules_test.yml"
REQUIRED = os.environ.get("APPLIANCE_REQUIRE_PROMETHEUS") == "1"
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
                "and", "or", "unless", "offset", "inf", "nan"}


def tool(name: str) -> str:
    """The path of ``name`` (Debian package ``prometheus``), or skip / fail."""
    found = shutil.which(name)
    if found is None:
        message = f"{name} not installed (apt-get install prometheus)"
        if REQUIRED:
            pytest.fail(message + " but APPLIANCE_REQUIRE_PROMETHEUS=1")
        pytest.skip(message)
    return found


def rule_docs() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression reads (label matchers, groupings, ranges,
    strings and function names removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        after = text[match.end():].lstrip()
        word = match.group()
        if after.startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def exported(text: str) -> set[str]:
    """Every series name a ``/metrics`` page declares (histograms: bucket, sum, count;
    counters: total, created), samples or not."""
    names = set()
    for family in text_string_to_metric_families(text):
        kind = family.type
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum",
                                                                    "_count", "_created"),
                    "summary": ("_sum", "_count", "_created")}.get(kind, ("",))
        names.update(family.name + s for s in suffixes)
    return names


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def engine() -> Iterator[FakeEngine]:
    eng = FakeEngine().start()
    yield eng
    eng.stop()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def gateway(engine: FakeEngine, pki: Pki) -> Iterator[GatewayHandle]:
    """A TLS gateway (so the certificate gauge is exported) whose advisory list is 100 days
    old against a 30-day limit (so ``ApplianceAdvisoryListStale`` must fire)."""
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=100)
    handle = start_in_thread(make_settings(
        engine, tls=pki.policy(),
        advisory_list={"timestamp": old.timestamp(), "serial": 2026090100,
                       "max_age_days": 30}))
    yield handle
    handle.stop()


def test_promtool_check_rules() -> None:
    out = subprocess.run([tool("promtool"), "check", "rules", str(RULES)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rule_docs())} rules found" in out.stdout


def test_promtool_test_rules(tmp_path: Path) -> None:
    # the fixture names the rules by their source path; run it against the shipped copy
    fixture = yaml.safe_load(RULES_TEST.read_text())
    fixture["rule_files"] = [str(RULES)]
    (tmp_path / "rules_test.yml").write_text(yaml.safe_dump(fixture))
    out = subprocess.run([tool("promtool"), "test", "rules", "rules_test.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_every_alert_has_a_firing_fixture() -> None:
    alerts = {r["alert"] for r in rule_docs() if "alert" in r}
    assert len(alerts) >= 10
    fixture = yaml.safe_load(RULES_TEST.read_text())
    fired = {case["alertname"] for test in fixture["tests"]
             for case in test.get("alert_rule_test", ()) if case.get("exp_alerts")}
    assert alerts == fired


def test_dashboard_and_rules_name_only_exported_series(gateway: GatewayHandle,
                                                       pki: Pki) -> None:
    with httpx.Client(verify=pki.context(), timeout=10) as client:
        page = client.get(gateway.url + "/metrics", headers=AUTH).text
    names = exported(page)
    recorded = {r["record"] for r in rule_docs() if "record" in r}
    known = names | recorded | {"up"}
    rules_read = set().union(*(metric_names(r["expr"]) for r in rule_docs()))
    assert rules_read - known == set()
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(queries) >= 14
    read = set().union(*(metric_names(q) for q in queries))
    assert read - known == set()
    assert {"gen_ai_client_token_usage_sum", "gen_ai_server_time_to_first_token_seconds_bucket",
            "gateway_tool_call_outcomes_total", "appliance_model_engine_up",
            "gateway_tls_certificate_expiry_seconds",
            "appliance_advisory_list_timestamp_seconds"} <= read | rules_read
    # the checker itself: a made-up series is caught
    assert metric_names('rate(no_such_series{job="x"}[5m])') == {"no_such_series"}


def _query(base: str, expr: str) -> list[Any]:
    url = f"{base}/api/v1/query?query={urllib.parse.quote(expr)}"
    body = httpx.get(url, timeout=5).json()
    assert body["status"] == "success", body
    result: list[Any] = body["data"]["result"]
    return result


def _until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
        except httpx.HTTPError:
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.5)


def test_real_prometheus_scrapes_the_gateway_and_evaluates_the_rules(
        gateway: GatewayHandle, engine: FakeEngine, pki: Pki, tmp_path: Path) -> None:
    binary = tool("prometheus")
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{
            "job_name": "appliance", "scheme": "https",
            "authorization": {"type": "Bearer", "credentials": KEY},
            "tls_config": {"ca_file": str(pki.root / "ca.pem")},
            "static_configs": [{"targets": [f"127.0.0.1:{gateway.port}"]}]}],
    }
    pki.ca.cert_pem.write_to_path(str(pki.root / "ca.pem"))
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(  # noqa: S603 - the Debian binary, loopback only
        [binary, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _until(lambda: _query(base, 'up{job="appliance"} == 1'), 60, "the scrape target up")
        engine.reply = Reply(body=completion({"content": "hi"}))
        with httpx.Client(verify=pki.context(), timeout=10) as client:
            for _ in range(3):
                assert client.post(gateway.url + "/v1/chat/completions", json=chat_body(),
                                   headers=AUTH).status_code == 200
        tokens = _until(lambda: _query(
            base, 'sum(gen_ai_client_token_usage_sum{gen_ai_token_type="output"})'),
            30, "the token series")
        assert float(tokens[0]["value"][1]) >= 15  # 3 requests x 5 output tokens
        _until(lambda: _query(base, "appliance:gen_ai_tokens:rate5m"), 30,
               "the recording rule's result")
        alerts = _until(lambda: [a for a in httpx.get(base + "/api/v1/alerts", timeout=5)
                                 .json()["data"]["alerts"]
                                 if a["labels"]["alertname"] == "ApplianceAdvisoryListStale"
                                 and a["state"] == "firing"], 30, "the stale-list alert")
        assert alerts[0]["labels"]["job"] == "appliance"
        groups = httpx.get(base + "/api/v1/rules", timeout=5).json()["data"]["groups"]
        evaluated = [r for g in groups for r in g["rules"]]
        assert len(evaluated) == len(rule_docs())
        assert all(r["health"] == "ok" for r in evaluated), [
            (r["name"], r.get("lastError")) for r in evaluated if r["health"] != "ok"]
        firing = {a["labels"]["alertname"] for a in httpx.get(
            base + "/api/v1/alerts", timeout=5).json()["data"]["alerts"]}
        assert firing == {"ApplianceAdvisoryListStale"}  # a healthy gateway raises no other
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
