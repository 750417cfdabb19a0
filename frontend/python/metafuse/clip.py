"""Gradient clipping (TorchOpt's ``torchopt.clip``)."""

from metafuse.transform import clip_grad_norm

__all__ = ["clip_grad_norm"]
