"""Gradient hooks as transformations: they act on the gradient that flows
back through the updates during a meta-backward pass."""

import torch

from metafuse import _C
from metafuse.base import GradientTransformation

_core = _C._optim


def zero_nan_hook(g):
    """Replaces NaN entries of a gradient by zeros."""
    return torch.where(torch.isnan(g), torch.zeros_like(g), g)


def nan_to_num_hook(nan=0.0, posinf=None, neginf=None):
    """A hook replacing NaN and infinities (torch.nan_to_num)."""
    def hook(grad):
        return torch.nan_to_num(grad, nan=nan, posinf=posinf, neginf=neginf)
    return hook


def register_hook(hook):
    """A transformation that registers ``hook`` on every update tensor that
    requires grad; the updates themselves pass through unchanged."""
    if not callable(hook):
        raise TypeError(f"register_hook: `hook` must be callable, got "
                        f"{type(hook).__name__}")
    name = getattr(hook, "__name__", type(hook).__name__)
    return GradientTransformation(_core.register_hook(hook, name))


__all__ = ["zero_nan_hook", "nan_to_num_hook", "register_hook"]
