"""pytest setup: test the package of this checkout, built by tools/build.sh,
or the installed one under METAFUSE_TEST_INSTALLED=1 (package_under_test)."""

import os
import sys
import warnings

from package_under_test import INSTALLED, PACKAGE_DIR

if not INSTALLED:
    sys.path.insert(0, PACKAGE_DIR)

# An internal error in a compiler pass raises with the pass named instead of
# falling back with a warning (compiler/pass_failure.h); a test of the
# fallback itself sets it to 0.
os.environ.setdefault("METAFUSE_STRICT", "1")

# Timing never chooses which compiled program a test checks: the fusion cost
# check (metafuse/_fusion_check.py) is off, so the fused (specialized)
# program runs unless a test turns fusion off (METAFUSE_DISABLE_FUSION=1) to
# check the unfused one; the tests of the check itself turn it on.
os.environ.setdefault("METAFUSE_FUSION_CHECK", "0")


def _load_torchs_own_scripted_decompositions():
    """torch 2.x scripts its forward-mode AD decompositions with torch.jit on
    their first use (torch/_decomp/decompositions_for_jvp.py), which warns
    that torch.jit is deprecated. pytest.ini makes that warning an error for
    metafuse's and the tests' own calls; torch's internal one is made here,
    once, before any test runs."""
    try:
        import torch  # noqa: F401
        from torch.autograd import forward_ad
    except ImportError:
        return
    load = getattr(forward_ad, "_maybe_load_decompositions", None)
    if load is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            load()


_load_torchs_own_scripted_decompositions()
