"""One diagnostic shape for every error the project reports: scanner, appliance and gateway.

A :class:`Diagnostic` is ``(code, message, at, fix)``:

- ``code``: stable snake_case id from one :class:`CodeRegistry` (tests, JSON and logs key on
  it; ``docs/errors.md`` lists every registered code, enforced by a test);
- ``message``: what went wrong, for a person;
- ``at``: the offending path, field, JSON pointer or variable, or ``None``;
- ``fix``: what to do about it, or ``None``.

Terminal form (:meth:`Diagnostic.render`)::

    error[<code>]: <message>
      at: <at>
      fix: <fix>

JSON form (:meth:`Diagnostic.to_json`): ``{"code": str, "message": str, "at": str | null,
"fix": str | null}``. Several diagnostics render one after another (:func:`render_many`),
each with its own ``at:`` and ``fix:`` lines.

The scanner package owns this module because ``appliance`` may import ``scanner`` and never
the reverse. The shape follows sigstore-python's ``Error.diagnostics()`` (sigstore/
sigstore-python ``sigstore/errors.py``): a stable code, what was found, where, and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CodeRegistry", "Diagnostic", "render_many"]


def _printable(text: str, keep: str = "") -> str:
    """``text`` with each non-printable character (other than those in ``keep``) written as
    a Python escape, so a hostile file name cannot drive the terminal."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in keep else ascii(ch)[1:-1] for ch in text)


@dataclass(frozen=True)
class Diagnostic:
    """One error for a person and a machine. ``at`` and ``fix`` are optional."""

    code: str
    message: str
    at: str | None = None
    fix: str | None = None

    def render(self) -> str:
        """Terminal text: ``error[code]: message`` then ``  at: …`` and ``  fix: …`` lines
        when set. Non-printable characters are escaped (newlines kept in ``message``)."""
        lines = [f"error[{_printable(self.code)}]: {_printable(self.message, keep=chr(10))}"]
        if self.at:
            lines.append(f"  at: {_printable(self.at)}")
        if self.fix:
            lines.append(f"  fix: {_printable(self.fix)}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, str | None]:
        """``{"code", "message", "at", "fix"}`` (``at`` / ``fix`` may be ``None``)."""
        return {"code": self.code, "message": self.message, "at": self.at, "fix": self.fix}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Diagnostic:
        """Inverse of :meth:`to_json`. Raises ``ValueError`` on a missing or non-string
        ``code`` / ``message`` or a non-string, non-null ``at`` / ``fix``."""
        code, message = data.get("code"), data.get("message")
        at, fix = data.get("at"), data.get("fix")
        if not isinstance(code, str) or not isinstance(message, str):
            raise ValueError("a diagnostic needs string 'code' and 'message'")
        if not all(v is None or isinstance(v, str) for v in (at, fix)):
            raise ValueError("'at' and 'fix' must be strings or null")
        return cls(code, message, at, fix)


def render_many(diagnostics: Iterable[Diagnostic]) -> str:
    """Each diagnostic's :meth:`~Diagnostic.render`, one after another."""
    return "\n".join(d.render() for d in diagnostics)


class CodeRegistry(Mapping[str, str]):
    """The codes of one area (``scanner CLI``, ``appliance``, ``preflight`` …), each with a
    one-line meaning. A read-only mapping ``code -> meaning``; ``title`` names the area and
    is the heading of its table in ``docs/errors.md``."""

    def __init__(self, title: str, codes: Mapping[str, str]) -> None:
        for code, meaning in codes.items():
            if not code or not code.replace("_", "").isalnum() or code != code.lower():
                raise ValueError(f"{title}: code {code!r} is not snake_case")
            if not meaning or "\n" in meaning:
                raise ValueError(f"{title}: code {code!r} needs a one-line meaning")
        self.title = title
        self._codes = dict(codes)

    def __getitem__(self, code: str) -> str:
        return self._codes[code]

    def __iter__(self) -> Iterator[str]:
        return iter(self._codes)

    def __len__(self) -> int:
        return len(self._codes)

    def diagnostic(self, code: str, message: str, at: str | None = None,
                   fix: str | None = None) -> Diagnostic:
        """A :class:`Diagnostic` with a code of this registry; ``KeyError`` otherwise."""
        if code not in self._codes:
            raise KeyError(f"{code!r} is not a registered {self.title} code")
        return Diagnostic(code, message, at, fix)

    def markdown(self) -> str:
        """The registry as a Markdown table (``| code | meaning |``), sorted by code."""
        rows = ["| code | meaning |", "|---|---|"]
        rows += [f"| `{code}` | {self._codes[code].replace('|', chr(92) + '|')} |"
                 for code in sorted(self._codes)]
        return "\n".join(rows)
