"""Long inner loops: compile time, peak tensor memory and time of one
meta-gradient as the number of inner steps K grows.

One task: MLP 8-64-64-1 (tanh), Adam inner optimizer (lr 1e-3, eps 1e-3),
32 support and 32 query samples, float32, 1 thread by default; the
meta-gradient of the query loss after K inner steps with respect to the
initial parameters. (With Adam's default eps 1e-8 this interpolating task
reaches a training loss near 1e-14 within a few thousand steps, where
Adam's update g / (|g| + eps) has derivatives near 1 / eps: the exact
meta-gradient then exceeds 1e60 even in float64, in eager autograd as in the
compiled loop. eps 1e-3 keeps it finite through 10,000 steps; float32 and
float64 agree to 5e-4 relative there.)
Variants, alternated within each K (every repeat runs each once):

  compiled, stored        metafuse.compile_inner_loop as a loop
                          (unroll=False), every step's saved values kept
  compiled, checkpointed  the looped form with memory="auto" (revolve)
  compiled, unrolled      unroll=True, one program of K steps (K <=
                          --max-unrolled only: its compile time grows with K)
  eager metafuse          metafuse.adam, out of place, autograd create_graph
  TorchOpt 0.7.3          torchopt.adam, the same, where installed
  higher 0.2.1            innerloop_ctx with torch.optim.Adam, where installed
  implicit (iMAML)        K Adam steps without a graph on the inner loss plus
                          a proximal term, then metafuse.diff.implicit's
                          custom_root with 10 CG steps: a DIFFERENT,
                          approximate meta-gradient, the constant-memory
                          reference

Compile time: cold, in a fresh process with an empty kernel cache
(METAFUSE_CACHE_DIR), per K and compiled variant: the first call (trace,
compile, fusion check, first meta-gradient) minus the second. Peak tensor memory:
metafuse's exact CPU allocation meter, from the start of the call to the end
of its backward, above what was live before. Time: median of the repeats.
The fitted exponent is the slope of log(peak memory) against log(K).

    .venv/bin/python bench/long_horizon.py [--steps 10 100 1000 10000]
        [--repeats 3] [--threads 1] [--json docs/long_horizon.json]
        [--plot docs/long_horizon.png]
"""

import argparse
import gc
import subprocess
import tempfile
import json
import math
import os
import statistics
import sys
import time
import warnings

import torch

import metafuse as mf
from metafuse import _C

_meter = _C._compiler
SIZES = (8, 64, 64, 1)
LR = 1e-3
EPS = 1e-3


def init_params():
    g = torch.Generator().manual_seed(0)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        params.append(torch.randn(fan_in, fan_out, generator=g) / math.sqrt(fan_in))
        params.append(torch.zeros(fan_out))
    return params


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, SIZES[0], generator=g)
    y = torch.sin(x.sum(1, keepdim=True))
    return x[:32], y[:32], x[32:], y[32:]


def forward(params, x):
    h = x
    for i in range(0, len(params) - 2, 2):
        h = torch.tanh(h @ params[i] + params[i + 1])
    return h @ params[-2] + params[-1]


def loss_fn(params, x, y):
    return ((forward(params, x) - y) ** 2).mean()


def leaves():
    return [p.clone().requires_grad_() for p in init_params()]


class Compiled:
    def __init__(self, steps, **options):
        self.steps, self.options = steps, options
        self.adapt = None

    def __call__(self, params, x, y, xq, yq):
        if self.adapt is None:
            self.adapt = mf.compile_inner_loop(loss_fn, mf.adam(LR, eps=EPS), steps=self.steps,
                                               **self.options)
        return torch.autograd.grad(loss_fn(self.adapt(params, x, y), xq, yq), params)


def functional_unrolled(tx, apply_updates):
    def run(steps, params, x, y, xq, yq):
        p = tuple(params)
        state = tx.init(p)
        for _ in range(steps):
            grads = torch.autograd.grad(loss_fn(p, x, y), p, create_graph=True)
            updates, state = tx.update(grads, state, inplace=False)
            p = apply_updates(p, updates, inplace=False)
        return torch.autograd.grad(loss_fn(p, xq, yq), params)
    return run


def higher_run(steps, params, x, y, xq, yq):
    import higher

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterList([torch.nn.Parameter(t.detach()) for t in params])

        def forward(self, x):
            return forward(list(self.p), x)

    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=LR, eps=EPS)
    with higher.innerloop_ctx(net, opt, copy_initial_weights=False) as (fnet, diffopt):
        for _ in range(steps):
            diffopt.step(((fnet(x) - y) ** 2).mean())
        return torch.autograd.grad(((fnet(xq) - yq) ** 2).mean(), list(net.parameters()))


def implicit_run(steps, params, x, y, xq, yq, reg=1.0):
    from metafuse.diff.implicit import linear_solve, custom_root

    def inner(phi, theta):
        prox = sum(((a - b) ** 2).sum() for a, b in zip(phi, theta))
        return loss_fn(phi, x, y) + 0.5 * reg * prox

    def optimality(phi, theta):
        return torch.autograd.grad(inner(phi, theta), phi, create_graph=True)

    @custom_root(optimality, argnums=1, solve=linear_solve.solve_cg(maxiter=10, rtol=1e-6))
    def solve(phi0, theta):
        phi = [p.detach().clone().requires_grad_() for p in phi0]
        opt = torch.optim.Adam(phi, lr=LR, eps=EPS)
        for _ in range(steps):
            opt.zero_grad()
            with torch.enable_grad():
                inner(phi, [t.detach() for t in theta]).backward()
            opt.step()
        return tuple(p.detach() for p in phi)

    phi = solve(tuple(params), tuple(params))
    return torch.autograd.grad(loss_fn(list(phi), xq, yq), params)


def variants(steps, max_unrolled):
    out = {name: Compiled(steps, **options) for name, options in COMPILED.items()
           if name != "compiled, unrolled" or steps <= max_unrolled}
    eager = functional_unrolled(mf.adam(LR, eps=EPS), mf.apply_updates)
    out["eager metafuse"] = lambda *a: eager(steps, *a)
    try:
        import torchopt
        run = functional_unrolled(torchopt.adam(LR, eps=EPS), torchopt.apply_updates)
        out["TorchOpt 0.7.3"] = lambda *a: run(steps, *a)
    except ImportError:
        pass
    try:
        import higher  # noqa: F401
        out["higher 0.2.1"] = lambda *a: higher_run(steps, *a)
    except ImportError:
        pass
    out["implicit (iMAML, approximate)"] = lambda *a: implicit_run(steps, *a)
    return out


def one_call(fn):
    """(seconds, peak bytes) of one meta-gradient."""
    batch = data()
    params = leaves()
    gc.collect()
    base = _meter.memory_stats()["live_bytes"]
    _meter.reset_peak_memory()
    start = time.perf_counter()
    grads = fn(params, *batch)
    seconds = time.perf_counter() - start
    peak = _meter.memory_stats()["peak_bytes"] - base
    return seconds, peak, grads


def measure(steps_list, repeats, max_unrolled, budget_s, threads):
    rows = []
    for steps in steps_list:
        fns = variants(steps, max_unrolled)
        times = {name: [] for name in fns}
        peaks, first, grads = {}, {}, {}
        skipped = set()
        for r in range(repeats + 1):  # the first round holds compilation
            for name, fn in fns.items():
                if name in skipped:
                    continue
                seconds, peak, g = one_call(fn)
                if r == 0:
                    first[name] = seconds
                    grads[name] = g
                else:
                    times[name].append(seconds)
                peaks[name] = max(peaks.get(name, 0), peak)
                if seconds > budget_s:  # one more round would not fit the run
                    skipped.add(name)
                print(f"  K={steps} {name}: {seconds * 1e3:.1f} ms, peak "
                      f"{peak / 2**20:.2f} MiB", file=sys.stderr, flush=True)
        ref = grads["compiled, stored"]
        for name in fns:
            median = statistics.median(times[name]) if times[name] else first[name]
            compiled = name in COMPILED
            diff = max(float((a - b).abs().max()) for a, b in zip(grads[name], ref))
            finite = all(bool(torch.isfinite(g).all()) for g in grads[name])
            rows.append({"steps": steps, "variant": name, "time_s": median, "finite": finite,
                         "repeats": len(times[name]) or 1,
                         "compile_s": cold_compile_seconds(steps, name, threads)
                         if compiled else None,
                         "peak_bytes": peaks[name], "max_abs_diff_vs_stored": diff})
    return rows


COMPILED = {"compiled, stored": dict(unroll=False),
            "compiled, checkpointed": dict(memory="auto"),
            "compiled, unrolled": dict(unroll=True)}


def cold_compile_seconds(steps, variant, threads):
    """Compile time of `variant` at `steps` in a fresh process and an empty
    kernel cache: its first meta-gradient minus its second."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, METAFUSE_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--cold-compile",
                              str(steps), variant, "--threads", str(threads)],
                             env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _cold_compile_child(steps, variant):
    fn = Compiled(steps, **COMPILED[variant])
    first, _, _ = one_call(fn)
    second, _, _ = one_call(fn)
    print(max(first - second, 0.0))


def fitted_exponents(rows):
    out = {}
    for name in sorted({r["variant"] for r in rows}):
        pts = [(math.log(r["steps"]), math.log(max(r["peak_bytes"], 1)))
               for r in rows if r["variant"] == name]
        if len(pts) < 2:
            continue
        mx = sum(p[0] for p in pts) / len(pts)
        my = sum(p[1] for p in pts) / len(pts)
        out[name] = (sum((a - mx) * (b - my) for a, b in pts) /
                     sum((a - mx) ** 2 for a, _ in pts))
    return out


def table(rows, exponents):
    lines = ["| K | variant | compile s | peak MiB | meta-gradient ms | vs stored time "
             "| vs stored memory | max abs diff vs stored |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        stored = next(s for s in rows if s["steps"] == r["steps"] and
                      s["variant"] == "compiled, stored")
        compile_s = f"{r['compile_s']:.2f}" if r["compile_s"] is not None else "-"
        lines.append(
            f"| {r['steps']} | {r['variant']} | {compile_s} | {r['peak_bytes'] / 2**20:.2f} | "
            f"{r['time_s'] * 1e3:.1f} | {r['time_s'] / stored['time_s']:.2f}x | "
            f"{r['peak_bytes'] / max(stored['peak_bytes'], 1):.3f} | "
            f"{r['max_abs_diff_vs_stored']:.1e} |")
    lines += ["", "| variant | fitted exponent of peak memory in K |", "|---|---:|"]
    lines += [f"| {name} | {e:.2f} |" for name, e in exponents.items()]
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (mem, comp) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in dict.fromkeys(r["variant"] for r in rows):
        pts = [r for r in rows if r["variant"] == name]
        mem.loglog([r["steps"] for r in pts], [r["peak_bytes"] / 2**20 for r in pts], "o-",
                   label=name)
        if pts[0]["compile_s"] is not None:
            comp.loglog([r["steps"] for r in pts], [max(r["compile_s"], 1e-3) for r in pts],
                        "o-", label=name)
    mem.set(xlabel="inner steps K", ylabel="peak tensor memory (MiB)",
            title="memory of one meta-gradient")
    comp.set(xlabel="inner steps K", ylabel="compile time (s)", title="compile time")
    for ax in (mem, comp):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 100, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-unrolled", type=int, default=100)
    parser.add_argument("--budget", type=float, default=20.0,
                        help="a variant slower than this many seconds runs no more repeats")
    parser.add_argument("--json")
    parser.add_argument("--plot")
    parser.add_argument("--cold-compile", nargs=2, metavar=("K", "VARIANT"),
                        help=argparse.SUPPRESS)  # the child of cold_compile_seconds
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    _meter.install_memory_meter()
    if args.cold_compile:
        _cold_compile_child(int(args.cold_compile[0]), args.cold_compile[1])
        return
    rows = measure(args.steps, args.repeats, args.max_unrolled, args.budget, args.threads)
    exponents = fitted_exponents(rows)
    print(table(rows, exponents))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join(["bench/long_horizon.py"] + sys.argv[1:]),
                       "threads": args.threads, "torch": torch.__version__,
                       "rows": rows, "exponents": exponents}, f, indent=1)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
