"""TorchOpt's ``torchopt.diff.implicit.nn``."""

from metafuse.diff.implicit.module import ImplicitMetaGradientModule

__all__ = ["ImplicitMetaGradientModule"]
