"""How a meta-batch is split over the ranks or workers that run it, by
their measured speed: ``partition_sizes`` (all finish together),
``sticky_sizes`` (batched mode's hysteresis) and ``Balancer``, the running
estimates both schedulers (RPC's TaskScheduler and the collective one) keep
and split by. Pure arithmetic: every rank of a collective world that feeds
a Balancer the same timings gets the same split.
"""

import math

__all__ = ["partition_sizes", "sticky_sizes", "Balancer"]

# The range a measured cost is kept in: a worker that reports 0 seconds
# (a coarse clock) or days per task must not make the split divide by zero
# or overflow.
_MIN_COST, _MAX_SECONDS = 1e-9, 1e6


def partition_sizes(count, costs, latencies=None, granule=1):
    """How many tasks each worker gets so that all finish together: worker
    w takes ``latencies[w] + size * costs[w]`` seconds, so its share is
    ``(T - latency) / cost`` for the common finish time T (a worker whose
    latency alone exceeds T gets none); rounded by largest remainder (ties
    to the earlier worker). Without latencies: shares inversely
    proportional to the seconds per task.

    Args:
        count: the number of tasks.
        costs: seconds per task of each worker (positive floats).
        latencies: seconds each worker's step costs besides its tasks (the
            RPC round trip; 0 for the caller's own share), or None.
        granule: shares in multiples of this many tasks (the remainder of
            ``count`` to the last worker with a share): fewer distinct share
            sizes, so fewer batched programs.

    Returns:
        A list of ints summing to ``count``.
    """
    latencies = [0.0] * len(costs) if latencies is None else list(latencies)
    for i, (cost, latency) in enumerate(zip(costs, latencies)):
        if not (math.isfinite(cost) and cost > 0 and math.isfinite(latency) and latency >= 0):
            raise ValueError(f"partition_sizes: worker {i} has {cost!r} seconds per task and "
                             f"{latency!r} seconds besides; both must be finite, the first "
                             "positive, the second not negative")
    active = list(range(len(costs)))
    while True:  # drop the workers whose latency is past the finish time
        finish = ((count + sum(latencies[i] / costs[i] for i in active))
                  / sum(1.0 / costs[i] for i in active))
        late = [i for i in active if latencies[i] >= finish]
        if not late or len(late) == len(active):
            break
        active = [i for i in active if i not in late]
    exact = [max(0.0, (finish - latencies[i]) / costs[i]) if i in active else 0.0
             for i in range(len(costs))]
    units = count // granule
    scale = units / sum(exact)
    exact = [e * scale for e in exact]
    sizes = [int(e) for e in exact]
    order = sorted(range(len(costs)), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in order[:units - sum(sizes)]:
        sizes[i] += 1
    sizes = [size * granule for size in sizes]
    last = max((i for i, size in enumerate(sizes) if size), default=len(sizes) - 1)
    sizes[last] += count - sum(sizes)
    return sizes


def sticky_sizes(current, proposed, costs, gain=0.1, latencies=None):
    """The shares of the next split in batched mode, where a new share size
    is a new program to compile and ship: ``proposed`` only if it shortens
    the predicted step (the slowest worker's latency plus its share times
    its seconds per task) by more than ``gain``, else ``current``.

    Args:
        current, proposed: tasks per worker (lists of ints, same length).
        costs: each worker's seconds per task.
        gain: the fraction the predicted step must shrink by.
        latencies: each worker's seconds besides its tasks, or None (0).

    Returns:
        ``current`` or ``proposed``.
    """
    latencies = [0.0] * len(costs) if latencies is None else latencies

    def step(sizes):
        return max(latency + size * cost
                   for size, cost, latency in zip(sizes, costs, latencies) if size)
    return proposed if step(proposed) < (1 - gain) * step(current) else current


class Balancer:
    """Each worker's compute seconds per task and its latency (seconds its
    step costs besides its tasks), as running averages, and the split they
    give.

    Args:
        balance: split by the estimates (False: equal shares).
        batched: shares are batched programs, one per share size: they
            move in whole blocks, only for a 10% shorter predicted step
            (``sticky_sizes``), and a size's first run is not measured.

    Attributes:
        costs: {worker id: seconds per task}.
        latency: {worker id: seconds besides its tasks}.
    """

    def __init__(self, balance=True, batched=False):
        self.balance, self.batched = balance, batched
        self.costs = {}
        self.latency = {}
        self.sizes = None  # batched: (count, worker ids, sizes) of the last split
        self.sizes_run = set()  # batched: (worker id, share size) run at least once

    def split(self, count, ids, block):
        """Tasks per worker (ints in the order of ``ids``, summing to
        ``count``); ``block`` is the gradient block of the meta-batch."""
        measured = self.balance and all(i in self.costs for i in ids)
        costs = [self.costs[i] if measured else 1.0 for i in ids]
        latencies = [self.latency.get(i, 0.0) if measured else 0.0 for i in ids]
        # Batched, measured shares move in whole gradient blocks (when the
        # meta-batch has at least 4 per worker): fewer sizes, fewer programs.
        granule = block if self.batched and measured and count // block >= 4 * len(ids) else 1
        sizes = partition_sizes(count, costs, latencies, granule=granule)
        if self.batched:
            last = self.sizes
            if last is not None and last[:2] == (count, list(ids)):
                sizes = sticky_sizes(last[2], sizes, costs, latencies=latencies)
            self.sizes = (count, list(ids), sizes)
        return sizes

    def record(self, worker, tasks, compute, latency):
        """One step's measurement of ``worker``: ``compute`` seconds for
        ``tasks`` tasks (> 0) and ``latency`` seconds besides. Batched, a
        share size's first run is skipped (loading and first page faults
        say little of later runs, and would move the split again)."""
        # What a worker reports is checked: a NaN or a negative time is a
        # broken measurement, never an estimate to split by.
        if not (tasks > 0 and math.isfinite(compute) and compute >= 0
                and math.isfinite(latency)):
            raise ValueError(f"worker {worker!r} reported {compute!r} seconds for {tasks!r} "
                             f"tasks and {latency!r} seconds besides: not a measurement")
        if self.batched and (worker, tasks) not in self.sizes_run:
            self.sizes_run.add((worker, tasks))
            return
        cost = min(max(compute / tasks, _MIN_COST), _MAX_SECONDS)
        for table, value in ((self.costs, cost), (self.latency, min(max(0.0, latency), _MAX_SECONDS))):
            old = table.get(worker)
            table[worker] = value if old is None else 0.5 * old + 0.5 * value

    def keep(self, ids):
        """Forgets every worker not in ``ids``."""
        self.costs = {k: v for k, v in self.costs.items() if k in ids}
        self.latency = {k: v for k, v in self.latency.items() if k in ids}

    def new_programs(self, worker):
        """``worker`` lost its programs (reregistered): its sizes run anew."""
        self.sizes_run = {seen for seen in self.sizes_run if seen[0] != worker}
