"""scanner.diagnostic: the one (code, message, at, fix) shape and its code registries."""

from __future__ import annotations

import dataclasses
import json

import pytest

from scanner.diagnostic import CodeRegistry, Diagnostic, render_many


def test_render_has_at_and_fix_lines_only_when_set() -> None:
    full = Diagnostic("io_error", "cannot read 'a'", "model/a", "check the permissions")
    assert full.render() == ("error[io_error]: cannot read 'a'\n  at: model/a\n"
                             "  fix: check the permissions")
    assert Diagnostic("usage", "bad").render() == "error[usage]: bad"
    assert Diagnostic("usage", "bad", fix="see --help").render() == \
        "error[usage]: bad\n  fix: see --help"


def test_render_escapes_control_characters_from_hostile_names() -> None:
    """A file name with an ANSI escape or a newline must not drive the terminal or forge an
    extra ``fix:`` line; a multi-line message (an engine's last log lines) keeps its lines."""
    diag = Diagnostic("no_verdict", "log:\nline two\x1b[2J", "evil\n  fix: rm -rf\x1b[31m",
                      "x\ty")
    text = diag.render()
    assert "\x1b" not in text
    assert text.splitlines() == [
        "error[no_verdict]: log:", "line two\\x1b[2J",
        "  at: evil\\n  fix: rm -rf\\x1b[31m", "  fix: x\\ty"]


def test_json_form_round_trips_and_is_frozen() -> None:
    diag = Diagnostic("key_invalid", "not a PEM key", "k.pem", None)
    doc = json.loads(json.dumps(diag.to_json()))
    assert doc == {"code": "key_invalid", "message": "not a PEM key", "at": "k.pem", "fix": None}
    assert Diagnostic.from_json(doc) == diag
    with pytest.raises(dataclasses.FrozenInstanceError):
        diag.code = "other"  # type: ignore[misc]


@pytest.mark.parametrize("doc", [{}, {"code": "x"}, {"code": 1, "message": "m"},
                                 {"code": "x", "message": "m", "at": 3}])
def test_from_json_refuses_a_wrong_shape(doc: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Diagnostic.from_json(doc)


def test_render_many_keeps_each_at_and_fix_with_its_own_diagnostic() -> None:
    text = render_many([Diagnostic("a", "first", "A", "fix a"),
                        Diagnostic("b", "second", "B", "fix b")])
    assert text == ("error[a]: first\n  at: A\n  fix: fix a\n"
                    "error[b]: second\n  at: B\n  fix: fix b")


def test_registry_is_a_mapping_of_one_line_meanings() -> None:
    reg = CodeRegistry("demo", {"no_path": "no PATH given", "bad_pipe": "a | in it"})
    assert set(reg) == {"no_path", "bad_pipe"} and reg["no_path"] == "no PATH given"
    assert reg.diagnostic("no_path", "m", fix="f") == Diagnostic("no_path", "m", None, "f")
    with pytest.raises(KeyError, match="not a registered demo code"):
        reg.diagnostic("other", "m")
    assert reg.markdown().splitlines() == [
        "| code | meaning |", "|---|---|", "| `bad_pipe` | a \\| in it |",
        "| `no_path` | no PATH given |"]


@pytest.mark.parametrize("codes", [{"Bad": "x"}, {"has space": "x"}, {"": "x"},
                                   {"ok": ""}, {"ok": "two\nlines"}])
def test_registry_refuses_bad_codes_and_meanings(codes: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        CodeRegistry("demo", codes)
