"""Public face of the one error shape (``scanner.core.diagnostic``) for the ``appliance``
package and other callers: ``Diagnostic(code, message, at, fix)``, ``CodeRegistry`` and
``render_many``. Scanner modules import ``scanner.core.diagnostic`` (layers import only
downwards); everything outside the scanner imports this module.
"""

from __future__ import annotations

from scanner.core.diagnostic import CodeRegistry, Diagnostic, render_many

__all__ = ["CodeRegistry", "Diagnostic", "render_many"]
