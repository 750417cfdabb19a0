"""Getting started: MAML's inner loop, eager and compiled.

Sinusoid regression: each task is y = a sin(x + p); an MLP adapts to a task
in 5 SGD steps on 10 support points, and the meta-loss is its error on 10
query points. The same inner loop runs eagerly (MetaSGD, TorchOpt's idiom)
and compiled (metafuse.compile_inner_loop); both give the same
meta-gradient.

    python docs/tutorials/first_compiled_loop.py
"""

import math
import os

import torch
import torch.nn.functional as F

import metafuse as mf

META_STEPS = 3 if os.environ.get("METAFUSE_DOCS_QUICK") == "1" else 200
torch.manual_seed(0)


def sample_task(shots=10):
    """Support and query points of one sinusoid task."""
    amplitude, phase = 0.1 + 4.9 * torch.rand(()), math.pi * torch.rand(())
    x = 10 * torch.rand(2 * shots, 1) - 5
    y = amplitude * torch.sin(x + phase)
    return x[:shots], y[:shots], x[shots:], y[shots:]


net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(),
                          torch.nn.Linear(40, 40), torch.nn.ReLU(),
                          torch.nn.Linear(40, 1))
x_s, y_s, x_q, y_q = sample_task()

# 1. Eager: MetaSGD replaces the module's parameters by differentiable updates.
originals = list(net.parameters())
saved = mf.extract_state_dict(net)                  # to restore them afterwards
inner = mf.MetaSGD(net, lr=0.01)
for _ in range(5):
    inner.step(F.mse_loss(net(x_s), y_s))
eager_loss = F.mse_loss(net(x_q), y_q)
eager_grads = torch.autograd.grad(eager_loss, originals)   # through the 5 steps
mf.recover_state_dict(net, saved)


# 2. Compiled: the per-step loss as a function of the parameters.
def loss_fn(params, x, y):
    return F.mse_loss(mf.functional_call(net, params, x), y)


adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.01), steps=5)
params = dict(net.named_parameters())
fast = adapt(params, x_s, y_s)                       # adapted parameters
compiled_loss = loss_fn(fast, x_q, y_q)
compiled_grads = torch.autograd.grad(compiled_loss, list(params.values()))

assert torch.allclose(eager_loss, compiled_loss, rtol=1e-5)
for a, b in zip(eager_grads, compiled_grads):
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
print(f"query loss after adaptation: eager {eager_loss.item():.5f}, "
      f"compiled {compiled_loss.item():.5f}; meta-gradients agree")

# 3. Meta-training with the compiled inner loop.
meta_opt = torch.optim.Adam(net.parameters(), lr=1e-3)
for step in range(META_STEPS):
    meta_opt.zero_grad()
    for _ in range(4):                                 # 4 tasks per meta-batch
        x_s, y_s, x_q, y_q = sample_task()
        (loss_fn(adapt(params, x_s, y_s), x_q, y_q) / 4).backward()
    meta_opt.step()
    if step % 50 == 0 or step == META_STEPS - 1:
        query_loss = loss_fn(adapt(params, x_s, y_s), x_q, y_q).item()
        print(f"meta-step {step}: a task's query loss after adaptation {query_loss:.4f}")
