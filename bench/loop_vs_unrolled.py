"""Short inner loops: the looped form against the unrolled one.

MAML's sinusoid network (MLP 1-40-40-1, ReLU, 10 samples, float32, 1
thread); one call and its meta-backward of compile_inner_loop with
unroll=True and unroll=False, alternated, for K = 1, 5 and 16 steps of SGD
and 5 of Adam. Prints the median of the repeats and the ratio unrolled /
looped (above 1: the loop is faster). What decides UNROLL_MAX_STEPS
(docs/long_horizon.md).

    .venv/bin/python bench/loop_vs_unrolled.py [--repeats 50] [--threads 1]
"""

import argparse
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

import metafuse as mf


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(), torch.nn.Linear(40, 40),
                              torch.nn.ReLU(), torch.nn.Linear(40, 1))

    def loss_fn(params, x, y):
        return F.mse_loss(mf.functional_call(net, params, x), y)

    x = torch.randn(10, 1)
    y = torch.sin(x)
    print("| K | inner optimizer | unrolled us | looped us | unrolled / looped |")
    print("|---:|---|---:|---:|---:|")
    for steps, name, tx in [(1, "SGD", mf.sgd(0.01)), (5, "SGD", mf.sgd(0.01)),
                            (16, "SGD", mf.sgd(0.01)), (5, "Adam", mf.adam(0.01))]:
        fns = {u: mf.compile_inner_loop(loss_fn, tx, steps=steps, unroll=u) for u in (True, False)}
        times = {u: [] for u in fns}
        for r in range(args.repeats + 10):  # 10 untimed rounds: compilation, warm-up
            for u, fn in fns.items():
                params = {k: v.detach().clone().requires_grad_()
                          for k, v in net.named_parameters()}
                start = time.perf_counter()
                loss_fn(fn(params, x, y), x, y).backward()
                if r >= 10:
                    times[u].append(time.perf_counter() - start)
        m = {u: statistics.median(v) * 1e6 for u, v in times.items()}
        print(f"| {steps} | {name} | {m[True]:.0f} | {m[False]:.0f} | {m[True] / m[False]:.2f} |")


if __name__ == "__main__":
    main()
