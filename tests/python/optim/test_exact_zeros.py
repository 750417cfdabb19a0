"""Exact meta-gradients where a moment under a square root is exactly 0.

An update that divides by the root of its second moment, differentiated
where every gradient so far was exactly 0, meets sqrt's infinite
derivative; naive autodiff makes it 0 * inf = NaN although the derivative
of the update exists (Adam's first step is u(g) = -lr g / (|g| + eps), so
u'(0) = -lr / eps). metafuse returns the exact value: kernels/optim_math.h
(RootInverse) for the fused operators and the compiler's closed form,
frontend/core/optim/state_helpers.h (RootOfMoment) for the unfused chain.

Each optimizer runs T steps on gradients g_t = c_t * x (x holds exact zeros
and small and large values), and F(x) = sum_i w_i p_T,i. Checked in float64:
  * at x = 0, F'(0) against the value written out by hand per optimizer;
  * at every point, F' against central finite differences of F, and F''
    against central finite differences of F' (at 0 with eps_root = 0 the
    second derivative has one-sided limits of opposite sign, since every
    update is odd in g; metafuse returns their midpoint, 0, which the central
    difference also gives);
  * fused and unfused, eps_root 0 and > 0 where the optimizer has it.
Then the issue's case end to end: a net with a dead ReLU unit, two Adam
steps, the meta-gradient eager (MetaAdam, fused and not) and compiled
(unrolled fused and unfused, looped) against finite differences.
"""

import math

import pytest
import torch

import metafuse as mf

D = torch.float64
X = torch.tensor([0.0, 0.0, 1e-3, -2e-3, 0.7, -1.3], dtype=D)
W = torch.tensor([1.0, -0.5, 0.8, 1.2, -0.3, 0.6], dtype=D)
C = [1.0, -0.6, 1.4, 0.9, -1.1, 0.5, 1.2, -0.8]  # g_t = C[t] * x


def run(tx, x, steps, params=None):
    """F(x): the weighted sum of the parameters after `steps` updates."""
    p = torch.linspace(-0.5, 0.5, x.numel(), dtype=D) if params is None else params
    state = tx.init(p.detach())
    for t in range(steps):
        u, state = tx.update(C[t] * x, state, params=p, inplace=False)
        p = p + u
    return (W * p).sum()


def first_derivative(tx, x, steps, create_graph=False):
    x = x.detach().clone().requires_grad_(True)
    (d,) = torch.autograd.grad(run(tx, x, steps), x, create_graph=create_graph)
    return d, x


def second_derivative(tx, x, steps):
    d, xr = first_derivative(tx, x, steps, create_graph=True)
    if not d.requires_grad:  # the update is linear in g (no root reached yet)
        return torch.zeros_like(d)
    (dd,) = torch.autograd.grad(d.sum(), xr)
    return dd


def central(f, x, h):
    """Central differences of the separable f (vector -> vector or scalar)."""
    out = torch.empty_like(x)
    for i in range(x.numel()):
        e = torch.zeros_like(x)
        e[i] = h
        hi, lo = f(x + e), f(x - e)
        out[i] = ((hi - lo) / (2 * h)) if hi.dim() == 0 else ((hi - lo)[i] / (2 * h))
    return out


def adam_at_zero(lr, steps, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0):
    total = 0.0
    for t in range(1, steps + 1):
        m = sum((1 - b1) * b1 ** (t - k) * C[k - 1] for k in range(1, t + 1))
        total += -lr / (1 - b1 ** t) * m / (math.sqrt(eps_root) + eps)
    return total


def rmsprop_at_zero(lr, steps, eps=1e-8, momentum=0.0):
    buf, total = 0.0, 0.0
    for t in range(steps):
        buf = momentum * buf + C[t] / eps
        total += -lr * buf
    return total


def adagrad_at_zero(lr, steps, eps=1e-10):
    return sum(-lr * C[t] / eps for t in range(steps))


def adadelta_at_zero(lr, steps):
    # delta_t = sqrt(acc + eps) / sqrt(E[g^2] + eps) g = g at g = 0.
    return sum(-lr * C[t] for t in range(steps))


def radam_at_zero(lr, steps, b1=0.9, b2=0.999, eps=1e-8):
    rho_inf = 2 / (1 - b2) - 1
    total = 0.0
    for t in range(1, steps + 1):
        m = sum((1 - b1) * b1 ** (t - k) * C[k - 1] for k in range(1, t + 1))
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        rho_t = rho_inf - 2 * t * b2 ** t / bc2
        if rho_t > 5:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                             ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            total += -lr * rect * math.sqrt(bc2) / bc1 * m / eps
        else:
            total += -lr / bc1 * m
    return total


def adamax_at_zero(lr, steps, b1=0.9, eps=1e-8):
    # u_t = max(b2 u_{t-1}, |g| + eps) = eps while every gradient is 0.
    total = 0.0
    for t in range(1, steps + 1):
        m = sum((1 - b1) * b1 ** (t - k) * C[k - 1] for k in range(1, t + 1))
        total += -lr / (1 - b1 ** t) * m / eps
    return total


# name -> (make(fused, eps), steps, F'(0) written out by hand for that eps).
# adamw's F'(0) has its decay term, which the others do not: finite
# differences only.
CASES = {
    "adam": (lambda f, e: mf.adam(0.1, eps=e, fused=f), 3,
             lambda e: adam_at_zero(0.1, 3, eps=e)),
    "adam_eps_root": (lambda f, e: mf.adam(0.1, eps=e, eps_root=1e-6, fused=f), 3,
                      lambda e: adam_at_zero(0.1, 3, eps=e, eps_root=1e-6)),
    "adamw": (lambda f, e: mf.adamw(0.1, eps=e, weight_decay=0.1, fused=f), 3, None),
    "rmsprop": (lambda f, e: mf.rmsprop(0.01, eps=e, fused=f), 3,
                lambda e: rmsprop_at_zero(0.01, 3, eps=e)),
    "rmsprop_centered": (lambda f, e: mf.rmsprop(0.01, eps=e, centered=True, fused=f), 3,
                         lambda e: rmsprop_at_zero(0.01, 3, eps=e)),
    "rmsprop_momentum": (lambda f, e: mf.rmsprop(0.01, eps=e, momentum=0.9, fused=f), 3,
                         lambda e: rmsprop_at_zero(0.01, 3, eps=e, momentum=0.9)),
    "adagrad": (lambda f, e: mf.adagrad(0.01, eps=e, fused=f), 3,
                lambda e: adagrad_at_zero(0.01, 3, eps=e)),
    "adadelta": (lambda f, e: mf.adadelta(0.5, eps=e, fused=f), 3,
                 lambda e: adadelta_at_zero(0.5, 3)),
    # Eight steps: RAdam rectifies from its sixth.
    "radam": (lambda f, e: mf.radam(0.01, eps=e, fused=f), 8,
              lambda e: radam_at_zero(0.01, 8, eps=e)),
    "adamax": (lambda f, e: mf.adamax(0.01, eps=e, fused=f), 3,
               lambda e: adamax_at_zero(0.01, 3, eps=e)),
}
# Finite differences need derivatives that vary on a scale h can resolve:
# eps = 1e-3 and h = 1e-7 (a relative error of about h / eps near 0).
FD_EPS, FD_H = 1e-3, 1e-7


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("eps", [1e-8, 1e-3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_first_derivative_exact_at_zero(name, eps, fused):
    make, steps, at_zero = CASES[name]
    d, _ = first_derivative(make(fused, eps), X, steps)
    assert torch.isfinite(d).all(), d
    if at_zero is not None:
        for i in (0, 1):  # the exact zeros of X
            assert d[i].item() == pytest.approx(W[i].item() * at_zero(eps), rel=1e-12)


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_first_derivative_matches_finite_differences(name, fused):
    make, steps, _ = CASES[name]
    d, _ = first_derivative(make(fused, FD_EPS), X, steps)
    fd = central(lambda x: run(make(fused, FD_EPS), x, steps), X, h=FD_H)
    assert torch.allclose(d, fd, rtol=1e-3, atol=1e-7), (d, fd)


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_second_derivative_finite_and_matches_finite_differences(name, fused):
    make, steps, _ = CASES[name]
    dd = second_derivative(make(fused, FD_EPS), X, steps)
    assert torch.isfinite(dd).all(), dd
    fd = central(lambda x: first_derivative(make(fused, FD_EPS), x, steps)[0], X, h=FD_H)
    # At the exact zeros: the midpoint of the one-sided limits, 0, which the
    # central difference of the first derivative also gives.
    assert dd[0].item() == 0.0 and dd[1].item() == 0.0
    assert torch.allclose(dd, fd, rtol=1e-3, atol=1e-4), (dd, fd)
    # The default eps too: finite everywhere, 0 at the zeros.
    dd = second_derivative(make(fused, 1e-8), X, steps)
    assert torch.isfinite(dd).all() and dd[0].item() == 0.0 and dd[1].item() == 0.0


def test_second_order_with_eps_root_is_smooth_and_exact():
    """With eps_root > 0 the update is smooth at 0 and odd in g: F''(0) = 0
    is the exact second derivative, not only a midpoint."""
    for fused in (False, True):
        tx = mf.adam(0.1, eps_root=1e-6, fused=fused)
        dd = second_derivative(tx, X, 3)
        fd = central(lambda x: first_derivative(tx, x, 3)[0], X, h=1e-7)
        assert torch.allclose(dd, fd, rtol=1e-4, atol=1e-3), (dd, fd)


def test_functional_adam_from_the_issue():
    """adam(lr=0.1, eps_root=0, fused=True), one update of [0, 1e-3, -2]:
    d(update)/d(gradient) = -lr eps / (|g| + eps)^2."""
    lr, eps = 0.1, 1e-8
    for fused in (False, True):
        g = torch.tensor([0.0, 1e-3, -2.0], dtype=D, requires_grad=True)
        tx = mf.adam(lr, eps_root=0.0, fused=fused)
        u, _ = tx.update(g, tx.init(g.detach()), inplace=False)
        (d,) = torch.autograd.grad(u.sum(), g)
        expected = -lr * eps / (g.detach().abs() + eps) ** 2
        assert torch.allclose(d, expected, rtol=1e-6, atol=0), (d, expected)
        assert d[0].item() == pytest.approx(-lr / eps, rel=1e-14)


def test_clip_grad_norm_at_zero_norm():
    """The clip coefficient is a constant for autograd (as in
    torch.nn.utils.clip_grad_norm_): at a zero norm it is 1 and the
    derivative is the identity, to first and second order."""
    tx = mf.clip_grad_norm(1.0)
    g = torch.zeros(4, dtype=D, requires_grad=True)
    u, _ = tx.update(g * 2.0, tx.init(g.detach()), inplace=False)
    (d,) = torch.autograd.grad(u.sum(), g, create_graph=True)
    assert torch.equal(d.detach(), torch.full((4,), 2.0, dtype=D))


def test_adamax_at_zero_returns_the_first_moment_path():
    """Adamax's max(b2 u, |g| + eps) at g = 0: |g| has one-sided derivatives
    +-1; metafuse (like torch's abs) takes 0 there, and the update's
    derivative is then -lr / bc1 (1 - b1) / eps, its exact value (the max
    term is multiplied by m = 0)."""
    lr, b1, eps = 0.01, 0.9, 1e-8
    for fused in (False, True):
        g = torch.zeros(3, dtype=D, requires_grad=True)
        tx = mf.adamax(lr, eps=eps, fused=fused)
        u, _ = tx.update(g, tx.init(g.detach()), inplace=False)
        (d,) = torch.autograd.grad(u.sum(), g)
        expected = -lr / (1 - b1) * (1 - b1) / eps
        assert torch.allclose(d, torch.full((3,), expected, dtype=D), rtol=1e-14)


# --- the issue's case: a dead ReLU unit, two Adam steps ---------------------

def dead_unit_params():
    g = torch.Generator().manual_seed(0)
    w1 = torch.randn(3, 4, generator=g, dtype=D)
    b1 = torch.randn(4, generator=g, dtype=D).abs() + 0.1
    w1[:, 0] = 0.0  # unit 0: weight row zero and bias -1, never active
    b1[0] = -1.0
    w2 = torch.randn(4, 1, generator=g, dtype=D)
    return {"w1": w1, "b1": b1, "w2": w2, "b2": torch.zeros(1, dtype=D)}


def dead_unit_loss(p, x, y):
    return ((torch.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"] - y) ** 2).mean()


def dead_unit_batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 3, generator=g, dtype=D)
    return x, x.sum(1, keepdim=True), x.flip(0), x.prod(1, keepdim=True)


def hand_adam_meta_objective(p, lr=0.1, steps=2, b1=0.9, b2=0.999, eps=1e-8):
    """Two Adam steps written out by hand (float64), then the query loss."""
    x, y, xq, yq = dead_unit_batch()
    names = sorted(p)
    mu = {k: torch.zeros_like(p[k]) for k in names}
    nu = {k: torch.zeros_like(p[k]) for k in names}
    for t in range(1, steps + 1):
        grads = torch.autograd.grad(dead_unit_loss(p, x, y), [p[k] for k in names],
                                    create_graph=True)
        new = {}
        for k, g in zip(names, grads):
            mu[k] = b1 * mu[k] + (1 - b1) * g
            nu[k] = b2 * nu[k] + (1 - b2) * g * g
            root = torch.sqrt(nu[k] / (1 - b2 ** t))
            new[k] = p[k] - lr * (mu[k] / (1 - b1 ** t)) / (root + eps)
        p = new
    return dead_unit_loss(p, xq, yq)


class DeadUnitNet(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        for k, v in p.items():
            setattr(self, k, torch.nn.Parameter(v.clone()))

    def forward(self, x):
        return torch.relu(x @ self.w1 + self.b1) @ self.w2 + self.b2


def eager_meta_gradient(fused):
    """TorchOpt's tutorial: MetaAdam steps the module, the meta-gradient is
    taken with respect to the module's original parameters."""
    net = DeadUnitNet(dead_unit_params())
    initial = dict(net.named_parameters())
    opt = mf.MetaAdam(net, lr=0.1, use_accelerated_op=fused)
    x, y, xq, yq = dead_unit_batch()
    for _ in range(2):
        opt.step(((net(x) - y) ** 2).mean())
    loss = ((net(xq) - yq) ** 2).mean()
    return torch.autograd.grad(loss, [initial[k] for k in sorted(initial)])


def compiled_meta_gradient(monkeypatch, fusion, unroll):
    monkeypatch.setenv("METAFUSE_FUSION_CHECK", "0")
    monkeypatch.setenv("METAFUSE_DISABLE_FUSION", "0" if fusion else "1")
    adapt = mf.compile_inner_loop(dead_unit_loss, mf.adam(0.1), steps=2, unroll=unroll)
    p = {k: v.requires_grad_(True) for k, v in dead_unit_params().items()}
    x, y, xq, yq = dead_unit_batch()
    fast = adapt(p, x, y)
    return torch.autograd.grad(dead_unit_loss(fast, xq, yq), [p[k] for k in sorted(p)])


def reference_meta_gradient():
    p = {k: v.requires_grad_(True) for k, v in dead_unit_params().items()}
    return torch.autograd.grad(hand_adam_meta_objective(p), [p[k] for k in sorted(p)])


def finite_difference_meta_gradient(h=1e-7):
    p0 = dead_unit_params()
    out = []
    for k in sorted(p0):
        grad = torch.empty_like(p0[k])
        for i in range(p0[k].numel()):
            hi = {n: v.clone() for n, v in p0.items()}
            lo = {n: v.clone() for n, v in p0.items()}
            hi[k].view(-1)[i] += h
            lo[k].view(-1)[i] -= h
            with torch.enable_grad():
                f_hi = hand_adam_meta_objective({n: v.requires_grad_(True) for n, v in hi.items()})
                f_lo = hand_adam_meta_objective({n: v.requires_grad_(True) for n, v in lo.items()})
            grad.view(-1)[i] = (f_hi - f_lo).item() / (2 * h)
        out.append(grad)
    return out


@pytest.fixture(scope="module")
def dead_unit_expected():
    return finite_difference_meta_gradient()


def check_dead_unit(grads, expected):
    for g, e in zip(grads, expected):
        assert torch.isfinite(g).all(), g
        assert torch.allclose(g, e, rtol=1e-5, atol=1e-7), (g, e)
    # The dead unit's weights and bias: exactly 0 (its ReLU never opens).
    names = sorted(dead_unit_params())
    assert torch.equal(grads[names.index("w1")][:, 0], torch.zeros(3, dtype=D))
    assert grads[names.index("b1")][0].item() == 0.0


def test_dead_unit_reference_is_nan_without_the_rule(dead_unit_expected):
    """The hand-written reference differentiated by torch's sqrt is NaN
    (the issue's symptom); its finite differences are the exact answer."""
    grads = reference_meta_gradient()
    assert any(torch.isnan(g).any() for g in grads)
    for e in dead_unit_expected:
        assert torch.isfinite(e).all()


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
def test_dead_unit_meta_adam_eager(fused, dead_unit_expected):
    check_dead_unit(eager_meta_gradient(fused), dead_unit_expected)


@pytest.mark.parametrize("unroll", [True, False], ids=["unrolled", "looped"])
@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
def test_dead_unit_compiled(monkeypatch, fusion, unroll, dead_unit_expected):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", mf.compiler.CompilationFallbackWarning)
        grads = compiled_meta_gradient(monkeypatch, fusion, unroll)
    check_dead_unit(grads, dead_unit_expected)
