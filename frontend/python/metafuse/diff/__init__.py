"""Differentiation modes beyond unrolling: implicit (through optimality
conditions) and zero-order (evolution strategies)."""

from metafuse.diff import implicit, zero_order
from metafuse.diff.implicit import ImplicitMetaGradientModule
from metafuse.diff.zero_order import ZeroOrderGradientModule

__all__ = ["implicit", "zero_order", "ZeroOrderGradientModule",
           "ImplicitMetaGradientModule"]
