"""MetaOptimizer: differentiable in-place updates of an nn.Module.

    inner = metafuse.MetaSGD(net, lr=0.1)
    for _ in range(k):
        inner.step(loss_fn(net(x), y))   # net's parameters become new tensors
    meta_loss = loss_fn(net(x_query), y_query)
    meta_loss.backward()                  # reaches the meta-parameters

``step`` computes the gradients with create_graph=True and replaces each
parameter of the module by ``param + update`` (a non-leaf tensor that keeps
the graph), so the whole unrolled inner loop stays differentiable.
"""

import torch

from metafuse import states as _states
from metafuse import tree as _tree
from metafuse.optim import _factory


class MetaOptimizer:
    """Base class: ``alias_fn(**hyperparameters)`` builds the update."""

    def __init__(self, module, alias_fn, hyperparameters):
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"MetaOptimizer: `module` must be an nn.Module, "
                            f"got {type(module).__name__}")
        self.module = module
        self.hyperparameters = dict(hyperparameters)
        # (owner module, attribute name) of every trainable parameter, in the
        # order of named_parameters(); the update writes back there.
        self._slots = []
        for name, p in module.named_parameters():
            if p.requires_grad:
                owner_path, _, attr = name.rpartition(".")
                owner = module.get_submodule(owner_path) if owner_path else module
                self._slots.append((name, owner, attr))
        if not self._slots:
            raise ValueError("MetaOptimizer: the module has no trainable "
                             "parameters (none with requires_grad=True)")
        self._tx = alias_fn(**self.hyperparameters)
        params = self._current()
        spec = _tree.flatten(params)[1]
        self._spec = spec
        self.state = self._tx.init(params)
        if self._tx._core is None:
            raise ValueError("MetaOptimizer: transformation is not resolved")

    def _current(self):
        return tuple(owner._parameters[attr] for _, owner, attr in self._slots)

    def step(self, loss):
        """One differentiable update of the module's parameters from ``loss``."""
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError("MetaOptimizer.step: `loss` must be a scalar "
                             "tensor")
        params = self._current()
        if not loss.requires_grad:
            raise ValueError("MetaOptimizer.step: `loss` does not depend on "
                             "the module's parameters (it has no grad_fn)")
        grads = torch.autograd.grad(loss, params, create_graph=True,
                                    allow_unused=True)
        if all(g is None for g in grads):
            raise ValueError("MetaOptimizer.step: `loss` does not depend on "
                             "any of the module's trainable parameters")
        grads = tuple(torch.zeros_like(p) if g is None else g
                      for p, g in zip(params, grads))
        raw = _states.to_raw(self.state, self._spec)
        updates, raw = self._tx._core.update(list(grads), raw, list(params),
                                             False)
        self.state = _states.from_raw(raw, self._spec)
        for (_, owner, attr), p, u in zip(self._slots, params, updates):
            # Bypasses nn.Module.__setattr__, which only accepts Parameters
            # under a parameter's name: the new tensor carries the graph.
            owner._parameters[attr] = p + u

    def state_dict(self):
        """The optimizer state (a pytree of tensors)."""
        return self.state

    def load_state_dict(self, state):
        _states.to_raw(state, self._spec)  # validates the structure
        self.state = state




def _make(stem):
    fn = _factory.ALIASES[stem]
    return _factory.make_class(
        "Meta" + stem, MetaOptimizer, fn, "module",
        f"Differentiable {stem} on an nn.Module's parameters; hyperparameters "
        f"as metafuse.{fn.__name__}.")


MetaSGD = _make("SGD")
MetaAdam = _make("Adam")
MetaAdamW = _make("AdamW")
MetaAdamax = _make("Adamax")
MetaAdadelta = _make("Adadelta")
MetaAdagrad = _make("Adagrad")
MetaRAdam = _make("RAdam")
MetaRMSProp = _make("RMSProp")
