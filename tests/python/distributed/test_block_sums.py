"""The block sums of TaskScheduler.__call__ (no RPC): what a worker answers
for its slice, and the caller's total, the same bits whatever the
partition."""

import itertools
import types

import pytest
import torch

from metafuse.distributed.scheduler import _assemble_blocks
from metafuse.distributed.task_runner import block_segments, block_sums, pairwise_rows_sum


def test_block_segments_cut_a_slice_at_block_edges():
    # 10 tasks in blocks of 4: [0, 4), [4, 8), [8, 10).
    assert block_segments(0, 10, 4, 10) == [(0, 4, True), (4, 8, True), (8, 10, True)]
    assert block_segments(3, 9, 4, 10) == [(3, 4, False), (4, 8, True), (8, 9, False)]
    assert block_segments(5, 7, 4, 10) == [(5, 7, False)]
    assert block_segments(8, 10, 4, 10) == [(8, 10, True)]  # the short last block
    assert block_segments(4, 4, 4, 10) == []


def test_pairwise_rows_sum_is_the_sum():
    rows = torch.randn(3, 7, 5, dtype=torch.float64)
    torch.testing.assert_close(pairwise_rows_sum(rows), rows.sum(1), rtol=1e-14, atol=1e-14)


def _worker_answer(grads, start, end, block, count):
    return block_sums(grads[start:end], start, block, count)


def _partitions(count, parts):
    for cuts in itertools.combinations(range(1, count), parts - 1):
        bounds = (0, *cuts, count)
        yield [(types.SimpleNamespace(), a, b) for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("count,block", [(11, 4), (12, 3), (7, 1), (9, 9), (10, 16)])
def test_the_total_is_the_same_bits_for_every_partition(count, block):
    torch.manual_seed(count * 100 + block)
    grads = torch.randn(count, 6, 3, dtype=torch.float32) * 10 ** torch.randn(count, 1, 1)
    totals = []
    for workers in (1, 2, 3):
        for parts in _partitions(count, workers):
            rows = torch.cat([_worker_answer(grads, a, b, block, count) for _, a, b in parts])
            totals.append(_assemble_blocks(rows, parts, block, count))
    assert all(torch.equal(t, totals[0]) for t in totals)
    torch.testing.assert_close(totals[0], grads.double().sum(0).float(), rtol=1e-5, atol=1e-5)


def test_a_worker_with_whole_blocks_sends_one_row_per_block():
    grads = torch.randn(200, 4)
    assert block_sums(grads, 0, 13, 400).shape == (20, 4)  # 15 whole + 5 tasks of [195, 208)
    assert block_sums(grads[:8], 195, 13, 400).shape == (8, 4)  # inside one block
