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
from metafuse import _functorch_count
from metafuse.compile import capture as _capture
from metafuse import _torch_func
from metafuse import states as _states
from metafuse import tree as _tree

_core = _C._optim

EmptyState = _states.EmptyState
UninitializedState = _states.UninitializedState

__all__ = ["EmptyState", "UninitializedState", "GradientTransformation",
           "ChainedGradientTransformation", "IdentityGradientTransformation",
           "identity", "chain",
           "apply_updates"]


class GradientTransformation:
    """An optimizer or one of its parts: ``init(params)`` and ``update(...)``.

    ``inplace=True`` reuses the update and state buffers (fast; for plain
    training). ``inplace=False`` builds new tensors so that autograd can
    differentiate through the update (meta-learning).

    As in TorchOpt, a transformation can also be made from two Python
    functions, ``GradientTransformation(init_fn, update_fn)`` with
    ``update_fn(updates, state, *, params=None, inplace=True) -> (updates,
    state)``, and it unpacks as a pair: ``init, update = tx``. Gradients that
    are ``None`` (``torch.autograd.grad(..., allow_unused=True)``) pass
    through: those parameters are left alone and their state does not move.
    """

    __slots__ = ("_core", "_config", "_init_fn", "_update_fn", "__weakref__")

    def __init__(self, init, update=None):
        self._init_fn = self._update_fn = None
        if callable(init) and callable(update):
            # TorchOpt's form: user functions.
            self._core, self._config = None, None
            self._init_fn, self._update_fn = init, update
            return
        if callable(init) or callable(update):
            raise TypeError("GradientTransformation(init, update): `init` and "
                            "`update` must both be callables, got "
                            f"{type(init).__name__} and {type(update).__name__}")
        self._core = init
        # (alias name, hyperparameters) for the aliases: what the compiler
        # needs to emit the update itself; None for hand-built chains.
        self._config = update

    # -- TorchOpt's tuple protocol: ``init, update = tx`` -------------------
    def __iter__(self):
        return iter((self.init, self.update))

    def __len__(self):
        return 2

    def __getitem__(self, index):
        return (self.init, self.update)[index]

    def chain(self, next):  # noqa: A002 (TorchOpt's name)
        """``chain(self, next)``."""
        return chain(self, next)

    def init(self, params):
        """The initial optimizer state for ``params`` (a pytree of tensors)."""
        if self._init_fn is not None:
            return self._init_fn(params)
        leaves, spec = _flatten_tensors(params, "params")
        return _states.from_raw(self._core.init(leaves), spec)

    def update(self, updates, state, params=None, inplace=True):
        """``(updates, new_state)`` from the gradients ``updates`` and ``state``;
        ``params`` for transformations that read them, ``inplace=False`` to keep
        the update differentiable."""
        if self._update_fn is not None:
            return self._update_fn(updates, state, params=params,
                                   inplace=inplace)
        if self._core is None:
            raise RuntimeError("call init(params) before update()")
        with_none, none_spec = _tree.flatten(updates, none_is_leaf=True)
        if any(leaf is None for leaf in with_none):
            return self._update_skipping_none(with_none, none_spec, state,
                                              params, inplace)
        leaves, spec = _flatten_tensors(updates, "updates")
        param_leaves = None
        if params is not None:
            param_leaves = _leaves_like(spec, params, "params", "updates")
        if not leaves:  # nothing to update (an empty tree)
            return updates, state
        if state is None:  # a stateless transformation (TorchOpt allows it)
            raw_state = self._core.init(leaves)
        else:
            raw_state = _states.to_raw(state, spec)
        new_leaves, new_state = self._core_update(leaves, raw_state,
                                                  param_leaves, inplace)
        return (_tree.unflatten(spec, new_leaves),
                _states.from_raw(new_state, spec))

    def _core_update(self, leaves, raw_state, param_leaves, inplace):
        """The C++ update; under functorch.vmap the step count crosses as a
        host value (see metafuse._functorch_count)."""
        if _torch_func.transforms_active():
            fused = _fused_alias(self)
            if fused is not None:
                raise _torch_func.TorchFuncUnsupportedError(
                    f"metafuse.{fused}(fused=True) (use_accelerated_op=True) runs "
                    "metafuse's fused multi-tensor kernels, which torch.func transforms "
                    "cannot run (no batching rule; a C++ autograd node, which grad, vjp, "
                    "jacrev and jvp cannot differentiate); under torch.func transforms "
                    "use fused=False (the same numbers)")
        if _capture.active():
            _refuse_under_capture(self, raw_state)
        raw_state, replaced = _functorch_count.to_host(raw_state)
        try:
            new_leaves, new_state = self._core.update(leaves, raw_state,
                                                      param_leaves, inplace)
        except RuntimeError as exc:
            _functorch_count.explain_unbatchable(exc)
            raise
        if replaced is not None:
            new_state = _functorch_count.restore(new_state, replaced, inplace)
        return new_leaves, new_state

    def _update_skipping_none(self, with_none, none_spec, state, params,
                              inplace):
        """The update over the leaves whose gradient is not None; the others
        stay None and keep their state."""
        present = [i for i, leaf in enumerate(with_none) if leaf is not None]
        for i in present:
            if not isinstance(with_none[i], torch.Tensor):
                raise TypeError(f"`updates` must be a pytree of tensors (or "
                                f"None); leaf {i} is a "
                                f"{type(with_none[i]).__name__}")
        if not present:
            return _tree.unflatten(none_spec, with_none), state
        if params is not None:
            # The state follows the parameters' tensors (None ones have none).
            try:
                param_with_none = list(_tree.flatten_as(none_spec, params))
            except (ValueError, TypeError) as exc:
                raise ValueError("`params` must have the same tree structure as "
                                 f"`updates`: {exc}") from None
            state_spec = _tree.flatten(params)[1]
        else:
            param_with_none = [_PLACEHOLDER] * len(with_none)
            state_spec = _tree.flatten(_tree.unflatten(none_spec, param_with_none))[1]
        tensor_index = [i for i, p in enumerate(param_with_none) if p is not None]
        position = {i: k for k, i in enumerate(tensor_index)}
        for i in present:
            if i not in position:
                raise ValueError(f"`updates` has a tensor at leaf {i} where "
                                 "`params` has None")
        if state is None:
            raw = self._core.init([_PLACEHOLDER] * len(tensor_index))
        else:
            raw = _states.to_raw(state, state_spec)
        indices = [position[i] for i in present]
        sub = _states.select_raw(raw, indices)
        sub_params = (None if params is None
                      else [param_with_none[i] for i in present])
        new_sub, sub = self._core_update([with_none[i] for i in present], sub,
                                         sub_params, inplace)
        raw = _states.scatter_raw(raw, sub, indices)
        out = [None] * len(with_none)
        for i, u in zip(present, new_sub):
            out[i] = u
        return (_tree.unflatten(none_spec, out),
                _states.from_raw(raw, state_spec))

    def _parts(self):
        if isinstance(self, ChainedGradientTransformation):
            return self.transformations
        return (self,)

    def __eq__(self, other):
        """TorchOpt's equality: identities are equal, a chain equals the
        chain of the same parts, a one-part chain equals its part."""
        if not isinstance(other, GradientTransformation):
            return NotImplemented
        a, b = self._parts(), other._parts()
        if len(a) != len(b):
            return False
        return all(_same(x, y) for x, y in zip(a, b))

    def __hash__(self):
        return hash(tuple(_part_hash(p) for p in self._parts()))

    def __repr__(self):
        if self._core is None and self._update_fn is not None:
            return (f"GradientTransformation(init={self._init_fn!r}, "
                    f"update={self._update_fn!r})")
        return f"GradientTransformation({self._core!r})"


def _refuse_under_capture(tx, raw):
    """What an update cannot do while a function is captured by make_fx
    (metafuse.compile on torch 2.x): run a fused multi-tensor kernel, whose
    arithmetic happens inside one C++ autograd node that make_fx cannot
    see into (the TorchScript tracer records the operator, which the
    compiler then refuses by name), or read a step count computed from the
    function's inputs."""
    fused = _fused_alias(tx)
    if fused is not None and _capture.FRONT == "fx":
        op = "adam_multi" if fused == "adamw" else f"{fused}_multi"
        raise RuntimeError(f"op metafuse::{op} (metafuse.{fused}(fused=True)) is a fused "
                           "kernel the compiler does not take; use fused=False inside "
                           "compiled functions (the same numbers)")
    _refuse_counts_from_inputs(raw)


def _refuse_counts_from_inputs(raw):
    """A step count computed from the captured function's inputs is an
    error: the update reads it on the host, and the program would bake in
    this call's value."""
    name, fields, children = raw
    for field, tensors, per_param in fields:
        if not per_param and _capture.computed_from_inputs(tensors[0]):
            raise RuntimeError(
                f"optimizer state {name}.{field} comes from the traced function's inputs: "
                "its value would be baked into the program. Create the optimizer state "
                "inside the compiled function.")
    for child in children:
        _refuse_counts_from_inputs(child)


_PLACEHOLDER = torch.zeros(())


def _part_hash(x):
    if isinstance(x, _Identity):
        return hash(_Identity)
    if x._update_fn is not None:
        return hash((x._init_fn, x._update_fn))
    return id(x)


def _same(x, y):
    if x is y:
        return True
    if isinstance(x, _Identity) and isinstance(y, _Identity):
        return True
    if x._update_fn is not None:
        return x._init_fn == y._init_fn and x._update_fn == y._update_fn
    return False


def _fused_alias(tx):
    """The alias name of a fused transformation in ``tx`` (an alias made
    with fused=True, or a chain holding one), else None."""
    config = getattr(tx, "_config", None)
    if isinstance(config, tuple) and len(config) == 2 and isinstance(config[1], dict) \
            and config[1].get("fused"):
        return config[0]
    for part in getattr(tx, "transformations", ()):
        name = _fused_alias(part)
        if name is not None:
            return name
    return None


class ChainedGradientTransformation(GradientTransformation):
    """``chain(*transformations)``: applies them in order; the state is the
    tuple of theirs. Nested chains are flattened and identities dropped (as
    in TorchOpt); ``.transformations`` lists the parts. When every part is a
    C++ transformation the chain runs as one C++ call."""

    __slots__ = ("transformations",)

    def __init__(self, *transformations):
        flat = []
        for i, tx in enumerate(transformations):
            if not isinstance(tx, GradientTransformation):
                raise TypeError(f"chain: argument {i} must be a "
                                f"GradientTransformation, got "
                                f"{type(tx).__name__}")
            if isinstance(tx, ChainedGradientTransformation):
                flat.extend(tx.transformations)
            elif not isinstance(tx, _Identity):
                flat.append(tx)
        if not flat:
            flat = [identity()]
        self.transformations = tuple(flat)
        if all(type(tx) in (GradientTransformation, _Identity)
               and tx._core is not None for tx in flat):
            super().__init__(_core.chain([tx._core for tx in flat]))
        else:
            parts = self.transformations

            def init_fn(params):
                return tuple(tx.init(params) for tx in parts)

            def update_fn(updates, state, *, params=None, inplace=True):
                if state is None:
                    state = (None,) * len(parts)
                if not isinstance(state, tuple) or len(state) != len(parts):
                    raise ValueError(
                        f"chain: `state` must be a tuple of {len(parts)} "
                        "states, one per transformation (call init first)")
                new_state = []
                for tx, s in zip(parts, state):
                    updates, s = tx.update(updates, s, params=params,
                                           inplace=inplace)
                    new_state.append(s)
                return updates, tuple(new_state)
            super().__init__(init_fn, update_fn)

    def __repr__(self):
        inner = ",\n    ".join(repr(t) for t in self.transformations)
        return f"ChainedGradientTransformation(\n    {inner},\n)"


class IdentityGradientTransformation(GradientTransformation):
    """identity(): passes updates through (TorchOpt's class name)."""

    __slots__ = ()


_Identity = IdentityGradientTransformation


def chain(*transformations):
    """Applies ``transformations`` in order; the state is a tuple of theirs.
    ``chain()`` is ``identity()`` and ``chain(tx)`` is ``tx`` (TorchOpt).

    Args:
        *transformations: GradientTransformations, applied first to last.

    Returns:
        A ChainedGradientTransformation (or the one transformation, or
        ``identity()``).
    """
    for i, tx in enumerate(transformations):
        if not isinstance(tx, GradientTransformation):
            raise TypeError(f"chain: argument {i} must be a "
                            f"GradientTransformation, got {type(tx).__name__}")
    if not transformations:
        return identity()
    if len(transformations) == 1:
        return transformations[0]
    return ChainedGradientTransformation(*transformations)


def identity():
    """A transformation that passes updates through unchanged.

    Returns:
        A GradientTransformation (stateless).
    """
    return _Identity(_core.identity())


def apply_updates(params, updates, *, inplace=True):
    """``params + updates`` leaf by leaf; same tree structure required (an
    update that is None leaves its parameter alone, as in TorchOpt).

    Args:
        params: a pytree of tensors.
        updates: a pytree of tensors (or None leaves) with the structure of
            ``params``, as a GradientTransformation's ``update`` returns.
        inplace: True updates the parameters' storage without recording a
            graph (torch.optim semantics); False makes new, differentiable
            tensors.

    Returns:
        The updated parameters, a pytree like ``params``.
    """
    leaves, spec = _flatten_tensors(params, "params")
    with_none = _tree.flatten(updates, none_is_leaf=True)[0]
    if len(with_none) == len(leaves) and any(u is None for u in with_none):
        present = [i for i, u in enumerate(with_none) if u is not None]
        _leaves_like(spec, _tree.unflatten(
            _tree.flatten(updates, none_is_leaf=True)[1],
            [_PLACEHOLDER if u is None else u for u in with_none]),
            "updates", "params")
        new = _core.apply_updates([leaves[i] for i in present],
                                  [with_none[i] for i in present], inplace)
        out = list(leaves)
        for i, t in zip(present, new):
            out[i] = t
        return _tree.unflatten(spec, out)
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
