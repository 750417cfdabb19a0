"""Utilities for meta-learning loops: snapshot and restore module or
optimizer state, cut the graph, clone modules (TorchOpt's names, layouts and
copy modes)."""

import copy
from collections import OrderedDict, namedtuple

import torch

from metafuse import tree as _tree
from metafuse._recurrent_weights import sync_flat_weights
from metafuse.optim.meta import MetaOptimizer

class ModuleState(namedtuple("ModuleState", ["params", "buffers",
                                               "visual_contents",
                                               "detach_buffers"])):
    """A snapshot of a module (TorchOpt's layout): ``params`` and ``buffers``
    are tuples with one dict per submodule that has any (in ``modules()``
    order, each ``{attribute: tensor}`` of that submodule), ``visual_contents``
    maps graph nodes to parameter names for :func:`metafuse.visual.make_dot`
    (with ``enable_visual=True``), ``detach_buffers`` is recorded for
    :func:`recover_state_dict`."""

    __slots__ = ()

    def __new__(cls, params, buffers, visual_contents=None, detach_buffers=False):
        return super().__new__(cls, params, buffers, visual_contents,
                               detach_buffers)

    def named_params(self):
        """Not part of TorchOpt: an OrderedDict of the snapshot's tensors by
        their index path, for inspection."""
        return OrderedDict((f"{i}.{k}", v) for i, d in enumerate(self.params)
                           for k, v in d.items())


# TorchOpt accepts both spellings: 'ref' = 'reference', 'clone' = 'copy',
# 'deepclone' = 'deepcopy'.
_MODES = ("reference", "copy", "deepcopy", "ref", "clone", "deepclone")


def _normalize_by(by):
    if by not in _MODES:
        raise ValueError(f"`by` must be one of {_MODES}, got {by!r}")
    by = by.replace("clone", "copy")
    return "reference" if by == "ref" else by


def _replicator(by, device):
    """The function applied to each tensor for a copy mode and device."""
    move = (lambda t: t) if device is None else (
        lambda t, d=torch.device(device): t.to(device=d))

    def reference(t):
        return move(t)

    def copy_(t):  # keeps the graph to `t`
        return move(t.clone())

    def deepcopy(t):  # detached; a Parameter stays a Parameter
        out = move(t.clone()).detach_()
        if isinstance(t, torch.nn.Parameter):
            return torch.nn.Parameter(out, requires_grad=t.requires_grad)
        return out.requires_grad_(t.requires_grad)

    return {"reference": reference, "copy": copy_, "deepcopy": deepcopy}[by], deepcopy


def _containers(module, with_buffers=True):
    """The (params, buffers) dicts of every submodule that has any: the
    module's own containers, by reference."""
    params, buffers = [], []
    for sub in module.modules():  # each module once
        if sub._parameters:
            params.append(sub._parameters)
        if with_buffers and sub._buffers:
            buffers.append(sub._buffers)
    return tuple(params), tuple(buffers)


def extract_state_dict(target, *, by="reference", device=None,
                       with_buffers=True, detach_buffers=False,
                       enable_visual=False, visual_prefix=""):
    """A snapshot of an nn.Module's parameters (and buffers) as a
    :class:`ModuleState`, or of a MetaOptimizer's state (a tuple per group).

    Args:
        target: an nn.Module or a MetaOptimizer.
        by: ``'reference'`` (or ``'ref'``) keeps the tensors themselves (and
            their graph), ``'copy'`` (``'clone'``) clones them (graph kept),
            ``'deepcopy'`` (``'deepclone'``) clones them detached, Parameters
            staying Parameters.
        device: moves the copies there.
        with_buffers: include the module's buffers.
        detach_buffers: deep-copy the buffers whatever ``by`` is.
        enable_visual: record parameter names for
            :func:`metafuse.visual.make_dot`, prefixed with ``visual_prefix``.
        visual_prefix: see ``enable_visual``.

    Returns:
        A ModuleState for a module, a tuple of group states for a
        MetaOptimizer; :func:`recover_state_dict` writes it back.
    """
    by = _normalize_by(by)
    replicate, detached = _replicator(by, device)
    if isinstance(target, MetaOptimizer):
        return _tree.map(lambda t: replicate(t) if isinstance(t, torch.Tensor) else t,
                         target.state_dict())
    if not isinstance(target, torch.nn.Module):
        raise TypeError("extract_state_dict: `target` must be an nn.Module or "
                        f"a MetaOptimizer, got {type(target).__name__}")
    visual = None
    if enable_visual:
        visual = {}
        for name, p in target.named_parameters():
            if p.grad_fn is not None:
                visual[p.grad_fn] = (visual_prefix + name, p)
            else:
                visual[p] = visual_prefix + name
    params_c, buffers_c = _containers(target, with_buffers)
    params = tuple(type(c)((k, replicate(v)) for k, v in c.items()
                           if isinstance(v, torch.Tensor)) for c in params_c)
    buffer_fn = detached if detach_buffers else replicate
    buffers = tuple(type(c)((k, buffer_fn(v)) for k, v in c.items()
                            if isinstance(v, torch.Tensor)) for c in buffers_c)
    return ModuleState(params, buffers, visual, bool(detach_buffers))


def recover_state_dict(target, state):
    """Writes a snapshot from extract_state_dict back into ``target``.

    Args:
        target: the nn.Module or MetaOptimizer the snapshot was taken of.
        state: what :func:`extract_state_dict` returned.
    """
    if isinstance(target, MetaOptimizer):
        target.load_state_dict(state)
        return
    if not isinstance(target, torch.nn.Module) or not isinstance(state, ModuleState):
        raise TypeError("recover_state_dict: expected (nn.Module, ModuleState) "
                        "or (MetaOptimizer, its state)")
    params_c, buffers_c = _containers(target, True)
    buffers = state.buffers
    if state.detach_buffers:
        _, detached = _replicator("deepcopy", None)
        buffers = tuple(type(d)((k, detached(v)) for k, v in d.items())
                        for d in buffers)
    for kind, containers, values in (("parameter", params_c, state.params),
                                     ("buffer", buffers_c, buffers)):
        if len(values) > len(containers):
            raise ValueError(f"recover_state_dict: the snapshot has {kind}s of "
                             f"{len(values)} submodule(s), the module "
                             f"{len(containers)}")
        for container, saved in zip(containers, values):
            unknown = set(saved) - set(container)
            if unknown:
                raise KeyError(f"recover_state_dict: the module has no {kind} "
                               f"named {sorted(unknown)[0]!r} where the "
                               "snapshot has one")
            container.update(saved)
    sync_flat_weights(target.modules())


def _stop(tensors):
    with torch.no_grad():
        for t in tensors:
            if isinstance(t, torch.Tensor):
                requires_grad = t.requires_grad
                t.detach_().requires_grad_(requires_grad)


def stop_gradient(target):
    """Cuts the graph behind a module's parameters, an optimizer's state, a
    ModuleState or a tree of tensors, in place: later backward passes stop
    there.

    Args:
        target: an nn.Module, a MetaOptimizer, a ModuleState or a pytree of
            tensors.
    """
    if isinstance(target, MetaOptimizer):
        tensors = _tree.leaves(target.state_dict())
    elif isinstance(target, torch.nn.Module):
        tensors = list(target.parameters())  # skips None (bias=False)
    elif isinstance(target, ModuleState):
        tensors = _tree.leaves((target.params, target.buffers))
    else:
        tensors = _tree.leaves(target)
    _stop(tensors)


def module_detach_(target):
    """:func:`stop_gradient`, returning ``target``."""
    stop_gradient(target)
    return target


def module_clone(target, *, by="reference", detach_buffers=False, device=None):
    """A copy of an nn.Module (or a MetaOptimizer) whose tensors are the
    originals (by='reference'), clones that keep the graph ('copy') or
    detached clones ('deepcopy'); of a tree of tensors, the tree of copies.
    Works on modules whose parameters are non-leaf tensors produced by a
    MetaOptimizer, which copy.deepcopy alone rejects.

    Args:
        target: an nn.Module, a MetaOptimizer or a pytree of tensors.
        by: ``'reference'``, ``'copy'`` or ``'deepcopy'``, as for
            :func:`extract_state_dict`.
        detach_buffers: deep-copy the buffers whatever ``by`` is.
        device: moves the copies there.

    Returns:
        The copy.
    """
    by = _normalize_by(by)
    if isinstance(target, (torch.nn.Module, MetaOptimizer)):
        if isinstance(target, torch.nn.Module):
            tensors = _tree.leaves(_containers(target, True))
        else:
            tensors = _tree.leaves(target.state_dict())
        # The tensors are shared by the deepcopy, then replaced.
        clone = copy.deepcopy(target, {id(t): t for t in tensors})
        state = extract_state_dict(target, by=by, device=device,
                                   detach_buffers=detach_buffers)
        recover_state_dict(clone, state)
        return clone
    replicate, _ = _replicator(by, device)
    leaves = _tree.leaves(target)
    if not all(isinstance(t, torch.Tensor) for t in leaves):
        raise TypeError("module_clone: `target` must be an nn.Module, a "
                        "MetaOptimizer or a tree of tensors")
    return _tree.map(replicate, target)


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
    written with it compile (metafuse.compile_inner_loop).

    Args:
        module: the nn.Module to call.
        params: a dict from qualified parameter names to tensors; the
            module's parameters it does not name keep their values.
        *args: the module's positional arguments.
        **kwargs: its keyword arguments.

    Returns:
        What ``module(*args, **kwargs)`` returns.
    """
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
    recurrent = [owner for owner, _, _ in slots if "_flat_weights_names" in owner.__dict__]
    sync_flat_weights(recurrent)
    try:
        return module(*args, **kwargs)
    finally:
        for owner, attr, original in slots:
            owner._parameters[attr] = original
        sync_flat_weights(recurrent)


__all__ = ["ModuleState", "stop_gradient", "extract_state_dict",
           "recover_state_dict", "module_clone", "module_detach_",
           "functional_call"]
