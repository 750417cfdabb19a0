"""A meta-batch's arguments for the autograd Functions that run its tasks
outside one batched program (parallel_chunks, recomputed_chunks,
task_gradients): the arguments flattened to leaves with each leaf's mapped
dimension, and back; one chunk's leaves and gradients; the chunks'
gradients merged."""

import torch

from metafuse import tree as _tree

__all__ = ["flatten_arguments", "unflatten_arguments", "apply_to_arguments",
           "chunk_leaves", "chunk_gradients", "ChunkGradients"]


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


def chunk_leaves(leaves, leaf_dims, start, stop):
    """One chunk's leaves, detached (each chunk its own graph): mapped
    leaves narrowed to tasks [start, stop), shared ones whole; each
    requires grad as its leaf does."""
    out = []
    for leaf, dim in zip(leaves, leaf_dims):
        piece = leaf.detach() if dim is None else leaf.detach().narrow(dim, start, stop - start)
        out.append(piece.requires_grad_(leaf.requires_grad))
    return out


def chunk_gradients(inputs, outputs, grad_outputs, out_dims, start, stop):
    """One chunk's gradient of each of its ``inputs`` (None where it does
    not require grad or gets none): its ``outputs`` (the chunk's, with their
    graph) weighted by the tasks [start, stop) of the call's
    ``grad_outputs`` (each along its ``out_dims`` entry)."""
    pairs = [(o, g.narrow(d, start, stop - start))
             for o, g, d in zip(outputs, grad_outputs, out_dims)
             if o.requires_grad and g is not None]
    wanted = [t for t in inputs if t.requires_grad]
    if not pairs or not wanted:
        return [None] * len(inputs)
    found = iter(torch.autograd.grad([o for o, _ in pairs], wanted,
                                     [g for _, g in pairs], allow_unused=True))
    return [next(found) if t.requires_grad else None for t in inputs]


class ChunkGradients:
    """Each leaf's gradient, merged from its chunks' as they come in task
    order: a mapped leaf's pieces concatenated, a shared leaf's summed
    chunk 0 first (a running sum: one leaf-sized total alive, however many
    chunks), so the bits depend on the chunking alone."""

    def __init__(self, leaf_dims):
        self._dims = leaf_dims
        self._shared = [None] * len(leaf_dims)  # running sums, added to in place
        self._pieces = [[] for _ in leaf_dims]  # mapped leaves' pieces
        self._seen = [False] * len(leaf_dims)

    def add(self, grads, inputs):
        """One chunk's gradients (None: none for that leaf) and the leaves
        it ran on (for the zeros of a missing gradient)."""
        for j, (g, dim) in enumerate(zip(grads, self._dims)):
            if g is None and not inputs[j].requires_grad:
                continue  # no chunk has a gradient for it
            self._seen[j] = self._seen[j] or g is not None
            g = torch.zeros_like(inputs[j]) if g is None else g
            if dim is None:
                if self._shared[j] is None:
                    # A copy to add to in place (autograd's tensor is not ours
                    # to write): two leaf-sized tensors alive, not three.
                    self._shared[j] = g.clone()
                else:
                    self._shared[j].add_(g)
            else:
                self._pieces[j].append(g)

    def result(self):
        """The merged gradients, None for a leaf no chunk had one for (a
        leaf that requires grad and gets one from some chunks only has
        zeros in the others')."""
        return [None if not seen else total if dim is None else torch.cat(pieces, dim=dim)
                for seen, dim, total, pieces in
                zip(self._seen, self._dims, self._shared, self._pieces)]
