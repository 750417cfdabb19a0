"""Step counts under functorch transforms (``functorch.vmap``, ``grad``).

Why this exists: the C++ transforms read the step count on the host (bias
correction, schedules, momentum's first step), which is what keeps the normal
path free of device synchronizations. Under ``functorch.vmap`` the count is a
batched tensor and reading it is refused. An ensemble trained with vmap (a
vmapped ``init``, then vmapped ``update`` steps) keeps one count shared by
every member, so the C++ core gets that shared value as a plain count, and the
caller's count is advanced with tensor ops, which keeps it batched in the
returned state. Members with different counts cannot share one host value:
that is an error, never a silently wrong bias correction.

Outside functorch transforms nothing here runs (one cheap check per update).
"""

import torch

_functorch = getattr(torch._C, "_functorch", None)
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active",
                             None)


def _active():
    return _functorch is not None and _transforms_active is not None \
        and _transforms_active()


def _underlying(t):
    """The plain tensor below every functorch wrapper of ``t`` (it holds the
    values of all the members of every vmap level)."""
    while _functorch.is_functorch_wrapped_tensor(t):
        t = _functorch.get_unwrapped(t)
    return t


def to_host(raw):
    """``raw`` with each functorch-wrapped count replaced by a plain count of
    the same value, and what was replaced: one entry per count, in the
    record's order, None where the count was plain (None overall: nothing
    was replaced).

    ``raw`` is a C++ state record ``(name, fields, children)``.
    """
    if not _active():
        return raw, None
    replaced = []
    raw = _replace(raw, replaced)
    if all(entry is None for entry in replaced):
        return raw, None
    return raw, replaced


def _replace(raw, replaced):
    name, fields, children = raw
    out_fields = []
    for field, tensors, per_param in fields:
        if not per_param:  # the count
            if _functorch.is_functorch_wrapped_tensor(tensors[0]):
                host = _shared_value(name, field, tensors[0])
                replaced.append((tensors[0], host))
                tensors = [torch.tensor(host, dtype=torch.int64)]
            else:
                replaced.append(None)
        out_fields.append((field, tensors, per_param))
    return (name, out_fields, [_replace(c, replaced) for c in children])


def _shared_value(state_name, field, count):
    values = _underlying(count).detach()
    low, high = int(values.min()), int(values.max())
    if low != high:
        raise ValueError(
            f"optimizer state {state_name}.{field} differs across the "
            f"functorch.vmap batch (from {low} to {high}); metafuse's "
            "transforms take one step count per update: step the batch's "
            "states together (vmap init and update) or loop over them")
    return low


def restore(new_raw, replaced, inplace):
    """The state returned by C++ with each plain count put back as the
    caller's (batched) count, advanced by as many steps as C++ advanced it.
    C++ returns a record of the same layout, so the counts come in the same
    order as in ``to_host``."""
    return _restore(new_raw, iter(replaced), inplace)


def _restore(raw, it, inplace):
    name, fields, children = raw
    out_fields = []
    for field, tensors, per_param in fields:
        if not per_param:
            tensors = _put_back(tensors, next(it), inplace)
        out_fields.append((field, tensors, per_param))
    return (name, out_fields, [_restore(c, it, inplace) for c in children])


def _put_back(tensors, entry, inplace):
    if entry is None:  # a count that was plain on the way in
        return tensors
    original, host = entry
    steps = int(tensors[0]) - host
    if inplace and not torch._debug_has_internal_overlap(_underlying(original)):
        return [original.add_(steps)]
    # Out of place; also for inplace=True when the count is the expanded view
    # that vmap returns for a count every member shares (one element seen by
    # all: it cannot be written). The returned state carries the new count,
    # as TorchOpt's does (TorchOpt never writes the count in place).
    return [original + steps]


def explain_unbatchable(exc):
    """Re-raises functorch's refusal to batch an operator as an error that
    names the option to change; returns for any other error."""
    message = str(exc)
    if "Batching rule not implemented for metafuse::" in message:
        raise RuntimeError(
            "fused=True (use_accelerated_op=True) runs metafuse's multi-tensor "
            "kernels, which functorch.vmap cannot batch; under vmap use "
            "fused=False (the same numbers)") from exc
    if "fallback path doesn't work on out=" in message:
        # amsgrad's and adamax's running maxima are written with out= ops.
        raise RuntimeError(
            "update(..., inplace=True) writes this optimizer's state with "
            "out= operators, which functorch.vmap cannot batch; under vmap "
            "use inplace=False (the state passed in may be partly updated)"
        ) from exc
