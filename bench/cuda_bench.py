"""Issue 18, item 7: metafuse on a GPU, every ratio against a baseline
measured in the same run.

  1. Fused Adam step (metafuse.ops.adam_multi_, in place, float32) at 1e7
     and 1e8 parameters, as a share of the device-to-device copy bandwidth
     measured in the same run. Bytes counted: Adam reads grad, param, mu, nu
     and writes param, mu, nu (7 x 4 bytes per element); a copy reads and
     writes once (2 x 4). Target: >= 85%.
  2. MAML (sinusoid MLP 1-40-40-1, 5 SGD steps, 25 tasks) per meta-step:
     compiled per task, compiled batched (metafuse.vmap), eager plain CUDA
     (functional autograd), and the eager MetaSGD path. Target: batched
     >= 10x over the eager per-task path.
  3. NVRTC compile latency of a fused kernel: cold (empty kernel cache, a
     fresh process) and from the disk cache (another fresh process).

Usage: PYTHONPATH=frontend/python python3 bench/cuda_bench.py [--quick]
Exits with status 2 and the reason when there is no usable GPU."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import metafuse as mf


def gpu_or_exit():
    reasons = []
    if not torch.cuda.is_available():
        reasons.append(f"torch.cuda.is_available() is False (torch {torch.__version__}, "
                       f"CUDA build {torch.version.cuda})")
    elif not mf.build_info()["nvrtc"]:
        reasons.append("this metafuse build has no NVRTC (rebuild with the CUDA toolkit)")
    else:
        ok, why = mf.cuda_status()
        if not ok:
            reasons.append(why)
    if reasons:
        print("cuda_bench: no usable GPU, nothing measured: " + "; ".join(reasons),
              file=sys.stderr)
        sys.exit(2)


def timed(fn, repeats, warmup=3):
    """Median seconds of fn() on the GPU (CUDA events, synchronized once per run)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def adam_bandwidth(n, repeats):
    dev = "cuda"
    g, p, m = (torch.randn(n, device=dev) for _ in range(3))
    v = torch.rand(n, device=dev)
    src, dst = torch.randn(n, device=dev), torch.empty(n, device=dev)
    copy_s = timed(lambda: dst.copy_(src), repeats)
    count = [0]

    def step():
        count[0] += 1
        mf.ops.adam_multi_([g], [m], [v], [p], count=count[0], lr=1e-3)

    with torch.no_grad():
        adam_s = timed(step, repeats)
    copy_bw = 2 * 4 * n / copy_s
    adam_bw = 7 * 4 * n / adam_s
    print(f"fused Adam n={n:.0e}: {adam_s * 1e3:.3f} ms, {adam_bw / 1e9:.1f} GB/s; "
          f"copy {copy_s * 1e3:.3f} ms, {copy_bw / 1e9:.1f} GB/s; "
          f"Adam / copy bandwidth = {adam_bw / copy_bw:.1%} (target >= 85%)")


TASKS, SHOTS, STEPS, LR = 25, 10, 5, 0.01


def maml(repeats):
    dev = "cuda"
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(), torch.nn.Linear(40, 40),
                              torch.nn.ReLU(), torch.nn.Linear(40, 1)).to(dev)
    g = torch.Generator().manual_seed(1)
    amp = torch.rand(TASKS, 1, 1, generator=g) * 4.9 + 0.1
    phase = torch.rand(TASKS, 1, 1, generator=g) * 3.14
    x = torch.rand(TASKS, 2 * SHOTS, 1, generator=g) * 10 - 5
    y = amp * torch.sin(x + phase)
    xs, ys, xq, yq = (t.to(dev) for t in (x[:, :SHOTS], y[:, :SHOTS], x[:, SHOTS:], y[:, SHOTS:]))
    params = dict(net.named_parameters())
    mse = torch.nn.functional.mse_loss

    def loss_fn(p, a, b):
        return mse(mf.functional_call(net, p, a), b)

    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(LR), steps=STEPS)
    batched = mf.vmap(lambda p, a, b, c, d: loss_fn(adapt(p, a, b), c, d),
                      in_dims=(None, 0, 0, 0, 0))

    def per_task():
        total = sum(loss_fn(adapt(params, xs[t], ys[t]), xq[t], yq[t]) for t in range(TASKS))
        total.backward()

    def batched_step():
        batched(params, xs, ys, xq, yq).sum().backward()

    def eager_plain():
        total = 0
        for t in range(TASKS):
            p = params
            for _ in range(STEPS):
                grads = torch.autograd.grad(loss_fn(p, xs[t], ys[t]), list(p.values()),
                                            create_graph=True)
                p = {k: v - LR * gk for (k, v), gk in zip(p.items(), grads)}
            total = total + loss_fn(p, xq[t], yq[t])
        total.backward()

    def eager_metasgd():
        initial = mf.extract_state_dict(net)
        for t in range(TASKS):
            inner = mf.MetaSGD(net, lr=LR)
            for _ in range(STEPS):
                inner.step(mse(net(xs[t]), ys[t]))
            mse(net(xq[t]), yq[t]).backward()
            mf.recover_state_dict(net, initial)

    variants = [("compiled per task", per_task), ("compiled batched", batched_step),
                ("eager plain CUDA", eager_plain), ("eager MetaSGD", eager_metasgd)]
    results = {}
    for name, fn in variants:
        results[name] = timed(fn, repeats)
        net.zero_grad()
    base = results["eager MetaSGD"]
    for name, s in results.items():
        print(f"MAML meta-step, {name}: {s * 1e3:.2f} ms ({base / s:.2f}x vs eager MetaSGD, "
              f"{results['eager plain CUDA'] / s:.2f}x vs eager plain)")
    print(f"batched / eager per-task path: {results['eager MetaSGD'] / results['compiled batched']:.1f}x "
          "(target >= 10x)")


CHILD = r"""
import time, torch, metafuse as mf
torch.manual_seed({seed})
@mf.compile
def f(x, w):
    return (torch.sigmoid(x * {seed}.5) * w + torch.tanh(x)).sum()
x = torch.randn(4096, device="cuda", requires_grad=True); w = torch.randn(4096, device="cuda")
torch.cuda.synchronize()
t = time.perf_counter(); f(x, w).backward(); torch.cuda.synchronize()
print(time.perf_counter() - t)
"""


def nvrtc_latency(runs):
    cold, warm = [], []
    for seed in range(runs):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, METAFUSE_CACHE_DIR=cache)
            code = CHILD.format(seed=seed + 1)
            for into in (cold, warm):  # first process compiles, the second reads the cache
                out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                     capture_output=True, text=True)
                into.append(float(out.stdout.strip().splitlines()[-1]))
    print(f"first compiled call (trace + compile + NVRTC + run), median of {runs} fresh "
          f"processes: cold cache {statistics.median(cold) * 1e3:.1f} ms, "
          f"disk cache {statistics.median(warm) * 1e3:.1f} ms "
          f"({statistics.median(cold) / statistics.median(warm):.2f}x)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, 1e7 only")
    args = parser.parse_args()
    gpu_or_exit()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    repeats = 5 if args.quick else 20
    for n in ((10**7,) if args.quick else (10**7, 10**8)):
        adam_bandwidth(n, repeats)
    maml(3 if args.quick else 10)
    nvrtc_latency(2 if args.quick else 5)


if __name__ == "__main__":
    main()
