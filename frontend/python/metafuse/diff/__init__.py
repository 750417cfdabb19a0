"""Differentiation modes beyond unrolling: zero-order (evolution strategies)."""

from metafuse.diff.zero_order import ZeroOrderGradientModule, zero_order

__all__ = ["zero_order", "ZeroOrderGradientModule"]
