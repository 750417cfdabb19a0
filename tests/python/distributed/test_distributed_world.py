"""A world of 2 processes (spawn): TorchOpt's distributed API, TorchOpt's
MAML idiom, the scheduler for compiled tasks, a raising worker. One world
runs every check (dist_programs.api_world); each test reads one result."""

import pytest

import metafuse.distributed as todist


@pytest.fixture(scope="module")
def seen():
    import dist_programs
    return todist.spawn(dist_programs.api_world, 2, timeout=240)[0]


def test_torchopt_idiom_gets_the_full_meta_gradient(seen):
    # rpc.RRef(net) + module_clone(net_rref.to_here(), by='reference') on
    # each worker: the remote tasks' share reaches net's parameters.
    assert seen["idiom_ranks"] == [0, 1, 0, 1, 0, 1]
    assert seen["idiom_metafuse_error"] < 1e-12


def test_torch_s_rref_loses_the_remote_share(seen):
    # The failure metafuse's RRef fixes: torch's RRef gives rank 0's tasks alone.
    assert seen["idiom_torch_error"] > 0.1
    assert seen["idiom_torch_vs_rank0_half"] < 1e-12


def test_parallelize_over_a_function(seen):
    assert seen["parallelize_parts"] == [([[0.0, 2.0], [4.0, 6.0]], 0),
                                         ([[8.0, 10.0], [12.0, 14.0]], 1)]
    assert seen["parallelize_mean"] == 28.0  # mean of the two workers' 2 * (0+..+3), 2 * (4+..+7)
    assert seen["parallelize_async_sum"] == 28.0


def test_remote_call_to_a_rank_or_a_name(seen):
    assert seen["remote_by_rank"] == 1 and seen["remote_by_name"] == 1


def test_distributed_autograd_grad(seen):
    assert seen["dist_grad"] == [3.0, -4.0]


def test_tree_as_rref_and_tree_to_here_carry_gradients(seen):
    assert seen["tree_rref_grads"] == [[3.0, 5.0], [1.0, 2.0]]


def test_scheduler_meta_gradient_equals_the_single_process_one(seen):
    assert seen["scheduler_payload_kind"] == "artifact"  # compiled once, shipped as AOT
    assert seen["scheduler_error"] < 1e-12
    for name in ("both", "remote only", "local only"):
        assert seen[f"scheduler_losses_error_{name}"] < 1e-12


def test_scheduler_partitions_and_is_deterministic(seen):
    assert seen["scheduler_partition_both"] == [["worker0", 0, 3], ["worker1", 3, 6]] or \
        seen["scheduler_partition_both"] == [("worker0", 0, 3), ("worker1", 3, 6)]
    assert seen["scheduler_same_bits"]  # same bits whatever the partition


def test_scheduler_with_an_eager_task_and_balancing(seen):
    assert seen["scheduler_callable_error"] < 1e-12
    assert seen["scheduler_costs_measured"]
    assert seen["scheduler_costs_are_compute"]
    assert seen["scheduler_latencies"] == (0.0, True)


def test_an_exception_in_a_worker_arrives_with_its_traceback(seen):
    text = seen["raised"]
    assert text.startswith("ValueError: On WorkerInfo(id=1, name=worker1)")
    assert 'in raise_in_task\n    raise ValueError("task failed on purpose")' in text
