"""TorchOpt's ``torchopt.diff.zero_order.nn``."""

from metafuse.diff.zero_order_impl import ZeroOrderGradientModule

__all__ = ["ZeroOrderGradientModule"]
