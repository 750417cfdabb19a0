"""MetaOptimizer: differentiable in-place updates of an nn.Module.

    inner = metafuse.MetaSGD(net, lr=0.1)
    for _ in range(k):
        inner.step(loss_fn(net(x), y))   # net's parameters become new tensors
    meta_loss = loss_fn(net(x_query), y_query)
    meta_loss.backward()                  # reaches the meta-parameters

``step`` computes the gradients with create_graph=True and replaces each
parameter of the module by ``param + update`` (a non-leaf tensor that keeps
the graph), so the whole unrolled inner loop stays differentiable.

``MetaOptimizer(module, impl)`` (TorchOpt's form) takes any
GradientTransformation, chains and user-written ones included;
``add_param_group(module)`` adds another module's parameters as a group with
its own state; ``state_dict()`` is the tuple of the groups' states.
"""

import torch

from metafuse._recurrent_weights import sync_flat_weights
from metafuse.base import GradientTransformation, apply_updates
from metafuse.optim import _factory


class MetaOptimizer:
    """Base class: a GradientTransformation applied differentiably to the
    parameters of one or more modules (one param group per module).

    ``step(loss)`` computes the gradients of ``loss`` with
    ``create_graph=True`` and replaces each parameter of the module by its
    updated value, so a loss computed afterwards reaches the original
    parameters through the updates (MAML's inner loop).

    Args:
        module: the nn.Module whose trainable parameters are updated.
        impl: a GradientTransformation (``metafuse.sgd(0.1)``...), or, for the
            subclasses, the function that makes one from ``hyperparameters``.
        hyperparameters: the keyword arguments of ``impl`` when it is a
            function.
    """

    def __init__(self, module, impl, hyperparameters=None):
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"MetaOptimizer: `module` must be an nn.Module, "
                            f"got {type(module).__name__}")
        if isinstance(impl, GradientTransformation):
            self.impl = impl
            self.hyperparameters = {}
        elif callable(impl) and isinstance(hyperparameters, dict):
            self.hyperparameters = dict(hyperparameters)
            self.impl = impl(**self.hyperparameters)
        else:
            raise TypeError("MetaOptimizer: `impl` must be a "
                            "GradientTransformation (e.g. metafuse.sgd(0.1)), "
                            f"got {type(impl).__name__}")
        self.module = module
        # Per group: (qualified name, owner module, attribute) of every
        # trainable parameter, in named_parameters() order.
        self._groups = []
        self.state_groups = []
        self.add_param_group(module)

    def add_param_group(self, module):
        """Adds ``module``'s trainable parameters as a new group."""
        if not isinstance(module, torch.nn.Module):
            raise TypeError("MetaOptimizer.add_param_group: `module` must be an "
                            f"nn.Module, got {type(module).__name__}")
        slots = []
        for name, p in module.named_parameters():
            if p.requires_grad:
                owner_path, _, attr = name.rpartition(".")
                owner = module.get_submodule(owner_path) if owner_path else module
                slots.append((name, owner, attr))
        if not slots:
            raise ValueError("MetaOptimizer: the module has no trainable "
                             "parameters (none with requires_grad=True)")
        self._groups.append(slots)
        self.state_groups.append(self.impl.init(self._current(slots)))

    @property
    def param_containers_groups(self):
        """Per group, the parameter dicts (``module._parameters``) updated."""
        return [tuple({attr: owner._parameters[attr]}
                      for _, owner, attr in slots) for slots in self._groups]

    @property
    def state(self):
        """The state of the first (usually only) group."""
        return self.state_groups[0]

    @state.setter
    def state(self, value):
        self.state_groups[0] = value

    @staticmethod
    def _current(slots):
        return tuple(owner._parameters[attr] for _, owner, attr in slots)

    def step(self, loss):
        """One differentiable update of the parameters from ``loss``;
        parameters that ``loss`` does not depend on are left alone."""
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError("MetaOptimizer.step: `loss` must be a scalar "
                             "tensor")
        if not loss.requires_grad:
            raise ValueError("MetaOptimizer.step: `loss` does not depend on "
                             "the module's parameters (it has no grad_fn)")
        groups = [self._current(slots) for slots in self._groups]
        flat = [p for params in groups for p in params]
        grads = torch.autograd.grad(loss, flat, create_graph=True,
                                    allow_unused=True)
        if all(g is None for g in grads):
            raise ValueError("MetaOptimizer.step: `loss` does not depend on "
                             "any of the module's trainable parameters")
        offset = 0
        for i, (slots, params) in enumerate(zip(self._groups, groups)):
            group_grads = tuple(grads[offset:offset + len(params)])
            offset += len(params)
            if all(g is None for g in group_grads):
                continue
            updates, self.state_groups[i] = self.impl.update(
                group_grads, self.state_groups[i], params=params, inplace=False)
            new_params = apply_updates(params, updates, inplace=False)
            for (_, owner, attr), p in zip(slots, new_params):
                # Bypasses nn.Module.__setattr__, which only accepts
                # Parameters under a parameter's name: the new tensor carries
                # the graph.
                owner._parameters[attr] = p
            sync_flat_weights(owner for _, owner, _ in slots)

    def state_dict(self):
        """The optimizer state: a tuple with one state per param group."""
        return tuple(self.state_groups)

    def load_state_dict(self, state_dict):
        """Loads a tuple of per-group states (from :meth:`state_dict`)."""
        if not isinstance(state_dict, (tuple, list)) or \
                len(state_dict) != len(self.state_groups):
            raise ValueError(
                "MetaOptimizer.load_state_dict: `state_dict` must be a tuple of "
                f"{len(self.state_groups)} group state(s) from state_dict()")
        self.state_groups = list(state_dict)


def _make(stem):
    fn = _factory.ALIASES[stem]
    return _factory.make_class(
        "Meta" + stem, MetaOptimizer, stem, "module",
        f"Differentiable {stem} on an nn.Module's parameters; TorchOpt's "
        f"signature, update as metafuse.{fn.__name__}.\n\n"
        f"Args:\n"
        f"    module: the nn.Module whose trainable parameters ``step(loss)``\n"
        f"        replaces by their updated, differentiable values.\n"
        f"    lr, ...: the hyperparameters of metafuse.{fn.__name__} (see there),\n"
        f"        in TorchOpt's order and with TorchOpt's defaults.\n",
        _factory.META_SIGNATURES)


MetaSGD = _make("SGD")
MetaAdam = _make("Adam")
MetaAdamW = _make("AdamW")
MetaAdamax = _make("Adamax")
MetaAdadelta = _make("Adadelta")
MetaAdagrad = _make("Adagrad")
MetaRAdam = _make("RAdam")
MetaRMSProp = _make("RMSProp")
# TorchOpt's other spellings.
MetaAdaMax = MetaAdamax
MetaAdaDelta = MetaAdadelta
MetaAdaGrad = MetaAdagrad
MetaRMSprop = MetaRMSProp
