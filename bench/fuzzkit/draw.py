"""Where a generator's choices come from: one small interface (``Draw``), two sources.

``RandomDraw`` wraps ``random.Random`` (the bench: ~10^5 cases per format, fast and
reproducible from ``(seed, case number)``). ``HypothesisDraw`` wraps hypothesis's
``st.data()`` (the tests: derandomized, shrinks a failure to a small input). A generator
written against ``Draw`` runs unchanged under both, so the tests fuzz the same space as
the bench.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Draw(Protocol):
    """Choices a generator makes. ``integer`` is inclusive at both ends."""

    def integer(self, lo: int, hi: int) -> int: ...

    def choice(self, options: Sequence[T]) -> T: ...

    def blob(self, max_size: int) -> bytes: ...

    def chance(self, p: float) -> bool: ...


class RandomDraw:
    """``Draw`` over a seeded ``random.Random``."""

    def __init__(self, seed: int | str) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def blob(self, max_size: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, max_size))

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


class HypothesisDraw:
    """``Draw`` over hypothesis's ``st.data()`` object (imported lazily: the bench does
    not need hypothesis)."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def integer(self, lo: int, hi: int) -> int:
        value: int = self.data.draw(self.st.integers(min_value=lo, max_value=hi))
        return value

    def choice(self, options: Sequence[T]) -> T:
        return options[self.integer(0, len(options) - 1)]

    def blob(self, max_size: int) -> bytes:
        value: bytes = self.data.draw(self.st.binary(max_size=max_size))
        return value

    def chance(self, p: float) -> bool:
        # hypothesis explores both branches; p only matters for the random source
        value: bool = self.data.draw(self.st.integers(min_value=0, max_value=99)) < p * 100
        return value
