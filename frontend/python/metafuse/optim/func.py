"""FuncOptimizer: ``step(loss, params) -> new params`` for functional models
(params as a pytree of tensors); differentiable like MetaOptimizer."""

import torch

from metafuse import tree
from metafuse.base import GradientTransformation, apply_updates


class FuncOptimizer:
    """An optimizer for functional code: ``step(loss, params)`` returns the
    updated parameters (a pytree like ``params``) from one update of the
    GradientTransformation ``impl``, whose state it keeps.

    Args:
        impl: the update (``metafuse.sgd(...)``, ``metafuse.adam(...)``...).
        inplace: update the tensors of ``params`` in place (not
            differentiable); False keeps the update in the autograd graph.
    """

    def __init__(self, impl, *, inplace=False):
        if not isinstance(impl, GradientTransformation):
            raise TypeError("FuncOptimizer: `impl` must be a "
                            f"GradientTransformation, got {type(impl).__name__}")
        self.impl = impl
        self.inplace = bool(inplace)
        self.optim_state = None

    def step(self, loss, params, inplace=None):
        """New parameters after one update from ``loss``; ``inplace``
        overrides the constructor's choice for this call (TorchOpt)."""
        inplace = self.inplace if inplace is None else bool(inplace)
        leaves, spec = tree.flatten(params)
        if not leaves:
            raise ValueError("FuncOptimizer.step: `params` has no tensors")
        if self.optim_state is None:
            self.optim_state = self.impl.init(params)
        grads = torch.autograd.grad(loss, leaves, create_graph=not inplace,
                                    allow_unused=True)
        if all(g is None for g in grads):
            raise ValueError("FuncOptimizer.step: `loss` does not depend on "
                             "`params`")
        # A parameter without a gradient is left alone (TorchOpt).
        updates, self.optim_state = self.impl.update(
            tree.unflatten(spec, list(grads)), self.optim_state, params=params,
            inplace=inplace)
        return apply_updates(params, updates, inplace=inplace)

    def state_dict(self):
        """The optimizer state (None before the first step)."""
        return self.optim_state

    def load_state_dict(self, state):
        """Replaces the optimizer state with ``state`` (from state_dict)."""
        self.optim_state = state
