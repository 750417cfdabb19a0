"""FuncOptimizer: ``step(loss, params) -> new params`` for functional models
(params as a pytree of tensors); differentiable like MetaOptimizer."""

import torch

from metafuse import tree
from metafuse.base import GradientTransformation, apply_updates


class FuncOptimizer:
    def __init__(self, impl, *, inplace=False):
        if not isinstance(impl, GradientTransformation):
            raise TypeError("FuncOptimizer: `impl` must be a "
                            f"GradientTransformation, got {type(impl).__name__}")
        self.impl = impl
        self.inplace = bool(inplace)
        self.optim_state = None

    def step(self, loss, params):
        leaves, spec = tree.flatten(params)
        if not leaves:
            raise ValueError("FuncOptimizer.step: `params` has no tensors")
        if self.optim_state is None:
            self.optim_state = self.impl.init(params)
        grads = torch.autograd.grad(loss, leaves, create_graph=not self.inplace,
                                    allow_unused=True)
        if all(g is None for g in grads):
            raise ValueError("FuncOptimizer.step: `loss` does not depend on "
                             "`params`")
        grads = [torch.zeros_like(p) if g is None else g
                 for p, g in zip(leaves, grads)]
        updates, self.optim_state = self.impl.update(
            tree.unflatten(spec, grads), self.optim_state, params=params,
            inplace=self.inplace)
        return apply_updates(params, updates, inplace=self.inplace)

    def state_dict(self):
        return self.optim_state

    def load_state_dict(self, state):
        self.optim_state = state
