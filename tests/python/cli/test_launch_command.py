"""``metafuse launch``: the distributed launcher as a subcommand, in a
fresh process as a user runs it."""

from cli_helpers import cli

SCRIPT = """import os, sys
with open(sys.argv[1], "a") as f:
    f.write(" ".join([os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                      "OMP_NUM_THREADS")] + sys.argv[2:]) + "\\n")
sys.exit(int(os.environ["RANK"]) * int(os.environ.get("FAIL_CODE", "0")))
"""


def _script(tmp_path):
    path = tmp_path / "rank_script.py"
    path.write_text(SCRIPT)
    return str(path)


def test_launch_runs_the_script_in_every_process_with_its_arguments(tmp_path):
    out = tmp_path / "ranks.txt"
    done = cli("launch", "-n", "2", "--threads", "1", "--timeout", "60", _script(tmp_path),
               out, "--steps", "5")
    assert done.returncode == 0, done.stderr
    assert sorted(out.read_text().splitlines()) == ["0 2 0 1 --steps 5", "1 2 1 1 --steps 5"]


def test_a_failing_process_s_exit_code_is_the_job_s(tmp_path):
    done = cli("launch", "-n", "2", "--timeout", "60", _script(tmp_path), tmp_path / "x.txt",
               env={"FAIL_CODE": "3"})
    assert done.returncode == 3
    assert "local rank 1 exited with code 3" in done.stderr


def test_bad_usage_exits_2(tmp_path):
    done = cli("launch", "-n", "0", "x.py")
    assert done.returncode == 2
    assert "metafuse launch: error: `nproc_per_node` must be a positive int, got 0" in done.stderr
    done = cli("launch")
    assert done.returncode == 2 and "usage: metafuse launch" in done.stderr
    done = cli("launch", "-n", "two", "x.py")
    assert done.returncode == 2 and "invalid int value: 'two'" in done.stderr


def test_help():
    done = cli("launch", "--help")
    assert done.returncode == 0
    assert "usage: metafuse launch" in done.stdout and "--nproc-per-node" in done.stdout
