"""Where the test data lives: ``tests/fixtures/`` in this repository.

- ``CORPUS`` (``tests/fixtures/corpus/``): model artifacts for the scanner. ``files/`` holds
  benign, policy, malicious and malformed cases built from raw bytes (pickle payloads are
  harmless: ``True``, or a marker file ``PWNED_<case>`` in the temp dir; never unpickle them
  anyway). ``cases.json`` lists each case: ``id``, ``path`` (relative to ``files/``), ``kind``,
  ``expected``, ``format``, ``technique``, ``source`` (CVE / GHSA / repo#issue, or
  ``original``). Cases with a ``recipe`` (a FIFO, a character device, a 16 GiB sparse file) are
  not stored: the tests build them (tests/scanner/test_corpus.py). Symlink cases are stored as
  one-line placeholders naming the target; the tests rebuild the links.
- ``PUBLIC_BUGS`` (``tests/fixtures/public-bugs.jsonl``): public bug reports and advisories as
  small inputs, one JSON object a line (``id``, ``source``, ``component``, ``symptom``,
  ``input``, ``expected``); each is a regression test named after its ``id``.

A missing fixture is a test failure, never a skip.
"""

from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CORPUS = FIXTURES / "corpus"
PUBLIC_BUGS = FIXTURES / "public-bugs.jsonl"


class GuardedBlob:
    """A blob that fails the test on any read outside [0, size) and records reads."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self.data, self.size = name, data, len(data)
        self.reads: list[tuple[int, int]] = []

    def read_at(self, offset: int, length: int) -> bytes:
        assert 0 <= offset and 0 <= length and offset + length <= self.size, (offset, length)
        self.reads.append((offset, length))
        return self.data[offset : offset + length]


def regex_dfa_blowup_bodies(model: str = "appliance-model", n: int = 40) -> list[dict[str, Any]]:
    """The three request bodies of public bug regex-dfa-blowup, rebuilt from its generator."""
    pattern = f"[ab]*a[ab]{{{n}}}"
    alternation = "^(" + "|".join(f"w{i:05d}" for i in range(5000)) + ")$"
    msg = [{"role": "user", "content": "reply"}]

    def schema(p: str) -> dict[str, Any]:
        return {"type": "object", "properties": {"s": {"type": "string", "pattern": p}},
                "required": ["s"]}

    def rf(p: str) -> dict[str, Any]:
        return {"type": "json_schema", "json_schema": {"name": "r", "schema": schema(p)}}

    return [
        {"model": model, "messages": msg, "response_format": rf(pattern)},
        {"model": model, "messages": msg, "response_format": rf(alternation)},
        {"model": model, "messages": msg, "tool_choice": "required",
         "tools": [{"type": "function", "function": {"name": "f", "parameters": schema(pattern)}}]},
    ]


class CountingBlob:
    """Wraps a blob and counts the work done on it: ``calls`` to ``read_at`` and ``bytes``
    returned. Tests bound a scan's work with these counts, never with wall-clock time."""

    def __init__(self, blob: Any) -> None:
        self.blob, self.name, self.size = blob, blob.name, blob.size
        self.calls = 0
        self.bytes = 0

    def read_at(self, offset: int, length: int) -> bytes:
        data: bytes = self.blob.read_at(offset, length)
        self.calls += 1
        self.bytes += len(data)
        return data


def deadline_hits(findings: list[Any]) -> list[Any]:
    """Findings for the scanner's own per-target deadline (``seconds_per_target``): a scan
    that ran into it did not finish its work (fail closed, never a pass)."""
    return [f for f in findings
            if f.rule_id == "scanner.limit_exceeded" and f.evidence == "seconds_per_target"]
