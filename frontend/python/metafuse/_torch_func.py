"""metafuse under torch.func transforms (vmap, grad, vjp, jacrev, ...).

One place decides which form metafuse's autograd Functions take
(``FUNCTORCH_FORM``, from the torch version): on torch >= 2.0 the form
torch.func can transform (a ``forward`` without ctx, ``setup_context``, a
vmap rule); on torch 1.13 the ctx-forward form, which functorch refuses.

What each autograd Function of the package does under a transform:

* ``_ImplicitFunction`` (custom_root, ImplicitMetaGradientModule): the
  torch.func form, with a differentiable backward and a jvp (torch >= 2.0);
  a clear error on torch 1.13.
* ``_ZeroOrderFunction`` (zero-order estimates): a clear error (the
  estimate is drawn in the backward and combined in C++).
* ``_Tasks``, ``_Chunks``, ``_Recomputed`` (metafuse.vmap's first-order
  task nodes): reached only through metafuse.vmap, which refuses under a
  transform the caller opened.
* ``_RemoteTasks``, ``_ReducedRemoteTasks``: TaskScheduler refuses.
* The C++ nodes: compiled programs (metafuse.compile, metafuse.vmap, aot's
  loaded programs) refuse, naming metafuse.vmap and metafuse.grad;
  compile_inner_loop runs its loop eagerly instead; the fused operators
  have batching rules (metafuse.ops) and refuse under grad-like transforms,
  and fused=True optimizers refuse naming fused=False.

A refusal is a TorchFuncUnsupportedError (a RuntimeError) naming the
function and what to use instead (``refuse``).

metafuse runs functorch's vmap itself (metafuse.vmap traces a function under
it, and runs it eagerly under it where it does not compile): the levels it
opens are its own (``owned``), and a compiled function or a nested
metafuse.vmap inside them keeps working as before; only the transforms a
caller opened count (``user_transforms_active``).
"""

import threading

import torch

from metafuse._torch_check import major_minor

__all__ = ["FUNCTORCH_FORM", "TorchFuncUnsupportedError", "transforms_active",
           "user_transforms_active", "differentiating_transforms_active", "owned",
           "refuse", "vjp", "grad_and_value", "physical", "all_true"]

_functorch = torch._C._functorch


# The autograd.Function form torch.func transforms: torch >= 2.0, where
# Function has setup_context (checked once, here).
FUNCTORCH_FORM = (major_minor(torch.__version__) >= (2, 0)
                  and hasattr(torch.autograd.Function, "setup_context"))


class TorchFuncUnsupportedError(RuntimeError):
    """A metafuse function was called under a torch.func transform it cannot
    run under (the message names it and what to use instead)."""


def _levels():
    """The levels of the functorch transforms running now (outermost
    first); empty outside every transform."""
    if hasattr(_functorch, "get_interpreter_stack"):  # torch 2.x
        stack = _functorch.get_interpreter_stack()
        return [i.level() for i in stack] if stack else []
    if _functorch.are_transforms_active():  # torch 1.13: levels 1..current
        return list(range(1, _functorch.current_level() + 1))
    return []


def transforms_active():
    """Whether any functorch transform (vmap, grad, jvp, ...) is running."""
    if hasattr(_functorch, "are_transforms_active"):
        return _functorch.are_transforms_active()
    return _functorch.peek_interpreter_stack() is not None


_owned = threading.local()


def differentiating_transforms_active():
    """Whether torch.func.grad, vjp, jacrev, jvp or jacfwd (a grad or jvp
    level) is running. torch 1.13 cannot say: False there (functorch's own
    error then speaks)."""
    if not transforms_active() or not hasattr(_functorch, "get_interpreter_stack"):
        return False
    kinds = {_functorch.TransformType.Grad, _functorch.TransformType.Jvp}
    return any(i.key() in kinds for i in _functorch.get_interpreter_stack() or [])


def _owned_levels():
    levels = getattr(_owned, "levels", None)
    if levels is None:
        levels = _owned.levels = set()
    return levels


def owned(fn):
    """``fn`` as metafuse runs it under a functorch transform it opened
    itself: ``functorch.vmap(owned(fn))``. The transform's level is
    metafuse's while ``fn`` runs."""
    def run(*args, **kwargs):
        levels = _levels()
        level = levels[-1] if levels else None
        mine = _owned_levels()
        added = level is not None and level not in mine
        if added:
            mine.add(level)
        try:
            return fn(*args, **kwargs)
        finally:
            if added:
                mine.discard(level)
    return run


def user_transforms_active():
    """Whether a torch.func transform that metafuse did not open itself is
    running (metafuse.vmap's own functorch.vmap does not count)."""
    if not transforms_active():
        return False
    mine = _owned_levels()
    return any(level not in mine for level in _levels())


def _running():
    """The transforms running now, outermost first, in words."""
    if not hasattr(_functorch, "get_interpreter_stack"):
        return "a functorch transform"
    words = {"Vmap": "vmap", "Grad": "grad/vjp/jacrev", "Jvp": "jvp/jacfwd",
             "Functionalize": "functionalize"}
    kinds = [words.get(i.key().name, i.key().name)
             for i in _functorch.get_interpreter_stack() or []]
    return "torch.func " + " > ".join(kinds) if kinds else "a torch.func transform"


def refuse(what, instead):
    """Raises TorchFuncUnsupportedError for ``what`` (a metafuse function)
    called under a torch.func transform, saying what to use ``instead``."""
    raise TorchFuncUnsupportedError(
        f"{what} cannot run under a torch.func transform (here {_running()}): {instead}")


def vmap():
    """torch.func.vmap (torch 2.x: functorch.vmap is a deprecated alias
    there), functorch's (torch 1.13)."""
    if hasattr(torch, "func") and hasattr(torch.func, "vmap"):
        return torch.func.vmap
    import functorch
    return functorch.vmap


def vjp():
    """torch.func.vjp (torch 2.x), functorch's (torch 1.13)."""
    if hasattr(torch, "func") and hasattr(torch.func, "vjp"):
        return torch.func.vjp
    import functorch
    return functorch.vjp


def grad_and_value():
    """torch.func.grad_and_value (torch 2.x), functorch's (torch 1.13)."""
    if hasattr(torch, "func") and hasattr(torch.func, "grad_and_value"):
        return torch.func.grad_and_value
    import functorch
    return functorch.grad_and_value


def physical(tensor):
    """The plain tensor under functorch's wrappers (a BatchedTensor's
    values for every batch entry, a GradTrackingTensor's value): only for
    reading, e.g. whether an iterative solve has converged for the whole
    batch."""
    while _functorch.is_functorch_wrapped_tensor(tensor):
        tensor = _functorch.get_unwrapped(tensor)
    return tensor


def all_true(flag):
    """Whether a boolean tensor is true everywhere, for every batch entry
    of every vmap level: a Python bool read from its physical values, so
    that a loop may stop once every entry is done (under vmap,
    ``bool(flag)`` is an error)."""
    if not transforms_active():
        return bool(flag.all())
    try:
        return bool(physical(flag).all())
    except RuntimeError:  # a wrapper we cannot read through: keep going
        return False
