"""``appliance bench tools --compare``: two fake endpoints that know the accuracy suite's answers,
one of them wrong on chosen cases, run paired; the report must name exactly those flips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from bt_fake_openai import FakeOpenAI  # noqa: E402

from appliance.cli import main  # noqa: E402
from appliance.toolbench.expected import builtin_accuracy, stratified  # noqa: E402

MINI = stratified(builtin_accuracy(), 4)
CASES = {c.question: c for c in MINI}  # a multiple case may repeat a simple case's question


def right_calls(question: str) -> list[dict[str, Any]]:
    """The first allowed value of every non-optional ground-truth argument."""
    out = []
    for call in CASES[question].ground_truth:
        (name, args), = call.items()
        values = {k: next(v for v in allowed if v != "") for k, allowed in args.items()
                  if "" not in allowed}
        out.append({"name": name, "arguments": json.dumps(values)})
    return out


class OracleFake(FakeOpenAI):
    """Answers each accuracy case right, except the questions in ``wrong`` (a call to the
    wrong argument value, or a call where none fits). Keeps every request's tool_choice."""

    def __init__(self, wrong: set[str] | None = None) -> None:
        super().__init__()
        self.wrong = wrong or set()
        self.choices: list[Any] = []

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("max_tokens") == 2:  # the preflight probe
            return await self._answer(body, [], "OK")
        self.choices.append(body.get("tool_choice"))
        question = body["messages"][-1]["content"]
        calls = right_calls(question)
        if question in self.wrong:
            fn = body["tools"][0]["function"]
            calls = ([{"name": fn["name"], "arguments": json.dumps({"city": "Atlantis"})}]
                     if not calls else [{**calls[0], "arguments": "{}"}] + calls[1:])
        return await self._answer(body, calls, None if calls else "No tool fits.")

    async def _answer(self, body: dict[str, Any], calls: list[dict[str, Any]],
                      content: str | None) -> web.Response:
        self.chat_requests += 1
        message = {"role": "assistant", "content": content, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": c} for i, c in enumerate(calls)]}
        return web.json_response({
            "id": "x", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 12, "total_tokens": 22}})


def test_paired_run_reports_exactly_the_flipped_cases(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asked = [c.question for c in MINI]
    by_cat: dict[str, list[str]] = {}
    for c in MINI:
        by_cat.setdefault(c.category, []).append(c.question)
    once = {cat: [q for q in qs if asked.count(q) == 1] for cat, qs in by_cat.items()}
    wrong = {once["simple"][0], once["simple"][1], once["parallel"][0],
             once["irrelevance"][0]}
    ids = {CASES[q].id for q in wrong}
    key = tmp_path / "key"
    key.write_text("k-test\n")
    with OracleFake() as first, OracleFake(wrong) as second:
        status = main(["bench", "tools", "--base-url", first.base_url, "--api-key-file",
                       str(key), "--label", "right", "--suite", "accuracy-mini",
                       "--compare", second.base_url, "--compare-api-key-file", str(key),
                       "--compare-label", "flawed", "--compare-unconstrained",
                       "--concurrency", "3", "--repeat", "1", "--output", str(tmp_path / "o"),
                       "--quiet"])
        assert status == 0
        assert len(first.choices) == len(second.choices) == len(MINI)
    assert set(second.choices) == {"auto"}
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    other = json.loads((tmp_path / "o" / "compare" / "report.json").read_text())
    assert other["label"] == "flawed" and other["complete"]
    cats = report["levels"][0]["summary"]["by_category"]
    assert cats["all"]["accuracy"]["rate"] == 1.0
    assert cats["irrelevance"]["wrong_calls"]["k"] == 0
    ocats = other["levels"][0]["summary"]["by_category"]
    assert ocats["simple"]["accuracy"]["k"] == len(by_cat["simple"]) - 2
    assert ocats["parallel"]["accuracy"]["k"] == len(by_cat["parallel"]) - 1
    assert ocats["irrelevance"]["wrong_calls"]["k"] == 1
    assert ocats["simple"]["ast_reasons"] == {"missing_required": 2}
    assert ocats["all"]["latency_s"]["low"] <= ocats["all"]["latency_s"]["mean"] <= \
        ocats["all"]["latency_s"]["high"]
    paired = report["compare"]["levels"][0]["paired"]
    acc = paired["all"]["accuracy"]
    assert (acc["first_only"], acc["second_only"], acc["both"]) == (4, 0, len(MINI) - 4)
    assert set(acc["first_only_cases"]) == ids and acc["second_only_cases"] == []
    assert acc["mcnemar_p"] == pytest.approx(0.125)  # 4 vs 0 discordant: 2 * 0.5**4
    assert acc["difference"]["difference"] == pytest.approx(4 / len(MINI))
    assert paired["simple"]["accuracy"]["first_only"] == 2
    assert paired["multiple"]["accuracy"]["first_only"] == 0
    out = capsys.readouterr().out
    assert "target=flawed concurrency=3 category=irrelevance" in out
    assert "paired concurrency=3 accuracy: first_only=4 second_only=0" in out
    md = (tmp_path / "o" / "report.md").read_text()
    assert "## Paired: right (first) vs flawed (second)" in md
    assert all(i in md for i in ids)
    png = tmp_path / "o" / "accuracy_validity.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the gate covers accuracy: the flawed run against the right one as baseline
    with OracleFake(wrong) as again:
        status = main(["bench", "tools", "--base-url", again.base_url, "--api-key-file",
                       str(key), "--suite", "accuracy-mini", "--no-plain", "--no-plots",
                       "--concurrency", "3", "--repeat", "1", "--quiet",
                       "--output", str(tmp_path / "g"),
                       "--baseline", str(tmp_path / "o" / "report.json")])
    gate = json.loads((tmp_path / "g" / "report.json").read_text())["baseline"]
    metrics = {r["metric"] for r in gate["rows"]}
    assert {"accuracy[simple]", "accuracy[irrelevance]", "accuracy[all]"} <= metrics
    assert status == 1  # e.g. simple 21/23: its Wilson high 0.976 < the baseline's 1.0
    assert any(r["metric"] == "accuracy[simple]" and r["regression"] for r in gate["rows"])


def test_compare_url_needs_its_key_file(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "key"
    key.write_text("k\n")
    status = main(["bench", "tools", "--base-url", "http://127.0.0.1:9/v1", "--api-key-file",
                   str(key), "--compare", "http://127.0.0.1:9/v1", "--quiet"])
    assert status == 2
    assert "error[bad_argument]" in capsys.readouterr().err
