"""What the schedulers accept from a worker, fuzzed: the timings a worker
reports (RPC's reply, the collective all_reduce's slots) feed
``balance.Balancer``, whose split decides every rank's share. Random and
extreme reports (zero, negative, NaN, infinite, tiny, huge) must give a
split of non-negative ints summing to the meta-batch, or a ValueError that
names the worker, never a ZeroDivisionError, an OverflowError or a NaN
share. A seeded random search: cheap, and the same cases on every run."""

import math
import random

import pytest

from metafuse.distributed.balance import Balancer, partition_sizes

EXTREMES = [0.0, -0.0, -1.0, 1e-300, 1e-12, 1e-3, 1.0, 7.5, 1e12, 1e300,
            math.inf, -math.inf, math.nan]


def report(rng):
    return rng.choice(EXTREMES) if rng.random() < 0.5 else rng.uniform(0.0, 10.0)


@pytest.mark.parametrize("batched", [False, True])
def test_any_sequence_of_worker_reports_gives_a_valid_split_or_names_the_worker(batched):
    rng = random.Random(40 + batched)
    for _ in range(300):
        balancer = Balancer(batched=batched)
        ids = list(range(rng.randint(1, 5)))
        count = rng.randint(1, 64)
        for _ in range(rng.randint(1, 8)):
            worker, tasks = rng.choice(ids), rng.randint(1, count)
            compute, latency = report(rng), report(rng)
            try:
                balancer.record(worker, tasks, compute, latency)
            except ValueError as exc:
                assert repr(worker) in str(exc) and "not a measurement" in str(exc)
                assert not (math.isfinite(compute) and compute >= 0 and math.isfinite(latency))
                continue
            sizes = balancer.split(count, ids, block=rng.randint(1, 4))
            assert all(isinstance(s, int) and s >= 0 for s in sizes), sizes
            assert sum(sizes) == count, (sizes, balancer.costs, balancer.latency)


def test_partition_sizes_refuses_a_cost_it_cannot_divide_by():
    for cost in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="worker 1 has"):
            partition_sizes(10, [1.0, cost])
    with pytest.raises(ValueError, match="worker 0 has"):
        partition_sizes(10, [1.0, 1.0], [math.nan, 0.0])
