"""Per-layer learning rates learned by gradient through a whole training run.

A small MLP (1-32-32-1, tanh) is trained by SGD for K = 1000 steps on a
synthetic regression task (y = sin(3x) + noise, 64 training points). Each
layer has its own learning rate; the hyperparameter objective is the loss
on 256 held-out points after the K steps, and its gradient with respect to
the three rates flows back through all K steps (second order: through each
step's gradient). The inner loop is compiled once as a loop
(metafuse.compile_inner_loop with memory="auto"): the meta-backward keeps
about sqrt(2K) snapshots of the weights and recomputes the steps between
them, so its memory does not grow linearly with K.

    .venv/bin/python examples/long_horizon_hyperparameters.py \
        [--steps 1000] [--meta-steps 40] [--plot curve.png]

Prints, per hyperparameter step, the validation loss after training and the
three learning rates (the training curve of the hyperparameters). The rates
are learned in log space by Adam (lr 0.05): positive, and moving by at most
about 5% a step, since the hypergradient through 1000 steps is steep near
the rates where training diverges.
"""

import argparse
import math

import torch

import metafuse as mf


def make_data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = 4 * torch.rand(320, 1, generator=g) - 2
    y = torch.sin(3 * x) + 0.05 * torch.randn(320, 1, generator=g)
    return x[:64], y[:64], x[64:], y[64:]


def init_params(seed=1):
    g = torch.Generator().manual_seed(seed)
    sizes = [(1, 32), (32, 32), (32, 1)]
    params = {}
    for i, (fan_in, fan_out) in enumerate(sizes, 1):
        params[f"w{i}"] = torch.randn(fan_in, fan_out, generator=g) / math.sqrt(fan_in)
        params[f"b{i}"] = torch.zeros(fan_out)
    return params


def mse(params, x, y):
    h = torch.tanh(x @ params["w1"] + params["b1"])
    h = torch.tanh(h @ params["w2"] + params["b2"])
    return ((h @ params["w3"] + params["b3"] - y) ** 2).mean()


def main(steps=1000, meta_steps=40, meta_lr=0.05, initial_rate=0.01, plot=None,
         verbose=True):
    x_train, y_train, x_val, y_val = make_data()
    init = init_params()
    # One learning rate per layer, shared by its weight and bias; the compiled
    # loop reads these tensors at every call (the rate inputs of its program).
    rates = [torch.tensor(initial_rate, requires_grad=True) for _ in range(3)]
    per_param = {f"{kind}{i}": rates[i - 1] for i in (1, 2, 3) for kind in ("w", "b")}
    train = mf.compile_inner_loop(mse, mf.sgd(per_param), steps=steps, memory="auto")
    # The rates are learned in log space (positive, multiplicative steps).
    log_rates = [torch.tensor(math.log(initial_rate), requires_grad=True) for _ in range(3)]
    outer = torch.optim.Adam(log_rates, lr=meta_lr)
    history = []
    for it in range(meta_steps + 1):
        params = {k: v.clone().requires_grad_() for k, v in init.items()}
        trained = train(params, x_train, y_train)
        val = mse(trained, x_val, y_val)
        history.append((val.item(), [r.item() for r in rates]))
        if verbose:
            lrs = " ".join(f"{r.item():.4f}" for r in rates)
            print(f"hyper-step {it:3d}  validation loss {val.item():.5f}  rates {lrs}",
                  flush=True)
        if it == meta_steps:
            break
        for r in rates:
            r.grad = None
        val.backward()
        for r, log_r in zip(rates, log_rates):  # d val / d log r = r d val / d r
            log_r.grad = (r.grad * r).detach()
        outer.step()
        with torch.no_grad():
            for r, log_r in zip(rates, log_rates):
                r.copy_(log_r.exp())
    if verbose:
        schedule = train.schedule()
        print(schedule["description"])
    if plot:
        _plot(history, steps, plot)
    return history


def _plot(history, steps, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (loss_ax, rate_ax) = plt.subplots(1, 2, figsize=(10, 3.8))
    loss_ax.plot([h[0] for h in history], "o-", ms=3)
    loss_ax.set(xlabel="hyperparameter step", ylabel="validation loss",
                title=f"after {steps} SGD steps", yscale="log")
    for i in range(3):
        rate_ax.plot([h[1][i] for h in history], "o-", ms=3, label=f"layer {i + 1}")
    rate_ax.set(xlabel="hyperparameter step", ylabel="learning rate",
                title="per-layer learning rates")
    rate_ax.legend()
    for ax in (loss_ax, rate_ax):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--meta-steps", type=int, default=40)
    parser.add_argument("--meta-lr", type=float, default=0.05)
    parser.add_argument("--plot")
    args = parser.parse_args()
    main(args.steps, args.meta_steps, args.meta_lr, plot=args.plot)
