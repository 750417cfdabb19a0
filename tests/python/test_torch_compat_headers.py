"""The extension's C++ sources against a newer torch's headers
(tools/check_torch_headers.sh: Debian trixie's libtorch-dev 2.6, downloaded
and unpacked, every source compiled with -fsyntax-only). It needs the
network once and about 40 minutes of one core, so it runs only when asked:
METAFUSE_TEST_TORCH2_HEADERS=1."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.environ.get("METAFUSE_TEST_TORCH2_HEADERS") != "1",
                    reason="set METAFUSE_TEST_TORCH2_HEADERS=1 to compile every source "
                           "against torch 2.6's headers (network once, ~40 min)")
def test_every_source_compiles_against_torch_2_headers():
    result = subprocess.run(["bash", str(ROOT / "tools" / "check_torch_headers.sh"), "-j",
                             str(os.cpu_count() or 1)], capture_output=True, text=True)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "sources compile against torch 2." in summary, summary
