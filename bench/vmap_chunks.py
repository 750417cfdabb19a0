"""metafuse.vmap's chunk_size: tensor memory against time of the MAML
sinusoid's meta-gradient (MLP 1-40-40-1, 25 tasks, 10 + 10 shots, 5 inner
SGD steps at 0.01), float32, 1 thread.

For each chunk size (None: the whole meta-batch in one program) it measures
the peak of live tensor bytes during one meta-gradient (forward and
backward, no outer step; the allocator meter of bench/tensor_memory.py) and
the median time of a meta-gradient, the variants alternating in one
process; eager metafuse's per-task loop (MetaSGD, one backward per task) is
the baseline of both. The meta-gradients are compared with the one
program's.

    PYTHONPATH=frontend/python /usr/bin/python3 bench/vmap_chunks.py \\
        [--chunk-sizes none,5,1] [--repeats 21] [--json OUT]
"""

import argparse
import json
import statistics
import time

import torch

import metafuse as mf
import tensor_memory  # bench/tensor_memory.py

TASKS, SHOTS, STEPS, LR = 25, 10, 5, 0.01


def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(), torch.nn.Linear(40, 40),
                               torch.nn.ReLU(), torch.nn.Linear(40, 1))


def tasks():
    g = torch.Generator().manual_seed(1)
    x = 10 * torch.rand(TASKS, 2 * SHOTS, 1, generator=g) - 5
    y = (0.1 + 4.9 * torch.rand(TASKS, 1, 1, generator=g)) * torch.sin(
        x + 3 * torch.rand(TASKS, 1, 1, generator=g))
    return [t.contiguous() for t in (x[:, :SHOTS], y[:, :SHOTS], x[:, SHOTS:], y[:, SHOTS:])]


def chunk_size(text):
    return None if text == "none" else int(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunk-sizes", default="none,5,1",
                        type=lambda v: [chunk_size(s) for s in v.split(",") if s])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--json", help="also write the measurements to this file")
    args = parser.parse_args()
    if any(c is not None and c < 1 for c in args.chunk_sizes) or args.repeats < 1:
        parser.error("chunk sizes must be 'none' or >= 1, --repeats >= 1")
    tensor_memory.install()
    torch.set_num_threads(1)
    model = net()
    params = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}

    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(model, p, x), y)

    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(LR), steps=STEPS)
    xs, ys, xq, yq = tasks()

    def compiled(size):
        batched = mf.vmap(lambda p, xs, ys, xq, yq: loss_fn(adapt(p, xs, ys), xq, yq),
                          in_dims=(None, 0, 0, 0, 0), chunk_size=size)

        def run():
            for p in params.values():
                p.grad = None
            batched(params, xs, ys, xq, yq).mean().backward()
        return run

    def eager():
        for p in model.parameters():
            p.grad = None
        initial = mf.extract_state_dict(model)
        for t in range(TASKS):
            inner = mf.MetaSGD(model, lr=LR)
            for _ in range(STEPS):
                inner.step(loss_fn(dict(model.named_parameters()), xs[t], ys[t]))
            (loss_fn(dict(model.named_parameters()), xq[t], yq[t]) / TASKS).backward()
            mf.recover_state_dict(model, initial)

    names = ["eager metafuse"] + [f"chunk_size={c}" for c in args.chunk_sizes]
    runs = [eager] + [compiled(c) for c in args.chunk_sizes]
    rows, grads = {}, {}
    for name, run in zip(names, runs):
        run()  # compiles
        grads[name] = [p.grad.clone() for p in (model.parameters() if run is eager
                                                 else params.values())]
        rows[name] = {"peak_tensor_mib": tensor_memory.peak_during(run)["peak_tensor_mib"],
                      "times_ms": []}
    for i in range(args.repeats):
        for name, run in (list(zip(names, runs)) if i % 2 == 0 else list(zip(names, runs))[::-1]):
            start = time.perf_counter()
            run()
            rows[name]["times_ms"].append((time.perf_counter() - start) * 1e3)
    reference = grads[f"chunk_size={args.chunk_sizes[0]}"]
    eager_ms = statistics.median(rows["eager metafuse"]["times_ms"])
    eager_mib = rows["eager metafuse"]["peak_tensor_mib"]
    print(f"MAML sinusoid meta-gradient, {TASKS} tasks, 1 thread, {args.repeats} alternating "
          "repeats (median)")
    print("| variant | median ms | speed vs eager | peak tensor MiB | vs eager | "
          "grad max rel. diff |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        r = rows[name]
        r["median_ms"] = statistics.median(r["times_ms"])
        r["grad_max_rel_diff"] = max(float((a - b).abs().max() / b.abs().max())
                                     for a, b in zip(grads[name], reference))
        print(f"| {name} | {r['median_ms']:.2f} | {eager_ms / r['median_ms']:.1f}x | "
              f"{r['peak_tensor_mib']:.3f} | {r['peak_tensor_mib'] / eager_mib:.2f}x | "
              f"{r['grad_max_rel_diff']:.1e} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
