"""Zero-order estimator throughput: metafuse.diff.zero_order against a plain
Python loop over samples, same objective, same number of samples, one run.

    /usr/bin/python3 bench/zero_order_throughput.py [--samples N] [--repeats R]

Objective: the MSE of a 2-16-1 tanh MLP on 64 points, parameters as one flat
vector (65 values). Antithetic estimates with N noise pairs (2N evaluations).
Modes: the plain loop (what users write by hand), metafuse calling the
Python function once per sample, metafuse evaluating a TorchScript version in
C++ across OpenMP threads, and metafuse with a batched objective (one call).
Prints the median samples per second of each and the ratio to the loop.
"""

import argparse
import statistics
import time

import torch

import metafuse

P = 2 * 16 + 16 + 16 + 1


def make_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 2, generator=g)
    return x, torch.sin(x.sum(1, keepdim=True))


@torch.jit.script
def mlp_loss(flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    w1 = flat[:32].reshape(16, 2)
    b1 = flat[32:48]
    w2 = flat[48:64].reshape(1, 16)
    b2 = flat[64:65]
    h = torch.tanh(x @ w1.t() + b1)
    return ((h @ w2.t() + b2 - y) ** 2).mean()


def mlp_loss_python(flat, x, y):
    return mlp_loss(flat, x, y)


def mlp_loss_batched(flat, x, y):
    if flat.dim() == 1:
        return mlp_loss(flat, x, y)
    w1 = flat[:, :32].reshape(-1, 16, 2)
    b1 = flat[:, 32:48].unsqueeze(1)
    w2 = flat[:, 48:64].reshape(-1, 1, 16)
    b2 = flat[:, 64:65].unsqueeze(1)
    h = torch.tanh(x.unsqueeze(0) @ w1.transpose(1, 2) + b1)
    return ((h @ w2.transpose(1, 2) + b2 - y) ** 2).mean(dim=(1, 2))


def plain_loop(theta, x, y, n, sigma):
    """The estimator as users write it by hand."""
    grad = torch.zeros_like(theta)
    with torch.no_grad():
        for _ in range(n):
            z = torch.randn_like(theta)
            diff = mlp_loss_python(theta + sigma * z, x, y) - \
                mlp_loss_python(theta - sigma * z, x, y)
            grad += diff * z
    return grad / (2 * n * sigma)


def with_metafuse(fn, batched, n, sigma):
    wrapped = metafuse.diff.zero_order(
        lambda shape: torch.randn(shape), method="antithetic", num_samples=n,
        sigma=sigma, batched=batched)(fn)

    def estimate(theta, x, y):
        t = theta.detach().requires_grad_()
        (g,) = torch.autograd.grad(wrapped(t, x, y), t)
        return g
    return estimate


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    x, y = make_data()
    theta = 0.5 * torch.randn(P, generator=torch.Generator().manual_seed(1))
    sigma = 0.05
    modes = {
        "plain Python loop (baseline)": lambda: plain_loop(theta, x, y, args.samples, sigma),
        "metafuse, Python fn per sample": with_metafuse(mlp_loss_python, False, args.samples, sigma),
        "metafuse, TorchScript fn, OpenMP": with_metafuse(mlp_loss, False, args.samples, sigma),
        "metafuse, batched fn": with_metafuse(mlp_loss_batched, True, args.samples, sigma),
    }
    times = {name: [] for name in modes}
    for _ in range(args.repeats):  # interleaved, so noise hits all alike
        for name, fn in modes.items():
            start = time.perf_counter()
            fn() if name.startswith("plain") else fn(theta, x, y)
            times[name].append(time.perf_counter() - start)
    evaluations = 2 * args.samples
    base = statistics.median(times["plain Python loop (baseline)"])
    print(f"zero-order antithetic estimate, {args.samples} pairs "
          f"({evaluations} evaluations), MLP 2-16-1 on 64 points, "
          f"{torch.get_num_threads()} intra-op thread(s), median of {args.repeats}")
    for name, samples in times.items():
        t = statistics.median(samples)
        print(f"  {name:34s} {evaluations / t:10.0f} evaluations/s   "
              f"{base / t:6.2f}x")


if __name__ == "__main__":
    main()
