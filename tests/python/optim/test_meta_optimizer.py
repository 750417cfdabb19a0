"""Meta-gradients through MetaSGD / MetaAdam equal a hand-unrolled
torch.autograd computation (MAML on sinusoid regression) and central finite
differences, in float64."""

import math

import pytest
import torch

import metafuse


def sinusoid_task(seed, n=10):
    g = torch.Generator().manual_seed(seed)
    amplitude = 0.1 + 4.9 * torch.rand((), generator=g, dtype=torch.float64)
    phase = math.pi * torch.rand((), generator=g, dtype=torch.float64)
    x = 10 * torch.rand(2 * n, 1, generator=g, dtype=torch.float64) - 5
    y = amplitude * torch.sin(x + phase)
    return x[:n], y[:n], x[n:], y[n:]


def make_net(seed=0, hidden=16):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(1, hidden), torch.nn.Tanh(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 1)).double()


def functional_forward(params, x):
    w1, b1, w2, b2, w3, b3 = params
    h = torch.tanh(x @ w1.T + b1)
    h = torch.relu(h @ w2.T + b2)
    return h @ w3.T + b3


def mse(pred, y):
    return ((pred - y) ** 2).mean()


def meta_loss_with(meta_cls, net, task, k, **hyper):
    xs, ys, xq, yq = task
    inner = meta_cls(net, **hyper)
    for _ in range(k):
        inner.step(mse(net(xs), ys))
    return mse(net(xq), yq)


def hand_unrolled(params, task, k, kind, lr, betas=(0.9, 0.999), eps=1e-8,
                  eps_root=0.0):
    xs, ys, xq, yq = task
    mu = [torch.zeros_like(p) for p in params]
    nu = [torch.zeros_like(p) for p in params]
    for t in range(1, k + 1):
        grads = torch.autograd.grad(mse(functional_forward(params, xs), ys),
                                    params, create_graph=True)
        if kind == "sgd":
            params = [p - lr * g for p, g in zip(params, grads)]
            continue
        b1, b2 = betas
        mu = [b1 * m + (1 - b1) * g for m, g in zip(mu, grads)]
        nu = [b2 * v + (1 - b2) * g * g for v, g in zip(nu, grads)]
        params = [p - lr * (m / (1 - b1 ** t)) / (torch.sqrt(v / (1 - b2 ** t) + eps_root) + eps)
                  for p, m, v in zip(params, mu, nu)]
    return mse(functional_forward(params, xq), yq)


# eps_root > 0: ReLU units that are dead on the support set have a zero
# gradient, hence nu = 0, where d sqrt(nu) is infinite and the meta-gradient
# NaN (see test_zero_second_moment_needs_eps_root).
CASES = [(metafuse.MetaSGD, "sgd", dict(lr=0.05)),
         (metafuse.MetaAdam, "adam", dict(lr=0.01, eps_root=1e-10)),
         (metafuse.MetaSGD, "sgd", dict(lr=0.05, fused=True)),
         (metafuse.MetaAdam, "adam", dict(lr=0.01, eps_root=1e-10, fused=True))]
CASE_IDS = ["sgd", "adam", "sgd-fused", "adam-fused"]


@pytest.mark.parametrize("k", [1, 5])
@pytest.mark.parametrize("meta_cls, kind, hyper", CASES, ids=CASE_IDS)
def test_meta_gradient_equals_hand_unrolled(meta_cls, kind, hyper, k):
    task = sinusoid_task(seed=k)
    net = make_net()
    meta_params = list(net.parameters())
    meta_loss = meta_loss_with(meta_cls, net, task, k, **hyper)
    ours = torch.autograd.grad(meta_loss, meta_params)

    reference_params = [p.detach().clone().requires_grad_() for p in meta_params]
    ref_loss = hand_unrolled(reference_params, task, k, kind, hyper["lr"],
                             eps_root=hyper.get("eps_root", 0.0))
    expected = torch.autograd.grad(ref_loss, reference_params)
    torch.testing.assert_close(meta_loss, ref_loss, rtol=1e-12, atol=1e-12)
    for a, b in zip(ours, expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("meta_cls, kind, hyper", CASES, ids=CASE_IDS)
def test_meta_gradient_matches_finite_differences(meta_cls, kind, hyper):
    task = sinusoid_task(seed=3)
    k = 5
    net = make_net(hidden=8)
    meta_params = list(net.parameters())  # before the inner loop replaces them
    meta_loss = meta_loss_with(meta_cls, net, task, k, **hyper)
    grads = torch.autograd.grad(meta_loss, meta_params)

    def loss_at(flat):
        probe = make_net(hidden=8)
        torch.nn.utils.vector_to_parameters(flat, probe.parameters())
        return meta_loss_with(meta_cls, probe, task, k, **hyper).item()

    base = torch.nn.utils.parameters_to_vector(make_net(hidden=8).parameters()).detach()
    analytic = torch.cat([g.reshape(-1) for g in grads])
    h = 1e-6
    g = torch.Generator().manual_seed(0)
    for i in torch.randperm(base.numel(), generator=g)[:12].tolist():
        plus, minus = base.clone(), base.clone()
        plus[i] += h
        minus[i] -= h
        numeric = (loss_at(plus) - loss_at(minus)) / (2 * h)
        assert abs(numeric - analytic[i].item()) <= 1e-6 * max(1.0, abs(numeric)), (
            f"coordinate {i}: finite difference {numeric}, meta-gradient "
            f"{analytic[i].item()}")


def test_zero_second_moment_meta_gradient_is_exact():
    # A gradient entry that is exactly zero but depends on the parameters
    # (d/dw0 of w0^2 w1 at w1 = 0). Adam's first step is u(g) = -lr g /
    # (|g| + eps), u'(g) = -lr eps / (|g| + eps)^2: finite at g = 0 (-lr/eps)
    # although d sqrt(nu)/d nu is infinite there, with eps_root = 0 as with
    # eps_root > 0 (tests/python/optim/test_exact_zeros.py covers the rest).
    lr, eps = 0.1, 1e-8
    for eps_root in (0.0, 1e-10):
        w = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
        tx = metafuse.adam(lr=lr, eps=eps, eps_root=eps_root)
        state = tx.init(w)
        grad = torch.autograd.grad(w[0] ** 2 * w[1], w, create_graph=True)[0]
        updates, state = tx.update(grad, state, inplace=False)
        new_w = metafuse.apply_updates(w, updates, inplace=False)
        (meta_grad,) = torch.autograd.grad(new_w.sum(), w)
        assert torch.isfinite(meta_grad).all(), meta_grad
        if eps_root == 0.0:
            # grad = (2 w0 w1, w0^2) = (0, 1); d grad / d w = [[0, 2], [2, 0]].
            def u_prime(g):
                return -lr * eps / (abs(g) + eps) ** 2
            expected = [1 + 2 * u_prime(1.0), 1 + 2 * u_prime(0.0)]
            assert meta_grad.tolist() == pytest.approx(expected, rel=1e-12)


def test_adam_state_stays_differentiable_and_is_a_pytree():
    net = make_net(hidden=4)
    inner = metafuse.MetaAdam(net, lr=0.1, moment_requires_grad=True)
    xs, ys, _, _ = sinusoid_task(seed=1)
    inner.step(mse(net(xs), ys))
    leaves, spec = metafuse.tree.flatten(inner.state)
    assert all(isinstance(t, torch.Tensor) for t in leaves)
    assert any(t.requires_grad for t in leaves)
    rebuilt = metafuse.tree.unflatten(spec, leaves)
    assert type(rebuilt) is type(inner.state)


def test_meta_optimizer_errors():
    frozen = torch.nn.Linear(2, 1)
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        metafuse.MetaSGD(frozen, lr=0.1)
    net = torch.nn.Linear(2, 1)
    inner = metafuse.MetaSGD(net, lr=0.1)
    with pytest.raises(ValueError, match="does not depend"):
        inner.step(torch.ones((), requires_grad=True) * 2)
    with pytest.raises(ValueError, match="does not depend"):
        inner.step(torch.tensor(1.0))
    with pytest.raises(ValueError, match="`lr` must be >= 0"):
        metafuse.MetaSGD(net, lr=-0.1)
    with pytest.raises(ValueError, match=r"betas\[0\]"):
        metafuse.MetaAdam(net, betas=(1.0, 0.999))
    with pytest.raises(TypeError, match="MetaSGD"):
        metafuse.MetaSGD(net, lr=0.1, not_an_option=1)
