"""Utilities for meta-learning loops: snapshot and restore module or
optimizer state, cut the graph, clone modules."""

import copy
from collections import OrderedDict, namedtuple

import torch

from metafuse import tree as _tree
from metafuse.optim.meta import MetaOptimizer

ModuleState = namedtuple("ModuleState", ["params", "buffers"])

_MODES = ("reference", "copy", "deepcopy")


def _replicate(t, by):
    if t is None or by == "reference":
        return t
    if by == "copy":
        return t.clone()  # keeps the graph to `t`
    return t.detach().clone().requires_grad_(t.requires_grad)


def _check_by(by):
    if by not in _MODES:
        raise ValueError(f"`by` must be one of {_MODES}, got {by!r}")


def extract_state_dict(target, *, by="reference", with_buffers=True,
                       detach_buffers=False):
    """A snapshot of an nn.Module's parameters (and buffers) as a
    ModuleState of OrderedDicts, or of a MetaOptimizer's state.

    by='reference' keeps the tensors themselves (and their graph), 'copy'
    clones them (graph kept), 'deepcopy' clones them detached.
    """
    _check_by(by)
    if isinstance(target, MetaOptimizer):
        return _tree.map(lambda t: _replicate(t, by), target.state)
    if not isinstance(target, torch.nn.Module):
        raise TypeError("extract_state_dict: `target` must be an nn.Module or "
                        f"a MetaOptimizer, got {type(target).__name__}")
    params = OrderedDict(
        (name, _replicate(p, by))
        for name, p in _named_slots(target, "_parameters"))
    buffers = OrderedDict()
    if with_buffers:
        for name, b in _named_slots(target, "_buffers"):
            b = _replicate(b, by)
            if detach_buffers and b is not None:
                b = b.detach()
            buffers[name] = b
    return ModuleState(params, buffers)


def recover_state_dict(target, state):
    """Writes a snapshot from extract_state_dict back into ``target``."""
    if isinstance(target, MetaOptimizer):
        target.load_state_dict(state)
        return
    if not isinstance(target, torch.nn.Module) or not isinstance(state, ModuleState):
        raise TypeError("recover_state_dict: expected (nn.Module, ModuleState) "
                        "or (MetaOptimizer, its state)")
    for kind, values in (("_parameters", state.params), ("_buffers", state.buffers)):
        for name, value in values.items():
            owner_path, _, attr = name.rpartition(".")
            owner = target.get_submodule(owner_path) if owner_path else target
            if attr not in getattr(owner, kind):
                raise KeyError(f"recover_state_dict: the module has no "
                               f"{kind[1:-1]} named {name!r}")
            getattr(owner, kind)[attr] = value


def stop_gradient(target):
    """Cuts the graph behind a module's parameters or an optimizer's state,
    in place: later backward passes stop there."""
    if isinstance(target, MetaOptimizer):
        tensors = [t for t in _tree.leaves(target.state)
                   if isinstance(t, torch.Tensor)]
    elif isinstance(target, torch.nn.Module):
        tensors = [p for _, p in _named_slots(target, "_parameters")]
    elif isinstance(target, ModuleState):
        tensors = [t for t in list(target.params.values())
                   + list(target.buffers.values()) if t is not None]
    else:
        tensors = [t for t in _tree.leaves(target) if isinstance(t, torch.Tensor)]
    with torch.no_grad():
        for t in tensors:
            requires_grad = t.requires_grad
            t.detach_().requires_grad_(requires_grad)


def module_clone(target, *, by="reference", detach_buffers=False):
    """A copy of an nn.Module whose parameters and buffers are the originals
    (by='reference'), clones that keep the graph ('copy'), or detached clones
    ('deepcopy'). Works on modules whose parameters are non-leaf tensors
    produced by a MetaOptimizer, which copy.deepcopy alone rejects."""
    _check_by(by)
    if not isinstance(target, torch.nn.Module):
        raise TypeError("module_clone: `target` must be an nn.Module, got "
                        f"{type(target).__name__}")
    memo = {}
    for _, p in _named_slots(target, "_parameters"):
        if p is not None:
            memo[id(p)] = _replicate(p, by)
    for _, b in _named_slots(target, "_buffers"):
        if b is not None:
            clone = _replicate(b, by)
            memo[id(b)] = clone.detach() if detach_buffers else clone
    return copy.deepcopy(target, memo)


def _named_slots(module, kind):
    """(qualified name, tensor) for every entry of every submodule's
    ``_parameters`` or ``_buffers`` dict, including non-Parameter tensors
    written there by a MetaOptimizer."""
    for prefix, sub in module.named_modules():
        for attr, value in getattr(sub, kind).items():
            yield (f"{prefix}.{attr}" if prefix else attr), value


_NAME_PARTS = {}  # "layer.0.weight" -> (("layer", "0"), "weight")


def functional_call(module, params, *args, **kwargs):
    """Calls ``module(*args, **kwargs)`` with its parameters replaced by the
    tensors in ``params`` (a dict: qualified name -> tensor), then restores
    them. Unlike torch's stateless API it is traceable, so loss functions
    written with it compile (metafuse.compile_inner_loop)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"functional_call: `module` must be an nn.Module, got "
                        f"{type(module).__name__}")
    slots = []
    for name, value in params.items():
        parts = _NAME_PARTS.get(name)
        if parts is None:
            owner_path, _, attr = name.rpartition(".")
            parts = _NAME_PARTS[name] = (tuple(owner_path.split(".")) if owner_path else (),
                                         attr)
        path, attr = parts
        try:  # the submodule dicts directly: this runs once per parameter per call
            owner = module
            for part in path:
                owner = owner._modules[part]
            if owner is None:
                raise KeyError(name)
        except (KeyError, AttributeError):
            owner = module.get_submodule(".".join(path))  # its error names the path
        if attr not in owner._parameters:
            raise KeyError(f"functional_call: the module has no parameter {name!r}")
        slots.append((owner, attr, owner._parameters[attr]))
        owner._parameters[attr] = value
    try:
        return module(*args, **kwargs)
    finally:
        for owner, attr, original in slots:
            owner._parameters[attr] = original
