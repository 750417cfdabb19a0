import os
import subprocess
import sys

import pytest
import torch

import metafuse

STUB = "/usr/local/cuda/lib64/stubs/libcuda.so"


def test_cuda_status_is_an_answer_not_a_crash():
    available, reason = metafuse.cuda_status()
    assert isinstance(available, bool)
    if torch.cuda.is_available():  # a GPU torch can use: metafuse's driver must reach it
        assert available, reason
    else:
        assert not available and reason.startswith("CUDA is unavailable"), reason


@pytest.mark.skipif(not os.path.exists(STUB),
                    reason="no CUDA toolkit stub library at " + STUB)
def test_stub_library_is_reported_as_such(tmp_path):
    # The toolkit's stub libcuda answers CUDA_ERROR_STUB_LIBRARY to cuInit;
    # metafuse must say so instead of failing obscurely.
    os.symlink(STUB, tmp_path / "libcuda.so.1")
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path),
               PYTHONPATH=":".join(p for p in sys.path if p))
    out = subprocess.run(
        [sys.executable, "-c", "import metafuse; print(metafuse.cuda_status())"],
        capture_output=True, text=True, env=env, check=True)
    assert "(False, " in out.stdout
    assert "stub library" in out.stdout
