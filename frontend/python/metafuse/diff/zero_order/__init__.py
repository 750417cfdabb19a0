"""Zero-order (evolution-strategies) gradients; see
``metafuse.diff.zero_order_impl``. As in TorchOpt the module itself is
callable: ``metafuse.diff.zero_order(distribution, ...)`` is the decorator
:func:`zero_order`."""

import sys as _sys
import types as _types

from metafuse.diff.zero_order_impl import ZeroOrderGradientModule, zero_order
from metafuse.diff.zero_order import nn  # noqa: F401

__all__ = ["zero_order", "ZeroOrderGradientModule"]


class _CallableModule(_types.ModuleType):
    def __call__(self, *args, **kwargs):
        return self.zero_order(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableModule
