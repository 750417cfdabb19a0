"""The fusion cost check (metafuse._fusion_check): a guard's first call
times the specialized program against the generic one, each a call and its
backward, and keeps the faster (unless the generic one is not 1.1x faster);
either choice computes the eager results (float64, 1e-10); the check leaves
no trace: no gradient accumulated, the random generators as they were;
METAFUSE_FUSION_CHECK=0 turns it off and a bad value is named."""

import pytest
import torch

import metafuse as mf
from metafuse import _fusion_check

F64 = torch.float64


@pytest.fixture(autouse=True)
def check_on(monkeypatch):
    """The suite turns the check off (conftest.py); these tests are of it."""
    monkeypatch.setenv(_fusion_check.VARIABLE, "1")


def mlp_and_data():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(),
                              torch.nn.Linear(16, 1)).double()
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    x = torch.randn(10, 3, dtype=F64)
    return net, params, x, torch.sin(x.sum(1, keepdim=True))


def make(net):
    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)
    return loss_fn, mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=3)


def test_first_call_times_both_and_keeps_the_rule(monkeypatch):
    monkeypatch.delenv(_fusion_check.VARIABLE, raising=False)
    net, params, x, y = mlp_and_data()
    _, adapt = make(net)
    adapt(params, x, y)
    [record] = adapt.fusion_checks()
    assert record["fused_s"] > 0 and record["unfused_s"] > 0
    assert record["fusion"] == (not record["unfused_s"] * 1.1 < record["fused_s"])
    [program] = adapt.programs()
    assert program.fusion() == record["fusion"]
    adapt(params, x, y)  # the same guard: not checked again
    assert len(adapt.fusion_checks()) == 1


@pytest.mark.parametrize("margin", [0.0, 1e9])  # 0: always generic; 1e9: always fused
def test_either_choice_gives_the_eager_results(monkeypatch, margin):
    monkeypatch.delenv(_fusion_check.VARIABLE, raising=False)
    # The rule's decision, replaced: the generic program wins (margin 0) or
    # never does (margin 1e9).
    monkeypatch.setattr(_fusion_check._cost_timing, "beats_default",
                        lambda rival, default: rival * margin < default)
    net, params, x, y = mlp_and_data()
    loss_fn, adapt = make(net)
    fast = adapt(params, x, y)
    [record] = adapt.fusion_checks()
    assert record["fusion"] == (margin != 0.0)
    loss = loss_fn(fast, x, y)
    grads = torch.autograd.grad(loss, list(params.values()))
    eager = mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=3)
    eager_fast = eager._eager(params, (x, y))
    eager_loss = loss_fn(eager_fast, x, y)
    eager_grads = torch.autograd.grad(eager_loss, list(params.values()))
    assert abs(float(loss) - float(eager_loss)) < 1e-10
    for g, e in zip(grads, eager_grads):
        assert torch.allclose(g, e, rtol=1e-10, atol=1e-10)


def test_the_check_leaves_no_gradient_and_no_random_state(monkeypatch):
    monkeypatch.delenv(_fusion_check.VARIABLE, raising=False)
    net, params, x, y = mlp_and_data()

    @mf.compile
    def step(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)

    state = torch.get_rng_state()
    step(params, x, y)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(p.grad is None for p in params.values())
    assert len(step.fusion_checks()) == 1


def test_the_check_can_be_turned_off_and_a_bad_value_is_named(monkeypatch):
    net, params, x, y = mlp_and_data()
    monkeypatch.setenv(_fusion_check.VARIABLE, "0")
    _, adapt = make(net)
    adapt(params, x, y)
    assert adapt.fusion_checks() == []
    assert adapt.programs()[0].fusion()
    monkeypatch.setenv(_fusion_check.VARIABLE, "maybe")
    _, adapt = make(net)
    with pytest.raises(ValueError, match="METAFUSE_FUSION_CHECK must be 0 or 1, got 'maybe'"):
        adapt(params, x, y)
