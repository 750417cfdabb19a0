"""Zero-order gradient estimates: unbiased for the smoothed objective's
gradient (checked against analytic or quadrature references within
confidence bounds computed here), lower variance for antithetic sampling,
deterministic under a seed, identical across evaluation modes, and clear
errors."""

import numpy as np
import pytest
import torch

import metafuse
from metafuse.diff import ZeroOrderGradientModule, zero_order

F64 = torch.float64
NORMAL = torch.distributions.Normal(torch.tensor(0.0, dtype=F64),
                                   torch.tensor(1.0, dtype=F64))
REPEATS = 40


def estimates(fn, theta, *extra, repeats=REPEATS, seed=0):
    """`repeats` independent estimates of d fn / d theta, stacked."""
    torch.manual_seed(seed)
    out = []
    for _ in range(repeats):
        t = theta.detach().clone().requires_grad_()
        (g,) = torch.autograd.grad(fn(t, *extra), t)
        out.append(g)
    return torch.stack(out)


def assert_within_confidence(samples, truth, truth_se=None, z=4.5):
    """mean(samples) == truth within z standard errors, coordinate-wise."""
    mean = samples.mean(0)
    se = samples.std(0) / samples.shape[0] ** 0.5
    if truth_se is not None:
        se = (se ** 2 + truth_se ** 2).sqrt()
    assert bool(((mean - truth).abs() <= z * se + 1e-12).all()), (
        f"estimate mean {mean} vs reference {truth} (bound {z} x {se})")


A = torch.tensor([[3.0, 1.0], [1.0, 2.0]], dtype=F64)
B = torch.tensor([1.0, -1.0], dtype=F64)


def quadratic(t):
    return 0.5 * t @ A @ t + B @ t


@pytest.mark.parametrize("method", ["naive", "forward", "antithetic"])
def test_quadratic_estimate_is_unbiased(method):
    # For a quadratic, grad f_sigma = grad f = A theta + b exactly.
    theta = torch.tensor([0.5, -0.3], dtype=F64)
    fn = zero_order(NORMAL, method=method, num_samples=64, sigma=0.3)(quadratic)
    assert_within_confidence(estimates(fn, theta), A @ theta + B)


def rosenbrock(t):
    return (1 - t[0]) ** 2 + 10 * (t[1] - t[0] ** 2) ** 2


def rosenbrock_smoothed_grad(theta, sigma):
    # E[grad f(theta + sigma z)] by Gauss-Hermite quadrature: exact here,
    # since grad f is a polynomial of degree 3.
    x, w = np.polynomial.hermite_e.hermegauss(8)
    w = w / np.sqrt(2 * np.pi)
    total = torch.zeros(2, dtype=F64)
    for xi, wi in zip(x, w):
        for xj, wj in zip(x, w):
            p = (theta + sigma * torch.tensor([xi, xj], dtype=F64)).requires_grad_()
            (g,) = torch.autograd.grad(rosenbrock(p), p)
            total += wi * wj * g
    return total


@pytest.mark.parametrize("method", ["forward", "antithetic"])
def test_rosenbrock_estimate_matches_smoothed_gradient(method):
    theta, sigma = torch.tensor([-0.5, 0.8], dtype=F64), 0.2
    truth = rosenbrock_smoothed_grad(theta, sigma)
    fn = zero_order(NORMAL, method=method, num_samples=256, sigma=sigma)(rosenbrock)
    assert_within_confidence(estimates(fn, theta), truth)


def mlp_problem():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 2, dtype=F64, generator=g)
    y = torch.sin(x.sum(1, keepdim=True))
    theta = 0.5 * torch.randn(2 * 6 + 6 + 6 + 1, dtype=F64, generator=g)

    def loss(flat):  # flat: [P] or [S, P] (batched over samples)
        batch = flat.dim() == 2
        flat = flat if batch else flat.unsqueeze(0)
        w1 = flat[:, :12].reshape(-1, 6, 2)
        b1 = flat[:, 12:18].unsqueeze(1)
        w2 = flat[:, 18:24].reshape(-1, 1, 6)
        b2 = flat[:, 24:25].unsqueeze(1)
        h = torch.tanh(x.unsqueeze(0) @ w1.transpose(1, 2) + b1)
        out = h @ w2.transpose(1, 2) + b2
        values = ((out - y) ** 2).mean(dim=(1, 2))
        return values if batch else values[0]

    return theta, loss


def test_mlp_loss_estimate_matches_smoothed_gradient():
    theta, loss = mlp_problem()
    sigma = 0.1
    # Reference: E[grad f(theta + sigma z)] by Monte Carlo with 20000 samples.
    g = torch.Generator().manual_seed(123)
    points = (theta + sigma * torch.randn(20000, theta.numel(), dtype=F64,
                                          generator=g)).requires_grad_()
    (per_sample,) = torch.autograd.grad(loss(points).sum(), points)
    truth = per_sample.mean(0)
    truth_se = per_sample.std(0) / per_sample.shape[0] ** 0.5
    fn = zero_order(NORMAL, method="antithetic", num_samples=256, sigma=sigma,
                    batched=True)(loss)
    assert_within_confidence(estimates(fn, theta), truth, truth_se)


def test_antithetic_has_lower_variance_on_the_same_budget():
    theta, loss = mlp_problem()
    # Same number of function evaluations: 2n naive samples, n antithetic pairs.
    naive = zero_order(NORMAL, method="naive", num_samples=64, sigma=0.1,
                       batched=True)(loss)
    anti = zero_order(NORMAL, method="antithetic", num_samples=32, sigma=0.1,
                      batched=True)(loss)
    var_naive = estimates(naive, theta).var(0).sum()
    var_anti = estimates(anti, theta).var(0).sum()
    assert var_anti < 0.5 * var_naive, (float(var_anti), float(var_naive))


# One mode is a user's TorchScript function (deprecated by torch 2.x, still
# accepted by zero_order): the test scripts it itself.
@pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")
def test_deterministic_under_a_seed_and_modes_agree():
    theta = torch.tensor([0.5, -0.3], dtype=F64)

    @torch.jit.script
    def scripted(t, a, b):
        return 0.5 * t @ a @ t + b @ t

    def batched_quadratic(t, a, b):
        return 0.5 * ((t @ a) * t).sum(-1) + t @ b

    def plain(t, a, b):
        return 0.5 * t @ a @ t + b @ t

    def sampler(shape):
        return torch.randn(shape, dtype=F64)

    results = []
    for fn, batched in ((plain, False), (plain, False), (scripted, False),
                        (batched_quadratic, True)):
        wrapped = zero_order(sampler, method="antithetic", num_samples=16,
                             sigma=0.2, batched=batched)(fn)
        results.append(estimates(wrapped, theta, A, B, repeats=3, seed=7))
    assert torch.equal(results[0], results[1])  # same seed, same estimate
    for other in results[2:]:
        torch.testing.assert_close(other, results[0], rtol=1e-12, atol=1e-12)


def test_pytree_arguments_and_argnums():
    def f(scale, params):
        return scale * ((params["w"] ** 2).sum() + params["b"].sum())

    params = {"w": torch.tensor([1.0, 2.0], dtype=F64, requires_grad=True),
              "b": torch.tensor([0.5], dtype=F64, requires_grad=True)}
    wrapped = zero_order(NORMAL, method="antithetic", num_samples=4000,
                         sigma=0.05, argnums=1)(f)
    torch.manual_seed(0)
    wrapped(torch.tensor(2.0, dtype=F64), params).backward()
    torch.testing.assert_close(params["w"].grad, torch.tensor([4.0, 8.0], dtype=F64),
                               rtol=0.1, atol=0.2)
    torch.testing.assert_close(params["b"].grad, torch.tensor([2.0], dtype=F64),
                               rtol=0.1, atol=0.2)


class QuadraticModule(ZeroOrderGradientModule, method="antithetic",
                      num_samples=512, sigma=0.1):
    def __init__(self):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.tensor([0.5, -0.3], dtype=F64))

    def forward(self, a, b):
        return 0.5 * self.theta @ a @ self.theta + b @ self.theta

    def sample(self, sample_shape):
        return torch.randn(sample_shape, dtype=F64)


def test_zero_order_module():
    module = QuadraticModule()
    torch.manual_seed(0)
    samples = []
    for _ in range(10):
        module.zero_grad()
        module(A, B).backward()
        samples.append(module.theta.grad.clone())
    assert_within_confidence(torch.stack(samples), A @ module.theta.detach() + B)
    # Parameters are restored exactly after the perturbed evaluations.
    torch.testing.assert_close(module.theta.detach(),
                               torch.tensor([0.5, -0.3], dtype=F64), rtol=0, atol=0)


def test_bad_input_errors():
    with pytest.raises(ValueError, match="`num_samples` must be an integer >= 1"):
        zero_order(NORMAL, num_samples=0)
    with pytest.raises(ValueError, match="`sigma` must be a number > 0"):
        zero_order(NORMAL, sigma=0.0)
    with pytest.raises(ValueError, match="`method` must be one of"):
        zero_order(NORMAL, method="central")
    with pytest.raises(TypeError, match="`distribution`"):
        zero_order(42)
    vector_valued = zero_order(NORMAL)(lambda t: t * 2)
    with pytest.raises(ValueError, match="must return a scalar tensor"):
        vector_valued(torch.ones(3, dtype=F64, requires_grad=True))
    with pytest.raises(ValueError, match="argnums"):
        zero_order(NORMAL, argnums=2)(lambda t: t.sum())(torch.ones(2))
    with pytest.raises(TypeError, match="tensor or a pytree of tensors"):
        zero_order(NORMAL)(lambda t: torch.tensor(1.0))("not a tensor")

    class NoSample(ZeroOrderGradientModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

        def forward(self):
            return self.w.sum()

    # As in TorchOpt: a module without sample() cannot be instantiated.
    with pytest.raises(TypeError, match="abstract methods sample"):
        NoSample()
    with pytest.raises(ValueError, match="`sigma`"):
        class Bad(ZeroOrderGradientModule, sigma=-1.0):
            pass
