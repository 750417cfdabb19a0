"""Calling a function on remote workers: partitioners split the arguments,
reducers combine the results (TorchOpt's ``torchopt.distributed.api``).

    @parallelize(partitioner=dim_partitioner(dim=0, exclusive=True, keepdim=False),
                 reducer=mean_reducer)
    def task_loss(net_rref, x, y): ...

A partitioner maps ``(*args, **kwargs)`` to a list of ``(worker rank,
args, kwargs)``, one RPC each; the reducer receives the list of results in
that order. Failures reach the caller as errors.WorkerError (a worker that
does not answer within the timeout, or whose process is gone) or as the
worker's own exception with its traceback.
"""

import functools
import sys

import torch
import torch.distributed.rpc as rpc

from metafuse import tree as _tree
from metafuse.distributed.errors import gather_futures
from metafuse.distributed.world import get_worker_id, get_world_rank, get_world_size

__all__ = ["TensorDimensionPartitioner", "dim_partitioner", "batch_partitioner",
           "mean_reducer", "sum_reducer", "remote_async_call", "remote_sync_call",
           "parallelize", "parallelize_async", "parallelize_sync"]

UNSET_RPC_TIMEOUT = rpc.api.UNSET_RPC_TIMEOUT


def _split_points(batch_size, parts):
    """Start indices of ``parts`` contiguous chunks of a batch (the last
    chunk takes the remainder), plus the end."""
    step = batch_size // parts
    return [i * step for i in range(parts)] + [batch_size]


class TensorDimensionPartitioner:
    """Splits every tensor of the arguments along one dimension; other
    values go to every part unchanged.

    Args:
        dim: the dimension to split (negative counts from the end).
        exclusive: one part per batch entry (True), or at most one part per
            worker, contiguous chunks, the last taking the remainder (False).
        keepdim: keep the split dimension (slices), or drop it (select);
            dropping needs ``exclusive=True``.
        workers: ranks or names of the workers to use (None: all), given
            parts in turn.

    Raises:
        ValueError: ``keepdim=False`` without ``exclusive=True``.
    """

    def __init__(self, dim, *, exclusive=False, keepdim=False, workers=None):
        if not keepdim and not exclusive:
            raise ValueError("TensorDimensionPartitioner: keepdim=False needs "
                             "exclusive=True (a part of several entries keeps the dimension)")
        if not isinstance(dim, int):
            raise TypeError(f"TensorDimensionPartitioner: `dim` must be an int, got {dim!r}")
        self.dim, self.exclusive, self.keepdim, self.workers = dim, exclusive, keepdim, workers

    def _ranks(self):
        if self.workers is None:
            return list(range(get_world_size()))
        return [get_worker_id(w) for w in self.workers]

    def _batch_size(self, leaves):
        size = None
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                n = leaf.shape[self.dim]
                if size is not None and n != size:
                    raise ValueError(f"TensorDimensionPartitioner: batch size mismatch on "
                                     f"dim={self.dim}: {size} and {n} (shape "
                                     f"{tuple(leaf.shape)})")
                size = n
        return size

    def _index(self, part):
        """The indexing tuple that takes ``part`` along self.dim."""
        if self.dim >= 0:
            return (slice(None),) * self.dim + (part,)
        return (Ellipsis, part) + (slice(None),) * (-self.dim - 1)

    def __call__(self, *args, **kwargs):
        """Returns:
            A list of ``(rank, args, kwargs)``: one element (this rank, the
            arguments unchanged) when no argument is a tensor."""
        ranks = self._ranks()
        leaves, spec = _tree.flatten((args, kwargs))
        size = self._batch_size(leaves)
        if size is None:
            return [(get_world_rank(), args, dict(kwargs))]
        if self.exclusive:
            parts = [slice(i, i + 1) if self.keepdim else i for i in range(size)]
        elif size <= len(ranks):
            parts = [slice(i, i + 1) for i in range(size)]
        else:
            points = _split_points(size, len(ranks))
            parts = [slice(a, b) for a, b in zip(points[:-1], points[1:])]
        calls = []
        for i, part in enumerate(parts):
            index = self._index(part)
            local = [x[index] if isinstance(x, torch.Tensor) else x for x in leaves]
            part_args, part_kwargs = _tree.unflatten(spec, local)
            calls.append((ranks[i % len(ranks)], part_args, part_kwargs))
        return calls

    def __reduce__(self):
        return (_rebuild_partitioner, (self.dim, self.exclusive, self.keepdim, self.workers))


def _rebuild_partitioner(dim, exclusive, keepdim, workers):
    return TensorDimensionPartitioner(dim, exclusive=exclusive, keepdim=keepdim, workers=workers)


def dim_partitioner(dim=0, *, exclusive=False, keepdim=True, workers=None):
    """A partitioner that splits tensors along ``dim`` (see
    TensorDimensionPartitioner for the arguments).

    Returns:
        A TensorDimensionPartitioner.
    """
    return TensorDimensionPartitioner(dim, exclusive=exclusive, keepdim=keepdim, workers=workers)


batch_partitioner = dim_partitioner(dim=0, keepdim=True, exclusive=False)
"""Splits the batch dimension into at most one contiguous chunk per worker."""

exclusive_batch_partitioner = dim_partitioner(dim=0, keepdim=True, exclusive=True)
"""One RPC per entry of the batch dimension."""


def mean_reducer(results):
    """The elementwise mean of a sequence of tensors (stacked on a new dim 0)."""
    return torch.stack(tuple(results), dim=0).mean(dim=0)


def sum_reducer(results):
    """The elementwise sum of a sequence of tensors (stacked on a new dim 0)."""
    return torch.stack(tuple(results), dim=0).sum(dim=0)


def _partitions(partitioner, args, kwargs):
    if partitioner is None:
        partitioner = batch_partitioner
    if isinstance(partitioner, (int, str)):
        return [(get_worker_id(partitioner), args, kwargs)]
    if callable(partitioner):
        return partitioner(*args, **kwargs)
    raise ValueError(f"remote_async_call: `partitioner` must be a rank, a worker name or a "
                     f"callable, got {partitioner!r}")


def _worker_name(rank):
    return rpc.get_worker_info(rank).name if isinstance(rank, int) else str(rank)


def remote_async_call(func, *, args=None, kwargs=None, partitioner=None, reducer=None,
                      timeout=UNSET_RPC_TIMEOUT):
    """Calls ``func`` on workers without waiting.

    Args:
        func: a function the workers can import (pickled by reference).
        args, kwargs: the arguments, split by the partitioner.
        partitioner: a rank, a worker name, or a callable (default:
            batch_partitioner).
        reducer: ``f(list of results) -> result``, or None for the list.
        timeout: seconds each RPC may take (default: the RPC agent's, 30 s
            under auto_init_rpc).

    Returns:
        A torch.futures.Future of the (reduced) results, in partition order.

    Raises:
        ValueError: the partitioner is neither a rank, a name nor callable.
    """
    args = () if args is None else tuple(args)
    kwargs = {} if kwargs is None else dict(kwargs)
    calls = _partitions(partitioner, args, kwargs)
    futures = [rpc.rpc_async(rank, func, args=call_args, kwargs=call_kwargs, timeout=timeout)
               for rank, call_args, call_kwargs in calls]
    targets = [(_worker_name(rank), get_worker_id(rank)) for rank, _, _ in calls]
    gathered = gather_futures(futures, targets)
    if reducer is None:
        return gathered
    reduced = torch.futures.Future()

    def reduce(fut):
        # Not Future.then, which would wrap a WorkerError in a RuntimeError.
        try:
            reduced.set_result(reducer(fut.wait()))
        except Exception as exc:  # noqa: BLE001 - the caller's wait() raises it
            reduced.set_exception(exc)
    gathered.add_done_callback(reduce)
    return reduced


def remote_sync_call(func, *, args=None, kwargs=None, partitioner=None, reducer=None,
                     timeout=UNSET_RPC_TIMEOUT):
    """remote_async_call, waited for (same arguments).

    Returns:
        The (reduced) results.
    """
    return remote_async_call(func, args=args, kwargs=kwargs, partitioner=partitioner,
                             reducer=reducer, timeout=timeout).wait()


def _publish_unwrapped(func, suffix):
    """Makes the undecorated function importable under a new name in its
    module, so that workers unpickle the function itself (not the
    decorated wrapper, which would call RPC again)."""
    name = getattr(func, "__qualname__", func.__name__)
    if hasattr(func, "__qualname__"):
        func.__qualname__ = f"{func.__qualname__}{suffix}"
    func.__name__ = f"{func.__name__}{suffix}"
    __import__(func.__module__, level=0)
    setattr(sys.modules[func.__module__], f"{name}{suffix}", func)


def _decorator(partitioner, reducer, timeout, call, suffix):
    if partitioner is None:
        partitioner = batch_partitioner
        if reducer is None:
            reducer = mean_reducer

    def decorate(func):
        @functools.wraps(func)
        def wrapped(*args, **kwargs):
            return call(func, args=args, kwargs=kwargs, partitioner=partitioner,
                        reducer=reducer, timeout=timeout)
        _publish_unwrapped(func, suffix)
        return wrapped
    return decorate


def parallelize_async(partitioner=None, reducer=None, timeout=UNSET_RPC_TIMEOUT):
    """A decorator: calling the function runs it on workers (remote_async_call)
    and returns a future.

    Args:
        partitioner: as remote_async_call (default: batch_partitioner, and
            then mean_reducer if ``reducer`` is None).
        reducer: as remote_async_call.
        timeout: as remote_async_call.

    Returns:
        The decorator.
    """
    return _decorator(partitioner, reducer, timeout, remote_async_call,
                      "__parallelize_async_unwrapped__")


def parallelize(partitioner=None, reducer=None, timeout=UNSET_RPC_TIMEOUT):
    """A decorator: calling the function runs it on workers (remote_sync_call)
    and returns the (reduced) results. Arguments as parallelize_async.

    Returns:
        The decorator.
    """
    return _decorator(partitioner, reducer, timeout, remote_sync_call,
                      "__parallelize_unwrapped__")


parallelize_sync = parallelize
