"""Checks the batched-compilation tests share."""

import torch


def assert_same_losses_and_meta_gradients(losses, expected, params, rtol=1e-10, atol=1e-12):
    """Per-task losses and the meta-gradient of their sum with respect to
    ``params`` (a dict) equal the reference's (float64 tolerances)."""
    torch.testing.assert_close(losses, expected, rtol=rtol, atol=atol)
    for got, want in zip(torch.autograd.grad(losses.sum(), list(params.values())),
                         torch.autograd.grad(expected.sum(), list(params.values()))):
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
