"""torch's recurrent cells and layers compile: the cells because
compiler/decompose/split_chunks.h makes their chunked, in-place gate arithmetic
functional, the nn.RNN / GRU / LSTM layers by compiler/decompose/decompose_recurrent.cc.
Values and gradients equal eager's in float64; recurrent policies adapted
inside metafuse.vmap give the per-task loop's meta-gradient."""

import warnings

import pytest
import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

from meta_checks import assert_same_losses_and_meta_gradients

# The fused and the unfused compiled program, each (compiler/conftest.py).
pytestmark = pytest.mark.usefixtures("program")

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
    assert_same_losses_and_meta_gradients(out, unroll(params, xs, h0), params)


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


LAYERS = [(torch.nn.GRU, {"batch_first": True}), (torch.nn.LSTM, {"num_layers": 2}),
          (torch.nn.RNN, {"nonlinearity": "relu", "bias": False}),
          (torch.nn.LSTM, {"batch_first": True, "bias": False})]


@pytest.mark.parametrize("layer, options", LAYERS,
                         ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_a_recurrent_layer_compiles_and_equals_eager(layer, options):
    torch.manual_seed(0)
    net = layer(3, 4, **options).to(F64)
    params = {k: (1.3 * v).detach().requires_grad_() for k, v in net.named_parameters()}
    x = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(1), dtype=F64)

    def loss(p, x):
        out, state = mf.functional_call(net, p, x)
        states = state if isinstance(state, tuple) else (state,)
        return out.square().sum() + sum(s.sin().sum() for s in states)

    ctx = strict()
    out = mf.compile(loss)(params, x)
    ctx.__exit__(None, None, None)
    assert_same_losses_and_meta_gradients(out, loss(params, x), params)


def test_a_gru_layer_policy_adapts_inside_vmap():
    torch.manual_seed(0)
    net = torch.nn.ModuleDict({"rnn": torch.nn.GRU(3, 6, batch_first=True),
                               "head": torch.nn.Linear(6, 2)}).to(F64)
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}

    def loss_fn(p, xs, ys):  # xs [batch, steps, 3], ys [batch, steps, 2]
        out, _ = mf.functional_call(net.rnn, {k[4:]: v for k, v in p.items()
                                              if k.startswith("rnn.")}, xs)
        pred = mf.functional_call(net.head, {k[5:]: v for k, v in p.items()
                                             if k.startswith("head.")}, out)
        return torch.nn.functional.mse_loss(pred, ys)

    adapt = mf.compile_inner_loop(loss_fn, mf.adam(0.05, eps_root=1e-10), steps=2)
    g = torch.Generator().manual_seed(2)
    xs = torch.randn(3, 2, 4, 3, generator=g, dtype=F64)
    ys = torch.randn(3, 2, 4, 2, generator=g, dtype=F64)
    batched = mf.vmap(lambda p, a, b: loss_fn(adapt(p, a, b), a, b), in_dims=(None, 0, 0))
    # torch 1.13's functorch has no batching rule for aten::gru: one warning,
    # then the function compiled for one task, task after task.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = batched(params, xs, ys)
    messages = [str(w.message) for w in caught
                if issubclass(w.category, CompilationFallbackWarning)]
    assert len(messages) == 1 and "each compiled for one task" in messages[0], messages
    assert sum(f.compile_count for f in batched._task_programs.values()) == 1
    expected = torch.stack([loss_fn(adapt._eager(params, (xs[t], ys[t])), xs[t], ys[t])
                            for t in range(3)])
    assert_same_losses_and_meta_gradients(losses, expected, params)


def test_a_bidirectional_layer_falls_back_naming_the_reason():
    net = torch.nn.GRU(3, 4, bidirectional=True).to(F64)
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    x = torch.randn(5, 2, 3, dtype=F64)
    fn = lambda p, x: mf.functional_call(net, p, x)[0].sum()  # noqa: E731
    with pytest.warns(CompilationFallbackWarning, match="bidirectional layers are not compiled"):
        out = mf.compile(fn)(params, x)
    torch.testing.assert_close(out, fn(params, x), rtol=0, atol=0)
