"""TaskScheduler(batched=True): each worker's share of the meta-batch as one
batched program (a metafuse.vmap shipped as its AOT artifact). One world of
2 runs every check (batched_programs.batched_world); each test reads one
result."""

import pytest

import metafuse.distributed as todist
from metafuse.distributed.scheduler import sticky_sizes

PARTITIONS = {"equal": [3, 3], "remote only": [6], "local only": [6], "4 + 2": [4, 2],
              "1 + 5": [1, 5]}


@pytest.fixture(scope="module")
def seen():
    import batched_programs
    return todist.spawn(batched_programs.batched_world, 2, timeout=240)[0]


@pytest.mark.parametrize("name", sorted(PARTITIONS))
def test_meta_gradient_equals_the_single_process_one(seen, name):
    assert seen[f"partition {name}"] == PARTITIONS[name]
    assert seen[f"error {name}"] < 1e-12
    assert seen[f"losses error {name}"] < 1e-12


def test_meta_gradient_is_the_same_bits_whatever_the_partition(seen):
    assert seen["same bits"] == {name: True for name in PARTITIONS}


# Gradient rows each worker sends with blocks of 4 tasks ([0, 4), [4, 6)).
REDUCED_ROWS = {"equal": [2, 3], "remote only": [2], "local only": [2], "4 + 2": [1, 1],
                "1 + 5": [1, 4]}


@pytest.mark.parametrize("name", sorted(PARTITIONS))
def test_the_reduced_call_sends_block_sums_and_is_exact(seen, name):
    assert seen[f"reduced error {name}"] < 1e-12
    assert seen[f"reduced rows {name}"] == REDUCED_ROWS[name]


def test_block_sums_are_the_same_bits_whatever_the_partition(seen):
    assert seen["reduced same bits"] == {name: True for name in PARTITIONS}
    assert seen["per-task reduced error"] < 1e-12
    assert seen["per-task reduced same bits"]


def test_block_must_be_a_positive_int():
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="`block` must be a positive int"):
            todist.TaskScheduler(print, block=bad)


def test_a_worker_on_another_device_compiles_the_function_there(seen):
    assert seen["elsewhere error per task"] < 1e-12
    assert seen["elsewhere runs per task"] == "CompiledFunction"
    assert seen["elsewhere error batched"] < 1e-12
    assert seen["elsewhere runs batched"] == ["BatchedFunction"]


def test_without_worker_devices_shares_run_where_the_tensors_arrive(seen):
    assert seen["arrival device error per task"] < 1e-12
    assert seen["arrival device error batched"] < 1e-12


def test_per_task_mode_is_kept(seen):
    assert seen["per-task error"] < 1e-12


def test_each_worker_loads_its_program_once(seen):
    # The same loaded program object serves every meta-step; only the share
    # size in use was shipped.
    first = seen["loaded per step"][0]
    assert list(first) == [3]
    assert seen["loaded per step"] == [first] * 3
    assert seen["shipped sizes"] == {0: [3], 1: [3]}
    assert seen["sum error"] < 1e-12


def test_a_worker_runs_every_share_on_its_one_task_thread(seen):
    # Not on TensorPipe's RPC threads, whose fresh malloc arenas made the
    # remote share 4-7x slower than the caller's.
    assert seen["task threads"] == ["metafuse-tasks"]


def test_a_task_that_does_not_compile_batched_is_a_clear_error(seen):
    assert seen["uncompilable"].startswith(
        "TaskScheduler(batched=True): the task cannot be compiled as one program for 3 tasks")
    assert seen["uncompilable"].endswith("use batched=False")


def test_batched_must_be_a_bool():
    with pytest.raises(TypeError, match="`batched` must be a bool, got 'yes'"):
        todist.TaskScheduler(print, batched="yes")


def test_batched_shares_change_only_for_a_real_gain():
    # Predicted steps: [3, 3] at costs [1, 1.1] is 3.3; [4, 2] is 4.0: keep.
    assert sticky_sizes([3, 3], [4, 2], [1.0, 1.1]) == [3, 3]
    # [3, 3] at costs [1, 2] is 6.0; [4, 2] is 4.0, a third shorter: change.
    assert sticky_sizes([3, 3], [4, 2], [1.0, 2.0]) == [4, 2]
    # 12.0 -> 11.0 is 8% shorter: not enough.
    assert sticky_sizes([10, 10], [11, 9], [1.0, 1.2]) == [10, 10]
    # A latency counts: 6 + 200 * 0.08 = 22 against max(238 * 0.08, 6 + 162 * 0.08) = 19.04.
    assert sticky_sizes([200, 200], [238, 162], [0.08, 0.08], latencies=[0.0, 6.0]) == [238, 162]
    assert sticky_sizes([200, 200], [238, 162], [0.08, 0.08]) == [200, 200]
