"""docs/owasp-llm-2026.md is generated from appliance.owasp.RISKS (issue 33): the page is in
sync with the table, the table covers the ten 2026 risks in order, and every test it names
as proof exists (a renamed or deleted test fails here, not silently)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from appliance.owasp import RISKS, render

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "owasp-llm-2026.md"
NAMES_2026 = ("Prompt Injection", "Sensitive Information Disclosure", "Excessive Agency",
              "Supply Chain", "Data and Model Poisoning", "Unbounded Consumption",
              "Misinformation", "Hidden Context Exposure", "Vector and Embedding Weaknesses",
              "Improper Output Handling")


def test_the_page_is_generated_from_the_table() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "regenerate: python -m appliance.owasp > docs/owasp-llm-2026.md")


def test_the_table_has_the_ten_2026_risks_in_order() -> None:
    assert [r.id for r in RISKS] == [f"LLM{n:02d}" for n in range(1, 11)]
    assert tuple(r.name for r in RISKS) == NAMES_2026
    for risk in RISKS:
        assert risk.enforced and risk.tests and risk.out_of_scope, risk.id


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test_")}


@pytest.mark.parametrize("node", sorted({t for r in RISKS for t in r.tests}))
def test_every_named_test_exists(node: str) -> None:
    file, _, name = node.partition("::")
    path = REPO / file
    assert path.is_file(), f"{node}: no such test file"
    assert name in _functions(path), f"{node}: no such test function"


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with ``$ref`` followed and ``anyOf`` (optional tables) narrowed to the
    object branch."""
    while True:
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in node:
            node = next((n for n in node["anyOf"] if n.get("type") != "null"), {})
        elif "items" in node and "properties" not in node:
            node = node["items"]
        else:
            return node


@pytest.mark.parametrize("key", sorted({k for r in RISKS for k in r.policy_keys}))
def test_every_named_policy_key_exists(key: str) -> None:
    from appliance.config.policy import Policy

    schema = Policy.model_json_schema()
    table, found, name = key[1:].partition("] ")
    if not found:  # a whole table: "[gateway.tls]"
        table = table.removesuffix("]")
    node: dict[str, Any] = schema
    for part in [*table.split("."), *([name] if name else [])]:
        node = _resolve(schema, node)
        if part == "<name>":
            node = node["additionalProperties"]
            continue
        assert part in node.get("properties", {}), f"{key}: no {part!r} there"
        node = node["properties"][part]
