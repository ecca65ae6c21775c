"""The code registries cannot drift: every code literal in the source is registered in the
registry of the error it becomes, docs/errors.md lists exactly the registered codes, and a
gateway status literal agrees with its code's status (issue 11, "one error type")."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

from appliance.error_codes import REGISTRIES, markdown
from appliance.gateway.errors import GatewayCode, GatewayError
from scanner.cli import CLI_CODES
from scanner.diagnostic import CodeRegistry

sys.path.insert(0, str(Path(__file__).parent))
from code_sites import REPO, Index, Site, code_sites  # noqa: E402

DOCS = REPO / "docs" / "errors.md"
ALL_CODES = {code for registry in REGISTRIES for code in registry}
# f-string codes and the registered codes they expand to (checked below).
DYNAMIC = {
    ("appliance/signing/_fs.py", "f'{what}_missing'"),
}


def _registry(index: Index, cls: str, site: Site) -> CodeRegistry | None:
    """The ``registry`` the error class (or its nearest base) names; a Diagnostic built by
    hand in the scanner CLI takes a scanner CLI code; ``None``: any registry."""
    for name in index.lineage(cls):
        path, _, attr = name.partition(":")
        if attr == "Diagnostic" and path.endswith("diagnostic.py"):
            return CLI_CODES if site.path.endswith("scanner/cli.py") else None
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        registry = getattr(getattr(module, attr, None), "registry", None)
        if isinstance(registry, CodeRegistry):
            return registry
    return None


@pytest.fixture(scope="module")
def sites() -> tuple[Index, list[Site]]:
    return code_sites()


def test_the_scan_finds_the_known_raise_sites(sites: tuple[Index, list[Site]]) -> None:
    """The scan must see each way a code is passed, or the registry test proves nothing."""
    _, found = sites
    seen = {(s.code, s.target.rpartition(":")[2]) for s in found}
    assert ("upstream_error", "GatewayError") in seen  # GatewayError(502, "upstream_error")
    assert ("store_bad_name", "store_error") in seen  # positional through a helper
    assert ("store_file_added", "StoreError") in seen  # a dict of codes in a variable
    assert ("schema_too_complex", "SchemaProblem") in seen  # an imported constant
    assert ("invalid_parameter", "_bad") in seen  # a parameter's default
    assert ("policy_invalid", "PolicyError") in seen  # a class's default code
    assert ("package_missing", "Problem") in seen  # a dataclass field
    assert ("no_path", "Diagnostic") in seen
    assert len(found) > 200


def test_every_code_literal_is_registered(sites: tuple[Index, list[Site]]) -> None:
    index, found = sites
    wrong = []
    for site in found:
        if site.code is None:
            if (site.path, site.expr) not in DYNAMIC:
                wrong.append(f"{site.path}:{site.line}: code built at run time "
                             f"({site.expr}); use literals, or list it in DYNAMIC")
            continue
        classes = index.classes_of(site.target) or {site.target}
        for cls in classes:
            registry = _registry(index, cls, site)
            codes = registry if registry is not None else ALL_CODES
            if site.code not in codes:
                where = registry.title if registry is not None else "any registry"
                wrong.append(f"{site.path}:{site.line}: {site.code!r} ({cls}) is not in "
                             f"the {where} codes: register it with a one-line meaning "
                             "and run `python -m appliance.error_codes > docs/errors.md`")
    assert wrong == []


def test_dynamic_codes_expand_to_registered_codes() -> None:
    """``read_small_file(path, limit, what, invalid_code)`` raises ``<what>_missing``."""
    registry = REGISTRIES[0]
    whats = set()
    for path in (REPO / "appliance").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "read_small_file"):
                what = node.args[2]
                assert isinstance(what, ast.Constant), f"{path}: 'what' must be a literal"
                whats.add(what.value)
    assert whats == {"key", "signature"}
    assert all(f"{what}_missing" in registry for what in whats)


def test_gateway_status_literals_agree_with_their_code(sites: tuple[Index, list[Site]]) -> None:
    wrong = []
    for path in sorted((REPO / "appliance").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "GatewayError"
                    and len(node.args) >= 2):
                continue
            status, code = node.args[0], node.args[1]
            if isinstance(status, ast.Constant) and isinstance(code, ast.Constant):
                expected = GatewayCode.parse(code.value).status
                if expected is not None and expected != status.value:
                    wrong.append(f"{path.relative_to(REPO)}:{node.lineno}: {code.value} is "
                                 f"{expected}, not {status.value}")
    assert wrong == []


def _doc_tables(text: str) -> dict[str, set[str]]:
    """``## heading -> codes`` in the first column of that section's table rows."""
    out: dict[str, set[str]] = {}
    heading = None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            out[heading] = set()
        elif heading and (m := re.match(r"\|\s*`([a-z0-9_]+)`\s*\|", line)):
            out[heading].add(m.group(1))
    return out


def test_docs_list_exactly_the_registered_codes() -> None:
    tables = _doc_tables(DOCS.read_text(encoding="utf-8"))
    assert set(tables) == {r.title for r in REGISTRIES}, "one section per registry"
    for registry in REGISTRIES:
        assert tables[registry.title] == set(registry), (
            f"docs/errors.md '{registry.title}' is out of date: run "
            "`python -m appliance.error_codes > docs/errors.md`")


def test_docs_are_the_generated_document() -> None:
    assert DOCS.read_text(encoding="utf-8") == markdown(), (
        "run `python -m appliance.error_codes > docs/errors.md`")


def test_registry_meanings_are_one_line() -> None:
    for registry in REGISTRIES:
        assert len(registry) > 0
        for code, meaning in registry.items():
            assert meaning and "\n" not in meaning, (registry.title, code)


def test_gateway_error_refuses_an_unregistered_code() -> None:
    with pytest.raises(ValueError, match="not a registered gateway code"):
        GatewayError(400, "no_such_code", "x")
    err = GatewayError.of(GatewayCode.RATE_LIMITED, "slow down", param="key")
    assert (err.status, err.code, err.diagnostic.at) == (429, "rate_limited", "key")
    assert err.payload()["error"]["code"] == "rate_limited"
