"""Gradient-graph visualization: the graph of a meta-loss through one
differentiable inner step (parameters named, the fused Adam update drawn as
one node), and the graph of the same inner loop compiled by metafuse (fused
kernels as clusters, GEMMs, buffer reuse, measured times).

    /usr/bin/python3 examples/visualize_meta_gradient.py [output directory]

writes meta_gradient.png and compiled_program.png. Written as a TorchOpt
program: `import metafuse as torchopt` is the only change from TorchOpt.
"""

import os
import sys

import torch

import metafuse as torchopt


def main(out_dir="."):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x, y = torch.randn(16, 3), torch.randn(16, 1)

    # TorchOpt style: name the meta-parameters, take one inner step, name the
    # adapted parameters, draw the meta-loss.
    meta = torchopt.extract_state_dict(net, enable_visual=True, visual_prefix="meta.")
    inner = torchopt.MetaAdam(net, lr=0.1, use_accelerated_op=True)
    inner.step(torch.nn.functional.mse_loss(net(x), y))
    adapted = torchopt.extract_state_dict(net, enable_visual=True, visual_prefix="step1.")
    meta_loss = torch.nn.functional.mse_loss(net(x), y)
    dot = torchopt.visual.make_dot(meta_loss, params=[meta, adapted])
    first = dot.render(os.path.join(out_dir, "meta_gradient"), format="png", cleanup=True)

    # metafuse: the compiled inner loop (forward and meta-backward).
    def loss_fn(params, x, y):
        w1, w2 = params
        return ((torch.tanh(x @ w1) @ w2 - y) ** 2).mean()

    params = (torch.randn(3, 8, requires_grad=True), torch.randn(8, 1, requires_grad=True))
    adapt = torchopt.compile_inner_loop(loss_fn, torchopt.sgd(0.1), steps=2)
    result = torchopt.profile(adapt, params, x, y, quiet=True)
    program = torchopt.visual.make_program_dot(adapt, result)
    second = program.render(os.path.join(out_dir, "compiled_program"), format="png",
                            cleanup=True)
    return first, second


if __name__ == "__main__":
    for path in main(sys.argv[1] if len(sys.argv) > 1 else "."):
        print("wrote", path)
