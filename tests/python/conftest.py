"""pytest setup: test the package of this checkout, built by tools/build.sh."""

import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO_ROOT, "frontend", "python"))
