"""What both task schedulers share (the RPC TaskScheduler, scheduler.py; the
collective one, collective.py): MetaBatchScheduler, the autograd nodes that
carry a meta-batch's per-task or per-block gradients, their assembly in the
fixed block order, and a compiled task's AOT artifact bytes."""

import os
import tempfile

import torch

from metafuse import _torch_func
from metafuse import aot
from metafuse import tree as _tree
from metafuse.distributed import task_runner
from metafuse.distributed.balance import Balancer

__all__ = ["MetaBatchScheduler"]


def _skeleton(params):
    """The parameters' structure, ints for leaves (what a worker needs)."""
    return _tree.unflatten(_tree.structure(params), list(range(len(_tree.leaves(params)))))


def _artifact_bytes(compiled, *example_args):
    """The bytes of ``compiled``'s AOT artifact for ``example_args``.

    Raises:
        RuntimeError: the call does not compile (it would run eagerly).
    """
    fd, path = tempfile.mkstemp(suffix=".mfa", prefix="metafuse-task-")
    os.close(fd)
    try:
        aot.save(compiled, path, *example_args)
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)


def _dispatch_and_save(ctx, scheduler, batch, param_leaves, block):
    """The two nodes' forward: the meta-batch run by the scheduler, its
    gradients (per task, or totals with ``block``) saved; the losses."""
    want = any(t.requires_grad for t in param_leaves) and scheduler._grad_mode
    losses, grads = scheduler._dispatch([t.detach() for t in param_leaves], batch, want,
                                        block=block)
    ctx.save_for_backward(*grads)
    ctx.leaf_count = len(param_leaves)
    return losses


class _RemoteTasks(torch.autograd.Function):
    """One node for a meta-batch: forward = the losses from the workers,
    backward = the per-task gradients weighted by the incoming gradient."""

    @staticmethod
    def forward(ctx, scheduler, batch, *param_leaves):
        return _dispatch_and_save(ctx, scheduler, batch, param_leaves, block=None)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_losses):
        grads = ctx.saved_tensors
        if not grads:
            return (None, None) + (None,) * ctx.leaf_count
        weighted = [torch.tensordot(grad_losses.to(g.dtype), g, dims=1) for g in grads]
        return (None, None, *weighted)


class _ReducedRemoteTasks(torch.autograd.Function):
    """One node for a reduced meta-batch: forward = the mean or sum of the
    workers' losses, backward = the block-summed gradient, scaled."""

    @staticmethod
    def forward(ctx, scheduler, batch, *param_leaves):
        count = batch[0].shape[0]
        losses = _dispatch_and_save(ctx, scheduler, batch, param_leaves,
                                    block=scheduler._block_size(count))
        ctx.scale = 1.0 / count if scheduler.reduction == "mean" else 1.0
        return losses.mean() if scheduler.reduction == "mean" else losses.sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        totals = ctx.saved_tensors
        if not totals:
            return (None, None) + (None,) * ctx.leaf_count
        return (None, None, *(t * (grad_loss.to(t.dtype) * ctx.scale) for t in totals))


def _assemble_blocks(rows, parts, block, count):
    """The workers' gradient rows of one leaf, in task order -> the
    meta-batch's total: blocks split between workers summed from their task
    rows as a worker sums a whole one, then every block sum added pairwise
    (task_runner.block_sums; the order is fixed by the task indices)."""
    sums, pending, offset = [], [], 0
    for _, start, end in parts:
        for first, last, whole in task_runner.block_segments(start, end, block, count):
            if whole:
                sums.append(rows[offset])
                offset += 1
                continue
            pending.append(rows[offset:offset + last - first])
            offset += last - first
            block_start = first - first % block
            if last == min(block_start + block, count):  # the block's last task
                sums.append(task_runner.pairwise_rows_sum(torch.cat(pending).unsqueeze(0))[0])
                pending = []
    return task_runner.pairwise_rows_sum(torch.stack(sums).unsqueeze(0))[0]


class MetaBatchScheduler:
    """What both back ends share (RPC's TaskScheduler, the collective
    one): the argument checks, the two calls (``__call__`` with block sums,
    ``task_losses`` with per-task gradients) as one autograd node each, and
    the balancing estimates. A back end provides ``_ensure_registered`` and
    ``_dispatch(param_leaves, task_batch, want_grads, block)``.
    """

    def _init_common(self, task, reduction, balance, batched, block):
        name = type(self).__name__
        if not callable(task):
            raise TypeError(f"{name}: `task` must be callable, got {task!r}")
        if not isinstance(batched, bool):
            raise TypeError(f"{name}: `batched` must be a bool, got {batched!r}")
        if block is not None and (isinstance(block, bool) or not isinstance(block, int)
                                  or block < 1):
            raise ValueError(f"{name}: `block` must be a positive int (tasks per "
                             f"gradient block), got {block!r}")
        if reduction not in ("mean", "sum"):
            raise ValueError(f"{name}: `reduction` must be 'mean' or 'sum', got "
                             f"{reduction!r}")
        self.task, self.reduction, self.batched, self.block = task, reduction, batched, block
        self.balance = True if balance is None else bool(balance)
        self._balancer = Balancer(self.balance, batched)
        self._spec = None  # the parameters' TreeSpec of the current call
        self._grad_mode = True
        self.last_partition = []
        self.last_seconds = {}
        self.last_gradient_rows = {}

    def __call__(self, params, *task_batch):
        """The reduced (mean or sum) loss of the tasks; differentiable with
        respect to ``params``' tensors (workers answer with block sums)."""
        leaves = self._prepare(params, task_batch)
        return _ReducedRemoteTasks.apply(self, task_batch, *leaves)

    def _block_size(self, count):
        return self.block if self.block is not None else max(1, -(-count // 32))

    def task_losses(self, params, *task_batch):
        """Each task's loss, in task order ([number of tasks]); differentiable
        with respect to ``params``' tensors.

        Args:
            params: a pytree of tensors (the meta-parameters).
            *task_batch: tensors whose dim 0 indexes the tasks.

        Raises:
            TypeError: an argument leaf is not a tensor.
            ValueError: the task batch is empty or its sizes disagree.
            WorkerError: a worker timed out or died (named).
        """
        leaves = self._prepare(params, task_batch)
        return _RemoteTasks.apply(self, task_batch, *leaves)

    def _prepare(self, params, task_batch):
        """Checks the arguments, registers the task where needed; the
        parameters' leaves."""
        if _torch_func.transforms_active():
            # The scheduler's nodes (_RemoteTasks, _ReducedRemoteTasks) carry
            # gradients computed by the workers: first-order, not batchable.
            _torch_func.refuse(
                f"metafuse.distributed.{type(self).__name__}",
                "its autograd nodes carry the gradients the workers computed "
                "(first-order, no batching rule); call it outside the transform and "
                "use torch.autograd.grad / .backward() on the loss; it batches the "
                "tasks itself (batched=True runs each worker's share as a metafuse.vmap)")
        leaves, spec = _tree.flatten(params)
        if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
            raise TypeError(f"{type(self).__name__}: `params` must be a pytree of tensors")
        if not task_batch or not all(isinstance(b, torch.Tensor) for b in task_batch):
            raise TypeError(f"{type(self).__name__}: the task batch must be tensors with the tasks "
                            "along dim 0")
        sizes = {b.shape[0] for b in task_batch}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(f"{type(self).__name__}: every task tensor needs the same non-zero "
                             f"dim 0 (the number of tasks), got {[b.shape[0] for b in task_batch]}")
        self._ensure_registered(params, leaves, task_batch)
        self._grad_mode = torch.is_grad_enabled()
        self._spec = spec
        return leaves

    def _guard(self, leaves, task_batch):
        return tuple((tuple(t.shape), t.dtype) for t in leaves) + tuple(
            (tuple(b.shape[1:]), b.dtype) for b in task_batch)
