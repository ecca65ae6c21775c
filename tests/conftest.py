import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Test modules import the fixture locator (tests/_shared.py: tests/fixtures/) by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _stop_signals_forgotten() -> Iterator[None]:
    """``appliance serve``/``demo`` run in-process (``cli.main``) install the process-wide
    stop handlers (``appliance.engine.stopping.SIGNALS``) and may leave a stop request
    recorded; a later in-process appliance would then stop at once. Each test starts with
    the handlers as pytest set them and no request pending."""
    yield
    from appliance.engine.stopping import SIGNALS

    SIGNALS.uninstall()
