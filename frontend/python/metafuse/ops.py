"""Python entry points of metafuse's fused operators (torch.ops.metafuse.*)."""

import torch

from metafuse import _C  # noqa: F401  (registers torch.ops.metafuse)


def ema_update(moment: torch.Tensor, update: torch.Tensor, decay: float,
               order: int = 1) -> torch.Tensor:
    """Fused exponential moving average of ``update**order``.

    Returns ``decay * moment + (1 - decay) * update**order`` in one pass over
    memory. ``order`` is 1 for a first moment (Adam's mu) and 2 for a second
    moment (Adam's nu). Differentiable to any order with respect to ``moment``
    and ``update``: the backward is the exact closed form.
    """
    if not isinstance(moment, torch.Tensor):
        raise TypeError(f"ema_update: `moment` must be a torch.Tensor, got "
                        f"{type(moment).__name__}")
    if not isinstance(update, torch.Tensor):
        raise TypeError(f"ema_update: `update` must be a torch.Tensor, got "
                        f"{type(update).__name__}")
    return torch.ops.metafuse.ema_update(moment, update, float(decay),
                                         int(order))
