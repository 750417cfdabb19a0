"""A meta-batch's arguments for the autograd Functions that run its tasks
outside one batched program (_parallel_chunks, _task_gradients): the
arguments flattened to leaves with each leaf's mapped dimension, and back."""

from metafuse import tree as _tree

__all__ = ["flatten_arguments", "unflatten_arguments", "apply_to_arguments"]


def flatten_arguments(args, dims):
    """(leaves, [(spec, count)] per argument, each leaf's mapped dim)."""
    leaves, specs, leaf_dims = [], [], []
    for arg, dim in zip(args, dims):
        flat, spec = _tree.flatten(arg)
        specs.append((spec, len(flat)))
        leaves.extend(flat)
        leaf_dims.extend([dim] * len(flat))
    return leaves, specs, leaf_dims


def unflatten_arguments(specs, leaves):
    """flatten_arguments's leaves back into the arguments."""
    args, k = [], 0
    for spec, count in specs:
        args.append(_tree.unflatten(spec, leaves[k:k + count]))
        k += count
    return args


def apply_to_arguments(function, run, args, dims, *plan):
    """``function.apply`` (an autograd Function whose forward takes
    ``(run, specs, leaf_dims, *plan)`` and the arguments' leaves, and
    returns ``run``'s output leaves) with ``run``'s output structure
    restored."""
    leaves, specs, leaf_dims = flatten_arguments(args, dims)
    holder = {}

    def recording_run(*call_args):
        out = run(*call_args)
        holder.setdefault("spec", _tree.flatten(out)[1])
        return out

    flat = function.apply((recording_run, specs, leaf_dims, *plan), *leaves)
    return _tree.unflatten(holder["spec"], list(flat))
