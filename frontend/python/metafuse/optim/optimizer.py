"""torch.optim-compatible optimizers whose step runs metafuse's C++ core.

They subclass torch.optim.Optimizer, so param groups, zero_grad,
add_param_group and torch.optim.lr_scheduler work as usual; the update of
each group is one call into C++ over the group's flat parameter list.
"""

import inspect

import torch

from metafuse import states as _states
from metafuse import tree as _tree
from metafuse.base import GradientTransformation
from metafuse.optim import _factory


class Optimizer(torch.optim.Optimizer):
    """A torch.optim.Optimizer whose update is a GradientTransformation.

    ``Optimizer(params, impl)`` (TorchOpt's form) runs any transformation,
    chains and user-written ones included, over all parameter groups. The
    subclasses (SGD, Adam, ...) build theirs from each group's
    hyperparameters, so schedulers that change ``group["lr"]`` work.

    Args:
        params: an iterable of tensors or of param-group dicts, as for
            torch.optim.
        impl: the GradientTransformation (``metafuse.adam(1e-3)``...), or, for
            the subclasses, the function that makes one from a group's
            hyperparameters.
        defaults: the default hyperparameters of the groups when ``impl`` is
            such a function.
    """

    def __init__(self, params, impl, defaults=None):
        if isinstance(impl, GradientTransformation):
            self._impl = impl
            self._alias_fn = None
            self._alias_keys = frozenset()
            defaults = {}
        elif callable(impl) and isinstance(defaults, dict):
            self._impl = None
            self._alias_fn = impl
            # Group keys the alias understands; schedulers add others.
            self._alias_keys = frozenset(inspect.signature(impl).parameters)
        else:
            raise TypeError("Optimizer: `impl` must be a GradientTransformation "
                            f"(e.g. metafuse.adam(1e-3)), got {type(impl).__name__}")
        self._transforms = {}  # hyperparameter key -> GradientTransformation
        self._group_states = []  # optimizer state per param group
        if isinstance(params, torch.Tensor):
            raise TypeError("Optimizer: `params` must be an iterable of tensors "
                            "or of param-group dicts, got a Tensor")
        super().__init__(params, defaults)

    @property
    def impl(self):
        """The transformation of the first param group (TorchOpt's attribute)."""
        return self._transform(self.param_groups[0])

    @property
    def state_groups(self):
        """The optimizer state of each param group (TorchOpt's attribute)."""
        return tuple(self._group_states)

    def _transform(self, group):
        if self._impl is not None:
            return self._impl
        hyper = {k: v for k, v in group.items() if k in self._alias_keys}
        key = tuple(sorted((k, _hashable(v)) for k, v in hyper.items()))
        tx = self._transforms.get(key)
        if tx is None:
            # Rebuilt when a scheduler (or the user) changes group["lr"] etc.
            tx = self._alias_fn(**hyper)
            self._transforms[key] = tx
        return tx

    def add_param_group(self, param_group):
        """Adds a group: a dict as in torch.optim, or (TorchOpt) an iterable
        of tensors using the defaults."""
        if not isinstance(param_group, dict):
            if isinstance(param_group, torch.Tensor):
                param_group = [param_group]
            param_group = {"params": list(param_group)}
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        self._group_states.append(self._transform(group).init(
            [p.detach() for p in group["params"]]))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for i, group in enumerate(self.param_groups):
            tx = self._transform(group)
            params = group["params"]
            grads = [p.grad for p in params]
            if all(g is None for g in grads):
                continue
            # Parameters without a gradient are skipped, as in torch.optim:
            # their update is None and their state does not move.
            updates, self._group_states[i] = tx.update(
                grads, self._group_states[i], params=list(params), inplace=True)
            for p, u in zip(params, updates):
                if u is not None:
                    p.add_(u)
        return loss

    def state_dict(self):
        """torch.optim's layout: {"state": [state of each group],
        "param_groups": [...]} (TorchOpt's Optimizer returns the tuple of
        group states; see :attr:`state_groups`)."""
        groups = []
        index = 0
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = list(range(index, index + len(group["params"])))
            index += len(group["params"])
            groups.append(packed)
        return {"state": list(self._group_states), "param_groups": groups}

    def load_state_dict(self, state_dict):
        if isinstance(state_dict, (tuple, list)) and not isinstance(state_dict, dict):
            state_dict = {"state": list(state_dict), "param_groups": [
                {"params": g["params"]} for g in self.param_groups]}
        groups = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
        states = state_dict.get("state") if isinstance(state_dict, dict) else None
        if groups is None or states is None or len(groups) != len(self.param_groups) \
                or len(states) != len(self.param_groups):
            raise ValueError(
                "load_state_dict: expected a dict with 'state' and "
                f"'param_groups' for {len(self.param_groups)} param group(s)")
        for i, (saved, group) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(
                    f"load_state_dict: param group {i} has "
                    f"{len(group['params'])} parameters, the saved one "
                    f"{len(saved['params'])}")
        for i, (saved, group) in enumerate(zip(groups, self.param_groups)):
            group.update({k: v for k, v in saved.items() if k != "params"})
            tx = self._transform(group)
            if tx._core is not None:  # validates the structure
                spec = _tree.flatten(list(group["params"]))[1]
                _states.to_raw(states[i], spec)
            self._group_states[i] = states[i]


def _hashable(value):
    try:
        hash(value)
    except TypeError:
        return id(value)
    return id(value) if isinstance(value, torch.Tensor) else value


def _make(stem, name=None):
    fn = _factory.ALIASES[stem]
    return _factory.make_class(
        name or stem, Optimizer, stem, "params",
        f"torch.optim-compatible {stem} (a torch.optim.Optimizer subclass); "
        f"TorchOpt's signature, update as metafuse.{fn.__name__}.\n\n"
        f"Args:\n"
        f"    params: an iterable of tensors or of param-group dicts, as for\n"
        f"        torch.optim.\n"
        f"    lr, ...: the hyperparameters of metafuse.{fn.__name__} (see there),\n"
        f"        in TorchOpt's order and with TorchOpt's defaults.\n",
        _factory.OOP_SIGNATURES)


SGD = _make("SGD")
Adam = _make("Adam")
AdamW = _make("AdamW")
Adamax = _make("Adamax")
Adadelta = _make("Adadelta")
Adagrad = _make("Adagrad")
RAdam = _make("RAdam")
RMSProp = _make("RMSProp")
# TorchOpt's other spellings.
AdaMax = Adamax
AdaDelta = Adadelta
AdaGrad = Adagrad
RMSprop = RMSProp
