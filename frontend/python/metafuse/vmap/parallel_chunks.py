"""A meta-batch split into contiguous chunks of tasks that run on several
threads at once, forward and backward (metafuse.vmap's "parallel"
strategy, each chunk through the batched program, and its
"parallel-tasks" strategy, each chunk through the one-task program task
after task).

One batched program of a small meta-batch (the MAML sinusoid: 25 tasks of
10x40x40 products) has no operation big enough to split over threads, so a
second core sits idle. Here each thread runs the same batched program on
its own chunk of tasks: the compiled programs run without the GIL, and
their backward runs in each chunk's thread too (one
``torch.autograd.grad`` per chunk), not one after another on the autograd
engine's CPU thread.

The result is one autograd node: forward returns the chunks' outputs
concatenated in task order; backward returns, for a mapped input, its
chunks' gradients concatenated, and for a shared input (``in_dims`` None)
the sum of its chunks' gradients, chunk 0 first, so the bits depend on the
chunking alone (fixed by the task and thread counts). The node is
first-order: a backward with ``create_graph=True`` raises, naming
METAFUSE_VMAP_STRATEGY=batched (the one batched program differentiates
again).
"""

import concurrent.futures
import threading

import torch

from metafuse import tree as _tree
from metafuse.vmap.arguments import (ChunkGradients, apply_to_arguments, chunk_gradients,
                                      chunk_leaves, unflatten_arguments)

__all__ = ["chunk_bounds", "run_in_parallel"]

_POOL = []  # [(threads, ThreadPoolExecutor)], made on first use, grown when more are asked
_POOL_LOCK = threading.Lock()


def chunk_bounds(size, chunks):
    """[(start, stop)] of ``chunks`` contiguous chunks of ``size`` tasks,
    the first ones a task longer where it does not divide."""
    base, extra = divmod(size, chunks)
    bounds, start = [], 0
    for i in range(chunks):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _pool(workers):
    # Each chunk thread runs its operations on 1 intra-op thread: the chunks
    # are the parallelism.
    with _POOL_LOCK:
        if not _POOL or _POOL[0][0] < workers:
            if _POOL:
                _POOL.pop()[1].shutdown(wait=False)
            _POOL.append((workers, concurrent.futures.ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="metafuse-chunk",
                initializer=torch.set_num_threads, initargs=(1,))))
        return _POOL[0][1]


def _on_threads(calls):
    """Runs the callables on the pool's threads at once (this thread waits:
    changing its own intra-op thread count per call would cost more, torch
    rebuilds a thread pool on every change); their results in order, the
    first exception raised after all end."""
    futures = [_pool(len(calls)).submit(call) for call in calls]
    errors = [f.exception() for f in futures]  # waits for every one
    for error in errors:
        if error is not None:
            raise error
    return [f.result() for f in futures]


class _Chunks(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan, *leaves):
        run, specs, leaf_dims, bounds, out_dims, grad_enabled = plan

        def one(start, stop):
            inputs = chunk_leaves(leaves, leaf_dims, start, stop)
            with torch.set_grad_enabled(grad_enabled):
                outputs, out_spec = _tree.flatten(run(*unflatten_arguments(specs, inputs)))
            return inputs, outputs, out_spec

        results = _on_threads([lambda a=a, b=b: one(a, b) for a, b in bounds])
        ctx.chunks = [(inputs, outputs) for inputs, outputs, _ in results]
        ctx.leaf_dims, ctx.bounds = leaf_dims, bounds
        ctx.out_dims = out_dims(len(results[0][1]))
        merged = [torch.cat([r[1][j].detach() for r in results], dim=d)
                  for j, d in enumerate(ctx.out_dims)]
        ctx.mark_non_differentiable(*[m for m, o in zip(merged, results[0][1])
                                      if not o.requires_grad])
        return tuple(merged)

    @staticmethod
    def backward(ctx, *grad_outputs):
        if torch.is_grad_enabled():  # create_graph: each chunk's graph starts detached
            raise RuntimeError(
                "metafuse.vmap: the meta-gradient of a call run as parallel chunks is "
                "first-order (create_graph=True is not supported there); set "
                "METAFUSE_VMAP_STRATEGY=batched to differentiate it again")
        def one(i):
            inputs, outputs = ctx.chunks[i]
            return chunk_gradients(inputs, outputs, grad_outputs, ctx.out_dims, *ctx.bounds[i])

        per_chunk = _on_threads([lambda i=i: one(i) for i in range(len(ctx.chunks))])
        merged = ChunkGradients(ctx.leaf_dims)
        for grads, (inputs, _) in zip(per_chunk, ctx.chunks):
            merged.add(grads, inputs)
        ctx.chunks = None
        return (None, *merged.result())


def run_in_parallel(run, args, dims, bounds, out_dims):
    """``run`` (a batched function of the arguments) on each chunk of tasks,
    the chunks on as many threads, as one autograd node.

    Args:
        run: called with one chunk's arguments (a compiled batched program:
            each chunk size's must be compiled before, tracing is not
            thread-safe).
        args: the call's arguments (pytrees of tensors).
        dims: each argument's mapped dimension or None (shared).
        bounds: [(start, stop)] of the chunks (``chunk_bounds``).
        out_dims: count -> each output's dimension of tasks.

    Returns:
        The outputs, as ``run`` structures them, chunks concatenated.
    """
    return apply_to_arguments(_Chunks, run, args, dims, bounds, out_dims,
                              torch.is_grad_enabled())
