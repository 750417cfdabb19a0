"""Loading a saved MAML inner loop (metafuse.aot) against compiling it, in
one process, alternating: the median of repeats of (a) aot.load + first call
and (b) compile_inner_loop + first call (trace, passes, kernels from the
process registry), and their ratio. Kernels are in the process registry and
the disk cache for both ("warm").

    PYTHONPATH=frontend/python /usr/bin/python3 bench/aot_load.py [--repeats 15]
"""

import argparse
import os
import secrets
import statistics
import tempfile
import time

import torch

import metafuse as mf


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(), torch.nn.Linear(40, 40),
                              torch.nn.ReLU(), torch.nn.Linear(40, 1))
    params = dict(net.named_parameters())
    x = torch.rand(10, 1) * 10 - 5
    y = torch.sin(x)

    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)

    path = os.path.join(tempfile.mkdtemp(), "maml.mfa")
    key = secrets.token_bytes(32)  # signed: the artifact's own host code runs (docs/aot.md)
    mf.aot.save(mf.compile_inner_loop(loss_fn, mf.sgd(0.01), steps=5), path, params, x, y,
                key=key)
    load, compile_ = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        job = mf.aot.load(path, key=key)
        job(params, x, y)
        load.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.01), steps=5)
        adapt(params, x, y)
        compile_.append((time.perf_counter() - start) * 1e3)
    lm, cm = statistics.median(load), statistics.median(compile_)
    print(f"MAML inner loop (MLP 1-40-40-1, 5 SGD steps), {args.repeats} repeats, 1 thread")
    print(f"  aot.load + first call        {lm:7.2f} ms (median; min {min(load):.2f})")
    print(f"  compile_inner_loop + call    {cm:7.2f} ms (median; min {min(compile_):.2f})")
    print(f"  ratio compile / load         {cm / lm:7.2f}x")
    print(f"  artifact size                {os.path.getsize(path) / 1024:7.1f} KiB")


if __name__ == "__main__":
    main()
