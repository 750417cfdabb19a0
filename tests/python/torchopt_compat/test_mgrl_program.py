"""A meta-gradient RL program written against TorchOpt's API (the shape of
TorchOpt's MGRL example: a learned per-state discount, one differentiable
inner TD step with MetaSGD, an outer torch.optim-style SGD on the discount,
extract_state_dict / recover_state_dict around each episode), run under
`import metafuse as torchopt`."""

import torch
import torch.nn.functional as F

import metafuse as torchopt


def returns(rewards, discount):
    """Bootstrapped returns: r_t + discount_t * G_{t+1} (no gradient through G)."""
    out = [rewards[-1]]
    for t in reversed(range(len(rewards) - 1)):
        out.append(rewards[t] + discount[t] * out[-1].detach())
    return torch.stack(out[::-1])


def episode():
    # Even steps pay a random reward, odd steps a constant 0.1.
    rewards = torch.stack([torch.randn(5), torch.full((5,), 0.1)], dim=1).reshape(10, 1)
    return rewards, torch.eye(10)


def test_meta_gradient_learns_the_discount():
    torch.manual_seed(0)
    value = torch.nn.Linear(10, 1)
    inner = torchopt.MetaSGD(value, lr=0.5)
    logit = torch.zeros(9, requires_grad=True)
    outer = torchopt.SGD([logit], lr=0.5)
    initial = torchopt.extract_state_dict(value)
    for _ in range(1500):
        rewards, states = episode()
        inner.step(F.mse_loss(value(states), returns(rewards, torch.sigmoid(logit))))
        rewards, states = episode()
        loss = F.mse_loss(value(states), returns(rewards, torch.ones(9)))
        outer.zero_grad()
        loss.backward()
        outer.step()
        torchopt.recover_state_dict(value, initial)
        assert value.weight is initial.params[0]["weight"]
    gamma = torch.sigmoid(logit.detach())
    # From 0.5 everywhere, the discount separates (TorchOpt's example reaches
    # about 0.93 / 0.01 after 10000 episodes): it collapses where it would
    # bootstrap a noisy reward and stays high where the next reward is
    # constant.
    assert (gamma[1::2] < 0.1).all(), gamma
    assert (gamma[0::2] > 0.4).all() and gamma[0::2].min() - gamma[1::2].max() > 0.3, gamma
