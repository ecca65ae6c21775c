"""The feed's error codes and its error type.

A refusal of the signature machinery (:mod:`appliance.signing`, a ``SigningError``) is
re-raised as a :class:`FeedError` with the feed code of the same meaning, so every refusal
of ``appliance advisories import`` has a code of its own and a fix that talks about feeds,
not models.
"""

from __future__ import annotations

from typing import ClassVar

from appliance.errors import ApplianceError, SigningError
from scanner.diagnostic import CodeRegistry

FEED_CODES = CodeRegistry("advisory feed", {
    "feed_error": "an advisory feed operation failed without a more specific code",
    "feed_unsigned": "the file is a plain advisory list, not a signed feed",
    "feed_malformed": "the file is not a signed feed bundle (bad JSON, fields or encoding)",
    "feed_wrong_type": "the bundle is signed but is not an advisory feed (e.g. a model "
                       "signature)",
    "feed_signature_invalid": "the feed's signature does not verify (altered, or another key)",
    "feed_key_untrusted": "the feed was signed by a key that is not in the policy's [trust]",
    "feed_key_revoked": "the feed's signing key is in [trust] revoked",
    "feed_key_expired": "the feed's signing key is past its not_after",
    "feed_key_not_yet_valid": "the feed's signing key is before its not_before",
    "feed_trust_key_invalid": "a [[trust.keys]] entry cannot be used to check the feed",
    "feed_no_trusted_key": "the policy's [trust] lists no key to check a feed with",
    "feed_list_invalid": "the signed advisory list inside the feed is not a valid list",
    "feed_rollback": "the feed's serial is not newer than the advisory list in force",
    "feed_serial_not_newer": "export: the serial is not above the source list's serial",
    "feed_unreadable": "the feed file cannot be read, or is too large",
    "feed_install_failed": "the feed cannot be written to its state file",
    "feed_floor_invalid": "the advisory floor file (highest serial ever installed) cannot "
                          "be read or holds no serial",
    "feed_below_floor": "the list in force is older than the highest serial ever installed "
                        "(installed feed deleted, replaced by an older one, or unreadable)",
    "advisories_stale": "warning only (``appliance check``, ``advisories show``, ``serve``): "
                        "the advisory list in force is older than [preflight] "
                        "advisories_max_age_days",
})
"""Codes of :class:`FeedError` (one-line meanings; ``docs/errors.md``), and the warning
``advisories_stale`` (:func:`appliance.preflight.in_force.describe`; not a refusal, so not a
preflight rule's code)."""

_FIXES = {
    "feed_signature_invalid": "copy the feed again from the publisher: it was altered on the "
                              "way or signed with another key",
    "feed_key_untrusted": "add the publisher's key as a [[trust.keys]] entry, or obtain a "
                          "feed signed by a trusted key",
    "feed_key_revoked": "obtain a feed signed by a current key",
    "feed_key_expired": "obtain a feed signed by a current key",
    "feed_key_not_yet_valid": "wait until the key's not_before, or correct its window",
    "feed_trust_key_invalid": "fix or remove this [[trust.keys]] entry",
    "feed_malformed": "copy the feed again; it must be the file `appliance advisories "
                      "export` wrote",
}


class FeedError(ApplianceError):
    """An advisory feed refused or failed; ``code`` names the case (:data:`FEED_CODES`)."""

    code = "feed_error"
    registry: ClassVar[CodeRegistry] = FEED_CODES


def from_signing(exc: SigningError, source: str) -> FeedError:
    """The feed error of the same meaning as a signing refusal ``exc``."""
    code = {"signature_invalid": "feed_signature_invalid",
            "key_mismatch": "feed_signature_invalid",
            "key_untrusted": "feed_key_untrusted",
            "key_revoked": "feed_key_revoked",
            "key_expired": "feed_key_expired",
            "key_not_yet_valid": "feed_key_not_yet_valid",
            "trust_key_invalid": "feed_trust_key_invalid",
            "bundle_malformed": "feed_malformed",
            "bundle_unsupported": "feed_malformed"}.get(exc.code, "feed_error")
    return FeedError(f"advisory feed '{source}' refused: {exc.message}", code=code,
                     where=exc.where or source, fix=_FIXES.get(code, exc.fix))
