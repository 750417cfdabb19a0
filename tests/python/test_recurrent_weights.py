"""nn.RNN / GRU / LSTM compute from a cached list of their weights: every
place that writes parameters behind nn.Module.__setattr__ keeps it in step
(metafuse._recurrent_weights), or the layer would silently compute with its
old weights (torch 1.13's own stateless.functional_call does)."""

import copy

import pytest
import torch

import metafuse as mf

F64 = torch.float64
LAYERS = [torch.nn.RNN, torch.nn.GRU, torch.nn.LSTM]


def reference_output(template, params, x):
    """A fresh copy of `template` (a layer whose weights are leaves) holding
    `params` as its own weights."""
    fresh = copy.deepcopy(template)
    with torch.no_grad():
        for name, value in params.items():
            fresh.get_parameter(name).copy_(value)
    return fresh(x)[0]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda c: c.__name__)
def test_functional_call_computes_with_the_given_weights(layer):
    torch.manual_seed(0)
    net = layer(3, 4, batch_first=True).to(F64)
    x = torch.randn(2, 5, 3, dtype=F64)
    params = {k: (1.5 * v).detach().requires_grad_() for k, v in net.named_parameters()}
    out = mf.functional_call(net, params, x)[0]
    torch.testing.assert_close(out, reference_output(net, params, x), rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad(out.square().sum(), list(params.values()))
    assert all(g.abs().sum() > 0 for g in grads)
    # ... and the module's own weights are back afterwards
    torch.testing.assert_close(net(x)[0], reference_output(net, dict(net.named_parameters()), x))


@pytest.mark.parametrize("layer", LAYERS, ids=lambda c: c.__name__)
def test_a_meta_optimizer_step_and_a_recovered_state_reach_the_layer(layer):
    torch.manual_seed(0)
    net = layer(3, 4).to(F64)
    template = copy.deepcopy(net)
    x = torch.randn(5, 2, 3, dtype=F64)
    initial = mf.extract_state_dict(net)
    before = net(x)[0].detach()
    optimizer = mf.MetaSGD(net, lr=0.5)
    optimizer.step(net(x)[0].square().sum())
    updated = dict(net.named_parameters())
    after = net(x)[0]
    assert not torch.allclose(after, before)
    torch.testing.assert_close(after, reference_output(template, updated, x), rtol=1e-12,
                               atol=1e-12)
    mf.recover_state_dict(net, initial)
    torch.testing.assert_close(net(x)[0].detach(), before, rtol=0, atol=0)
