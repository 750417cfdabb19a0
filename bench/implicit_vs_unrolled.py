"""Meta-gradient cost, implicit versus unrolled, as the inner loop grows.

One iMAML-style task (MLP 1-40-40-1, inner objective = support MSE +
reg/2 |phi - theta|^2, gradient descent with lr 0.02): the meta-gradient of
the query loss with respect to theta by
- unrolled: backpropagation through all K inner steps (create_graph), and
- implicit: K inner steps without a graph, then custom_root with 10 CG steps
  on Hessian-vector products,
for K = 10, 100, 1000.

    /usr/bin/python3 bench/implicit_vs_unrolled.py [--steps 10 100 1000]

Memory is measured two ways: the bytes of tensors autograd saves for the
backward pass (counted with saved_tensors_hooks, distinct storages), and the
peak resident memory of a fresh process running that one configuration.
Time is the median of 3 runs. Prints a table with the unrolled / implicit
ratios.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import imaml_sinusoid as task_lib  # noqa: E402  (the example's model and loss)
from metafuse.diff.implicit import ConvergenceWarning, custom_root, linear_solve  # noqa: E402


def make_task():
    g = torch.Generator().manual_seed(0)
    theta = [torch.nn.Parameter(t) for t in task_lib.init_params(g)]
    xs, ys, xq, yq = task_lib.sample_tasks(g, 1)
    return theta, xs[0], ys[0], xq[0], yq[0]


def unrolled(theta, xs, ys, xq, yq, steps):
    phi = list(theta)
    for _ in range(steps):
        grads = torch.autograd.grad(task_lib.inner_objective(phi, theta, xs, ys),
                                    phi, create_graph=True)
        phi = [p - task_lib.INNER_LR * g for p, g in zip(phi, grads)]
    return task_lib.mse(phi, xq, yq)


def implicit(theta, xs, ys, xq, yq, steps):
    @custom_root(task_lib.optimality, argnums=1,
                 solve=linear_solve.solve_cg(maxiter=10, rtol=1e-6))
    def adapt(phi0, meta, x, y):
        phi = [p.detach().clone() for p in phi0]
        for _ in range(steps):
            with torch.enable_grad():
                phi_r = [p.requires_grad_() for p in phi]
                grads = torch.autograd.grad(
                    task_lib.inner_objective(phi_r, meta, x, y), phi_r)
            phi = [(p - task_lib.INNER_LR * g).detach() for p, g in zip(phi_r, grads)]
        return phi
    return task_lib.mse(adapt(theta, theta, xs, ys), xq, yq)


MODES = {"unrolled": unrolled, "implicit": implicit}


def measure(mode, steps):
    """Time (median of 3) and saved-tensor bytes of one meta-gradient."""
    warnings.simplefilter("ignore", ConvergenceWarning)
    theta, xs, ys, xq, yq = make_task()
    times = []
    saved = {}

    def pack(t):
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return t

    for _ in range(3):
        saved.clear()
        start = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = MODES[mode](theta, xs, ys, xq, yq, steps)
        torch.autograd.grad(loss, theta)
        times.append(time.perf_counter() - start)
    return statistics.median(times), sum(saved.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.child:
        mode, steps = args.child[0], int(args.child[1])
        seconds, saved = measure(mode, steps)
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"seconds": seconds, "saved": saved, "peak_kib": peak_kib}))
        return
    rows = []
    for steps in args.steps:
        row = {"steps": steps}
        for mode in MODES:  # each configuration in a fresh process
            out = subprocess.run([sys.executable, __file__, "--child", mode, str(steps)],
                                 capture_output=True, text=True, check=True)
            row[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
    print("meta-gradient of one iMAML-style task, MLP 1-40-40-1, 1 thread")
    print(f"{'inner steps':>11} | {'unrolled ms':>11} {'implicit ms':>11} {'ratio':>6} | "
          f"{'unrolled saved MiB':>18} {'implicit saved MiB':>18} {'ratio':>7} | "
          f"{'unrolled peak MiB':>17} {'implicit peak MiB':>17}")
    for row in rows:
        u, i = row["unrolled"], row["implicit"]
        print(f"{row['steps']:>11} | {u['seconds'] * 1e3:>11.1f} {i['seconds'] * 1e3:>11.1f} "
              f"{u['seconds'] / i['seconds']:>6.2f} | {u['saved'] / 2**20:>18.2f} "
              f"{i['saved'] / 2**20:>18.2f} {u['saved'] / max(i['saved'], 1):>7.1f} | "
              f"{u['peak_kib'] / 1024:>17.1f} {i['peak_kib'] / 1024:>17.1f}")


if __name__ == "__main__":
    main()
