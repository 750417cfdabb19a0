"""MAML on sinusoid regression with the whole meta-batch as one program.

metafuse.vmap has torch.func.vmap's signature: a function written for one
task (adapt on the support set, loss on the query set) becomes one compiled
program over the meta-batch, whose meta-backward is derived symbolically.

    python docs/tutorials/maml_vmap.py
"""

import math
import os

import torch
import torch.nn.functional as F

import metafuse as mf

QUICK = os.environ.get("METAFUSE_DOCS_QUICK") == "1"
META_STEPS, TASKS, SHOTS = (5 if QUICK else 500), 25, 10
torch.manual_seed(0)


def sample_meta_batch(tasks=TASKS, shots=SHOTS):
    """Support and query sets of `tasks` sinusoid tasks, each with a leading
    task dimension: four tensors of shape [tasks, shots, 1]."""
    amplitude = 0.1 + 4.9 * torch.rand(tasks, 1, 1)
    phase = math.pi * torch.rand(tasks, 1, 1)
    x = 10 * torch.rand(tasks, 2 * shots, 1) - 5
    y = amplitude * torch.sin(x + phase)
    return x[:, :shots], y[:, :shots], x[:, shots:], y[:, shots:]


net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(),
                          torch.nn.Linear(40, 40), torch.nn.ReLU(),
                          torch.nn.Linear(40, 1))


def loss_fn(params, x, y):
    return F.mse_loss(mf.functional_call(net, params, x), y)


# The inner loop: 5 steps of SGD, compiled with its meta-backward.
adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.01), steps=5)


def task_loss(params, x_support, y_support, x_query, y_query):
    """One task: adapt the shared parameters, then the query loss."""
    return loss_fn(adapt(params, x_support, y_support), x_query, y_query)


# in_dims: the parameters are shared (None), the data has a task dimension (0).
meta_batch_loss = mf.vmap(task_loss, in_dims=(None, 0, 0, 0, 0))
# The same with at most 5 tasks' saved values alive at once (less memory).
meta_batch_loss_chunked = mf.vmap(task_loss, in_dims=(None, 0, 0, 0, 0), chunk_size=5)

params = dict(net.named_parameters())
meta_opt = torch.optim.Adam(params.values(), lr=1e-3)
for step in range(META_STEPS):
    losses = meta_batch_loss(params, *sample_meta_batch())   # one loss per task
    meta_opt.zero_grad()
    losses.mean().backward()
    meta_opt.step()
    if step % 100 == 0 or step == META_STEPS - 1:
        print(f"meta-step {step}: mean query loss {losses.mean().item():.4f}")

# Chunks compute the same meta-gradient.
batch = sample_meta_batch()
whole = torch.autograd.grad(meta_batch_loss(params, *batch).mean(), list(params.values()))
chunked = torch.autograd.grad(meta_batch_loss_chunked(params, *batch).mean(),
                              list(params.values()))
for a, b in zip(whole, chunked):
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
print("chunk_size=5 gives the same meta-gradient")
