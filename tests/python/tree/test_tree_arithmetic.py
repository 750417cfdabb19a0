"""add, sub, scalar_mul, vdot over matching trees of tensors: values and
gradients (they must be differentiable for meta-learning)."""

import torch

from metafuse import tree as mt


def params(seed):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(3, 2, generator=g, dtype=torch.float64),
            "b": [torch.randn(2, generator=g, dtype=torch.float64)]}


def test_values():
    a, b = params(0), params(1)
    s = mt.add(a, b, 0.5)
    torch.testing.assert_close(s["w"], a["w"] + 0.5 * b["w"])
    d = mt.sub(a, b)
    torch.testing.assert_close(d["b"][0], a["b"][0] - b["b"][0])
    m = mt.scalar_mul(3, a)
    torch.testing.assert_close(m["w"], 3 * a["w"])
    v = mt.vdot(a, b)
    torch.testing.assert_close(v, (a["w"] * b["w"]).sum() + (a["b"][0] * b["b"][0]).sum())
    assert mt.vdot([], []).item() == 0


def test_tensor_scalars_are_differentiable():
    a, b = params(2), params(3)
    lr = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    for leaf in mt.leaves(a):
        leaf.requires_grad_(True)
    updated = mt.sub(a, b, lr)
    loss = mt.vdot(updated, updated)
    loss.backward()
    expected = -2 * sum((u * g).sum() for u, g in zip(mt.leaves(updated), mt.leaves(b)))
    torch.testing.assert_close(lr.grad, expected.detach())
    torch.testing.assert_close(a["w"].grad, 2 * updated["w"].detach())
    scaled = mt.scalar_mul(lr, b)
    torch.testing.assert_close(scaled["w"], lr.detach() * b["w"])
