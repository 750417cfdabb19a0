"""The fused optimizer ops against plain-autograd references: values,
gradcheck and gradgradcheck in float64 for every option combination."""

import pytest
import torch

import kernels_reference as ref
from kernels_cases import case_id, cases, make_inputs

import metafuse  # noqa: F401  (registers torch.ops.metafuse)

CASES = cases()
IDS = [f"{name}-{case_id(c)}" for name, c in CASES]


def op(name):
    return getattr(torch.ops.metafuse, name)


def present(xs):
    return [x for x in xs if x is not None]


@pytest.mark.parametrize("name, cfg", CASES, ids=IDS)
def test_values_match_reference(name, cfg):
    args = make_inputs(name, cfg, 37)
    out = op(name)(*args, **cfg)
    expected = getattr(ref, name)(*args, **cfg)
    assert len(out) == len(expected)
    for a, b in zip(out, expected):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def _differentiable(name, cfg, n=4, seed=1):
    """(fn, inputs): fn maps the present tensors to the op's present outputs."""
    args = make_inputs(name, cfg, n, seed=seed)
    slots = [i for i, a in enumerate(args) if a is not None]
    inputs = [args[i].clone().requires_grad_() for i in slots]

    def fn(*xs):
        full = list(args)
        for i, x in zip(slots, xs):
            full[i] = x
        return tuple(present(op(name)(*full, **cfg)))

    return fn, inputs


@pytest.mark.parametrize("name, cfg", CASES, ids=IDS)
def test_gradcheck(name, cfg):
    fn, inputs = _differentiable(name, cfg)
    assert torch.autograd.gradcheck(fn, inputs)


@pytest.mark.parametrize("name, cfg", CASES, ids=IDS)
def test_gradgradcheck(name, cfg):
    fn, inputs = _differentiable(name, cfg)
    assert torch.autograd.gradgradcheck(fn, inputs)


@pytest.mark.parametrize("name, cfg", CASES, ids=IDS)
def test_backward_equals_autograd_of_reference(name, cfg):
    """First and second derivatives against the reference, not just finite
    differences: exact up to rounding."""
    args = make_inputs(name, cfg, 9, seed=2)
    slots = [i for i, a in enumerate(args) if a is not None]

    def grads(impl):
        xs = [args[i].clone().requires_grad_() for i in slots]
        full = list(args)
        for i, x in zip(slots, xs):
            full[i] = x
        outs = present(impl(*full, **cfg))
        w = torch.Generator().manual_seed(3)
        loss = sum((o * torch.randn(o.shape, dtype=o.dtype, generator=w)).sum()
                   for o in outs)
        first = torch.autograd.grad(loss, xs, create_graph=True,
                                    allow_unused=True)
        first = [f if f is not None else torch.zeros_like(x)
                 for f, x in zip(first, xs)]
        total = sum((f * f).sum() for f in first)
        if not total.requires_grad:  # linear in every input (plain SGD)
            return first, [torch.zeros_like(x) for x in xs]
        second = torch.autograd.grad(total, xs, allow_unused=True)
        second = [s if s is not None else torch.zeros_like(x)
                  for s, x in zip(second, xs)]
        return first, second

    f1, s1 = grads(op(name))
    f2, s2 = grads(getattr(ref, name))
    for a, b in zip(f1 + s1, f2 + s2):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name, cfg", CASES, ids=IDS)
def test_fused_first_order_backward_equals_differentiable_one(name, cfg):
    """First-order backward without a graph runs fused (one kernel); with
    create_graph=True the ATen closed form runs. Same numbers, every option."""
    args = make_inputs(name, cfg, 41, seed=4)
    slots = [i for i, a in enumerate(args) if a is not None]
    xs = [args[i].clone().requires_grad_() for i in slots]
    full = list(args)
    for i, x in zip(slots, xs):
        full[i] = x
    outs = present(op(name)(*full, **cfg))
    w = torch.Generator().manual_seed(5)
    loss = sum((o * torch.randn(o.shape, dtype=o.dtype, generator=w)).sum()
               for o in outs)
    fused = torch.autograd.grad(loss, xs, retain_graph=True, allow_unused=True)
    aten = torch.autograd.grad(loss, xs, create_graph=True, allow_unused=True)
    for a, b in zip(fused, aten):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b.detach(), rtol=1e-13, atol=1e-15)
