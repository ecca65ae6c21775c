import sys
from pathlib import Path

# Test modules import the shared-data locator (tests/_shared.py) by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))
