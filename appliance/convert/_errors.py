"""Errors of ``appliance convert``: one :class:`ConvertError` with a stable code from
:data:`CONVERT_CODES`, and the findings that refused a conversion as its details.

A refusal carries the scanner's findings (or the converter's own, in the same
:class:`scanner.core.model.Finding` shape, rule ids ``convert.*``); each prints as its own
diagnostic: ``error[<rule id>]: message``, ``at: path@offset``, ``fix: …``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from appliance.errors import ApplianceError
from scanner.diagnostic import CodeRegistry, Diagnostic
from scanner.readers import RULES, Finding, Rule, Severity, Verdict

CONVERT_CODES = CodeRegistry("convert", {
    "convert_refused": "the checkpoint holds something the converter does not accept "
                       "(each finding is listed after it); nothing was written",
    "convert_source_invalid": "the source is not a torch checkpoint, legacy checkpoint or "
                              "sharded folder the converter can read",
    "convert_unsupported": "the checkpoint uses a feature the converter does not support "
                           "(a dtype, a compressed member)",
    "convert_limit": "a size or count in the checkpoint is over the converter's limit",
    "convert_output_exists": "the output folder exists and is not empty",
    "convert_io": "a source file cannot be read or an output file cannot be written",
    "convert_output_not_clean": "the scanner's verdict on the converted folder is not clean",
})
"""Codes of :class:`ConvertError` (one-line meanings; ``docs/errors.md``)."""

_FIX_REVIEW = ("Nothing was written. Do not convert this checkpoint; obtain the weights from "
               "a trusted source, or export a plain state_dict of tensors.")

UNSUPPORTED_CALL = Rule(
    "convert.unsupported_call", Verdict.POLICY, Severity.MEDIUM,
    "The pickle calls something outside the converter's allowlist (tensor rebuilds, "
    "OrderedDict)", _FIX_REVIEW)
UNSUPPORTED_VALUE = Rule(
    "convert.unsupported_value", Verdict.POLICY, Severity.MEDIUM,
    "The pickle builds a value the converter does not map to tensors", _FIX_REVIEW)
BAD_STORAGE = Rule(
    "convert.bad_storage", Verdict.MALFORMED, Severity.HIGH,
    "A storage reference names data that is not in the archive, or a size that disagrees "
    "with it", "Re-export the checkpoint; its storage records are inconsistent.")
BAD_VIEW = Rule(
    "convert.bad_view", Verdict.MALFORMED, Severity.HIGH,
    "A tensor's offset, shape or stride reaches outside its storage",
    "Re-export the checkpoint; a tensor view is out of bounds.")


def rule_fix(rule_id: str) -> str | None:
    """The fix of a scanner rule or a converter rule, by id."""
    for rule in (UNSUPPORTED_CALL, UNSUPPORTED_VALUE, BAD_STORAGE, BAD_VIEW):
        if rule.id == rule_id:
            return rule.fix
    found = RULES.get(rule_id)
    return found.fix if found is not None else None


def finding_diagnostic(finding: Finding) -> Diagnostic:
    """A finding as a diagnostic: its rule id as the code, ``path@offset`` as where."""
    at = finding.path if finding.offset is None else f"{finding.path}@{finding.offset}"
    message = finding.message
    if finding.evidence and finding.evidence not in message:
        message += f" [evidence: {finding.evidence[:200]}]"
    return Diagnostic(finding.rule_id, f"{finding.verdict.label}: {message}", at,
                      rule_fix(finding.rule_id))


class ConvertError(ApplianceError):
    """``appliance convert`` refused or failed; ``code`` names the case (``CONVERT_CODES``);
    ``findings`` are the findings that refused it (empty for other errors)."""

    code = "convert_source_invalid"
    registry: ClassVar[CodeRegistry] = CONVERT_CODES

    def __init__(self, message: str, *, code: str | None = None, where: str | None = None,
                 fix: str | None = None, findings: Sequence[Finding] = ()) -> None:
        super().__init__(message, code=code, where=where, fix=fix,
                         details=[finding_diagnostic(f) for f in findings])
        self.findings = tuple(findings)


def refused(source: str, findings: Sequence[Finding]) -> ConvertError:
    """The refusal for ``findings`` (worst first)."""
    ordered = sorted(findings, key=lambda f: (-int(f.verdict), f.path, f.offset or 0))
    worst = ordered[0].verdict.label if ordered else "policy"
    return ConvertError(
        f"conversion refused: {len(ordered)} finding(s), worst {worst}; nothing was written",
        code="convert_refused", where=source,
        fix="Read each finding below. A checkpoint that runs code or is malformed cannot be "
            "converted safely; a plain state_dict of tensors converts.", findings=ordered)
