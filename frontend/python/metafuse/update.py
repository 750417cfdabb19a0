"""Applying updates (TorchOpt's ``torchopt.update``)."""

from metafuse.base import apply_updates

__all__ = ["apply_updates"]
