"""metafuse.vmap with ``chunk_size``: at most one chunk of tasks' saved
values alive at once, by running each chunk twice.

A batched program keeps every task's saved values (adapted weights and
activations of each inner step) from its call until the meta-backward: the
MAML sinusoid's 25 tasks hold 1.6 MiB where the per-task idiom (adapt,
query loss, backward, next task) holds one task's 0.08 MiB. Splitting the
call into chunks alone does not help, as every chunk's graph waits for the
backward too. Here the call is one autograd node: its forward runs the
chunks' program with grad mode off (each chunk's saved values are freed as
it returns) and keeps only the inputs; its backward runs each chunk again,
with grad mode on, and takes that chunk's gradient at once, weighted by the
chunk's share of the incoming gradient, before the next chunk runs. The
price is each chunk's forward run twice.

Gradients are merged as parallel_chunks merges them: a mapped input's
pieces concatenated, a shared input's summed chunk 0 first. With
randomness other than 'error' each chunk's random state is kept and
restored for its second run, so both runs draw the same numbers. The node
is first-order: a backward with ``create_graph=True`` raises.
"""

import torch

from metafuse import tree as _tree
from metafuse.vmap.arguments import (ChunkGradients, apply_to_arguments, chunk_gradients,
                                      chunk_leaves, unflatten_arguments)

__all__ = ["run_recomputed"]


def _devices_of(leaves):
    """The CUDA devices the leaves are on (whose random states a chunk
    keeps besides the CPU's)."""
    return sorted({t.device.index or 0 for t in leaves
                   if isinstance(t, torch.Tensor) and t.device.type == "cuda"})


def _random_state(devices):
    return (torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in devices])


def _restore_random_state(state, devices):
    cpu, cuda = state
    torch.set_rng_state(cpu)
    for d, s in zip(devices, cuda):
        torch.cuda.set_rng_state(s, d)


class _Recomputed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan, *leaves):
        run, specs, leaf_dims, bounds, out_dims, keeps_random = plan
        devices = _devices_of(leaves) if keeps_random else []
        states, outputs = [], []
        for start, stop in bounds:
            if keeps_random:
                states.append(_random_state(devices))
            inputs = chunk_leaves(leaves, leaf_dims, start, stop)
            # (grad mode is off in forward: the chunk's saved values go at once)
            outputs.append(_tree.flatten(run(*unflatten_arguments(specs, inputs)))[0])
        ctx.plan = (run, specs, leaf_dims, bounds, states, devices)
        ctx.out_dims = out_dims(len(outputs[0]))
        ctx.save_for_backward(*leaves)
        return tuple(torch.cat([chunk[j] for chunk in outputs], dim=d)
                     for j, d in enumerate(ctx.out_dims))

    @staticmethod
    def backward(ctx, *grad_outputs):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "metafuse.vmap: the meta-gradient of a call split by chunk_size is "
                "first-order (create_graph=True is not supported there); call it "
                "without chunk_size to differentiate it again")
        run, specs, leaf_dims, bounds, states, devices = ctx.plan
        leaves = ctx.saved_tensors
        merged = ChunkGradients(leaf_dims)

        def again(start, stop):
            # Locals only: the chunk's graph and gradients are gone once it
            # returns, before the next chunk runs.
            inputs = chunk_leaves(leaves, leaf_dims, start, stop)
            with torch.enable_grad():
                outputs, _ = _tree.flatten(run(*unflatten_arguments(specs, inputs)))
                return chunk_gradients(inputs, outputs, grad_outputs, ctx.out_dims,
                                       start, stop), inputs

        with torch.random.fork_rng(devices=devices, enabled=bool(states)):
            for i, (start, stop) in enumerate(bounds):
                if states:
                    _restore_random_state(states[i], devices)
                merged.add(*again(start, stop))
        ctx.plan = None
        return (None, *merged.result())


def run_recomputed(run, args, dims, bounds, out_dims, keeps_random):
    """``run`` (a batched function of the arguments) on each chunk of tasks,
    one after another, as one autograd node whose backward runs each chunk
    again (module docstring).

    Args:
        run: called with one chunk's arguments (the batched program).
        args: the call's arguments (pytrees of tensors).
        dims: each argument's mapped dimension or None (shared).
        bounds: [(start, stop)] of the chunks, in task order.
        out_dims: count -> each output's dimension of tasks.
        keeps_random: whether each chunk's random state is kept for its
            second run (randomness other than 'error').

    Returns:
        The outputs, as ``run`` structures them, chunks concatenated.
    """
    return apply_to_arguments(_Recomputed, run, args, dims, bounds, out_dims, keeps_random)
