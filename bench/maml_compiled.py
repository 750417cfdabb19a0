"""MAML sinusoid meta-step: compiled inner loop versus the eager path.

MLP 1-40-40-1, 5 inner SGD steps (lr 0.01), meta-batch 25 tasks, outer
metafuse.Adam (1e-3), float32, 1 thread. Variants, alternating meta-steps
in one run from the same weights and tasks:
  - eager: metafuse.MetaSGD on the nn.Module (the eager path of issue 5)
  - compiled: metafuse.compile_inner_loop (no fusion yet)
Also reports the one-time compile latency (trace + passes + lowering) and the
peak resident memory of each variant, each in a fresh process.

    /usr/bin/python3 bench/maml_compiled.py [--iterations N]
"""

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time

import torch

import metafuse as mf

HIDDEN, INNER_STEPS, META_BATCH, SHOTS, INNER_LR = 40, 5, 25, 10, 0.01


def make_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(1, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, 1))


def sample_tasks(generator):
    amplitude = 0.1 + 4.9 * torch.rand(META_BATCH, 1, 1, generator=generator)
    phase = math.pi * torch.rand(META_BATCH, 1, 1, generator=generator)
    x = 10 * torch.rand(META_BATCH, 2 * SHOTS, 1, generator=generator) - 5
    y = amplitude * torch.sin(x + phase)
    return x[:, :SHOTS], y[:, :SHOTS], x[:, SHOTS:], y[:, SHOTS:]


def eager_step(net, outer, tasks):
    xs, ys, xq, yq = tasks
    outer.zero_grad()
    initial = mf.extract_state_dict(net)
    total = 0.0
    for t in range(META_BATCH):
        inner = mf.MetaSGD(net, lr=INNER_LR)
        for _ in range(INNER_STEPS):
            inner.step(torch.nn.functional.mse_loss(net(xs[t]), ys[t]))
        loss = torch.nn.functional.mse_loss(net(xq[t]), yq[t]) / META_BATCH
        loss.backward()
        total += float(loss)
        mf.recover_state_dict(net, initial)
    outer.step()
    return total


def compiled_step(net, outer, adapt, tasks):
    xs, ys, xq, yq = tasks
    outer.zero_grad()
    params = dict(net.named_parameters())
    total = 0.0
    for t in range(META_BATCH):
        fast = adapt(params, xs[t], ys[t])
        loss = torch.nn.functional.mse_loss(mf.functional_call(net, fast, xq[t]),
                                            yq[t]) / META_BATCH
        loss.backward()
        total += float(loss)
    outer.step()
    return total


def peak_memory(variant, iterations):
    """Peak resident memory (MiB) of a fresh process running `iterations`
    meta-steps of one variant: the two never share a process."""
    out = subprocess.run([sys.executable, __file__, "--memory-child", variant,
                          "--iterations", str(iterations)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mib"]


def memory_child(variant, iterations):
    torch.set_num_threads(1)
    net = make_net()
    outer = mf.Adam(net.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    if variant == "compiled":
        def loss_fn(p, x, y):
            return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)
        adapt = mf.compile_inner_loop(loss_fn, mf.sgd(INNER_LR), steps=INNER_STEPS)
        for _ in range(iterations):
            compiled_step(net, outer, adapt, sample_tasks(generator))
    else:
        for _ in range(iterations):
            eager_step(net, outer, sample_tasks(generator))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_mib": peak}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--memory-child", choices=["eager", "compiled"],
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.iterations)
        return
    torch.set_num_threads(1)
    eager_net, compiled_net = make_net(), make_net()
    eager_outer = mf.Adam(eager_net.parameters(), lr=1e-3)
    compiled_outer = mf.Adam(compiled_net.parameters(), lr=1e-3)

    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(compiled_net, p, x), y)

    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(INNER_LR), steps=INNER_STEPS)
    generator = torch.Generator().manual_seed(1)
    warm = sample_tasks(generator)
    start = time.perf_counter()
    adapt(dict(compiled_net.named_parameters()), warm[0][0], warm[1][0])
    compile_seconds = time.perf_counter() - start
    assert adapt.compile_count == 1

    eager_times, compiled_times, eager_losses, compiled_losses = [], [], [], []
    for _ in range(args.iterations):
        tasks = sample_tasks(generator)
        start = time.perf_counter()
        eager_losses.append(eager_step(eager_net, eager_outer, tasks))
        eager_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        compiled_losses.append(compiled_step(compiled_net, compiled_outer, adapt, tasks))
        compiled_times.append(time.perf_counter() - start)
    assert adapt.compile_count == 1, "same guard must not recompile"
    first = abs(eager_losses[0] - compiled_losses[0]) / abs(eager_losses[0])
    assert first < 1e-5, (eager_losses[0], compiled_losses[0])
    t_eager, t_compiled = statistics.median(eager_times), statistics.median(compiled_times)
    print(f"MAML sinusoid meta-step, MLP 1-{HIDDEN}-{HIDDEN}-1, {INNER_STEPS} inner SGD "
          f"steps, meta-batch {META_BATCH}, {args.iterations} meta-steps, 1 thread")
    print(f"  eager (MetaSGD)            : {t_eager * 1e3:8.1f} ms / meta-step (median)")
    print(f"  compiled (no fusion)       : {t_compiled * 1e3:8.1f} ms / meta-step (median)")
    print(f"  eager / compiled           : {t_eager / t_compiled:8.2f}x")
    print(f"  one-time compile latency   : {compile_seconds * 1e3:8.1f} ms")
    print(f"  first meta-step loss agrees to {first:.1e} relative; final losses "
          f"eager {eager_losses[-1]:.4f}, compiled {compiled_losses[-1]:.4f}")
    eager_peak, compiled_peak = peak_memory("eager", 5), peak_memory("compiled", 5)
    print(f"  peak RSS, fresh process, 5 meta-steps: eager {eager_peak:.1f} MiB, "
          f"compiled {compiled_peak:.1f} MiB")


if __name__ == "__main__":
    main()
