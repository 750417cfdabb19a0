"""Fused multi-tensor Adam step versus torch.optim.Adam and an unfused
reference, same run, same parameters.

Run from the repository root after a build:
    PYTHONPATH=frontend/python /usr/bin/python3 bench/fused_adam.py

Parameters: a list of float32 tensors shaped like a small MLP/CNN
(--scale multiplies every size). Variants, each timed as the median over
--repeats repeats of --steps steps:

forward (no autograd graph; every variant ends with updated parameters):
  fused in-place  metafuse.ops.adam_multi_ (params += update, states
                  overwritten: one pass, what torch.optim.Adam.step does)
  fused multi   metafuse.ops.adam_multi + torch._foreach_add_ (apply update)
  fused single  metafuse.ops.adam per tensor + add_
  torch.optim   Adam(foreach=False) and Adam(foreach=True), .step()
  unfused       the Adam formula in plain out-of-place torch ops per tensor

forward + backward (differentiable step, as in an unrolled inner loop): the
step from grads and states that require grad, new params p + u, then a
backward of sum(new_params * w) to grads and states:
  fused multi   metafuse.ops.adam_multi (closed-form backward)
  unfused       the plain ops, differentiated by autograd

Ratios are variant time / fused time (the first row; higher is better for
metafuse). --threads sets torch.set_num_threads (default: torch's choice).
"""

import argparse
import statistics
import time

import torch

from metafuse import ops

SHAPES = [(64, 3, 3, 3), (64,), (128, 64, 3, 3), (128,), (256, 128, 3, 3),
          (256,), (256, 256, 3, 3), (256,), (1024, 1024), (1024,), (10, 1024),
          (10,), (333,), (1, 1)]
OPTS = dict(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8)


def make_params(scale, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [tuple(max(1, int(d * scale)) if i == 0 else d
                    for i, d in enumerate(s)) for s in SHAPES]
    params = [torch.randn(s, generator=gen) for s in shapes]
    grads = [torch.randn(s, generator=gen) for s in shapes]
    return params, grads


def unfused_adam(g, mu, nu, count, lr, b1, b2, eps):
    m = b1 * mu + (1 - b1) * g
    v = b2 * nu + (1 - b2) * g * g
    bc1, bc2 = 1 - b1 ** count, 1 - b2 ** count
    return -lr * (m / bc1) / (torch.sqrt(v / bc2) + eps), m, v


def timed(fn, steps, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            fn()
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times)


def forward_variants(params0, grads):
    variants = {}

    pi = [p.clone() for p in params0]
    sti = [[torch.zeros_like(p) for p in pi], [torch.zeros_like(p) for p in pi]]
    ci = {"count": 0}

    def fused_in_place():
        ci["count"] += 1
        ops.adam_multi_(grads, sti[0], sti[1], pi, count=ci["count"], **OPTS)
    variants["fused in-place"] = fused_in_place

    ps = [p.clone() for p in params0]
    mus = [torch.zeros_like(p) for p in ps]
    nus = [torch.zeros_like(p) for p in ps]
    state = {"count": 0, "mus": mus, "nus": nus}

    def fused_multi():
        state["count"] += 1
        us, state["mus"], state["nus"] = ops.adam_multi(
            grads, state["mus"], state["nus"], [], count=state["count"], **OPTS)
        torch._foreach_add_(ps, us)
    variants["fused multi"] = fused_multi

    ps1 = [p.clone() for p in params0]
    st1 = [[torch.zeros_like(p), torch.zeros_like(p)] for p in ps1]
    c1 = {"count": 0}

    def fused_single():
        c1["count"] += 1
        for p, g, s in zip(ps1, grads, st1):
            u, s[0], s[1] = ops.adam(g, s[0], s[1], None, count=c1["count"], **OPTS)
            p.add_(u)
    variants["fused single"] = fused_single

    for foreach in (False, True):
        tp = [p.clone().requires_grad_() for p in params0]
        for p, g in zip(tp, grads):
            p.grad = g.clone()
        opt = torch.optim.Adam(tp, lr=OPTS["lr"], betas=(OPTS["b1"], OPTS["b2"]),
                               eps=OPTS["eps"], foreach=foreach)
        variants[f"torch.optim foreach={foreach}"] = opt.step

    ps2 = [p.clone() for p in params0]
    st2 = [[torch.zeros_like(p), torch.zeros_like(p)] for p in ps2]
    c2 = {"count": 0}

    def unfused():
        c2["count"] += 1
        for p, g, s in zip(ps2, grads, st2):
            u, s[0], s[1] = unfused_adam(g, s[0], s[1], c2["count"], **OPTS)
            p.add_(u)
    variants["unfused"] = unfused
    return variants


def backward_variants(params0, grads):
    gen = torch.Generator().manual_seed(1)
    w = [torch.randn(p.shape, generator=gen) for p in params0]
    mus0 = [0.1 * torch.randn(p.shape, generator=gen) for p in params0]
    nus0 = [torch.rand(p.shape, generator=gen) for p in params0]

    def leaves():
        return ([g.clone().requires_grad_() for g in grads],
                [m.clone().requires_grad_() for m in mus0],
                [n.clone().requires_grad_() for n in nus0])

    def fused():
        gs, ms, ns = leaves()
        us, _, _ = ops.adam_multi(gs, ms, ns, [], count=3, **OPTS)
        loss = sum(((p + u) * wi).sum() for p, u, wi in zip(params0, us, w))
        torch.autograd.grad(loss, gs + ms + ns)

    def unfused():
        gs, ms, ns = leaves()
        loss = 0
        for p, g, m, n, wi in zip(params0, gs, ms, ns, w):
            u, _, _ = unfused_adam(g, m, n, 3, **OPTS)
            loss = loss + ((p + u) * wi).sum()
        torch.autograd.grad(loss, gs + ms + ns)

    # Both give the same gradients (up to rounding); checked once here.
    return {"fused multi": fused, "unfused": unfused}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    params, grads = make_params(args.scale)
    numel = sum(p.numel() for p in params)
    print(f"{len(params)} float32 tensors, {numel / 1e6:.2f} M elements, "
          f"{torch.get_num_threads()} threads, median of {args.repeats} x "
          f"{args.steps} steps")
    for title, variants in (("forward (optimizer step)", forward_variants(params, grads)),
                            ("forward + backward (differentiable step)",
                             backward_variants(params, grads))):
        times = {k: timed(fn, args.steps, args.repeats) for k, fn in variants.items()}
        ref = "fused in-place" if "fused in-place" in times else "fused multi"
        fused = times[ref]
        print(f"\n{title}")
        print(f"| variant | ms / step | time / {ref} |")
        print(f"| --- | ---: | ---: |")
        for k, t in times.items():
            print(f"| {k} | {t * 1e3:.3f} | {t / fused:.2f}x |")


if __name__ == "__main__":
    main()
