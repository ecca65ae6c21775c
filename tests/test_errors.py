"""appliance.errors: every ApplianceError is a scanner.diagnostic.Diagnostic."""

from __future__ import annotations

import json

from appliance.errors import APPLIANCE_CODES, ApplianceError, PolicyError, SigningError
from appliance.store._layout import STORE_CODES, StoreError
from scanner.diagnostic import Diagnostic


def test_error_is_its_diagnostic_and_keeps_code_where_fix() -> None:
    err = SigningError("bad digest", code="digest_mismatch", where="config.json", fix="re-sign")
    assert err.diagnostic == Diagnostic("digest_mismatch", "bad digest", "config.json",
                                        "re-sign")
    assert (err.code, err.where, err.at, err.fix, err.message) == (
        "digest_mismatch", "config.json", "config.json", "re-sign", "bad digest")
    assert err.diagnostics() == ("error[digest_mismatch]: bad digest\n  at: config.json\n"
                                 "  fix: re-sign")
    assert str(err) == "bad digest"


def test_class_default_code_and_exit_status() -> None:
    err = PolicyError("no such file")
    assert err.code == "policy_invalid" and err.exit_status == 2
    assert err.diagnostics() == "error[policy_invalid]: no such file"


def test_details_render_after_the_head_and_in_json() -> None:
    err = ApplianceError("two things", code="appliance_error",
                         details=[Diagnostic("a", "one", "x", "f1"), Diagnostic("b", "two")])
    assert err.diagnostics() == ("error[appliance_error]: two things\n"
                                 "error[a]: one\n  at: x\n  fix: f1\nerror[b]: two")
    doc = json.loads(json.dumps(err.to_json()))
    assert doc == {"code": "appliance_error", "message": "two things", "at": None, "fix": None,
                   "details": [{"code": "a", "message": "one", "at": "x", "fix": "f1"},
                               {"code": "b", "message": "two", "at": None, "fix": None}]}


def test_each_error_class_names_its_registry() -> None:
    assert ApplianceError.registry is APPLIANCE_CODES
    assert StoreError.registry is STORE_CODES and StoreError.code in STORE_CODES
    for cls in (ApplianceError, PolicyError, SigningError):
        assert cls.code in cls.registry
