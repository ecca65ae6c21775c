"""scanner.core.strict_json.loads_strict: the strict JSON parser for configs, headers and
bundles."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scanner.core.context import Limits, ScanContext
from scanner.core.model import BytesBlob
from scanner.core.strict_json import JSONProblem, loads_strict
from scanner.formats.text import analyze_json


def problem(data: bytes, **kw: Any) -> JSONProblem:
    with pytest.raises(JSONProblem) as info:
        loads_strict(data, **kw)
    return info.value


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def depth_of(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


def test_depth_limit_is_inclusive_and_names_the_offset() -> None:
    assert loads_strict(nested(64).encode()) is not None
    found = problem(nested(65).encode())
    assert found.kind == "depth"
    assert found.offset == 64  # the 65th opening bracket


def test_depth_counts_objects_and_arrays_and_ignores_brackets_in_strings() -> None:
    doc = '{"a": [{"b": "[[[[[[[[[["}]}'
    assert loads_strict(doc.encode(), max_depth=3) == {"a": [{"b": "[" * 10}]}
    assert problem(doc.encode(), max_depth=2).kind == "depth"


def test_nesting_past_the_recursion_limit_is_a_depth_problem() -> None:
    found = problem(nested(100_000).encode())
    assert found.kind == "depth" and found.offset == 64


def test_too_deep_and_unterminated_reports_depth_first() -> None:
    assert problem(("[" * 200).encode()).kind == "depth"
    assert problem(b"[[1,]").kind == "syntax"


@pytest.mark.parametrize("doc, key", [
    (b'{"w": 1, "w": 2}', "w"),
    (b'{"w": 1, "\\u0077": 2}', "w"),
    (b'{"a": {"x": 1, "y": 2, "x": 3}}', "x"),
])
def test_duplicate_keys_are_refused_after_unescaping(doc: bytes, key: str) -> None:
    found = problem(doc)
    assert found.kind == "duplicate_key" and found.key == key


def test_duplicate_keys_option_keeps_the_last_value_and_every_other_rule() -> None:
    assert loads_strict(b'{"w": 1, "\\u0077": 2, "a": {"x": 1, "x": 3}}',
                        duplicate_keys=True) == {"w": 2, "a": {"x": 3}}
    assert problem(b'{"w": 1, "w": NaN}', duplicate_keys=True).kind == "non_finite"
    assert problem(nested(65).encode(), duplicate_keys=True).kind == "depth"
    assert problem(b'{"w": 1, "w": 2', duplicate_keys=True).kind == "syntax"
    with pytest.raises(ValueError, match="cannot watch"):
        loads_strict(b"{}", duplicate_keys=True, watch=frozenset({"a"}), found=set())


@pytest.mark.parametrize("doc, kind", [
    (b"\xef\xbb\xbf{}", "bom"),
    (b'{"a": "\xff"}', "encoding"),
    (b'{"a": NaN}', "non_finite"),
    (b'{"a": 1e999}', "non_finite"),
    (b'{"a": 1', "syntax"),
])
def test_other_problems_have_stable_kinds(doc: bytes, kind: str) -> None:
    assert problem(doc).kind == kind


def test_watched_keys_are_reported_at_any_depth_and_under_escapes() -> None:
    found: set[str] = set()
    doc = b'{"v": {"auto_map": 1}, "l": [[{"chat_templat\\u0065": "x"}]], "k": "auto_map"}'
    loads_strict(doc, watch=frozenset({"auto_map", "chat_template", "other"}), found=found)
    assert found == {"auto_map", "chat_template"}


def test_a_value_that_names_a_watched_key_is_not_a_key() -> None:
    found: set[str] = set()
    loads_strict(b'{"model": ["auto_map", {"x": "chat_template"}]}',
                 watch=frozenset({"auto_map", "chat_template"}), found=found)
    assert found == set()


def _scan_json(doc: bytes) -> list[str]:
    return [f.rule_id for f in analyze_json(ScanContext(Limits()), BytesBlob("t.json", doc))]


def test_tokenizer_sized_document_without_code_keys_has_no_findings() -> None:
    vocab = {f"tok{i}": i for i in range(20_000)}
    doc = {"model": {"vocab": vocab, "merges": [["a", f"b{i}"] for i in range(20_000)]},
           "note": "auto_map"}
    assert _scan_json(json.dumps(doc).encode()) == []


def test_code_key_deep_in_a_large_document_is_still_found() -> None:
    doc = {"model": {"merges": [["a", "b"]] * 5000, "extra": [{"auto_map": {"x": "m.C"}}]}}
    assert "config.auto_map" in _scan_json(json.dumps(doc).encode())


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                  max_size=3),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_json_values, st.integers(min_value=0, max_value=6))
def test_matches_json_and_refuses_exactly_past_the_depth_limit(value: object,
                                                               limit: int) -> None:
    data = json.dumps(value).encode()
    if depth_of(value) > limit:
        assert problem(data, max_depth=limit).kind == "depth"
    else:
        assert loads_strict(data, max_depth=limit) == value


def test_the_cyclic_gc_is_paused_only_while_a_large_document_parses() -> None:
    """Large documents parse with the collector paused (they hold no cycles); it is on
    again afterwards, also when the document is refused, and left off if it was off."""
    import gc

    from scanner.core.strict_json import _NO_GC_BYTES

    seen: list[bool] = []

    def spy(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen.append(gc.isenabled())
        return dict(pairs)

    big = b'{"k": "' + b"x" * _NO_GC_BYTES + b'"}'
    import scanner.core.strict_json as sj

    original = sj._DECODER
    sj._DECODER = json.JSONDecoder(object_pairs_hook=spy)
    try:
        assert gc.isenabled()
        loads_strict(big)
        assert seen == [False] and gc.isenabled()
        loads_strict(b'{"k": 1}')
        assert seen == [False, True]
        assert problem(big[:-1]).kind == "syntax" and gc.isenabled()
        gc.disable()
        try:
            loads_strict(big)
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        sj._DECODER = original
