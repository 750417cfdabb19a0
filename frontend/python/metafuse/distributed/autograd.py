"""Distributed autograd helpers (TorchOpt's ``torchopt.distributed.autograd``):
``context`` and ``get_gradients`` are torch's; ``backward`` also
accumulates the gradients into ``.grad`` (so that a torch optimizer can
step), ``grad`` returns them.

    with context() as ctx:
        loss = parallel_task_loss(...)
        backward(ctx, loss)
    meta_optimizer.step()
"""

import threading

import torch
import torch.distributed.autograd as _dist_autograd

__all__ = ["is_available", "context"]

_ACCUMULATE = threading.Lock()  # .grad of one tensor written by one thread at a time


def is_available():
    """Whether torch was built with distributed autograd (bool)."""
    return _dist_autograd.is_available()


if is_available():
    from torch.distributed.autograd import DistAutogradContext, context, get_gradients

    def _as_tuple(tensors, what):
        if isinstance(tensors, torch.Tensor):
            return (tensors,)
        tensors = tuple(tensors)
        if not tensors:
            raise RuntimeError(f"'{what}' argument to backward() cannot be empty.")
        return tensors

    def _check_requires_grad(inputs):
        if not all(t.requires_grad for t in inputs):
            raise RuntimeError("One of the differentiated Tensors does not require grad")

    def backward(autograd_ctx_id, tensors, retain_graph=False, inputs=None):
        """Runs the distributed backward of ``tensors`` and adds the local
        gradients to ``.grad`` of the leaves (all, or only ``inputs``).

        Args:
            autograd_ctx_id: the id from ``with context() as ctx``.
            tensors: a tensor or tensors to differentiate (their sum).
            retain_graph: keep the graph for another backward.
            inputs: a tensor or tensors whose ``.grad`` receives gradients,
                or None for every leaf the roots depend on.

        Raises:
            RuntimeError: ``inputs`` is empty or holds a tensor that does not
                require grad.
        """
        if inputs is not None:
            inputs = _as_tuple(inputs, "inputs")
            _check_requires_grad(inputs)
        roots = list(_as_tuple(tensors, "tensors"))
        _dist_autograd.backward(autograd_ctx_id, roots=roots, retain_graph=retain_graph)
        gradients = _dist_autograd.get_gradients(autograd_ctx_id)
        if inputs is not None:
            wanted = set(inputs)
            gradients = {p: g for p, g in gradients.items() if p in wanted}
        with _ACCUMULATE:
            for leaf, gradient in gradients.items():
                leaf.grad = gradient if leaf.grad is None else leaf.grad.add(gradient)

    def grad(autograd_ctx_id, outputs, inputs, retain_graph=False, allow_unused=False):
        """The gradients of ``outputs`` (their sum) with respect to
        ``inputs``, through every worker; ``.grad`` is left alone.

        Args:
            autograd_ctx_id: the id from ``with context() as ctx``.
            outputs: a tensor or tensors.
            inputs: a tensor or tensors.
            retain_graph: keep the graph for another backward.
            allow_unused: give None for an input the outputs do not use
                (else that is an error).

        Returns:
            A tuple with one gradient (or None) per input.

        Raises:
            RuntimeError: an input does not require grad, or is unused and
                ``allow_unused`` is False.
        """
        roots = list(_as_tuple(outputs, "outputs"))
        inputs = _as_tuple(inputs, "inputs")
        _check_requires_grad(inputs)
        _dist_autograd.backward(autograd_ctx_id, roots=roots, retain_graph=retain_graph)
        gradients = _dist_autograd.get_gradients(autograd_ctx_id)
        result = []
        for tensor in inputs:
            if tensor not in gradients and not allow_unused:
                raise RuntimeError("One of the differentiated Tensors appears to not have "
                                   "been used in the graph. Set allow_unused=True if this "
                                   "is the desired behavior.")
            result.append(gradients.get(tensor))
        return tuple(result)

    __all__ += ["DistAutogradContext", "get_gradients", "backward", "grad"]
