"""Moving from TorchOpt: the same program, then its compiled inner loop.

Part 1 is a TorchOpt program (functional Adam inside a MAML inner loop,
TorchOpt's API) that runs unchanged on metafuse: only the import differs.
Part 2 replaces the hand-written inner loop with
metafuse.compile_inner_loop, which computes the same meta-gradient.

    python docs/tutorials/from_torchopt.py
"""

import torch
import torch.nn.functional as F

import metafuse as torchopt   # was: import torchopt

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
x_support, y_support = torch.randn(16, 4), torch.randn(16, 1)
x_query, y_query = torch.randn(16, 4), torch.randn(16, 1)


# Part 1: TorchOpt's functional API, differentiable through 3 Adam steps.
def inner_loop_torchopt(params):
    optimizer = torchopt.adam(lr=0.05, eps_root=1e-8)
    state = optimizer.init(params)
    for _ in range(3):
        loss = F.mse_loss(torch.func.functional_call(net, params, x_support), y_support)
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
        updates, state = optimizer.update(dict(zip(params, grads)), state, inplace=False)
        params = torchopt.apply_updates(params, updates, inplace=False)
    return params


params = dict(net.named_parameters())
query_loss = F.mse_loss(torch.func.functional_call(net, inner_loop_torchopt(params), x_query),
                        y_query)
eager_grads = torch.autograd.grad(query_loss, list(params.values()))


# Part 2: the same inner loop, compiled by metafuse.
def loss_fn(p, x, y):
    return F.mse_loss(torchopt.functional_call(net, p, x), y)


adapt = torchopt.compile_inner_loop(loss_fn, torchopt.adam(lr=0.05, eps_root=1e-8), steps=3)
compiled_loss = loss_fn(adapt(params, x_support, y_support), x_query, y_query)
compiled_grads = torch.autograd.grad(compiled_loss, list(params.values()))

for a, b in zip(eager_grads, compiled_grads):
    assert torch.allclose(a, b, rtol=1e-3, atol=1e-5), (a - b).abs().max()
print(f"query loss: TorchOpt-style {query_loss.item():.5f}, compiled {compiled_loss.item():.5f}; "
      "meta-gradients agree")
