"""``python -m scanner``: see ``scanner.cli``.

The process leaves through ``os._exit`` once its output is flushed: interpreter
finalization (tearing down every module and freeing a fleet scan's findings and memos one
object at a time) was a tenth of a fleet scan's wall time and does nothing this process
needs (the report is written and flushed, helper processes are reaped, files are closed,
no ``atexit`` handler of ours exists). When flushing fails, the normal exit runs instead.
"""

import os
import sys

from scanner.cli import main

code = main()
try:
    sys.stdout.flush()
    sys.stderr.flush()
except (OSError, ValueError):  # a closed or broken stream: let the interpreter report it
    raise SystemExit(code) from None
os._exit(code)
