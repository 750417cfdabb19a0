"""GradientTransformation: the functional optimizer interface.

    tx = metafuse.adam(lr=1e-3)
    state = tx.init(params)
    updates, state = tx.update(grads, state, params=params, inplace=False)
    params = metafuse.apply_updates(params, updates, inplace=False)

``params``, ``grads`` and ``updates`` are pytrees of tensors (metafuse.tree).
The work happens in C++ (metafuse._C._optim) over the flat leaves; this class
only flattens once per call and rebuilds the trees.
"""

import torch

from metafuse import _C
from metafuse import states as _states
from metafuse import tree as _tree

_core = _C._optim


class GradientTransformation:
    """An optimizer or one of its parts: ``init(params)`` and ``update(...)``.

    ``inplace=True`` reuses the update and state buffers (fast; for plain
    training). ``inplace=False`` builds new tensors so that autograd can
    differentiate through the update (meta-learning).
    """

    __slots__ = ("_core", "_config")

    def __init__(self, core, config=None):
        self._core = core
        # (alias name, hyperparameters) for the aliases: what the compiler
        # needs to emit the update itself; None for hand-built chains.
        self._config = config

    def init(self, params):
        leaves, spec = _flatten_tensors(params, "params")
        return _states.from_raw(self._core.init(leaves), spec)

    def update(self, updates, state, params=None, inplace=True):
        leaves, spec = _flatten_tensors(updates, "updates")
        param_leaves = None
        if params is not None:
            param_leaves = _leaves_like(spec, params, "params", "updates")
        raw_state = _states.to_raw(state, spec)
        new_leaves, new_state = self._core.update(leaves, raw_state,
                                                  param_leaves, inplace)
        return (_tree.unflatten(spec, new_leaves),
                _states.from_raw(new_state, spec))

    def __repr__(self):
        return f"GradientTransformation({self._core!r})"


def chain(*transformations):
    """Applies ``transformations`` in order; the state is a tuple of theirs."""
    for i, tx in enumerate(transformations):
        if not isinstance(tx, GradientTransformation):
            raise TypeError(f"chain: argument {i} must be a "
                            f"GradientTransformation, got {type(tx).__name__}")
    return GradientTransformation(
        _core.chain([tx._core for tx in transformations]))


def identity():
    """A transformation that passes updates through unchanged."""
    return GradientTransformation(_core.identity())


def apply_updates(params, updates, inplace=True):
    """``params + updates`` leaf by leaf; same tree structure required.

    With ``inplace=True`` the parameters' storage is updated without
    recording a graph (torch.optim semantics); ``inplace=False`` returns new,
    differentiable tensors.
    """
    leaves, spec = _flatten_tensors(params, "params")
    update_leaves = _leaves_like(spec, updates, "updates", "params")
    new_leaves = _core.apply_updates(leaves, update_leaves, inplace)
    return _tree.unflatten(spec, new_leaves)


def _flatten_tensors(tree, name):
    leaves, spec = _tree.flatten(tree)
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"`{name}` must be a pytree of tensors; leaf {i} "
                            f"is a {type(leaf).__name__}")
    return leaves, spec


def _leaves_like(spec, tree, name, reference):
    """Leaves of ``tree``, which must have ``spec``'s structure."""
    try:
        leaves = _tree.flatten_as(spec, tree)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"`{name}` must have the same tree structure as "
                         f"`{reference}`: {exc}") from None
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"`{name}` must be a pytree of tensors; leaf {i} "
                            f"is a {type(leaf).__name__}")
    return list(leaves)
