"""torch.optim-compatible optimizers whose step runs metafuse's C++ core.

They subclass torch.optim.Optimizer, so param groups, zero_grad,
add_param_group and torch.optim.lr_scheduler work as usual; the update of
each group is one call into C++ over the group's flat parameter list.
"""

import inspect

import torch

from metafuse import states as _states
from metafuse import tree as _tree
from metafuse.optim import _factory


class Optimizer(torch.optim.Optimizer):
    """Base class: ``alias_fn(**group hyperparameters)`` builds the update."""

    def __init__(self, params, alias_fn, defaults):
        self._alias_fn = alias_fn
        # Group keys the alias understands; schedulers add others (initial_lr).
        self._alias_keys = frozenset(inspect.signature(alias_fn).parameters)
        self._transforms = {}  # hyperparameter key -> C++ transformation
        self._group_states = []  # raw C++ state per param group
        super().__init__(params, defaults)

    def _transform(self, group):
        hyper = {k: v for k, v in group.items() if k in self._alias_keys}
        key = tuple(sorted((k, _hashable(v)) for k, v in hyper.items()))
        tx = self._transforms.get(key)
        if tx is None:
            # Rebuilt when a scheduler (or the user) changes group["lr"] etc.
            py_tx = self._alias_fn(**hyper)
            if py_tx._core is None:  # a mask, resolved against the params
                py_tx.init([p.detach() for p in group["params"]])
            tx = py_tx._core
            self._transforms[key] = tx
        return tx

    def add_param_group(self, param_group):
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
            having_grad = [j for j, p in enumerate(params) if p.grad is not None]
            if not having_grad:
                continue
            state = self._group_states[i]
            if len(having_grad) == len(params):
                grads = [p.grad for p in params]
                updates, state = tx.update(grads, state, params, True)
                tx_params = params
            else:
                # Parameters without a gradient are skipped, as in torch.optim:
                # the update runs on the others' slice of the state.
                tx_params = [params[j] for j in having_grad]
                grads = [p.grad for p in tx_params]
                sub = _select(state, having_grad)
                updates, sub = tx.update(grads, sub, tx_params, True)
                state = _scatter(state, sub, having_grad)
            self._group_states[i] = state
            for p, u in zip(tx_params, updates):
                p.add_(u)
        return loss

    def state_dict(self):
        groups = []
        index = 0
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = list(range(index, index + len(group["params"])))
            index += len(group["params"])
            groups.append(packed)
        states = [_states.from_raw(raw, _tree.flatten(list(g["params"]))[1])
                  for raw, g in zip(self._group_states, self.param_groups)]
        return {"state": states, "param_groups": groups}

    def load_state_dict(self, state_dict):
        groups = state_dict.get("param_groups")
        states = state_dict.get("state")
        if groups is None or states is None or len(groups) != len(self.param_groups):
            raise ValueError(
                "load_state_dict: expected a dict with 'state' and "
                f"'param_groups' for {len(self.param_groups)} param group(s)")
        for i, (saved, group) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(
                    f"load_state_dict: param group {i} has "
                    f"{len(group['params'])} parameters, the saved one "
                    f"{len(saved['params'])}")
            group.update({k: v for k, v in saved.items() if k != "params"})
            spec = _tree.flatten(list(group["params"]))[1]
            self._group_states[i] = _states.to_raw(states[i], spec)


def _hashable(value):
    try:
        hash(value)
    except TypeError:
        return id(value)
    return id(value) if isinstance(value, torch.Tensor) else value


def _select(raw, indices):
    name, fields, children = raw
    fields = [(f, [t[j] for j in indices] if per_param else t, per_param)
              for f, t, per_param in fields]
    return (name, fields, [_select(c, indices) for c in children])


def _scatter(full, sub, indices):
    name, fields, children = full
    out_fields = []
    for (f, tensors, per_param), (_, sub_tensors, _) in zip(fields, sub[1]):
        if per_param:
            tensors = list(tensors)
            for j, t in zip(indices, sub_tensors):
                tensors[j] = t
            out_fields.append((f, tensors, True))
        else:
            out_fields.append((f, sub_tensors, False))
    return (name, out_fields,
            [_scatter(c, s, indices) for c, s in zip(children, sub[2])])


def _make(stem):
    fn = _factory.ALIASES[stem]
    return _factory.make_class(
        stem, Optimizer, fn, "params",
        f"torch.optim-compatible {stem}; hyperparameters as metafuse.{fn.__name__}.")


SGD = _make("SGD")
Adam = _make("Adam")
AdamW = _make("AdamW")
Adamax = _make("Adamax")
Adadelta = _make("Adadelta")
Adagrad = _make("Adagrad")
RAdam = _make("RAdam")
RMSProp = _make("RMSProp")
