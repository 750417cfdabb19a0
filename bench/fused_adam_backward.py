"""The differentiable Adam update, fused against unfused, forward and
backward timed apart, and the forward's memory bandwidth against the
machine's triad bandwidth measured in the same run.

    .venv/bin/python bench/fused_adam_backward.py [--repeats 15] [--json out.json]

Workloads (float32): one tensor of 1e6 elements, ten of 1e5, a thousand of
1e3; each at 1 and 2 threads (torch.set_num_threads). Variants:

  fused     metafuse.adam(lr, fused=True).update(grads, state,
            inplace=False): the torch.ops.metafuse.adam_multi operator and
            its closed-form backward
  unfused   metafuse.adam(lr, fused=False): the same update as a chain of
            ATen ops, differentiated by autograd

The update is taken at step 3 from states (mu, nu) and gradients that all
require grad (an unrolled inner loop's step); the backward is
torch.autograd.grad(updates, grads + mus + nus, grad_outputs=w). Forward
time = the update call; backward time = (update + grad) - update, medians
over --repeats alternated rounds of --inner calls each. Both variants'
gradients are compared once per workload (they must agree to 1e-5).

Bandwidth: the forward moves 7 arrays (reads g, mu, nu; writes the update,
mu', nu' and the saved root), counted as STREAM counts (no write-allocate);
triad is a = b + s c on 3 arrays of 4e6 floats (48 MB, past the caches),
torch.add(b, c, alpha=s, out=a), with the same thread count.
"""

import argparse
import json
import statistics
import time

import torch

import metafuse as mf

WORKLOADS = {"1 x 1e6": (1, 10**6), "10 x 1e5": (10, 10**5), "1000 x 1e3": (1000, 10**3)}
LR = 1e-3


def median_time(fn, inner):
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def triad_gbs(repeats):
    n = 4 * 10**6
    a, b, c = torch.empty(n), torch.randn(n), torch.randn(n)
    fn = lambda: torch.add(b, c, alpha=3.0, out=a)  # noqa: E731
    fn()
    t = statistics.median(median_time(fn, 10) for _ in range(repeats))
    return 3 * n * 4 / t / 1e9


class Workload:
    def __init__(self, count, numel, fused):
        gen = torch.Generator().manual_seed(0)
        self.grads = [torch.randn(numel, generator=gen) for _ in range(count)]
        self.w = [torch.randn(numel, generator=gen) for _ in range(count)]
        self.tx = mf.adam(LR, fused=fused)
        state = self.tx.init(self.grads)
        # Two steps first, so the timed one is step 3 with nonzero moments.
        for _ in range(2):
            _, state = self.tx.update(self.grads, state, inplace=False)
        self.state = state

    def leaves(self):
        grads = [g.clone().requires_grad_() for g in self.grads]
        state = mf.tree.map(lambda t: t.clone().requires_grad_()
                            if t.is_floating_point() else t.clone(), self.state)
        return grads, state

    def forward(self, leaves):
        grads, state = leaves
        updates, _ = self.tx.update(grads, state, inplace=False)
        return updates

    def forward_backward(self, leaves):
        grads, state = leaves
        updates = self.forward(leaves)
        inputs = grads + [t for t in mf.tree.leaves(state) if t.requires_grad]
        return torch.autograd.grad(updates, inputs, grad_outputs=self.w)


def measure(count, numel, threads, repeats):
    torch.set_num_threads(threads)
    work = {v: Workload(count, numel, v == "fused") for v in ("fused", "unfused")}
    inner = max(2, int(2e6 // (count * numel)))
    # The same gradients from both (once).
    ref = [work[v].forward_backward(work[v].leaves()) for v in ("fused", "unfused")]
    worst = max(float((a - b).abs().max() / (b.abs().max() + 1e-30))
                for a, b in zip(*ref))
    assert worst < 1e-5, f"fused and unfused gradients differ by {worst:.2e}"
    times = {v: {"forward": [], "total": []} for v in work}
    for _ in range(repeats):
        for v, wl in work.items():  # alternated, round by round
            pool = [wl.leaves() for _ in range(inner)]
            it = iter(pool)
            times[v]["forward"].append(median_time(lambda: wl.forward(next(it)), inner))
            pool = [wl.leaves() for _ in range(inner)]
            it = iter(pool)
            times[v]["total"].append(median_time(lambda: wl.forward_backward(next(it)), inner))
    out = {}
    for v, t in times.items():
        fwd, total = statistics.median(t["forward"]), statistics.median(t["total"])
        out[v] = {"forward_ms": fwd * 1e3, "backward_ms": (total - fwd) * 1e3,
                  "total_ms": total * 1e3,
                  "forward_gbs": 7 * count * numel * 4 / fwd / 1e9}
    out["speedup"] = out["unfused"]["total_ms"] / out["fused"]["total_ms"]
    out["gradient_agreement"] = worst
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    results = {"torch": torch.__version__, "rows": []}
    print("| workload | threads | triad GB/s | variant | forward ms | backward ms | "
          "total ms | forward GB/s | forward / triad | unfused / fused (total) |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        triad = triad_gbs(args.repeats)
        for name, (count, numel) in WORKLOADS.items():
            r = measure(count, numel, threads, args.repeats)
            for v in ("fused", "unfused"):
                m = r[v]
                ratio = f"{r['speedup']:.2f}x" if v == "fused" else ""
                print(f"| {name} | {threads} | {triad:.1f} | {v} | {m['forward_ms']:.3f} | "
                      f"{m['backward_ms']:.3f} | {m['total_ms']:.3f} | {m['forward_gbs']:.1f} | "
                      f"{m['forward_gbs'] / triad:.0%} | {ratio} |", flush=True)
            results["rows"].append({"workload": name, "threads": threads,
                                    "triad_gbs": triad, **r})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
