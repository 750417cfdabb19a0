"""One optimizer step (Adam) on a small net's parameters: metafuse.Adam
(unfused: the in-place one-loop direction, kernels/adam_direction),
metafuse.Adam(use_accelerated_op=True) (the fused multi-tensor kernel) and
torch.optim.Adam (for-loop and foreach). Variants alternate, the median of
the repeats is reported, and the unfused metafuse step's parameters are
checked bit for bit against the out-of-place op chain (metafuse.adam with
inplace=False) after the run.

    PYTHONPATH=frontend/python /usr/bin/python3 bench/optimizer_step.py \\
        [--net sinusoid|wide] [--repeats N] [--threads T]
"""

import argparse
import statistics
import time

import torch

import metafuse as mf

NETS = {
    "sinusoid": [1, 40, 40, 1],   # MAML's MLP: 6 tensors, 1.8k parameters
    "wide": [256, 1024, 1024, 10],  # 6 tensors, 1.3M parameters
}


def make_params(widths):
    torch.manual_seed(0)
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return [p.detach().clone().requires_grad_() for p in torch.nn.Sequential(*layers[:-1]).parameters()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", choices=sorted(NETS), default="sinusoid")
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = {
        "metafuse.Adam": lambda ps: mf.Adam(ps, lr=1e-3),
        "metafuse.Adam(use_accelerated_op=True)":
            lambda ps: mf.Adam(ps, lr=1e-3, use_accelerated_op=True),
        "torch.optim.Adam": lambda ps: torch.optim.Adam(ps, lr=1e-3, foreach=False),
        "torch.optim.Adam(foreach=True)": lambda ps: torch.optim.Adam(ps, lr=1e-3, foreach=True),
    }
    grads = [torch.randn_like(p) for p in make_params(NETS[args.net])]
    runs = {}
    for name, make in variants.items():
        params = make_params(NETS[args.net])
        for p, g in zip(params, grads):
            p.grad = g.clone()
        runs[name] = (params, make(params), [])
    for i in range(args.repeats):
        order = list(runs.values()) if i % 2 == 0 else list(runs.values())[::-1]
        for _, opt, times in order:
            start = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - start)
    base = statistics.median(runs["metafuse.Adam"][2])
    print(f"Adam step, net {args.net} ({sum(g.numel() for g in grads)} parameters in "
          f"{len(grads)} tensors), {args.threads} thread(s), median of {args.repeats}")
    print("| variant | median us | / metafuse.Adam |")
    print("| --- | ---: | ---: |")
    for name, (_, _, times) in runs.items():
        ms = statistics.median(times)
        print(f"| {name} | {ms * 1e6:.1f} | {ms / base:.2f}x |")
    # The same number of steps as the op chain, out of place: the same bits.
    params = make_params(NETS[args.net])
    tx = mf.adam(1e-3)
    state = tx.init(params)
    for _ in range(args.repeats):
        updates, state = tx.update(grads, state, inplace=False)
        params = mf.apply_updates(params, updates, inplace=False)
    same = all(torch.equal(a.detach(), b.detach())
               for a, b in zip(runs["metafuse.Adam"][0], params))
    print(f"metafuse.Adam bit for bit the out-of-place op chain: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
