import sys
from pathlib import Path

# Test modules import the fixture locator (tests/_shared.py: tests/fixtures/) by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))
