"""torch's GRU and LSTM cells compile (compiler/split_chunks.h makes their
chunked, in-place gate arithmetic functional): values and gradients equal
eager's in float64, and a GRU-cell policy adapted inside metafuse.vmap gives
the per-task loop's meta-gradient."""

import warnings

import pytest
import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

from meta_checks import assert_same_losses_and_meta_gradients

F64 = torch.float64


def strict():
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error", CompilationFallbackWarning)
    return ctx


@pytest.mark.parametrize("cell_type", [torch.nn.GRUCell, torch.nn.LSTMCell, torch.nn.RNNCell],
                         ids=lambda c: c.__name__)
def test_a_cell_compiles_and_equals_eager(cell_type):
    torch.manual_seed(0)
    cell = cell_type(3, 4).to(F64)
    params = {k: v.detach().clone().requires_grad_() for k, v in cell.named_parameters()}
    g = torch.Generator().manual_seed(1)
    xs, h0 = torch.randn(5, 2, 3, generator=g, dtype=F64), torch.randn(2, 4, generator=g, dtype=F64)

    def unroll(p, xs, h):
        state = (h, h) if cell_type is torch.nn.LSTMCell else h
        total = 0.0
        for t in range(xs.shape[0]):  # (iterating a tensor is not an exact trace)
            state = mf.functional_call(cell, p, xs[t], state)
            out = state[0] if cell_type is torch.nn.LSTMCell else state
            total = total + out.square().sum()
        return total

    ctx = strict()
    out = mf.compile(unroll)(params, xs, h0)
    ctx.__exit__(None, None, None)
    expected = unroll(params, xs, h0)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    for a, b in zip(torch.autograd.grad(out, list(params.values())),
                    torch.autograd.grad(expected, list(params.values()))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_a_gru_cell_policy_adapts_inside_vmap():
    torch.manual_seed(0)
    net = torch.nn.ModuleDict({"cell": torch.nn.GRUCell(3, 6), "head": torch.nn.Linear(6, 2)})
    net = net.to(F64)
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}

    def loss_fn(p, xs, ys):  # xs [steps, batch, 3], ys [steps, batch, 2]
        h = torch.zeros(xs.shape[1], 6, dtype=F64)
        total = 0.0
        for t in range(xs.shape[0]):
            h = mf.functional_call(net.cell, {k[5:]: v for k, v in p.items()
                                              if k.startswith("cell.")}, xs[t], h)
            pred = mf.functional_call(net.head, {k[5:]: v for k, v in p.items()
                                                 if k.startswith("head.")}, h)
            total = total + torch.nn.functional.huber_loss(pred, ys[t])
        return total

    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.3), steps=2)
    g = torch.Generator().manual_seed(2)
    xs = torch.randn(3, 4, 2, 3, generator=g, dtype=F64)
    ys = torch.randn(3, 4, 2, 2, generator=g, dtype=F64)
    ctx = strict()
    losses = mf.vmap(lambda p, a, b: loss_fn(adapt(p, a, b), a, b),
                     in_dims=(None, 0, 0))(params, xs, ys)
    ctx.__exit__(None, None, None)
    expected = torch.stack([loss_fn(adapt._eager(params, (xs[t], ys[t])), xs[t], ys[t])
                            for t in range(3)])
    assert_same_losses_and_meta_gradients(losses, expected, params)
