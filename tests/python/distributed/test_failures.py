"""A dead worker and a hung worker, through the launcher (3 processes):
the caller gets WorkerError naming the worker within the timeout, removes
it and goes on with the others."""

import json
import os
import subprocess
import sys

import pytest

from package_under_test import PACKAGE_DIR

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 10  # METAFUSE_RPC_TIMEOUT of the job


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    out = tmp_path_factory.mktemp("failure") / "seen.json"
    env = dict(os.environ, METAFUSE_RPC_TIMEOUT=str(TIMEOUT),
               PYTHONPATH=PACKAGE_DIR)
    done = subprocess.run(
        [sys.executable, "-m", "metafuse.distributed.launch", "-n", "3", "--keep-going",
         "--grace", "3", "--timeout", "150", os.path.join(HERE, "failure_job.py"), str(out)],
        env=env, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_step_before_is_exact(seen):
    assert seen["before"]["ok"] and seen["before"]["error"] < 1e-12


def test_a_killed_worker_is_named_within_the_timeout(seen):
    killed = seen["killed"]
    assert not killed["ok"]
    assert (killed["worker"], killed["rank"], killed["reason"]) == ("worker2", 2, "unreachable")
    assert "worker2 (rank 2) is unreachable: its process died" in killed["message"]
    assert killed["seconds"] < TIMEOUT + 5  # a bound against hanging, not a speed check


def test_the_caller_continues_with_the_remaining_workers(seen):
    assert seen["workers_after_removal"] == ["worker0", "worker1"]
    assert seen["continued"]["ok"] and seen["continued"]["error"] < 1e-12


def test_a_hung_worker_is_named_after_the_timeout(seen):
    hung = seen["hung"]
    assert (hung["worker"], hung["reason"]) == ("worker1", "timeout")
    assert "did not answer within the RPC timeout" in hung["message"]
    assert 2.0 <= hung["seconds"] < 2.0 + 10
