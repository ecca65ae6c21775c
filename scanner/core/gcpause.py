"""Pausing Python's cyclic garbage collector around work that makes no reference cycles
(parsing a large JSON document, importing modules): collections meanwhile would only
traverse the new containers. Cycles made during the pause stay tracked and are collected
once the collector runs again."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused(pause: bool = True) -> Iterator[None]:
    """Run the block with the cyclic collector off when ``pause``, and on again after it
    only if it was on before (so pauses nest, and a caller's own pause is kept)."""
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
