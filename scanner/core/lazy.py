"""Deferred imports of standard-library modules that a third-party analyzer imports at its
top level but never uses on the scanner's paths.

``picklescan.scanner`` (the pickle second opinion, ``scanner.formats.pickle.second``)
starts with ``import http.client`` for its URL and Hub scans, which the scanner never
makes; importing ``http.client`` (email, socket, ssl; and the ``http`` package's status
enums) was about a fifth of a fleet scan's startup. Defer a package before its submodule
(``defer("http")``, then ``defer("http.client")``): finding the submodule reads only the
package's ``__path__``.

``defer(name)`` puts the module in ``sys.modules`` with only its import metadata
(``__spec__``, ``__name__`` ...); its code runs on the first access to any other
attribute, so code that really uses it still gets the real module. (Not
``importlib.util.LazyLoader``: before Python 3.12 it loads on any attribute, ``__spec__``
included, which every ``import`` statement reads.)

Only for single-threaded, short-lived processes (``python -m scanner``): two threads
touching a deferred module first at the same time could see it half-loaded. Nothing from
a model is ever imported this way: only names the scanner itself passes.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any


class _Deferred(types.ModuleType):
    """A module whose code has not run yet: the first missing attribute runs it."""

    def __getattr__(self, attr: str) -> Any:
        spec = self.__spec__
        self.__class__ = types.ModuleType  # type: ignore[assignment]  # plain again, then run
        if spec is None or spec.loader is None:  # defer() only makes them with both
            raise AttributeError(attr)
        try:
            spec.loader.exec_module(self)
        except BaseException:  # as a failed import does: no half-run module stays behind
            if sys.modules.get(spec.name) is self:
                del sys.modules[spec.name]
            raise
        return getattr(self, attr)


def defer(name: str) -> bool:
    """Make ``name`` (a stdlib module, e.g. ``"http.client"``) load on first use. Returns
    False, doing nothing, when it is already imported or cannot be found."""
    if name in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return False
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _Deferred
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:  # what the import statement does for a submodule it loads
        setattr(sys.modules[parent], child, module)
    return True
