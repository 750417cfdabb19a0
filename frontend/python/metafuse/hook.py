"""Gradient hooks as transformations: they act on the gradient that flows
back through the updates during a meta-backward pass."""

import torch

from metafuse import _C
from metafuse import tree as _tree
from metafuse.base import GradientTransformation
from metafuse.states import EmptyState

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
    """A stateless transformation that registers ``hook`` on every update
    tensor (``tensor.register_hook``); the updates pass through unchanged.
    The hook then acts on the gradient that flows back through the update.

    Args:
        hook: ``hook(grad) -> grad or None``, as for ``Tensor.register_hook``.

    Returns:
        A GradientTransformation (stateless).
    """
    if not callable(hook):
        raise TypeError(f"register_hook: `hook` must be callable, got "
                        f"{type(hook).__name__}")

    def init_fn(params):
        return EmptyState()

    def update_fn(updates, state, *, params=None, inplace=True):
        def register(t):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(hook)
        _tree.map_(register, updates)
        return updates, state

    return GradientTransformation(init_fn, update_fn)

__all__ = ["zero_nan_hook", "nan_to_num_hook", "register_hook"]
