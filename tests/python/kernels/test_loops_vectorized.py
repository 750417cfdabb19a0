"""The fused optimizer loops of the extension under test are vectorized:
tools/check_kernel_vectorization.py disassembles it and finds packed AVX2
arithmetic in every forward (ElementLoop) and first-order backward
(BackwardLoop) clone. A closed form that stops vectorizing (a division under
a condition did, once: the backward ran 3-4x slower) fails here instead of
only in a benchmark."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

from package_under_test import PACKAGE_DIR, REPO_ROOT


def test_every_fused_loop_has_packed_arithmetic():
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    libs = glob.glob(os.path.join(PACKAGE_DIR, "metafuse", "_C*.so"))
    assert libs, f"no metafuse extension under {PACKAGE_DIR}"
    run = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "check_kernel_vectorization.py"),
         libs[0]], capture_output=True, text=True, timeout=300)
    summary = run.stdout.strip().splitlines()[-1]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    # The summary names how many clones it saw: none would mean the tool
    # matched nothing (a renamed loop), not that all is well.
    count = int(summary.split()[0])
    assert count >= 100, summary
