"""Names that different readers may take for the same name.

Two distinct strings can still name one thing to some reader: a C/C++ reader stops at the
first NUL (``std::string(const char*)``, ``strcmp``), tools that normalise Unicode (NFKC,
as Python identifiers and many key/value stores do) fold compatibility characters, and
renderers drop invisible format characters (zero-width joiners, BOM, bidi marks). A header
whose names differ only in such characters loads differently in different readers.

Source: Unicode Standard Annex #15 (normalisation forms) and UTS #39 (confusables,
"default ignorable" format characters); the C string convention (ISO C 7.1.1).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable


def reader_keys(name: str) -> tuple[str, str]:
    """The two keys under which other readers may file ``name``: (C string: cut at the
    first NUL, NFKC with control and format characters removed)."""
    cut = name.split("\x00", 1)[0]
    folded = "".join(ch for ch in unicodedata.normalize("NFKC", name)
                     if unicodedata.category(ch) not in ("Cc", "Cf"))
    return cut, folded


def collisions(names: Iterable[str], limit: int = 20) -> list[tuple[str, str]]:
    """Pairs ``(first, other)`` of distinct names that share a reader key (at most
    ``limit``). ASCII names without control characters are their own keys (fast path)."""
    seen: dict[tuple[int, str], str] = {}
    out: list[tuple[str, str]] = []
    for name in names:
        if name.isascii() and name.isprintable():
            keys: tuple[str, ...] = (name,)
        else:
            keys = reader_keys(name)
        for which, key in enumerate(keys if len(keys) == 2 else (name, name)):
            first = seen.setdefault((which, key), name)
            if first != name:
                out.append((first, name))
                if len(out) >= limit:
                    return out
                break
    return out
