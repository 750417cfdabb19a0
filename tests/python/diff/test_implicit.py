"""Implicit differentiation: hypergradients through optimality conditions
against closed forms, finite differences and long unrolled runs (float64)."""

import warnings

import pytest
import torch

import metafuse
from metafuse.diff.implicit import (ConvergenceWarning,
                                    ImplicitMetaGradientModule, custom_root,
                                    linalg, linear_solve)

F64 = torch.float64


def ridge_data(n=30, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, dtype=F64, generator=g)
    w_true = torch.randn(d, dtype=F64, generator=g)
    y = X @ w_true + 0.1 * torch.randn(n, dtype=F64, generator=g)
    Xv = torch.randn(n, d, dtype=F64, generator=g)
    yv = Xv @ w_true + 0.1 * torch.randn(n, dtype=F64, generator=g)
    return X, y, Xv, yv


def ridge_optimality(w, lam, X, y):
    return X.T @ (X @ w - y) + lam * w


def ridge_closed_form(lam, X, y):
    return torch.linalg.solve(X.T @ X + lam * torch.eye(X.shape[1], dtype=F64), X.T @ y)


def ridge_hypergradient(lam, X, y, Xv, yv):
    A = X.T @ X + lam * torch.eye(X.shape[1], dtype=F64)
    w = torch.linalg.solve(A, X.T @ y)
    g = Xv.T @ (Xv @ w - yv)
    return -(g @ torch.linalg.solve(A, w))


def solvers(X, lam):
    top = float(torch.linalg.eigvalsh(X.T @ X).max()) + lam
    return {
        "cg": linear_solve.solve_cg(),
        "normal_cg": linear_solve.solve_normal_cg(),
        "inv": linear_solve.solve_inv(),
        "inv_neumann": linear_solve.solve_inv(ns=True, alpha=1.0 / top,
                                              maxiter=20000, rtol=1e-12),
    }


@pytest.mark.parametrize("solver", ["cg", "normal_cg", "inv", "inv_neumann"])
def test_ridge_hypergradient_equals_closed_form(solver):
    X, y, Xv, yv = ridge_data()
    lam_value = 3.0
    solve = solvers(X, lam_value)[solver]

    @custom_root(ridge_optimality, argnums=1, solve=solve)
    def fit(w0, lam, X, y):
        return ridge_closed_form(lam, X, y)

    lam = torch.tensor(lam_value, dtype=F64, requires_grad=True)  # a scalar
    w = fit(torch.zeros(X.shape[1], dtype=F64), lam, X, y)
    (grad,) = torch.autograd.grad(0.5 * ((Xv @ w - yv) ** 2).sum(), lam)
    expected = ridge_hypergradient(lam_value, X, y, Xv, yv)
    assert float(expected) != 0.0
    torch.testing.assert_close(grad, expected, rtol=1e-6, atol=1e-9)


def logistic_data(seed=0, n=80, d=4):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, dtype=F64, generator=g)
    w = torch.randn(d, dtype=F64, generator=g)
    y = (torch.sigmoid(X @ w) > torch.rand(n, dtype=F64, generator=g)).to(F64)
    return X[:40], y[:40], X[40:], y[40:]


def logistic_objective(w, log_lam, X, y):
    logits = X @ w
    data = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
    return data + 0.5 * (torch.exp(log_lam) * w * w).sum()


def logistic_optimality(w, log_lam, X, y):
    with torch.enable_grad():
        w = w if w.requires_grad else w.requires_grad_()
        (g,) = torch.autograd.grad(logistic_objective(w, log_lam, X, y), w,
                                   create_graph=True)
    return g


def newton_fit(log_lam, X, y, iterations=30):
    w = torch.zeros(X.shape[1], dtype=F64)
    for _ in range(iterations):
        with torch.enable_grad():
            wr = w.clone().requires_grad_()
            g = torch.autograd.grad(logistic_objective(wr, log_lam, X, y), wr,
                                    create_graph=True)[0]
            H = torch.stack([torch.autograd.grad(g[i], wr, retain_graph=True)[0]
                             for i in range(len(g))])
        w = w - torch.linalg.solve(H, g.detach())
    return w


def test_logistic_per_feature_l2_hypergradient_matches_finite_differences():
    X, y, Xv, yv = logistic_data()

    @custom_root(logistic_optimality, argnums=1, solve=linear_solve.solve_cg())
    def fit(w0, log_lam, X, y):
        return newton_fit(log_lam.detach(), X, y)

    def validation_loss(log_lam):
        w = fit(torch.zeros(X.shape[1], dtype=F64), log_lam, X, y)
        return torch.nn.functional.binary_cross_entropy_with_logits(Xv @ w, yv)

    log_lam = torch.tensor([-1.0, 0.0, 0.5, -2.0], dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(validation_loss(log_lam), log_lam)
    h = 1e-5
    for j in range(4):
        e = torch.zeros(4, dtype=F64)
        e[j] = h
        with torch.no_grad():
            fd = (validation_loss(log_lam + e) - validation_loss(log_lam - e)) / (2 * h)
        assert abs(float(fd) - float(grad[j])) <= 1e-6 * max(1.0, abs(float(fd))), (j, fd, grad)


def test_imaml_implicit_equals_long_unrolled_run():
    # iMAML: phi*(theta) = argmin L_train(phi) + reg/2 |phi - theta|^2.
    g = torch.Generator().manual_seed(0)
    x = torch.linspace(-3, 3, 12, dtype=F64).unsqueeze(1)
    y = torch.sin(x + 0.5)
    xq = torch.linspace(-2.5, 2.5, 9, dtype=F64).unsqueeze(1)
    yq = torch.sin(xq + 0.5)
    sizes = [(8, 1), (8,), (1, 8), (1,)]
    theta = [0.5 * torch.randn(s, dtype=F64, generator=g) for s in sizes]
    reg, lr, steps = 2.0, 0.1, 400

    def forward(p, inputs):
        return torch.tanh(inputs @ p[0].T + p[1]) @ p[2].T + p[3]

    def inner_objective(phi, meta):
        train = ((forward(phi, x) - y) ** 2).mean()
        return train + 0.5 * reg * sum(((a - b) ** 2).sum() for a, b in zip(phi, meta))

    # Unrolled: differentiate through all 400 gradient steps.
    meta = [t.clone().requires_grad_() for t in theta]
    phi = list(meta)
    for _ in range(steps):
        grads = torch.autograd.grad(inner_objective(phi, meta), phi, create_graph=True)
        phi = [p - lr * gr for p, gr in zip(phi, grads)]
    unrolled = torch.autograd.grad(((forward(phi, xq) - yq) ** 2).mean(), meta)
    solution = [p.detach() for p in phi]

    def optimality(phi, meta):
        with torch.enable_grad():
            return list(torch.autograd.grad(inner_objective(phi, meta), phi,
                                            create_graph=True))

    @custom_root(optimality, argnums=1, solve=linear_solve.solve_cg())
    def adapt(phi0, meta):
        return solution

    meta2 = [t.clone().requires_grad_() for t in theta]
    phi_star = adapt([t.clone() for t in theta], meta2)
    implicit = torch.autograd.grad(((forward(phi_star, xq) - yq) ** 2).mean(), meta2)
    for a, b in zip(implicit, unrolled):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)


def test_scalar_solution_gets_its_gradient():
    # x*(lam) = lam / 2 from 2 (x - lam) + 2 x = 0: dx*/dlam = 0.5, through CG
    # on a single unknown (TorchOpt's CG ran zero iterations there).
    @custom_root(lambda x, lam: 2 * (x - lam) + 2 * x, argnums=1,
                 solve=linear_solve.solve_cg())
    def solve(x0, lam):
        return lam.detach() / 2

    lam = torch.tensor(3.0, dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(solve(torch.tensor(0.0, dtype=F64), lam), lam)
    assert float(grad) == pytest.approx(0.5, rel=1e-10)


def test_non_convergence_warns_with_the_residual():
    A = torch.diag(torch.arange(1.0, 6.0, dtype=F64))
    with pytest.warns(ConvergenceWarning, match="residual"):
        linalg.cg(lambda v: A @ v, torch.ones(5, dtype=F64), maxiter=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = linalg.cg(lambda v: A @ v, torch.ones(5, dtype=F64))
    torch.testing.assert_close(x, 1.0 / torch.arange(1.0, 6.0, dtype=F64))
    y = linalg.ns(A, torch.ones(5, dtype=F64), alpha=0.3, maxiter=2000)
    torch.testing.assert_close(y, x, rtol=1e-8, atol=1e-10)


def test_pytree_linear_solves():
    b = {"a": torch.tensor([1.0, 2.0], dtype=F64), "b": torch.tensor(3.0, dtype=F64)}
    op = lambda v: {"a": 2 * v["a"], "b": 4 * v["b"]}  # noqa: E731
    for solve in (linear_solve.solve_cg(), linear_solve.solve_normal_cg(),
                  linear_solve.solve_inv(),
                  linear_solve.solve_inv(ns=True, alpha=0.2, maxiter=200)):
        x = solve(op, b)
        torch.testing.assert_close(x["a"], torch.tensor([0.5, 1.0], dtype=F64))
        torch.testing.assert_close(x["b"], torch.tensor(0.75, dtype=F64))


def test_bad_input_errors():
    lam = torch.tensor(1.0, dtype=F64, requires_grad=True)
    wrong_structure = custom_root(lambda x, lam: (x, x), argnums=1)(lambda x0, lam: lam.detach())
    with pytest.raises(ValueError, match="structure of the solution"):
        wrong_structure(torch.zeros(()), lam).backward()
    with pytest.raises(ValueError, match="out of range"):
        custom_root(lambda x, lam: x, argnums=3)(lambda x0, lam: lam)(torch.zeros(()), lam)
    with pytest.raises(ValueError, match="must be >= 1"):
        custom_root(lambda x, lam: x, argnums=0)
    with pytest.raises(TypeError, match="solver's result"):
        custom_root(lambda x, lam: x, argnums=1)(lambda x0, lam: 3.0)(torch.zeros(()), lam)
    with pytest.raises(ValueError, match="must be square"):
        linalg.cg(torch.ones(2, 3), torch.ones(2))
    with pytest.raises(ValueError, match="`maxiter`"):
        linear_solve.solve_cg(maxiter=0)


class RidgeHead(ImplicitMetaGradientModule, linear_solve=linear_solve.solve_cg()):
    """Ridge regression on the features of a meta network."""

    def __init__(self, features, lam, dim):
        super().__init__()
        self.features = features
        self.lam = lam
        self.w = torch.nn.Parameter(torch.zeros(dim, dtype=F64))

    def objective(self, x, y):
        f = self.features(x)
        return 0.5 * ((f @ self.w - y) ** 2).sum() + 0.5 * self.lam * (self.w ** 2).sum()

    def solve(self, x, y):
        with torch.no_grad():
            f = self.features(x)
            self.w.copy_(ridge_closed_form(self.lam, f, y))

    def forward(self, x):
        return self.features(x) @ self.w


def test_module_with_batchnorm_meta_network_matches_direct_differentiation():
    X, y, Xv, yv = ridge_data(d=3)
    torch.manual_seed(0)
    features = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                   torch.nn.Tanh()).double()
    features(X)  # running statistics, then frozen
    features.eval()
    lam = torch.tensor(2.0, dtype=F64, requires_grad=True)
    head = RidgeHead(features, lam, 4)
    head.solve(X, y)
    loss = 0.5 * ((head(Xv) - yv) ** 2).sum()
    meta = [lam] + list(features.parameters())
    implicit = torch.autograd.grad(loss, meta)

    # Reference: differentiate straight through the closed-form solution.
    w = ridge_closed_form(lam, features(X), y)
    direct = torch.autograd.grad(0.5 * ((features(Xv) @ w - yv) ** 2).sum(), meta)
    for a, b in zip(implicit, direct):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)
    assert float(implicit[0]) != 0.0


def test_module_without_optimality_or_objective_is_an_error():
    # As in TorchOpt, the class definition itself is the error.
    with pytest.raises(TypeError, match="optimality"):
        class Incomplete(ImplicitMetaGradientModule):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.zeros(2))

            def solve(self):
                pass

    with pytest.raises(TypeError, match="staticmethod"):
        class Static(ImplicitMetaGradientModule):
            @staticmethod
            def objective(x):
                return x

    class NoMeta(ImplicitMetaGradientModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(2))

        def objective(self):
            return (self.w ** 2).sum()

        def solve(self):
            pass

    with pytest.raises(RuntimeError, match="no meta-parameters"):
        NoMeta().solve()
