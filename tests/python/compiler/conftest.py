"""Fixtures of the compiler tests."""

import pytest


@pytest.fixture(params=["fused", "unfused"])
def program(request, monkeypatch):
    """Which compiled program runs, chosen explicitly: the fused
    (specialized) one or the unfused (generic) one. The fusion cost check is
    off in the tests (tests/python/conftest.py), so timing never chooses; a
    module that means both marks itself
    ``pytestmark = pytest.mark.usefixtures("program")``."""
    monkeypatch.setenv("METAFUSE_DISABLE_FUSION", "1" if request.param == "unfused" else "0")
    return request.param
