"""ES-MAML on sinusoid regression with metafuse's zero-order gradients.

The meta-objective f(theta) = mean over tasks of the query loss after one
first-order inner SGD step from theta is treated as a black box: its gradient
comes from metafuse.diff.zero_order (antithetic evolution strategies), not
from backpropagation through the inner step (Song et al., ES-MAML). The
objective is evaluated for all noise samples at once (batched=True).

    /usr/bin/python3 examples/es_maml_sinusoid.py [--iterations N]

Prints the meta-loss on a fixed set of validation tasks; it falls.
"""

import argparse
import math

import torch

import metafuse

HIDDEN = 20
SHOTS, TASKS, INNER_LR = 10, 8, 0.02
SIZES = [(HIDDEN, 1), (HIDDEN,), (HIDDEN, HIDDEN), (HIDDEN,), (1, HIDDEN), (1,)]
NUM_PARAMS = sum(math.prod(s) for s in SIZES)


def unpack(flat):
    """[S, P] parameter rows -> per-layer tensors with a leading S."""
    out, k = [], 0
    for shape in SIZES:
        n = math.prod(shape)
        out.append(flat[:, k:k + n].reshape(flat.shape[0], *shape))
        k += n
    return out


def forward(flat, x):
    """Batched MLP: flat [S, P], x [T, N, 1] -> [S, T, N, 1]."""
    w1, b1, w2, b2, w3, b3 = unpack(flat)
    h = torch.relu(torch.einsum("sij,tnj->stni", w1, x) + b1[:, None, None])
    h = torch.relu(torch.einsum("sij,stnj->stni", w2, h) + b2[:, None, None])
    return torch.einsum("sij,stnj->stni", w3, h) + b3[:, None, None]


def sample_tasks(generator, n):
    amplitude = 0.1 + 4.9 * torch.rand(n, 1, 1, generator=generator)
    phase = math.pi * torch.rand(n, 1, 1, generator=generator)
    x = 10 * torch.rand(n, 2 * SHOTS, 1, generator=generator) - 5
    y = amplitude * torch.sin(x + phase)
    return x[:, :SHOTS], y[:, :SHOTS], x[:, SHOTS:], y[:, SHOTS:]


def meta_loss(flat, tasks):
    """Query loss after one first-order SGD step, per parameter row: [S]."""
    xs, ys, xq, yq = tasks
    with torch.enable_grad():
        params = flat.detach().requires_grad_()
        support = ((forward(params, xs) - ys) ** 2).mean(dim=(1, 2, 3))
        (grad,) = torch.autograd.grad(support.sum(), params)
    adapted = flat - INNER_LR * grad  # first-order: grad is a constant
    return ((forward(adapted, xq) - yq) ** 2).mean(dim=(1, 2, 3))


def main(iterations=150, seed=0, verbose=True):
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    theta = torch.nn.Parameter(0.3 * torch.randn(NUM_PARAMS))
    outer = metafuse.Adam([theta], lr=0.01)
    estimate = metafuse.diff.zero_order(
        torch.distributions.Normal(0.0, 1.0), method="antithetic",
        num_samples=64, sigma=0.02, batched=True)

    @estimate
    def objective(flat, tasks):
        # [P] for the value itself, [S, P] for the noise samples (batched).
        rows = flat if flat.dim() == 2 else flat.unsqueeze(0)
        values = meta_loss(rows, tasks)
        return values if flat.dim() == 2 else values[0]

    validation = sample_tasks(torch.Generator().manual_seed(999), 50)
    history = []
    for it in range(iterations):
        outer.zero_grad()
        objective(theta, sample_tasks(generator, TASKS)).backward()
        outer.step()
        if it % 25 == 0 or it == iterations - 1:
            with torch.no_grad():
                value = float(meta_loss(theta.detach().unsqueeze(0), validation)[0])
            history.append(value)
            if verbose:
                print(f"meta-step {it:4d}: validation meta-loss {value:.4f}")
    if verbose:
        print(f"meta-loss {'fell' if history[-1] < history[0] else 'did NOT fall'}: "
              f"{history[0]:.4f} -> {history[-1]:.4f}")
    return history


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=150)
    main(parser.parse_args().iterations)
