"""examples/distributed_maml.py runs under the launcher with 2 processes
(per task, and batched under `metafuse launch`) and its meta-loss falls."""

import os
import re
import subprocess
import sys

import pytest

from package_under_test import PACKAGE_DIR

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


@pytest.mark.parametrize("launcher, mode", [(["metafuse.distributed.launch"], []),
                                           (["metafuse", "launch"], ["--batched"])])
def test_distributed_maml_example_trains(launcher, mode):
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
    done = subprocess.run(
        [sys.executable, "-m", *launcher, "-n", "2", "--timeout", "150",
         os.path.join(ROOT, "examples", "distributed_maml.py"), "--steps", "31", "--tasks", "16",
         *mode],
        env=env, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [float(x) for x in re.findall(r"meta-loss (\S+)", done.stdout)]
    assert len(losses) == 4, done.stdout  # steps 0, 10, 20, 30
    assert losses[-1] < losses[0]
    assert "('worker0', 8), ('worker1', 8)" in done.stdout
