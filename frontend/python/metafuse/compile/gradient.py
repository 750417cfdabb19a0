"""metafuse.grad: the gradient of a scalar with respect to a pytree of
tensors, symbolic inside a compiled function."""

import torch

from metafuse import _batched_tensors
from metafuse import tree as _tree
from metafuse.compile import capture as _capture

__all__ = ["grad"]


def grad(output, inputs):
    """Gradient of a scalar with respect to a pytree of tensors.

    Inside a function compiled with metafuse.compile it becomes a symbolic
    gradient of the program; outside, it is torch.autograd.grad with
    create_graph.

    Args:
        output: a scalar tensor.
        inputs: a tensor or a pytree of tensors.

    Returns:
        A pytree shaped like ``inputs``: the differentiable gradient, zeros
        where ``output`` does not depend on a leaf."""
    leaves, spec = _tree.flatten(inputs)
    if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
        raise TypeError("metafuse.grad: `inputs` must be a tensor or a pytree of "
                        "tensors")
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"metafuse.grad: `output` must be a tensor, got "
                        f"{type(output).__name__}")
    if _batched_tensors.is_batched(output):  # inside metafuse.vmap / functorch.vmap
        return _tree.unflatten(spec, _batched_tensors.physical_grad(
            output, leaves, _capture.grad_op))
    return _tree.unflatten(spec, _capture.grad_op(output, leaves))
