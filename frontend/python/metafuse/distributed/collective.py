"""The task scheduler over torch.distributed collectives: every rank of a
process group (started by torchrun, then ``init_collectives``) runs the
same meta-step on the whole meta-batch and takes its share.

    todist.init_collectives()                     # gloo on CPU, NCCL on a GPU
    scheduler = todist.TaskScheduler(task_loss)   # collectives: on every rank
    loss = scheduler(params, xs, ys, xq, yq)      # every rank, same arguments
    loss.backward()                               # the same meta-gradient everywhere

Each rank holds the compiled program (a ``metafuse.compile``d task's AOT
program, made and loaded in that process on first use, as RPC's workers
load it; batched: the task's ``metafuse.vmap``, compiled for the rank's
share size) and runs the tasks of its share, a contiguous range given by
the same split as RPC's scheduler (``balance.Balancer``: measured seconds
per task and fixed seconds, all ranks fed the same timings, so all compute
the same split). Then one all_reduce carries everything of the step: a
buffer with a slot for every gradient row, every task's loss and every
rank's timings, each slot written by exactly one rank and zero elsewhere,
so the all_reduce's sum is exact (x + 0 = x) in whatever order the back end
adds. The gradient rows are those of RPC's block sums (``task_runner.
block_sums``: one row per block a rank holds whole, one per task of a
shared block), and every rank adds them in the fixed block order
(``scheduler._assemble_blocks``): the meta-gradient is the same bits on
every rank, for every partition, as in one process (a CollectiveScheduler
used without torch.distributed runs the whole meta-batch alone).

Failures: before the all_reduce each rank marks its share done on the
rendezvous store and waits for the others' marks (``liveness``); a rank
with no heartbeat for ``silence`` seconds (killed, or its host cut off) or
not done within ``timeout`` is named by a ``RankError`` on every other
rank, raised inside the forward, so the caller's parameters and their
gradients are as before the step. ``regroup`` re-forms the group with a
restarted rank (``init_collectives`` in the new process).
"""

import datetime
import functools
import os
import time

import torch
import torch.distributed as dist

from metafuse import tree as _tree
from metafuse.compile.compiled import kind_of, uncompiled
from metafuse.vmap.function import vmap
from metafuse.distributed import process_group, task_runner
from metafuse.distributed.balance import Balancer
from metafuse.distributed.config import default_timeout
from metafuse.distributed.errors import RankError
from metafuse.distributed.liveness import DEFAULT_SILENCE, Heartbeat, StepBarrier
from metafuse.distributed.meta_batch import (MetaBatchScheduler, _artifact_bytes,
                                             _assemble_blocks, _skeleton)

__all__ = ["CollectiveScheduler"]


def _group_ranks(group):
    if hasattr(dist, "get_process_group_ranks"):
        return sorted(dist.get_process_group_ranks(group or dist.group.WORLD))
    return list(range(dist.get_world_size(group)))


class CollectiveScheduler(MetaBatchScheduler):
    """Runs a meta-batch of tasks on every rank of a process group (see the
    module docstring). ``TaskScheduler(...)`` makes one where
    torch.distributed's default group is initialised. Every rank of the
    group constructs it, and calls it with the same arguments, in the same
    order.

    Args:
        task: ``task(params, *task_args) -> scalar loss``: a
            ``metafuse.compile``d function or any function.
        group: the ranks that take tasks (a process group; default: all, in
            a group of the scheduler's own with its ``timeout``).
        reduction, balance, batched, block: as ``TaskScheduler``'s.
        timeout: seconds a live rank may take beyond the others to finish
            its share, and the all_reduce's limit (default: 30, or
            METAFUSE_RPC_TIMEOUT).
        silence: seconds without a heartbeat after which a rank counts as
            gone (default 5).
        shares: fixed tasks per rank (ints in rank order, summing to the
            meta-batch size) instead of the balanced split.
        worker_devices: accepted for TaskScheduler's signature; each rank
            runs its share where its tensors are.

    Attributes:
        rank: this process's rank; ``ranks``: the group's.
        last_partition: [(rank, first task, end)] of the last step.
        last_seconds: {rank: seconds its share took} in the last step.
        last_gradient_rows: {rank: gradient rows it contributed}.

    Raises:
        TypeError, ValueError: as ``TaskScheduler``'s; ``shares`` is not a
            list of non-negative ints, one per rank; ``group`` is given
            without torch.distributed.
    """

    def __init__(self, task, *, group=None, reduction="mean", timeout=None, balance=None,
                 batched=False, block=None, silence=None, shares=None, worker_devices=True):
        del worker_devices  # each rank runs where its tensors are
        self._init_common(task, reduction, balance, batched, block)
        self.timeout = default_timeout() if timeout is None else float(timeout)
        self.silence = DEFAULT_SILENCE if silence is None else float(silence)
        if not (self.timeout > 0 and self.silence > 0):
            raise ValueError(f"CollectiveScheduler: `timeout` and `silence` must be positive "
                             f"seconds, got {timeout!r} and {silence!r}")
        self._distributed = dist.is_available() and dist.is_initialized()
        if group is not None and not self._distributed:
            raise ValueError("CollectiveScheduler: `group` needs torch.distributed's default "
                             "group; call metafuse.distributed.init_collectives() first")
        self._group_arg = group
        self._form()
        if shares is not None and (
                not isinstance(shares, (list, tuple)) or len(shares) != len(self.ranks)
                or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0
                           for k in shares)):
            raise ValueError(f"CollectiveScheduler: `shares` must be a list of "
                             f"{len(self.ranks)} non-negative ints (tasks per rank of "
                             f"{self.ranks}), got {shares!r}")
        self.shares = None if shares is None else list(shares)
        self._registered = None  # the guard of the registered task
        self._key = f"collective:{os.getpid()}:{id(self)}"

    def _form(self):
        """The group, the step barrier and the heartbeat (at construction
        and after ``regroup``); the balance estimates start afresh, as a
        restarted rank's do."""
        self._balancer = Balancer(self.balance, self.batched)
        self._step = 0
        if not self._distributed:
            self.rank, self.ranks, self.group, self._barrier = 0, [0], None, None
            return
        self.rank = dist.get_rank()
        generation, number = process_group.next_group_number()
        self.group = self._group_arg
        if self.group is None:
            self.group = dist.new_group(timeout=datetime.timedelta(seconds=self.timeout))
        self.ranks = _group_ranks(self.group)
        if self.rank not in self.ranks:
            raise ValueError(f"CollectiveScheduler: rank {self.rank} is not in `group` "
                             f"(ranks {self.ranks}); only its members construct it")
        store = process_group.rendezvous_store(self.timeout)
        connect = functools.partial(process_group.connect_store, self.timeout)
        Heartbeat.ensure(connect, self.rank)
        prefix = dist.PrefixStore(f"metafuse/scheduler/{generation}/{number}/", store)
        self._barrier = StepBarrier(prefix, store, self.rank, self.ranks, self.timeout,
                                    self.silence)

    def regroup(self):
        """After a RankError, on every rank still running, once the failed
        rank was restarted (it calls ``init_collectives`` and constructs its
        schedulers in the same order): re-forms the process group with it,
        and this scheduler's group. The next call is the next meta-step;
        give the restarted rank the current parameters first
        (``broadcast_parameters``).

        Raises:
            RuntimeError: the group was not started by ``init_collectives``.
        """
        if self._distributed:
            process_group.reform()
            if self._group_arg is not None:
                raise RuntimeError("CollectiveScheduler.regroup: a `group` passed in belongs "
                                   "to the old process group; construct a new scheduler")
        self._form()

    def broadcast_parameters(self, params, src=None):
        """Copies rank ``src``'s (default: the group's first) parameter
        tensors into every rank's, in place (for a restarted rank).

        Args:
            params: a pytree of tensors, the same structure on every rank.
        """
        if not self._distributed:
            return
        src = self.ranks[0] if src is None else src
        with torch.no_grad():
            for leaf in _tree.leaves(params):
                dist.broadcast(leaf.data, src, group=self.group)

    @property
    def workers(self):
        """The ranks that take tasks."""
        return list(self.ranks)

    def _ensure_registered(self, params, leaves, task_batch):
        guard = self._guard(leaves, task_batch)
        if self._registered == guard:
            return
        if self.batched:
            task = vmap(uncompiled(self.task))
        else:
            task = self.task
            if kind_of(task) == "function":  # its AOT program, loaded, as RPC's workers run it (no guard per call)
                try:
                    task = task_runner.load_artifact(
                        _artifact_bytes(self.task, params, *(b[0] for b in task_batch)))
                except RuntimeError:  # the call runs eagerly: nothing compiled to load
                    pass
        task_runner.register_local(self._key, task, _skeleton(params), batched=self.batched)
        self._registered = guard

    def _parts(self, count):
        if self.shares is not None:
            if sum(self.shares) != count:
                raise ValueError(f"CollectiveScheduler: `shares` {self.shares} sum to "
                                 f"{sum(self.shares)}, but the meta-batch has {count} tasks")
            sizes = self.shares
        else:
            sizes = self._balancer.split(count, self.ranks, self._block_size(count))
        parts, start = [], 0
        for rank, size in zip(self.ranks, sizes):
            if size:
                parts.append((rank, start, start + size))
            start += size
        return parts

    def _dispatch(self, param_leaves, task_batch, want_grads, block=None):
        """This rank's share, then one all_reduce; (losses, per-task
        gradients per leaf), or with ``block`` (losses, each leaf's total)."""
        began = time.perf_counter()
        count = task_batch[0].shape[0]
        parts = self._parts(count)
        self.last_partition = list(parts)
        widths = [t.numel() for t in param_leaves]
        width = sum(widths)
        dtype = functools.reduce(torch.promote_types, [t.dtype for t in param_leaves])
        rows = {r: (0 if not want_grads else b - a if block is None else
                    task_runner.block_row_count(a, b, block, count))
                for r, a, b in parts}
        total_rows = sum(rows.values())
        losses_at = total_rows * width
        times_at = losses_at + count
        buffer = torch.zeros(times_at + 2 * len(self.ranks), dtype=dtype,
                             device=param_leaves[0].device)
        mine = [p for p in parts if p[0] == self.rank]
        compute = 0.0
        if mine:
            _, a, b = mine[0]
            run = task_runner.run_batched if self.batched else task_runner.run_tasks
            losses, grads, compute = run(self._key, param_leaves,
                                         [t[a:b].contiguous() for t in task_batch], want_grads,
                                         None if block is None else (a, block, count))
            offset = sum(rows[r] for r, _, _ in parts if r < self.rank) * width
            if want_grads:
                flat = (grads[0] if block is not None else
                        torch.cat([g.reshape(g.shape[0], -1) for g in grads], 1))
                buffer[offset:offset + flat.numel()] = flat.reshape(-1)
            buffer[losses_at + a:losses_at + b] = losses.reshape(-1)
        index = self.ranks.index(self.rank)
        fixed = time.perf_counter() - began - compute
        buffer[times_at + 2 * index] = compute
        buffer[times_at + 2 * index + 1] = fixed
        if self._distributed and len(self.ranks) > 1:
            self._barrier.wait(self._step)
            try:
                dist.all_reduce(buffer, group=self.group)
            except Exception as exc:  # noqa: BLE001 - named below
                silent = self._barrier.name_after_failure(self._step)
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise RankError(silent or [r for r in self.ranks if r != self.rank],
                                "collective", self._step, self.timeout, first) from None
        self._step += 1
        times = buffer[times_at:].view(len(self.ranks), 2).tolist()
        self.last_seconds = {r: times[self.ranks.index(r)][0] for r, _, _ in parts}
        self.last_gradient_rows = {r: rows[r] for r, _, _ in parts}
        if self.shares is None:
            for r, a, b in parts:
                spent, overhead = times[self.ranks.index(r)]
                self._balancer.record(r, b - a, spent, overhead)
        losses = buffer[losses_at:times_at]
        if not want_grads:
            return losses, []
        table = buffer[:losses_at].view(total_rows, width)
        if block is not None:
            flat = _assemble_blocks(table, parts, block, count)
            return losses, [g.view(t.shape).to(t.dtype)
                            for g, t in zip(flat.split(widths), param_leaves)]
        return losses, [g.reshape(count, *t.shape).to(t.dtype)
                        for g, t in zip(table.split(widths, 1), param_leaves)]
