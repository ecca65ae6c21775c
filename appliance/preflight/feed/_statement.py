"""The signed payload of an advisory feed: an in-toto Statement v1 whose predicate is the
advisory list document itself (:class:`appliance.preflight.advisories.AdvisoryList`)::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "advisories.json",
                  "digest": {"sha256": <hex of the canonical predicate bytes>}}],
     "predicateType": "urn:model-appliance:advisory-feed:v1",
     "predicate": {"schema_version": 2, "serial": ..., "date": ..., "advisories": [...]}}

Canonical predicate bytes: ``json.dumps(predicate, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)`` in UTF-8. The predicate type keeps feeds and model signatures apart: a
model's bundle (predicate ``https://model_signing/signature/v1.0``) is refused here as
``feed_wrong_type``, and a feed is refused by the model verifier as ``bundle_unsupported``,
even when one key signs both.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from appliance.errors import PolicyError
from appliance.preflight.advisories import AdvisoryList, parse_list
from appliance.preflight.feed._errors import FeedError
from appliance.signing import STATEMENT_TYPE
from scanner.readers import JSONProblem, loads_strict

FEED_PREDICATE_TYPE = "urn:model-appliance:advisory-feed:v1"
SUBJECT_NAME = "advisories.json"
_RECOPY = "copy the feed again; it must be the file `appliance advisories export` wrote"


def canonical(document: Any) -> bytes:
    """The canonical JSON bytes of ``document`` (what the subject digest covers)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def encode(document: dict[str, Any]) -> bytes:
    """The Statement bytes for the advisory ``document`` (already validated)."""
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": SUBJECT_NAME,
                     "digest": {"sha256": hashlib.sha256(canonical(document)).hexdigest()}}],
        "predicateType": FEED_PREDICATE_TYPE,
        "predicate": document,
    }
    return json.dumps(statement, indent=1, ensure_ascii=False).encode("utf-8")


def _malformed(source: str, message: str, code: str = "feed_malformed") -> FeedError:
    return FeedError(f"advisory feed '{source}': {message}", code=code, where=source,
                     fix=_RECOPY)


def decode(payload: bytes, source: str) -> AdvisoryList:
    """Parse an authenticated payload into the advisory list it carries.

    Raises ``FeedError``: ``feed_wrong_type`` (another ``_type`` or ``predicateType``, e.g. a
    model signature), ``feed_malformed`` (not JSON, missing fields, digest disagrees),
    ``feed_list_invalid`` (the predicate is not a valid advisory list)."""
    try:
        doc = loads_strict(payload)
    except JSONProblem as exc:
        raise _malformed(source, f"signed payload is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _malformed(source, "signed payload is not a JSON object")
    kind, predicate_type = doc.get("_type"), doc.get("predicateType")
    if kind != STATEMENT_TYPE or predicate_type != FEED_PREDICATE_TYPE:
        raise FeedError(
            f"'{source}' is signed, but it is not an advisory feed (statement {kind!r}, "
            f"predicate type {str(predicate_type)[:80]!r})", code="feed_wrong_type",
            where=source, fix="pass a feed written by `appliance advisories export`, not a "
                              "model signature")
    subjects, predicate = doc.get("subject"), doc.get("predicate")
    if not (isinstance(subjects, list) and len(subjects) == 1
            and isinstance(subjects[0], dict) and subjects[0].get("name") == SUBJECT_NAME
            and isinstance(subjects[0].get("digest"), dict)):
        raise _malformed(source, f"the statement must have exactly one subject "
                                 f"'{SUBJECT_NAME}' with a digest")
    if not isinstance(predicate, dict):
        raise _malformed(source, "the statement's predicate is not an object")
    digest = hashlib.sha256(canonical(predicate)).hexdigest()
    if subjects[0]["digest"].get("sha256") != digest:
        raise _malformed(source, "the subject digest does not match the signed advisory list")
    try:
        return parse_list(canonical(predicate), f"{source}: predicate")
    except PolicyError as exc:
        raise FeedError(f"the advisory list inside '{source}' is invalid: {exc.message}",
                        code="feed_list_invalid", where=exc.where,
                        fix="re-export the feed from a valid advisory list") from None
