"""Gradient-based hyperparameter optimization with implicit differentiation.

L2-regularized logistic regression with one regularization strength per
feature (20 features, 5 informative, the rest noise). The inner problem is
solved by Newton's method; the gradient of the validation loss with respect
to the log-strengths comes from the implicit function theorem
(metafuse.diff.implicit.custom_root); metafuse.Adam tunes them.

    /usr/bin/python3 examples/hyperparameter_optimization.py [--steps N]

Prints the validation loss, which falls as the noise features get large
penalties.
"""

import argparse

import torch

import metafuse
from metafuse.diff.implicit import custom_root, linear_solve

F64 = torch.float64


def make_data(seed=0, n=120, d=20, informative=5):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(3 * n, d, dtype=F64, generator=g)
    w = torch.zeros(d, dtype=F64)
    w[:informative] = 2 * torch.randn(informative, dtype=F64, generator=g)
    y = (torch.sigmoid(X @ w) > torch.rand(3 * n, dtype=F64, generator=g)).to(F64)
    return (X[:n], y[:n]), (X[n:2 * n], y[n:2 * n]), (X[2 * n:], y[2 * n:])


def objective(w, log_lam, X, y):
    data = torch.nn.functional.binary_cross_entropy_with_logits(X @ w, y)
    return data + 0.5 * (torch.exp(log_lam) * w * w).sum()


def optimality(w, log_lam, X, y):
    with torch.enable_grad():
        w = w if w.requires_grad else w.requires_grad_()
        return torch.autograd.grad(objective(w, log_lam, X, y), w,
                                   create_graph=True)[0]


@custom_root(optimality, argnums=1, solve=linear_solve.solve_cg())
def fit(w0, log_lam, X, y, iterations=25):
    """Newton's method on the strictly convex inner objective."""
    w = w0.detach().clone()
    for _ in range(iterations):
        with torch.enable_grad():
            wr = w.clone().requires_grad_()
            g = torch.autograd.grad(objective(wr, log_lam, X, y), wr,
                                    create_graph=True)[0]
            H = torch.stack([torch.autograd.grad(g[i], wr, retain_graph=True)[0]
                             for i in range(g.numel())])
        w = w - torch.linalg.solve(H, g.detach())
    return w


def loss(w, X, y):
    return torch.nn.functional.binary_cross_entropy_with_logits(X @ w, y)


def main(steps=60, verbose=True):
    (Xt, yt), (Xv, yv), (Xtest, ytest) = make_data()
    log_lam = torch.full((Xt.shape[1],), -3.0, dtype=F64, requires_grad=True)
    tx = metafuse.adam(lr=0.1)
    state = tx.init(log_lam)
    w = torch.zeros(Xt.shape[1], dtype=F64)
    history = []
    for step in range(steps):
        w = fit(w, log_lam, Xt, yt)
        val = loss(w, Xv, yv)
        (grad,) = torch.autograd.grad(val, log_lam)
        updates, state = tx.update(grad, state, inplace=False)
        with torch.no_grad():
            log_lam += updates
        w = w.detach()
        history.append(float(val))
        if verbose and (step % 10 == 0 or step == steps - 1):
            print(f"step {step:3d}: validation loss {float(val):.4f}, "
                  f"test loss {float(loss(w, Xtest, ytest)):.4f}")
    if verbose:
        print("log-strengths, informative features:",
              [round(v, 2) for v in log_lam[:5].tolist()])
        print("log-strengths, noise features (mean):",
              round(float(log_lam[5:].mean()), 2))
        print(f"validation loss {'fell' if history[-1] < history[0] else 'did NOT fall'}: "
              f"{history[0]:.4f} -> {history[-1]:.4f}")
    return history


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    main(parser.parse_args().steps)
