"""functorch's batched tensors, as metafuse.vmap needs them.

Under ``functorch.vmap`` a tensor is a wrapper (a BatchedTensor) around a
physical tensor that has one extra dimension, the task dimension. Operators
dispatch through functorch's batching rules to operators on the physical
tensors, and those are what the TorchScript tracer records: tracing through
vmap yields the batched program (bmm, grouped convolutions, ...).

Two things need help, and live here:
  * ``metafuse.grad`` of a batched scalar: tasks are independent under vmap,
    so the gradient of each task's loss with respect to its own slice of the
    physical inputs is the gradient of the sum of the task losses with
    respect to the physical inputs (``physical_grad``);
  * size queries on a batched tensor while tracing: the tracer cannot record
    ``aten::size`` on a wrapper, so sizes are read untraced (they are
    constants of the trace; the compiled program's guard fixes every shape).
"""

import contextlib

import torch

_functorch = torch._C._functorch

__all__ = ["transforms_active", "is_batched", "physical_grad", "untraced_sizes", "no_tracing",
           "BatchingError"]


class BatchingError(RuntimeError):
    """A function cannot be run as one task-batched program (the reason)."""


def transforms_active():
    """Whether a functorch transform (vmap, grad, ...) is running. torch 1.13
    asks ``are_transforms_active``; torch 2.x dropped it for the interpreter
    stack, empty outside every transform."""
    if hasattr(_functorch, "are_transforms_active"):
        return _functorch.are_transforms_active()
    return _functorch.peek_interpreter_stack() is not None


def is_batched(tensor):
    """Whether ``tensor`` is a functorch BatchedTensor (inside vmap)."""
    return isinstance(tensor, torch.Tensor) and _functorch.is_batchedtensor(tensor)


def _unwrap(tensor, level):
    if not is_batched(tensor) or _functorch.maybe_get_level(tensor) != level:
        return None, None
    return _functorch.get_unwrapped(tensor), _functorch.maybe_get_bdim(tensor)


def physical_grad(output, leaves, grad_op):
    """Per-task gradients of a batched scalar ``output`` with respect to the
    batched ``leaves``, as batched tensors at the same vmap level.

    Args:
        output: a BatchedTensor holding one scalar per task.
        leaves: BatchedTensors at the same vmap level as ``output``.
        grad_op: the gradient of a physical scalar with respect to a list of
            physical tensors (metafuse's grad operator).

    Raises:
        BatchingError: a leaf is not batched at output's level (a gradient
            with respect to a tensor shared by all tasks is not a per-task
            quantity) or ``output`` is not one scalar per task."""
    level = _functorch.maybe_get_level(output)
    physical_output, _ = _unwrap(output, level)
    if physical_output is None or output.dim() != 0:
        raise BatchingError("metafuse.grad under vmap: `output` must be one scalar "
                            f"per task, got a tensor of per-task shape {tuple(output.shape)}")
    physical, dims = [], []
    for i, leaf in enumerate(leaves):
        tensor, dim = _unwrap(leaf, level)
        if tensor is None:
            raise BatchingError(
                f"metafuse.grad under vmap: input {i} is shared by all tasks (not "
                "batched); differentiate with respect to per-task tensors (vmap "
                "with in_dims=None expands arguments that require grad)")
        physical.append(tensor)
        dims.append(dim)
    grads = grad_op(physical_output.sum(), physical)
    return [_functorch._add_batch_dim(g, d, level) for g, d in zip(grads, dims)]


def _tracer_key_excluded():
    """The Tracer dispatch key, when it is excluded on this thread, else None.
    torch 2.x runs some Python decompositions (nll_loss's under vmap) with it
    excluded: nothing there is recorded, but setting the tracing state there
    is refused ("NoTracerDispatchMode") while the Python tracer hooks
    (``.shape`` of a wrapper) still see it."""
    parse = getattr(torch._C, "_dispatch_key_parse", None)
    if parse is None:
        return None
    key = parse("Tracer")
    return key if torch._C._dispatch_tls_is_dispatch_key_excluded(key) else None


def _set_tracing_state(state):
    excluded = _tracer_key_excluded()
    if excluded is None:
        torch._C._set_tracing_state(state)
        return
    torch._C._dispatch_tls_set_dispatch_key_excluded(excluded, False)
    try:
        torch._C._set_tracing_state(state)
    finally:
        torch._C._dispatch_tls_set_dispatch_key_excluded(excluded, True)


@contextlib.contextmanager
def no_tracing():
    """Python values read here are constants of the trace, not recorded."""
    state = torch._C._get_tracing_state()
    if state is None:
        yield
        return
    _set_tracing_state(None)
    try:
        yield
    finally:
        _set_tracing_state(state)


def _untraced(read):
    def read_untraced(tensor, *args):
        if not _functorch.is_batchedtensor(tensor):
            return read(tensor, *args)
        with no_tracing():
            return read(tensor, *args)
    return read_untraced


@contextlib.contextmanager
def untraced_sizes():
    """While tracing: ``size()``, ``shape`` and ``dim()`` of BatchedTensors are
    read without the tracer (which cannot record them on a wrapper)."""
    names = ("size", "shape", "dim")
    own = {name: torch.Tensor.__dict__.get(name) for name in names}
    size, shape, dim = (getattr(torch.Tensor, name) for name in names)
    torch.Tensor.size = _untraced(size)
    torch.Tensor.shape = property(_untraced(shape.__get__))
    torch.Tensor.dim = _untraced(dim)
    try:
        yield
    finally:
        for name in names:  # back to exactly what torch.Tensor had
            if own[name] is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, own[name])
