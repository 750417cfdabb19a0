"""MAML sinusoid meta-step: compiled inner loop versus the eager path.

MLP 1-40-40-1, 5 inner SGD steps (lr 0.01), meta-batch 25, 10 shots, outer
metafuse.Adam (1e-3), float32, 1 thread. Six variants train side by side
from the same weights on the same tasks, alternating meta-steps in one run:
  - eager unfused : metafuse.MetaSGD on the nn.Module (the TorchOpt idiom)
  - eager fused   : the same with fused=True (kernels/ optimizer operators)
  - torch.func vmap: plain PyTorch's best: torch.func.vmap over the tasks of
                    an inner loop written with torch.func.grad (functorch's
                    on torch 1.13)
  - compiled, fusion off : compile_inner_loop per task, its generic program
  - compiled per task    : compile_inner_loop per task with every pass: shape
                    specialization, vertical and horizontal fusion into
                    LLVM-JIT'd kernels, buffer planning, flatten caching
  - compiled batched     : metafuse.vmap of the task (adapt + query loss): the
                    whole meta-batch as one compiled program (batched GEMMs,
                    kernels over all tasks), ratios are against it
  - compiled chunked     : the same metafuse.vmap with chunk_size=1: one task's
                    saved values alive at a time (each task's program run
                    again in the backward), the low-memory setting
It prints the meta-training curve of each variant, the median meta-step
time and the ratios, then, each in a fresh process: the compile latency of
the first task (trace + passes + kernels) with an empty kernel cache (cold)
and with the cache the cold run filled (warm), and the working memory of
each variant (peak of live tensor bytes during a meta-step, counted by a
wrapper around c10's CPU allocator).

    /usr/bin/python3 bench/maml_compiled.py [--iterations N] [--json FILE]
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import metafuse as mf

HIDDEN, INNER_STEPS, META_BATCH, SHOTS, INNER_LR = 40, 5, 25, 10, 0.01
VARIANTS = ("eager unfused", "eager fused", "torch.func vmap", "compiled, fusion off",
            "compiled per task", "compiled batched", "compiled chunked")


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


def eager_step(net, outer, tasks, fused):
    xs, ys, xq, yq = tasks
    outer.zero_grad()
    initial = mf.extract_state_dict(net)
    total = 0.0
    for t in range(META_BATCH):
        inner = mf.MetaSGD(net, lr=INNER_LR, fused=fused)
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


def torch_func_transforms():
    """(vmap, grad, functional_call): torch.func's on torch 2.x; on torch 1.13
    functorch's, with torch's stateless functional_call (functorch 1.13 has
    none)."""
    try:
        import torch.func as func
        return func.vmap, func.grad, func.functional_call
    except ImportError:
        import functorch
        return functorch.vmap, functorch.grad, torch.nn.utils.stateless.functional_call


def torch_func_step(net, outer, tasks):
    vmap, grad, functional_call = torch_func_transforms()
    xs, ys, xq, yq = tasks
    outer.zero_grad()

    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(functional_call(net, p, (x,)), y)

    def task(p, xs, ys, xq, yq):
        for _ in range(INNER_STEPS):
            g = grad(loss_fn)(p, xs, ys)
            p = {k: p[k] - INNER_LR * g[k] for k in p}
        return loss_fn(p, xq, yq)

    loss = vmap(task, in_dims=(None, 0, 0, 0, 0))(
        dict(net.named_parameters()), xs, ys, xq, yq).mean()
    loss.backward()
    outer.step()
    return float(loss)


def batched_step(net, outer, batched, tasks):
    outer.zero_grad()
    loss = batched(dict(net.named_parameters()), *tasks).mean()
    loss.backward()
    outer.step()
    return float(loss)


class Variant:
    def __init__(self, name):
        self.name = name
        self.net = make_net()
        self.outer = mf.Adam(self.net.parameters(), lr=1e-3)
        self.adapt = self.batched = None
        if name.startswith("compiled"):
            def loss_fn(p, x, y):
                return torch.nn.functional.mse_loss(mf.functional_call(self.net, p, x), y)
            self.adapt = mf.compile_inner_loop(loss_fn, mf.sgd(INNER_LR), steps=INNER_STEPS)
        if name in ("compiled batched", "compiled chunked"):
            self.batched = mf.vmap(
                lambda p, xs, ys, xq, yq: loss_fn(self.adapt(p, xs, ys), xq, yq),
                in_dims=(None, 0, 0, 0, 0),
                chunk_size=1 if name == "compiled chunked" else None)
        self.losses, self.times = [], []

    def compile_count(self):
        return (self.batched or self.adapt).compile_count

    def step(self, tasks):
        if self.name == "torch.func vmap":
            return torch_func_step(self.net, self.outer, tasks)
        if self.batched is not None:
            return batched_step(self.net, self.outer, self.batched, tasks)
        if self.adapt is None:
            return eager_step(self.net, self.outer, tasks, fused=self.name == "eager fused")
        loss = compiled_step(self.net, self.outer, self.adapt, tasks)
        if self.name == "compiled, fusion off":
            for program in self.adapt.programs():
                program.set_fusion(False)
        return loss

    def timed_step(self, tasks):
        start = time.perf_counter()
        self.losses.append(self.step(tasks))
        self.times.append(time.perf_counter() - start)


def child_batched_compile_latency():
    """The first meta-step of a fresh process through metafuse.vmap: trace
    under vmap, passes, kernels, forward and meta-backward."""
    torch.set_num_threads(THREADS)
    v = Variant("compiled batched")
    tasks = sample_tasks(torch.Generator().manual_seed(1))
    start = time.perf_counter()
    v.step(tasks)
    first = time.perf_counter() - start
    start = time.perf_counter()
    v.step(tasks)
    return {"first_step_ms": first * 1e3, "steady_step_ms": (time.perf_counter() - start) * 1e3}


def child_compile_latency():
    """First task of a fresh process: adapt (trace, passes, forward kernels)
    plus the query loss's backward (backward specialization and kernels)."""
    torch.set_num_threads(THREADS)
    net = make_net()
    xs, ys, xq, yq = sample_tasks(torch.Generator().manual_seed(1))
    params = dict(net.named_parameters())

    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)

    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(INNER_LR), steps=INNER_STEPS)

    def task(t):
        fast = adapt(params, xs[t], ys[t])
        torch.nn.functional.mse_loss(mf.functional_call(net, fast, xq[t]), yq[t]).backward()

    start = time.perf_counter()
    task(0)
    first = time.perf_counter() - start
    start = time.perf_counter()
    task(1)
    steady = time.perf_counter() - start
    report = adapt.programs()[0].fusion_report()
    return {"first_task_ms": first * 1e3, "steady_task_ms": steady * 1e3,
            "specialize_forward_ms": report["forward"]["seconds"] * 1e3,
            "specialize_backward_ms": report["backward"]["seconds"] * 1e3,
            "report": report}


def child_memory(variant, iterations):
    """Tensor memory of one meta-step after `iterations` - 1 warm ones: the
    peak of live CPU tensor bytes above the level at its start, counted
    exactly by a wrapper around c10's CPU allocator (every allocation: eager
    ops, autograd, compiled instructions, fused-kernel outputs)."""
    import tensor_memory
    tensor_memory.install()
    torch.set_num_threads(THREADS)
    v = Variant(variant)
    generator = torch.Generator().manual_seed(1)
    for _ in range(iterations - 1):
        v.step(sample_tasks(generator))
    tasks = sample_tasks(generator)
    return tensor_memory.peak_during(lambda: v.step(tasks))


# Intra-op threads of every variant; children inherit it through the
# environment (main sets it from --threads).
THREADS = int(os.environ.get("MAML_BENCH_THREADS", "1"))


def run_child(args, env=None):
    out = subprocess.run([sys.executable, __file__] + args, capture_output=True, text=True,
                         check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads of every variant (default 1)")
    parser.add_argument("--json", help="also write the measurements to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is None:
        global THREADS
        THREADS = args.threads
        os.environ["MAML_BENCH_THREADS"] = str(args.threads)
    if args.child == "compile":
        print(json.dumps(child_compile_latency()))
        return
    if args.child == "compile-batched":
        print(json.dumps(child_batched_compile_latency()))
        return
    if args.child == "memory":
        print(json.dumps(child_memory(args.variant, 5)))
        return

    torch.set_num_threads(THREADS)
    variants = [Variant(name) for name in VARIANTS]
    generator = torch.Generator().manual_seed(1)
    warm = sample_tasks(generator)
    compiled_after_warm_up = {}
    for v in variants:  # compile (and specialize) outside the timed steps
        if v.name.startswith("compiled") or v.name == "torch.func vmap":
            v.step(warm)
            v.net.load_state_dict(make_net().state_dict())
            v.outer = mf.Adam(v.net.parameters(), lr=1e-3)
            if v.adapt is not None:
                compiled_after_warm_up[v.name] = v.compile_count()
    for i in range(args.iterations):
        tasks = sample_tasks(generator)
        for v in (variants if i % 2 == 0 else variants[::-1]):
            v.timed_step(tasks)
    for v in variants:
        if v.adapt is not None:  # (the parallel strategy compiles a program per chunk size)
            assert v.compile_count() == compiled_after_warm_up[v.name], \
                "same guard must not recompile"
    reference = variants[0].losses[0]
    for v in variants[1:]:
        agree = abs(v.losses[0] - reference) / abs(reference)
        assert agree < 1e-5, (v.name, v.losses[0], reference)

    print(f"MAML sinusoid meta-step, MLP 1-{HIDDEN}-{HIDDEN}-1, {INNER_STEPS} inner SGD "
          f"steps, meta-batch {META_BATCH}, {args.iterations} meta-steps, {THREADS} thread(s)")
    every = max(1, args.iterations // 10)
    print("meta-training loss (the variants train the same model on the same tasks):")
    print("  step " + "".join(f"{v.name:>22}" for v in variants))
    for i in sorted(set(range(0, args.iterations, every)) | {args.iterations - 1}):
        print(f"  {i + 1:4d} " + "".join(f"{v.losses[i]:22.4f}" for v in variants))
    medians = {v.name: statistics.median(v.times) * 1e3 for v in variants}
    batched_variant = next(v for v in variants if v.name == "compiled batched")
    strategies = batched_variant.batched.strategies()
    compiled = medians["compiled batched"]
    print("median meta-step time (ratio: variant / compiled batched):")
    for name, ms in medians.items():
        print(f"  {name:22s} {ms:8.1f} ms   {ms / compiled:6.2f}x")
    print(f"  compiled batched ran as: {strategies or 'one batched program (not timed)'}")

    # Cold: each run with an empty kernel cache of its own; warm: runs on the
    # cache the first cold run filled. Medians of three fresh processes each.
    def median_run(runs):
        return sorted(runs, key=lambda r: r["first_task_ms"])[len(runs) // 2]

    cache_dirs = [tempfile.mkdtemp(prefix="metafuse-bench-cache-") for _ in range(3)]
    cold = median_run([run_child(["--child", "compile"], dict(os.environ, XDG_CACHE_HOME=d))
                       for d in cache_dirs])
    warm = median_run([run_child(["--child", "compile"],
                                 dict(os.environ, XDG_CACHE_HOME=cache_dirs[0]))
                       for _ in range(3)])
    batched_cold = sorted((run_child(["--child", "compile-batched"],
                                     dict(os.environ, XDG_CACHE_HOME=tempfile.mkdtemp(
                                         prefix="metafuse-bench-cache-")))
                           for _ in range(3)), key=lambda r: r["first_step_ms"])[1]
    print("compile latency, first task of a fresh process (trace + passes + kernels, "
          "forward and backward; median of 3 processes):")
    print(f"  {'batched meta-step, cold':26s} {batched_cold['first_step_ms']:7.1f} ms "
          f"(metafuse.vmap: the whole meta-batch; steady step "
          f"{batched_cold['steady_step_ms']:.1f} ms)")
    for label, r in (("cold (empty kernel cache)", cold), ("warm (disk kernel cache)", warm)):
        print(f"  {label:26s} {r['first_task_ms']:7.1f} ms (steady task "
              f"{r['steady_task_ms']:.1f} ms; specialization + fusion + kernels: forward "
              f"{r['specialize_forward_ms']:.1f} ms, backward "
              f"{r['specialize_backward_ms']:.1f} ms)")
    report = warm["report"]
    for program in ("forward", "backward"):
        r = report[program]
        print(f"  {program}: {r['nodes_before']} nodes -> {r['nodes_specialized']} after "
              f"shape specialization -> {r['instructions']} instructions; "
              f"{r['fusion_groups']} fused groups of {r['fused_nodes']} ops, "
              f"{r['horizontal_nodes']} horizontal launches over "
              f"{r['horizontal_segments']} groups, {r['planned_reuses']} planned buffer reuses")
    memory = {}
    for name in VARIANTS:
        child_env = dict(os.environ)
        if name == "compiled, fusion off":
            child_env["METAFUSE_DISABLE_FUSION"] = "1"
        memory[name] = run_child(["--child", "memory", "--variant", name], child_env)
    print("tensor memory of a meta-step, fresh process (peak live tensor bytes above "
          "the level at its start):")
    for name, m in memory.items():
        print(f"  {name:22s} {m['peak_tensor_mib']:7.2f} MiB   (process peak RSS "
              f"{m['peak_rss_mib']:.1f} MiB)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"iterations": args.iterations, "threads": THREADS, "median_ms": medians,
                       "batched_strategies": strategies,
                       "losses": {v.name: v.losses for v in variants},
                       "compile": {"cold": cold, "warm": warm,
                                   "batched_cold": batched_cold}, "memory": memory}, f,
                      indent=1)


if __name__ == "__main__":
    main()
