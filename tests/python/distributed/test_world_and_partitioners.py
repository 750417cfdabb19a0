"""metafuse.distributed without processes: world information, rank
decorators, configuration errors, partitioners, reducers, load shares."""

import socket

import pytest
import torch

import metafuse.distributed as todist
from metafuse.distributed import config, world
from metafuse.distributed.scheduler import partition_sizes

WORLD = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}


@pytest.fixture
def world_env(monkeypatch):
    def set_env(**values):
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                     "MASTER_PORT", "METAFUSE_RPC_TIMEOUT"):
            monkeypatch.delenv(name, raising=False)
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        return world.reread_world_info()
    yield set_env
    monkeypatch.undo()
    world.reread_world_info()


def test_world_info_from_the_environment(world_env):
    info = world_env(**WORLD)
    assert info == (1, 4, 1, 2) and info.rank == 1 and info.worker_name == "worker1"
    assert (todist.get_world_rank(), todist.get_rank(), todist.get_world_size(),
            todist.get_local_rank(), todist.get_local_world_size()) == (1, 1, 4, 1, 2)
    assert todist.get_world_info.world_size == todist.get_world_info.WORLD_SIZE == 4
    assert todist.get_worker_id(3) == 3


def test_a_process_alone_is_a_world_of_one(world_env):
    assert world_env() == (0, 1, 0, 1)


def test_worker_names_are_padded_to_the_world_size():
    assert world.default_worker_name_format(3, 12, 0, 1) == "worker03"


def test_rank_decorators(world_env):
    world_env(**WORLD)
    assert todist.rank_zero_only(lambda: "ran")() is None
    assert todist.rank_non_zero_only(lambda: "ran")() == "ran"
    assert todist.on_rank(0, 1)(lambda: "ran")() == "ran"
    assert todist.not_on_rank(1)(lambda: "ran")() is None
    with pytest.raises(TypeError, match="ranks must be ints"):
        todist.on_rank("0")


@pytest.mark.parametrize("values, message", [
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 must be smaller than WORLD_SIZE=2"),
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE must be an integer, got 'two'"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE must be >= 1"),
    ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "1"}, "LOCAL_RANK=1 must be smaller"),
    ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "3"}, "LOCAL_WORLD_SIZE=3 exceeds WORLD_SIZE=2"),
])
def test_malformed_world_is_named(world_env, values, message):
    with pytest.raises(todist.WorldConfigError, match=message):
        world_env(**values)


def test_missing_master_address_is_named(world_env):
    world_env(RANK="0", WORLD_SIZE="2")
    with pytest.raises(todist.WorldConfigError, match="MASTER_ADDR is not set"):
        world.init_rpc_from_environment()
    world_env(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    with pytest.raises(todist.WorldConfigError, match="MASTER_PORT is not set"):
        world.init_rpc_from_environment()


def test_port_in_use_is_named(world_env):
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        world_env(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        with pytest.raises(todist.WorldConfigError, match=f"MASTER_PORT={port} is already in use"):
            world.init_rpc_from_environment()


def test_rpc_timeout_variable(world_env):
    world_env()
    assert config.default_timeout() == 30.0
    world_env(METAFUSE_RPC_TIMEOUT="4.5")
    assert config.default_timeout() == 4.5
    world_env(METAFUSE_RPC_TIMEOUT="soon")
    with pytest.raises(todist.WorldConfigError, match="METAFUSE_RPC_TIMEOUT"):
        config.default_timeout()


def test_worker_environment_is_torchrun_s():
    env = config.worker_environment(1, 2, master_addr="10.0.0.1", master_port=29500,
                                    nnodes=2, node_rank=1, base={})
    assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK",
                                "WORLD_SIZE", "LOCAL_WORLD_SIZE")} == {
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "RANK": "3", "LOCAL_RANK": "1",
        "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}


X = torch.arange(10.0).reshape(5, 2)


def test_batch_partitioner_splits_into_one_chunk_per_worker():
    parts = todist.dim_partitioner(workers=[0, 1])(X, "tag", scale=torch.ones(5))
    assert [rank for rank, _, _ in parts] == [0, 1]
    assert torch.equal(parts[0][1][0], X[:2]) and torch.equal(parts[1][1][0], X[2:])
    assert parts[1][1][1] == "tag" and torch.equal(parts[1][2]["scale"], torch.ones(3))


def test_exclusive_partitioner_without_dim_selects_and_cycles_workers():
    parts = todist.dim_partitioner(exclusive=True, keepdim=False, workers=[0, 1])(X)
    assert [rank for rank, _, _ in parts] == [0, 1, 0, 1, 0]
    assert torch.equal(parts[3][1][0], X[3])


def test_partitioner_on_a_negative_dim_keeps_it():
    parts = todist.dim_partitioner(dim=-1, exclusive=True, workers=[0, 1])(X)
    assert len(parts) == 2 and torch.equal(parts[1][1][0], X[:, 1:])


def test_fewer_entries_than_workers_gives_one_part_each():
    parts = todist.dim_partitioner(workers=[0, 1, 2])(X[:2])
    assert [(rank, tuple(a[0].shape)) for rank, a, _ in parts] == [(0, (1, 2)), (1, (1, 2))]


def test_partitioner_errors():
    with pytest.raises(ValueError, match="keepdim=False needs exclusive=True"):
        todist.dim_partitioner(keepdim=False)
    with pytest.raises(ValueError, match="batch size mismatch on dim=0: 5 and 4"):
        todist.dim_partitioner(workers=[0, 1])(X, torch.zeros(4))


def test_partitioner_without_tensors_calls_here(world_env):
    world_env(**WORLD)
    assert todist.batch_partitioner(1, k=2) == [(1, (1,), {"k": 2})]


def test_partitioner_pickles():
    import pickle
    p = pickle.loads(pickle.dumps(todist.dim_partitioner(1, exclusive=True, workers=[0])))
    assert (p.dim, p.exclusive, p.keepdim, p.workers) == (1, True, True, [0])


def test_reducers():
    parts = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 6.0])]
    assert torch.equal(todist.mean_reducer(parts), torch.tensor([2.0, 4.0]))
    assert torch.equal(todist.sum_reducer(iter(parts)), torch.tensor([4.0, 8.0]))


def test_load_shares_follow_measured_cost():
    assert partition_sizes(400, [1.0, 1.0]) == [200, 200]
    assert partition_sizes(9, [1.0, 2.0]) == [6, 3]
    assert partition_sizes(5, [1.0, 1.0]) == [3, 2]
    assert sum(partition_sizes(7, [0.3, 0.5, 0.9])) == 7
    # With latencies all finish together: 4 + 0.08 * n1 = 0.08 * n0 at 400
    # tasks gives 225 / 175; a latency past the finish time gets nothing.
    assert partition_sizes(400, [0.08, 0.08], [0.0, 4.0]) == [225, 175]
    assert partition_sizes(10, [1.0, 1.0, 1.0], [0.0, 0.0, 50.0]) == [5, 5, 0]
    assert partition_sizes(6, [1.0, 1.0], [0.0, 0.0]) == partition_sizes(6, [1.0, 1.0])
    # In granules of 13 tasks, the remainder to the last worker with a share.
    assert partition_sizes(400, [0.08, 0.08], [0.0, 4.0], granule=13) == [221, 179]
    assert partition_sizes(400, [1.0, 1.0, 1.0], [0.0, 0.0, 500.0], granule=13) == [195, 205, 0]


def test_remote_call_rejects_a_bad_partitioner():
    with pytest.raises(ValueError, match="`partitioner` must be a rank"):
        todist.remote_async_call(print, partitioner=1.5)


def test_scheduler_needs_rpc():
    with pytest.raises(ValueError, match="RPC is not started"):
        todist.TaskScheduler(lambda p, x: x.sum())
    with pytest.raises(TypeError, match="`task` must be callable"):
        todist.TaskScheduler(3)


def test_worker_error_names_the_worker_and_pickles():
    import pickle
    err = todist.WorkerError("worker2", 2, "unreachable", "eof")
    again = pickle.loads(pickle.dumps(err))
    assert "worker2 (rank 2) is unreachable" in str(again) and again.reason == "unreachable"


def test_worker_device_is_the_local_rank_s_gpu_or_the_cpu(world_env, monkeypatch):
    world_env(**{**WORLD, "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert todist.worker_device() == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert todist.worker_device() == torch.device("cuda", 1)  # one process per GPU, wrapped
    assert todist.worker_device(local_rank=0) == torch.device("cuda", 0)


def test_a_task_compiled_for_another_device_is_compiled_on_the_worker_s(monkeypatch):
    from metafuse.distributed import task_runner
    import dist_programs
    monkeypatch.setattr(world, "worker_device", lambda: torch.device("cuda", 1))
    reference = ("dist_programs", "compiled_task_loss")
    # Compiled for this worker's device: the artifact runs as it is.
    assert task_runner._placed(("cuda:1", reference)) == (torch.device("cuda", 1), None)
    # Compiled for another: the function (a metafuse.compile's own) by name.
    assert task_runner._placed(("cpu", reference)) == (
        torch.device("cuda", 1), dist_programs.compiled_task_loss.fn)
    with pytest.raises(RuntimeError, match="compiled for cpu and this process runs on "
                       "cuda:1; pass a module-level function"):
        task_runner._placed(("cpu", None))
    assert task_runner._placed(None) == (None, None)
