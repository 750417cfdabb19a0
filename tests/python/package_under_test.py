"""Which metafuse the Python tests exercise, and the directory that holds it
(children started by the tests get it as PYTHONPATH).

By default: this checkout's frontend/python, with the extension Bazel built
(tools/build.sh). With METAFUSE_TEST_INSTALLED=1: the metafuse installed in
the running interpreter (tools/test_all.sh's pip step runs the tests with a
venv's python after `pip install .`); the source tree is then never imported.
"""

import importlib.util
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE_PACKAGE_DIR = os.path.join(REPO_ROOT, "frontend", "python")
INSTALLED = os.environ.get("METAFUSE_TEST_INSTALLED") == "1"


def _installed_package_dir():
    spec = importlib.util.find_spec("metafuse")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("METAFUSE_TEST_INSTALLED=1 but this interpreter has no metafuse "
                           "installed: run `pip install --no-build-isolation .` first")
    directory = os.path.dirname(os.path.realpath(list(spec.submodule_search_locations)[0]))
    if directory == os.path.realpath(SOURCE_PACKAGE_DIR):
        raise RuntimeError(f"METAFUSE_TEST_INSTALLED=1 but metafuse resolves to the source "
                           f"tree {directory}: unset PYTHONPATH")
    return directory


PACKAGE_DIR = _installed_package_dir() if INSTALLED else SOURCE_PACKAGE_DIR
