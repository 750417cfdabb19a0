"""metafuse.vmap's task loop with each task's backward taken as soon as the
task has run.

The task loops (the cost check's "tasks" and "calls" strategies) run the
function compiled for one task, or as written, task after task. Stacking the tasks' outputs and
differentiating later keeps every task's graph, with its saved
activations, alive until the meta-backward: four conv-net tasks' buffers
at once, where the per-task idiom (adapt, query loss, backward, next task)
holds one. Where each task returns one differentiable scalar (its loss:
the meta-learning case), this node instead takes each task's gradient
with respect to the inputs right after the task runs, keeps only those
gradients (parameter-sized), and frees the task's graph. Its backward
weights them by the incoming gradient of each task's output: a shared
input gets the sum over tasks in task order, a mapped input each task's
own slice.

The node is first-order, as every compiled function is: a backward with
create_graph=True raises.
"""

import torch

from metafuse import tree as _tree
from metafuse.vmap.arguments import apply_to_arguments, unflatten_arguments

__all__ = ["NotOneScalar", "run_tasks_with_gradients"]


class NotOneScalar(Exception):
    """A task's outputs are not one differentiable scalar (and anything
    else non-differentiable): the caller stacks outputs instead."""


class _Tasks(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan, *leaves):
        run, specs, leaf_dims, size, out_dims = plan
        wanted = [i for i, t in enumerate(leaves) if t.requires_grad]
        outputs, gradients, scalar_at = [], [], None
        for t in range(size):
            inputs = [(leaf.detach() if d is None else leaf.detach().select(d, t))
                      .requires_grad_(leaf.requires_grad) for leaf, d in zip(leaves, leaf_dims)]
            with torch.enable_grad():
                flat, _ = _tree.flatten(run(*unflatten_arguments(specs, inputs)))
            differentiable = [j for j, o in enumerate(flat)
                              if isinstance(o, torch.Tensor) and o.requires_grad]
            if len(differentiable) != 1 or flat[differentiable[0]].numel() != 1 or (
                    scalar_at not in (None, differentiable[0])):
                raise NotOneScalar
            scalar_at = differentiable[0]
            with torch.enable_grad():  # (forward runs with grad mode off)
                found = torch.autograd.grad(flat[scalar_at].reshape(()),
                                            [inputs[i] for i in wanted], allow_unused=True)
            gradients.append([torch.zeros_like(inputs[i]) if g is None else g
                              for g, i in zip(found, wanted)])
            outputs.append([o.detach() for o in flat])  # the task's graph is freed here
        dims = out_dims(len(outputs[0]))
        stacked = [torch.stack([task[j] for task in outputs], dim=d) for j, d in enumerate(dims)]
        ctx.plan = (leaf_dims, wanted, scalar_at, dims[scalar_at], size, len(leaves))
        ctx.gradients = gradients
        ctx.mark_non_differentiable(*[x for j, x in enumerate(stacked) if j != scalar_at])
        return tuple(stacked)

    @staticmethod
    def backward(ctx, *grad_outputs):
        if torch.is_grad_enabled():
            raise RuntimeError("metafuse.vmap: the backward of a compiled function is not "
                               "differentiable (create_graph=True)")
        leaf_dims, wanted, scalar_at, out_dim, size, count = ctx.plan
        weights = grad_outputs[scalar_at]
        result = [None] * count
        if weights is None:
            return (None, *result)
        weights = weights.movedim(out_dim, 0).reshape(size)
        for k, i in enumerate(wanted):
            pieces = [weights[t].to(task[k].dtype) * task[k]
                      for t, task in enumerate(ctx.gradients)]
            if leaf_dims[i] is None:  # shared: the tasks' sum, in task order
                total = pieces[0]
                for piece in pieces[1:]:
                    total = total + piece
                result[i] = total
            else:
                result[i] = torch.stack(pieces, dim=leaf_dims[i])
        ctx.gradients = None
        return (None, *result)


def run_tasks_with_gradients(run, args, dims, size, out_dims):
    """``run`` (the function compiled for one task) on each task, each
    task's gradient taken at once (module docstring).

    Args:
        run: called with one task's arguments.
        args, dims: the call's arguments and their mapped dims (None: shared).
        size: the number of tasks.
        out_dims: count -> each output's dimension of tasks.

    Returns:
        The outputs stacked, structured as ``run`` returns them.

    Raises:
        NotOneScalar: a task does not return exactly one differentiable
            scalar (nothing is returned; the caller runs the plain loop).
    """
    return apply_to_arguments(_Tasks, run, args, dims, size, out_dims)
