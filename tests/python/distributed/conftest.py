"""Every distributed test means the compiled path where it compiles: a
CompilationFallbackWarning in the test's own process is an error (the
workers make it one in dist_programs.py)."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.filterwarnings(
            "error::metafuse.compiler.CompilationFallbackWarning"))
