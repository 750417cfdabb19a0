"""pytest setup: test the package of this checkout, built by tools/build.sh,
or the installed one under METAFUSE_TEST_INSTALLED=1 (package_under_test)."""

import sys

from package_under_test import INSTALLED, PACKAGE_DIR

if not INSTALLED:
    sys.path.insert(0, PACKAGE_DIR)
