"""``python -m scanner``: see ``scanner.cli``.

Startup and exit are tuned for a short-lived process (none of it changes what is scanned
or how it is judged):

- the cyclic garbage collector is off while the scanner's modules import (imports make
  no garbage cycles worth collecting; collections over the growing module graph were a
  few per cent of startup), then the import-time objects are frozen out of later
  collections (``gc.freeze``) and the collector is on again for the scan;
- the process leaves through ``os._exit`` once its output is flushed: interpreter
  finalization (tearing down every module and freeing a fleet scan's findings and memos
  one object at a time) was a tenth of a fleet scan's wall time and does nothing this
  process needs (the report is written and flushed, helper processes are reaped, files
  are closed, no ``atexit`` handler of ours exists). When flushing fails, the normal exit
  runs instead.
"""

import gc
import os
import sys

gc.disable()
from scanner.cli import main  # noqa: E402 - imported with the collector off (see above)

gc.freeze()
gc.enable()
code = main()
try:
    sys.stdout.flush()
    sys.stderr.flush()
except (OSError, ValueError):  # a closed or broken stream: let the interpreter report it
    raise SystemExit(code) from None
os._exit(code)
