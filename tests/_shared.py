"""Where the read-only shared data lives: ``$APPLIANCE_SHARED``, else ``shared/`` beside the
checkout (``/work/shared`` for ``/work/main``; CI lays a copy beside its clone)."""

import os
from pathlib import Path

SHARED = Path(os.environ.get("APPLIANCE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
CORPUS = Path(os.environ.get("APPLIANCE_CORPUS") or SHARED / "corpus")
