"""How workers share the host's cores: RPC without a busy-polling
transport, and OpenMP teams sized to each process's share."""

import sys

import pytest

import metafuse.distributed as todist
from metafuse.distributed import config
from metafuse.distributed.launch import launch


def test_default_transports_and_the_override(monkeypatch):
    monkeypatch.delenv("METAFUSE_RPC_TRANSPORTS", raising=False)
    assert config.default_transports() == ["uv"]
    monkeypatch.setenv("METAFUSE_RPC_TRANSPORTS", "shm, uv")
    assert config.default_transports() == ["shm", "uv"]
    monkeypatch.setenv("METAFUSE_RPC_TRANSPORTS", "tcp")
    with pytest.raises(config.WorldConfigError, match="METAFUSE_RPC_TRANSPORTS .* 'tcp'"):
        config.default_transports()


def test_thread_share():
    assert config.thread_share(2, cpus=2) == 1
    assert config.thread_share(3, cpus=16) == 5
    assert config.thread_share(4, cpus=2) == 1
    with pytest.raises(ValueError, match="`processes` must be a positive int"):
        config.thread_share(0)


def test_worker_environment_sets_the_share_unless_told(monkeypatch):
    share = str(config.thread_share(2))
    env = config.worker_environment(0, 2, master_addr="h", master_port=1, base={})
    assert env["OMP_NUM_THREADS"] == share
    env = config.worker_environment(0, 2, master_addr="h", master_port=1,
                                    base={"OMP_NUM_THREADS": "7"})
    assert env["OMP_NUM_THREADS"] == "7"
    env = config.worker_environment(0, 2, master_addr="h", master_port=1,
                                    base={"OMP_NUM_THREADS": "7"}, threads=3)
    assert env["OMP_NUM_THREADS"] == "3"


def test_launch_passes_threads(tmp_path):
    out = tmp_path / "out.txt"
    script = f"import os; open({str(out)!r}, 'a').write(os.environ['OMP_NUM_THREADS'] + '\\n')"
    assert launch([sys.executable, "-c", script], 2, timeout=60, threads=3) == 0
    assert out.read_text().split() == ["3", "3"]
    with pytest.raises(ValueError, match="`threads` must be a positive int"):
        launch([sys.executable, "-c", "pass"], 1, threads=0)


def test_spawn_threads_argument_is_checked():
    with pytest.raises(ValueError, match="`threads` must be 'auto', None or a positive int"):
        todist.spawn(print, 1, threads=0)


def test_an_idle_world_leaves_the_cores_free_and_rpc_threads_use_the_share(monkeypatch):
    # TensorPipe's shm transport busy-polls: rank 1 took 0.3 to 0.45 s of
    # CPU per idle second with it; with "uv" about 0.004 s.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("METAFUSE_RPC_TRANSPORTS", raising=False)
    import cpu_share_programs
    seen = todist.spawn(cpu_share_programs.idle_world, 2, args=(1.5,), timeout=120)[0]
    assert seen["idle_cpu"] < 0.15, seen
    share = config.thread_share(2)
    assert seen["omp"] == (str(share), share)


def test_the_task_thread_runs_calls_from_other_threads_and_nested_calls_in_place():
    import threading

    from metafuse.distributed import task_runner

    def where():
        return threading.current_thread().name

    def nested():
        return where(), task_runner._on_task_thread(where)

    assert task_runner._on_task_thread(where) == "MainThread"
    seen = []
    worker = threading.Thread(target=lambda: seen.append(task_runner._on_task_thread(nested)))
    worker.start()
    worker.join(timeout=30)
    assert seen == [("metafuse-tasks", "metafuse-tasks")]
