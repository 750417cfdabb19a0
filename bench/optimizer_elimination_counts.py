"""Optimizer-backward elimination on the MAML sinusoid program: node counts,
flop estimates and meta-step time with the pass off and on.

MLP 1-40-40-1 (bench/maml_compiled.py's model and tasks), 5 inner steps of
the unfused mf.adam (lr 0.01, eps_root 1e-8) written as a user loop under
metafuse.compile; meta-batch 25, outer metafuse.Adam (1e-3), float32, 1
thread. The pass is switched with METAFUSE_DISABLE_OPTIMIZER_ELIMINATION,
read when a function is compiled: the two variants are two compiled
functions in one process, and their meta-steps alternate.

Counts come from the compiled program's counts() (frontend/
compiler_bindings.cc): nodes without constants, and flops per node from the
sizes seen in one run (elementwise: numel of the output; mm: 2mkn;
reductions: numel of the input; shape ops: 0; metafuse::adam: 13 per
element, the generic chain it replaces).

    /usr/bin/python3 bench/optimizer_elimination_counts.py [--iterations N]
"""

import argparse
import os
import statistics
import sys
import time

import torch

import metafuse as mf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from maml_compiled import HIDDEN, META_BATCH, make_net, sample_tasks  # noqa: E402

INNER_STEPS, INNER_LR, EPS_ROOT = 5, 0.01, 1e-8
SWITCH = "METAFUSE_DISABLE_OPTIMIZER_ELIMINATION"


def make_inner(net):
    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)

    @mf.compile
    def adapt(params, x, y):
        tx = mf.adam(INNER_LR, eps_root=EPS_ROOT)
        state = tx.init(params)
        for _ in range(INNER_STEPS):
            grads = mf.grad(loss_fn(params, x, y), params)
            updates, state = tx.update(grads, state, params=params, inplace=False)
            params = mf.apply_updates(params, updates, inplace=False)
        return params

    return adapt, loss_fn


def compile_variant(disabled, tasks):
    """A net, its outer optimizer and its compiled inner loop, compiled with
    the pass off (disabled=True) or on; returns them and the counts."""
    os.environ[SWITCH] = "1" if disabled else "0"
    net = make_net()
    adapt, loss_fn = make_inner(net)
    params = dict(net.named_parameters())
    adapt(params, tasks[0][0], tasks[1][0])  # compiles
    program, = adapt.programs()
    counts = program.counts(mf.tree.leaves(params) + [tasks[0][0], tasks[1][0]])
    stages = dict(adapt.stages())
    assert ("optimizer backward eliminated" in stages) != disabled
    return net, mf.Adam(net.parameters(), lr=1e-3), adapt, loss_fn, counts


def meta_step(net, outer, adapt, loss_fn, tasks):
    xs, ys, xq, yq = tasks
    outer.zero_grad()
    params = dict(net.named_parameters())
    total = 0.0
    for t in range(META_BATCH):
        loss = loss_fn(adapt(params, xs[t], ys[t]), xq[t], yq[t]) / META_BATCH
        loss.backward()
        total += float(loss)
    outer.step()
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(1)
    warm = sample_tasks(generator)
    variants = {}
    for name, disabled in (("off", True), ("on", False)):
        variants[name] = compile_variant(disabled, warm)
    os.environ.pop(SWITCH)

    print(f"MAML sinusoid, MLP 1-{HIDDEN}-{HIDDEN}-1, {INNER_STEPS} inner steps of "
          f"unfused mf.adam under metafuse.compile, one task (float32)")
    print(f"  {'program':<14} {'nodes off':>10} {'nodes on':>9} {'ratio':>6}   "
          f"{'flops off':>10} {'flops on':>10} {'ratio':>6}")
    for program, label in (("forward", "forward"), ("backward", "meta-backward")):
        (n_off, f_off), (n_on, f_on) = (variants[v][4][program] for v in ("off", "on"))
        print(f"  {label:<14} {n_off:>10} {n_on:>9} {n_on / n_off:>6.2f}   "
              f"{f_off:>10.0f} {f_on:>10.0f} {f_on / f_off:>6.2f}")

    times = {"off": [], "on": []}
    losses = {"off": [], "on": []}
    for _ in range(args.iterations):
        tasks = sample_tasks(generator)
        for name in ("off", "on"):
            net, outer, adapt, loss_fn, _ = variants[name]
            start = time.perf_counter()
            losses[name].append(meta_step(net, outer, adapt, loss_fn, tasks))
            times[name].append(time.perf_counter() - start)
    for name in ("off", "on"):
        assert variants[name][2].compile_count == 1, "same guard must not recompile"
    first = abs(losses["on"][0] - losses["off"][0]) / abs(losses["off"][0])
    assert first < 1e-5, (losses["on"][0], losses["off"][0])
    t_off, t_on = statistics.median(times["off"]), statistics.median(times["on"])
    print(f"meta-step, meta-batch {META_BATCH}, {args.iterations} meta-steps each, "
          f"alternating, 1 thread")
    print(f"  pass off                   : {t_off * 1e3:8.1f} ms / meta-step (median)")
    print(f"  pass on                    : {t_on * 1e3:8.1f} ms / meta-step (median)")
    print(f"  off / on                   : {t_off / t_on:8.2f}x")
    print(f"  first meta-step loss agrees to {first:.1e} relative; final losses "
          f"off {losses['off'][-1]:.4f}, on {losses['on'][-1]:.4f}")


if __name__ == "__main__":
    main()
