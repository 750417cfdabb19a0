"""Combining transformations (TorchOpt's ``torchopt.combine``)."""

from metafuse.base import ChainedGradientTransformation, chain

__all__ = ["chain", "chain_flat"]


def chain_flat(*transformations):
    """TorchOpt's chain over the flattened leaves (a list). metafuse's
    transformations always work on flat leaf lists inside C++, so this is
    :func:`metafuse.chain`."""
    return chain(*transformations)


chain.flat = chain_flat  # TorchOpt: torchopt.chain.flat(...)

del ChainedGradientTransformation
