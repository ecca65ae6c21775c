"""Core value types shared by every analyzer: verdicts, severities, findings, blobs."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Protocol


class _Labelled(enum.IntEnum):
    """An ordered enum that prints as its lower-case name (``malicious``, ``high``)."""

    @property
    def label(self) -> str:
        return self.name.lower()

    def __str__(self) -> str:  # ``print(result.verdict)`` shows the label, not the number
        return self.label

    def __format__(self, spec: str) -> str:  # f-strings too (IntEnum formats the int)
        return format(self.label, spec)


class Verdict(_Labelled):
    """Per-target outcome, ordered: the worst finding wins.

    ``clean`` < ``policy`` (refused by policy, e.g. a non-safetensors weight format, but
    nothing shows it runs code) < ``malformed`` (violates its format, or a check could not
    finish: fail closed) < ``malicious`` (can run code or escape the model folder).
    """

    CLEAN = 0
    POLICY = 1
    MALFORMED = 2
    MALICIOUS = 3


class Severity(_Labelled):
    """Finding severity (SARIF ``security-severity`` buckets: 3.0 / 5.5 / 8.0 / 9.5)."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4


@dataclass(frozen=True)
class Finding:
    """One problem found in one artifact.

    ``path`` is POSIX, relative to the scan target's root (``"."``-free); members of
    containers are written ``outer.pt!archive/data.pkl``. ``offset`` is a byte offset in
    the innermost blob when known.
    """

    rule_id: str
    severity: Severity
    verdict: Verdict
    path: str
    message: str
    evidence: str = ""
    offset: int | None = None

    def moved(self, path: str) -> Finding:
        """This finding at another ``path`` (a memo replaying a copy's analysis): fields
        copied at C speed, where the frozen constructor sets each one through
        ``object.__setattr__`` (a fleet replays thousands)."""
        new = object.__new__(Finding)
        fields = new.__dict__
        fields.update(self.__dict__)
        fields["path"] = path
        return new

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "rule_id": self.rule_id,
            "severity": self.severity.label,
            "verdict": self.verdict.label,
            "path": self.path,
            "message": self.message,
            "evidence": self.evidence,
        }
        if self.offset is not None:
            out["offset"] = self.offset
        return out


def worst(findings: list[Finding]) -> Verdict:
    """The verdict implied by a list of findings (``CLEAN`` when empty)."""
    return max((f.verdict for f in findings), default=Verdict.CLEAN)


class Blob(Protocol):
    """A bounded, read-only byte source: a regular file or a container member.

    ``name`` is the display path used in findings. ``read_at`` never reads past ``size``
    and returns fewer bytes only at the end.
    """

    name: str
    size: int

    def read_at(self, offset: int, length: int) -> bytes: ...


@dataclass
class BytesBlob:
    """A blob held in memory (container members, tests)."""

    name: str
    data: bytes
    size: int = field(init=False)

    def __init__(self, name: str, data: bytes) -> None:  # one per file of a fleet scan
        self.name = name
        self.data = data
        self.size = len(data)

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            return b""
        return self.data[offset : offset + length]


class FileBlob:
    """A blob over an already-opened regular file descriptor (``os.pread``; no mmap).

    The caller owns the descriptor. ``size`` is fixed at open time (``fstat``) so a file
    growing during the scan is not followed.
    """

    __slots__ = ("name", "fd", "size")  # one per file of a fleet scan

    def __init__(self, name: str, fd: int, size: int) -> None:
        self.name = name
        self.fd = fd
        self.size = size

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length <= 0 or offset >= self.size:
            return b""
        length = min(length, self.size - offset)
        if length <= 1 << 24:  # one pread for what fits in one (a fleet's small files)
            chunk = os.pread(self.fd, length, offset)
            if len(chunk) == length or not chunk:
                return chunk
            offset += len(chunk)
            length -= len(chunk)
            chunks = [chunk]
        else:
            chunks = []
        while length > 0:
            chunk = os.pread(self.fd, min(length, 1 << 24), offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
            length -= len(chunk)
        return b"".join(chunks)
