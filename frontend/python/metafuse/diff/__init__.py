"""Differentiation modes beyond unrolling: implicit (through optimality
conditions) and zero-order (evolution strategies)."""

from metafuse.diff import implicit
from metafuse.diff.zero_order import ZeroOrderGradientModule, zero_order

__all__ = ["implicit", "zero_order", "ZeroOrderGradientModule"]
