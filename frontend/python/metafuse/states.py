"""Optimizer states as pytrees.

The C++ core keeps a transform's state as a record of named fields, each
either aligned with the parameter leaves (Adam's ``mu``) or a single tensor
(the step ``count``). Here every record becomes a namedtuple whose
per-parameter fields have the parameters' tree structure, so states flatten,
map, unflatten, pickle and ``torch.save`` like any other tree. A chain's state
is a tuple of its parts' states.
"""

from collections import namedtuple

from metafuse import tree as _tree

# Fields that hold one tensor, not one per parameter leaf.
_SCALAR_FIELDS = frozenset({"count"})

EmptyState = namedtuple("EmptyState", [])
EmptyState.__doc__ = "The state of a stateless transformation."
UninitializedState = namedtuple("UninitializedState", [])
UninitializedState.__doc__ = "A state that is not initialized yet (TorchOpt)."
ScaleByAdamState = namedtuple("ScaleByAdamState", ["mu", "nu", "count"])
ScaleByAmsgradState = namedtuple("ScaleByAmsgradState",
                                 ["mu", "nu", "nu_max", "count"])
ScaleByAdamaxState = namedtuple("ScaleByAdamaxState", ["mu", "nu", "count"])
ScaleByRAdamState = namedtuple("ScaleByRAdamState", ["mu", "nu", "count"])
ScaleByAdadeltaState = namedtuple("ScaleByAdadeltaState", ["e_g", "e_x"])
ScaleByRmsState = namedtuple("ScaleByRmsState", ["nu"])
ScaleByStddevState = namedtuple("ScaleByStddevState", ["mu", "nu"])
ScaleByRssState = namedtuple("ScaleByRssState", ["sum_of_squares"])
ScaleByScheduleState = namedtuple("ScaleByScheduleState", ["count"])
TraceState = namedtuple("TraceState", ["trace", "count"])
# States of the fused optimizers (fused=True) that the chains do not have.
FusedAdagradState = namedtuple("FusedAdagradState", ["sum_of_squares", "count"])
RMSPropState = namedtuple("RMSPropState", ["nu"])
CenteredRMSPropState = namedtuple("CenteredRMSPropState", ["nu", "mu"])
MomentumRMSPropState = namedtuple("MomentumRMSPropState", ["nu", "trace"])
CenteredMomentumRMSPropState = namedtuple("CenteredMomentumRMSPropState",
                                          ["nu", "mu", "trace"])
# The inner state of `masked` covers only the selected leaves: its
# per-parameter fields are tuples over those leaves, in leaf order.
MaskedState = namedtuple("MaskedState", ["inner_state"])

_STATE_TYPES = {
    cls.__name__: cls
    for cls in (EmptyState, ScaleByAdamState, ScaleByAmsgradState, ScaleByAdamaxState,
                ScaleByRAdamState, ScaleByAdadeltaState, ScaleByRmsState,
                ScaleByStddevState, ScaleByRssState, ScaleByScheduleState,
                TraceState, MaskedState, FusedAdagradState, RMSPropState,
                CenteredRMSPropState, MomentumRMSPropState,
                CenteredMomentumRMSPropState)
}

_STATE_TYPES[UninitializedState.__name__] = UninitializedState


def _allow_in_weights_only_load():
    """torch >= 2.6 loads with ``weights_only=True`` by default, which
    unpickles only allowlisted types: a state saved with ``torch.save``
    loads back with a plain ``torch.load`` once its types are on the list.
    They are plain namedtuples of tensors (no code runs when loading them)."""
    import torch
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None:  # torch >= 2.4
        add_safe_globals(list(_STATE_TYPES.values()))


_allow_in_weights_only_load()


def from_raw(raw, spec):
    """C++ record (name, fields, children) -> namedtuple (or tuple for chains).

    ``spec`` is the TreeSpec of the parameters; None means "keep flat"
    (used below ``masked``, whose inner leaves are a subset).
    """
    name, fields, children = raw
    if name == "ChainState":
        return tuple(from_raw(child, spec) for child in children)
    if name == "MaskedState":
        return MaskedState(from_raw(children[0], None))
    cls = _STATE_TYPES[name]
    values = {}
    for field, tensors, per_param in fields:
        if not per_param:
            values[field] = tensors[0]
        elif spec is None:
            values[field] = tuple(tensors)
        else:
            values[field] = _tree.unflatten(spec, tensors)
    return cls(**values)


def select_raw(raw, indices):
    """The state restricted to the parameter leaves ``indices``."""
    name, fields, children = raw
    if name == "MaskedState":
        raise ValueError("a gradient that is None is not supported below "
                         "`masked` (its state covers a subset of the leaves); "
                         "pass zeros instead")
    fields = [(f, [t[j] for j in indices] if per_param else t, per_param)
              for f, t, per_param in fields]
    return (name, fields, [select_raw(c, indices) for c in children])


def scatter_raw(full, sub, indices):
    """``full`` with the leaves ``indices`` replaced by those of ``sub``."""
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
            [scatter_raw(c, s, indices) for c, s in zip(children, sub[2])])


def to_raw(state, spec):
    """The inverse of from_raw; checks each per-parameter field against spec."""
    if isinstance(state, tuple) and not hasattr(state, "_fields"):
        return ("ChainState", [], [to_raw(part, spec) for part in state])
    name = type(state).__name__
    if _STATE_TYPES.get(name) is not type(state):
        raise TypeError(
            f"optimizer state must be a state created by this optimizer's "
            f"init(), got {type(state).__name__}")
    if isinstance(state, MaskedState):
        return ("MaskedState", [], [to_raw(state.inner_state, None)])
    fields = []
    for field in state._fields:
        value = getattr(state, field)
        if field in _SCALAR_FIELDS:
            fields.append((field, [value], False))
        elif spec is None:
            fields.append((field, list(value), True))
        else:
            try:
                leaves = _tree.flatten_as(spec, value)
            except (ValueError, TypeError) as exc:
                raise ValueError(
                    f"optimizer state field {name}.{field} does not have the "
                    f"structure of the updates: {exc}") from None
            fields.append((field, list(leaves), True))
    return (name, fields, [])

