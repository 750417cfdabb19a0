"""Swapping a module's tensors for others (TorchOpt's
``torchopt.nn.stateless``): call a module with parameters that are not its
own, e.g. the adapted parameters of a functional inner loop."""

import contextlib

import torch

__all__ = ["swap_state", "reparametrize", "reparameterize"]

_MISSING = object()


def swap_state(module, named_tensors, allow_missing=False):
    """Puts each ``name -> tensor`` of ``named_tensors`` (a dict or pairs;
    names are dotted paths such as ``"0.weight"``) into ``module`` in place of
    the parameter, buffer, meta-parameter or attribute of that name; returns
    the dict of what was there. With ``allow_missing`` a name the module does
    not have is added (and reported as missing, so swapping back removes it)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"swap_state: `module` must be an nn.Module, got "
                        f"{type(module).__name__}")
    if not isinstance(named_tensors, dict):
        named_tensors = dict(named_tensors)

    def owner_of(path):
        owner = module
        for part in path.split(".") if path else ():
            owner = getattr(owner, part)
        return owner

    def swap(name, value):
        if not isinstance(name, str):
            raise TypeError(f"swap_state: names must be strings, got {name!r}")
        prefix, _, attr = name.rpartition(".")
        owner = owner_of(prefix)
        if allow_missing:
            original = getattr(owner, attr, _MISSING)
        elif not hasattr(owner, attr):
            raise AttributeError(f"swap_state: the module has no tensor named "
                                 f"{name!r} (pass allow_missing=True to add it)")
        else:
            original = getattr(owner, attr)
        if value is _MISSING:
            delattr(owner, attr)
            return original
        for slot in ("_parameters", "_buffers", "_meta_parameters"):
            container = owner.__dict__.get(slot)
            if container is not None and attr in container:
                container[attr] = value
                return original
        setattr(owner, attr, value)
        return original

    return {name: swap(name, tensor) for name, tensor in named_tensors.items()}


@contextlib.contextmanager
def reparametrize(module, named_tensors, allow_missing=False):
    """Context manager: :func:`swap_state` on entry (yields the module),
    swapped back on exit, also on an exception."""
    if not isinstance(named_tensors, dict):
        named_tensors = dict(named_tensors)
    originals = {}
    try:
        originals = swap_state(module, named_tensors, allow_missing=allow_missing)
        yield module
    finally:
        swap_state(module, originals, allow_missing=allow_missing)


reparameterize = reparametrize
