"""The task scheduler over torch.distributed collectives (gloo) in a local
world of 2 (collective_programs.partitions_world): the meta-gradient is the
single-process one, bit for bit, for every partition, per task and
batched, with block sums and per-task gradients; and what a process alone
checks (no torch.distributed)."""

import pytest
import torch

import metafuse.distributed as todist
from metafuse.distributed.collective import CollectiveScheduler
from metafuse.distributed.errors import RankError

import collective_programs as cp
import dist_programs as programs


@pytest.fixture(scope="module")
def seen():
    return todist.spawn(cp.partitions_world, 2, init_rpc=False, timeout=240)


@pytest.fixture(scope="module")
def alone():
    return {(batched, per_task): cp.single_process(batched, per_task)
            for batched in (False, True) for per_task in (False, True)}


def _equal(got, want):
    return all(torch.equal(torch.from_numpy(a), torch.from_numpy(b)) for a, b in zip(got, want))


def test_task_scheduler_is_the_collective_one_where_torch_distributed_runs(seen):
    assert [s["kind"] for s in seen] == ["CollectiveScheduler"] * 2


@pytest.mark.parametrize("batched", [False, True], ids=["per task", "batched"])
@pytest.mark.parametrize("name", sorted(cp.PARTITIONS))
def test_every_rank_gets_the_single_process_bits_for_every_partition(seen, alone, batched, name):
    for rank in (0, 1):
        gradient, loss = seen[rank][(batched, name, "sum")]
        assert _equal(gradient, alone[(batched, False)][0]), (rank, name)
        assert loss == alone[(batched, False)][1]
        gradient, _ = seen[rank][(batched, name, "per task")]
        assert _equal(gradient, alone[(batched, True)][0]), (rank, name)


def test_the_single_process_result_is_the_eager_meta_gradient(alone):
    want = programs.reference_meta_gradient()[0]
    for gradient, _ in alone.values():
        assert programs.relative_error([torch.from_numpy(g) for g in gradient], want) < 1e-12


# Rows each rank contributes with blocks of 4 of 6 tasks ([0, 4), [4, 6)).
ROWS = {"3 + 3": {0: 3, 1: 2}, "6 + 0": {0: 2}, "0 + 6": {1: 2}, "4 + 2": {0: 1, 1: 1},
        "1 + 5": {0: 1, 1: 4}}


@pytest.mark.parametrize("name", sorted(cp.PARTITIONS))
def test_each_rank_contributes_block_sums(seen, name):
    assert seen[0][(False, name, "rows")] == ROWS[name]


@pytest.mark.parametrize("batched", [False, True], ids=["per task", "batched"])
def test_the_balanced_split_is_exact_and_the_same_on_every_rank(seen, alone, batched):
    for rank in (0, 1):
        for gradient, _ in seen[rank][(batched, "balanced")]:
            assert _equal(gradient, alone[(batched, False)][0])
    partitions = [s[(batched, "balanced partitions")] for s in seen]
    assert partitions[0] == partitions[1]
    assert sum(b - a for _, a, b in partitions[0]) == programs.TASKS


def test_argument_errors_name_the_argument():
    with pytest.raises(ValueError, match="`shares` must be a list of 1 non-negative ints"):
        CollectiveScheduler(programs.eager_task_loss, shares=[3, 3])
    with pytest.raises(ValueError, match="`timeout` and `silence` must be positive"):
        CollectiveScheduler(programs.eager_task_loss, silence=0)
    with pytest.raises(ValueError, match="`group` needs torch.distributed"):
        CollectiveScheduler(programs.eager_task_loss, group=object())
    with pytest.raises(TypeError, match="`task` must be callable"):
        CollectiveScheduler(3)
    with pytest.raises(ValueError, match="`backend` must be None, 'rpc' or 'collective'"):
        todist.TaskScheduler(programs.eager_task_loss, backend="mpi")
    scheduler = CollectiveScheduler(programs.eager_task_loss, shares=[5])
    with pytest.raises(ValueError, match=r"`shares` \[5\] sum to 5, but the meta-batch has 6"):
        scheduler(programs.meta_params(), *programs.task_batch())


def test_a_rank_error_names_the_ranks_and_survives_pickling():
    import pickle
    error = pickle.loads(pickle.dumps(RankError([2, 1], "silent", 4, 5.0)))
    assert error.ranks == [1, 2] and error.reason == "silent" and error.step == 4
    assert str(error).startswith("ranks 1, 2 sent no heartbeat for 5.0 s")
    assert "parameters are as before it" in str(error)


GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.skipif(GPUS < 2, reason=f"NCCL needs a GPU per rank: this machine has {GPUS} "
                    "(NCCL refuses two ranks on one GPU)")
def test_nccl_on_two_gpus_gives_the_single_gpu_bits():
    seen = todist.spawn(cp.nccl_world, 2, init_rpc=False, timeout=240)
    assert [s[:2] for s in seen] == [("nccl", "cuda:0"), ("nccl", "cuda:1")]
    for batched in (False, True):
        want = cp.on_device("cuda:0", batched)
        for rank in (0, 1):
            assert _equal(seen[rank][2][batched][0], want[0]), (rank, batched)
