"""Modules for meta-learning (TorchOpt's ``torchopt.nn``)."""

from metafuse.diff.implicit.module import ImplicitMetaGradientModule
from metafuse.diff.zero_order import ZeroOrderGradientModule
from metafuse.nn.module import MetaGradientModule
from metafuse.nn.stateless import reparameterize, reparametrize, swap_state

__all__ = ["MetaGradientModule", "ImplicitMetaGradientModule",
           "ZeroOrderGradientModule", "reparametrize", "reparameterize",
           "swap_state"]
