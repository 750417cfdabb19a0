"""TorchOpt's ``torchopt.nn.module``: :class:`MetaGradientModule` (defined
in metafuse._meta_module, which metafuse.diff imports without this
package)."""

from metafuse._meta_module import MetaGradientModule

__all__ = ["MetaGradientModule"]
