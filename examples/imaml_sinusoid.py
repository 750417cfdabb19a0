"""iMAML on sinusoid regression with metafuse's implicit gradients.

For each task the inner problem is
    phi*(theta) = argmin_phi  L_support(phi) + reg/2 |phi - theta|^2,
solved approximately by gradient descent without recording a graph; the
meta-gradient of the query loss comes from the implicit function theorem
(metafuse.diff.implicit.custom_root with conjugate gradient on
Hessian-vector products), so memory does not grow with the inner steps
(Rajeswaran et al., 2019).

    /usr/bin/python3 examples/imaml_sinusoid.py [--iterations N]

Prints the mean query loss after adaptation on fixed validation tasks; it
falls.
"""

import argparse
import math
import warnings

import torch

import metafuse
from metafuse.diff.implicit import ConvergenceWarning, custom_root, linear_solve

HIDDEN, SHOTS, META_BATCH = 40, 10, 10
INNER_STEPS, INNER_LR, REG = 20, 0.02, 1.0


def init_params(generator):
    def layer(n_in, n_out):
        bound = 1 / math.sqrt(n_in)
        return [(torch.rand(n_out, n_in, generator=generator) * 2 - 1) * bound,
                (torch.rand(n_out, generator=generator) * 2 - 1) * bound]
    return layer(1, HIDDEN) + layer(HIDDEN, HIDDEN) + layer(HIDDEN, 1)


def forward(p, x):
    h = torch.relu(x @ p[0].T + p[1])
    h = torch.relu(h @ p[2].T + p[3])
    return h @ p[4].T + p[5]


def mse(p, x, y):
    return ((forward(p, x) - y) ** 2).mean()


def inner_objective(phi, theta, x, y):
    return mse(phi, x, y) + 0.5 * REG * sum(((a - b) ** 2).sum()
                                            for a, b in zip(phi, theta))


def optimality(phi, theta, x, y):
    with torch.enable_grad():
        phi = [p if p.requires_grad else p.requires_grad_() for p in phi]
        return list(torch.autograd.grad(inner_objective(phi, theta, x, y), phi,
                                        create_graph=True))


@custom_root(optimality, argnums=1,
             solve=linear_solve.solve_cg(maxiter=10, rtol=1e-6))
def adapt(phi0, theta, x, y):
    """Gradient descent on the inner objective; no graph is kept."""
    phi = [p.detach().clone() for p in phi0]
    for _ in range(INNER_STEPS):
        with torch.enable_grad():
            phi_r = [p.requires_grad_() for p in phi]
            grads = torch.autograd.grad(inner_objective(phi_r, theta, x, y), phi_r)
        phi = [(p - INNER_LR * g).detach() for p, g in zip(phi_r, grads)]
    return phi


def sample_tasks(generator, n):
    amplitude = 0.1 + 4.9 * torch.rand(n, 1, 1, generator=generator)
    phase = math.pi * torch.rand(n, 1, 1, generator=generator)
    x = 10 * torch.rand(n, 2 * SHOTS, 1, generator=generator) - 5
    y = amplitude * torch.sin(x + phase)
    return x[:, :SHOTS], y[:, :SHOTS], x[:, SHOTS:], y[:, SHOTS:]


def evaluate(theta, tasks):
    xs, ys, xq, yq = tasks
    total = 0.0
    for t in range(xs.shape[0]):
        phi = adapt(theta, [p.detach() for p in theta], xs[t], ys[t])
        total += float(mse(phi, xq[t], yq[t]))
    return total / xs.shape[0]


def main(iterations=100, seed=0, verbose=True):
    warnings.simplefilter("ignore", ConvergenceWarning)  # CG is truncated on purpose
    generator = torch.Generator().manual_seed(seed)
    theta = [torch.nn.Parameter(t) for t in init_params(generator)]
    outer = metafuse.Adam(theta, lr=1e-3)
    validation = sample_tasks(torch.Generator().manual_seed(1234), 20)
    history = [evaluate(theta, validation)]
    if verbose:
        print(f"meta-step    0: validation query loss {history[0]:.4f}")
    for it in range(1, iterations + 1):
        xs, ys, xq, yq = sample_tasks(generator, META_BATCH)
        outer.zero_grad()
        for t in range(META_BATCH):
            phi = adapt(theta, theta, xs[t], ys[t])
            (mse(phi, xq[t], yq[t]) / META_BATCH).backward()
        outer.step()
        if it % 25 == 0 or it == iterations:
            history.append(evaluate(theta, validation))
            if verbose:
                print(f"meta-step {it:4d}: validation query loss {history[-1]:.4f}")
    if verbose:
        print(f"meta-loss {'fell' if history[-1] < history[0] else 'did NOT fall'}: "
              f"{history[0]:.4f} -> {history[-1]:.4f}")
    return history


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=100)
    main(parser.parse_args().iterations)
