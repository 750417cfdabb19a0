"""Trading time for memory with metafuse.vmap's chunk_size.

The whole meta-batch as one program keeps every task's saved values alive
until the backward. With chunk_size=k at most k tasks' values are alive: the
forward runs k tasks at a time and each chunk runs again in the backward.
The meta-gradient is the same.

    python docs/howto/chunk_size.py
"""

import time

import torch
import torch.nn.functional as F

import metafuse as mf

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(), torch.nn.Linear(40, 1))
params = dict(net.named_parameters())
adapt = mf.compile_inner_loop(
    lambda p, x, y: F.mse_loss(mf.functional_call(net, p, x), y), mf.sgd(0.01), steps=5)


def task_loss(p, xs, ys, xq, yq):
    return F.mse_loss(mf.functional_call(net, adapt(p, xs, ys), xq), yq)


batch = [torch.randn(20, 10, 1) for _ in range(4)]        # 20 tasks
reference = None
for chunk_size in (None, 5, 1):
    meta_loss = mf.vmap(task_loss, in_dims=(None, 0, 0, 0, 0), chunk_size=chunk_size)
    grads = torch.autograd.grad(meta_loss(params, *batch).mean(), list(params.values()))
    start = time.perf_counter()                            # after the first (compiling) call
    for _ in range(5):
        grads = torch.autograd.grad(meta_loss(params, *batch).mean(), list(params.values()))
    ms = (time.perf_counter() - start) / 5 * 1e3
    reference = reference or grads
    same = all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(reference, grads))
    print(f"chunk_size={chunk_size}: {ms:.2f} ms per meta-gradient, same gradient: {same}")
    assert same
