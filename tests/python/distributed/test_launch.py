"""The launcher and spawn: what they set, and that failures stop the job
in bounded time with every process reaped."""

import os
import subprocess
import sys

import pytest

from package_under_test import PACKAGE_DIR

import metafuse.distributed as todist
from metafuse.distributed.launch import launch, main

HERE = os.path.dirname(os.path.abspath(__file__))
PRINT_WORLD = ("import os; print(' '.join(os.environ[k] for k in ('RANK', 'LOCAL_RANK', "
               "'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR')), flush=True)")


def test_launch_sets_torchrun_s_variables(tmp_path, capsys):
    # One file per rank: what each process saw, whatever the order they ran.
    code = launch(["/bin/sh", "-c", f"{sys.executable} -c \"{PRINT_WORLD}\" "
                   f"> {tmp_path}/rank$RANK.txt 2>&1"], 2, timeout=60)
    seen = {p.name: p.read_text() for p in sorted(tmp_path.iterdir())}
    assert code == 0, (seen, capsys.readouterr().err)
    assert seen == {"rank0.txt": "0 0 2 2 127.0.0.1\n", "rank1.txt": "1 1 2 2 127.0.0.1\n"}


def test_a_failing_process_stops_the_others(capsys):
    script = "import os, sys, time; sys.exit(3) if os.environ['RANK'] == '1' else time.sleep(60)"
    assert launch([sys.executable, "-c", script], 2, timeout=50) == 3
    assert "local rank 1 exited with code 3; stopped local ranks [0]" in capsys.readouterr().err


def test_the_job_timeout_stops_everything(capsys):
    assert launch([sys.executable, "-c", "import time; time.sleep(60)"], 2, timeout=1) == 124
    assert "exceeded 1 s" in capsys.readouterr().err


def test_launch_argument_errors(capsys):
    with pytest.raises(ValueError, match="`nproc_per_node` must be a positive int"):
        launch(["true"], 0)
    with pytest.raises(ValueError, match="`master_port` must be given"):
        launch(["true"], 1, nnodes=2)
    assert main(["--nnodes", "2", "--node-rank", "2", "x.py"]) == 2
    assert "`node_rank` must be in [0, nnodes=2)" in capsys.readouterr().err


def test_spawn_returns_every_rank_s_result():
    import dist_programs
    assert todist.spawn(dist_programs.quick_start, 2, args=("hi",), timeout=120) == \
        [(0, "hi"), (1, "hi")]


def test_spawn_reports_the_failing_rank_s_traceback():
    import dist_programs
    with pytest.raises(todist.SpawnError, match="rank 1 raised") as info:
        todist.spawn(dist_programs.fail_on_rank_one, 2, timeout=120)
    assert "KeyError: 'rank one fails'" in str(info.value) and info.value.rank == 1


def _env():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [PACKAGE_DIR, HERE]))
    return env


def test_world_size_mismatch_is_a_clear_error_not_a_hang():
    # rank 0 expects 3 processes, only 2 come: both end with a message.
    # (10 s: long enough that rank 1, whose imports take seconds on a loaded
    # machine, reaches the rendezvous before rank 0, the store's server,
    # gives up; with 2 s it sometimes met a closed store instead)
    port = str(todist.config.free_port())
    code = ("import metafuse.distributed as d; d.world.init_rpc_from_environment()")
    procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                              env=dict(_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                                       RANK=str(r), WORLD_SIZE="3", METAFUSE_RPC_TIMEOUT="10"))
             for r in range(2)]
    try:
        errors = [p.communicate(timeout=90)[1] for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert all(p.returncode != 0 for p in procs)
    for rank, err in enumerate(errors):
        assert f"RPC start-up of worker{rank} (RANK={rank}, WORLD_SIZE=3)" in err, err[-2000:]
        assert "not every process joined" in err
