"""pytest set-up: import epifuse from the checkout (python/) and its C ABI from build/
(EPIFUSE_LIBRARY overrides), unless an installed epifuse is asked for."""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if not os.environ.get("EPIFUSE_TEST_INSTALLED"):
    sys.path.insert(0, str(ROOT / "python"))
