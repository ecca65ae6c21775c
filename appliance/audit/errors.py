"""The audit area's error codes (:data:`AUDIT_CODES`, a section of ``docs/errors.md``) and
:class:`AuditError`, which ``appliance audit verify`` raises for the first finding."""

from __future__ import annotations

from typing import ClassVar

from appliance.errors import ApplianceError
from scanner.diagnostic import CodeRegistry

AUDIT_CODES = CodeRegistry("audit", {
    "audit_error": "an audit log problem without a more specific code",
    "audit_not_a_record": "a line of the audit file is not a chained audit record",
    "audit_record_missing": "seq jumps forward: records were deleted",
    "audit_record_out_of_order": "seq goes back, repeats or skips to a record found later: "
                                 "records were moved or copied",
    "audit_record_altered": "a record's hash does not match the next record's prev: "
                            "it was edited or replaced",
    "audit_checkpoint_invalid": "a checkpoint's signature does not verify with the public key",
    "audit_unsigned": "no signed checkpoint verifies in the audit files",
    "audit_unreadable": "an audit file cannot be read",
})
"""Codes of :class:`AuditError` (one-line meanings)."""


class AuditError(ApplianceError):
    """An audit log that does not verify (``code`` from :data:`AUDIT_CODES`)."""

    code = "audit_error"
    registry: ClassVar[CodeRegistry] = AUDIT_CODES
