"""The README's Python example runs as written, and the meta-gradient it
leaves on the network's parameters is the one a hand-written float32
computation gives: each task's inner SGD steps unrolled with
torch.autograd.grad(create_graph=True), the query losses averaged."""

import os
import re

import torch

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def test_readme_python_blocks_run_and_give_the_meta_gradient():
    text = open(README).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    namespace = {}
    exec(compile("\n".join(blocks), "README.md", "exec"), namespace)
    net, loss_fn, adapt = namespace["net"], namespace["loss_fn"], namespace["adapt"]
    names = [k for k, _ in net.named_parameters()]
    got = [p.grad.clone() for p in net.parameters()]
    lr = float(adapt.optimizer._config[1]["lr"])
    theta = [p.detach().clone().requires_grad_() for p in net.parameters()]
    XS, YS, XQ, YQ = (namespace[k] for k in ("XS", "YS", "XQ", "YQ"))
    total = 0
    for t in range(XS.shape[0]):
        fast = list(theta)
        for _ in range(adapt.steps):
            loss = loss_fn(dict(zip(names, fast)), XS[t], YS[t])
            grads = torch.autograd.grad(loss, fast, create_graph=True)
            fast = [w - lr * g for w, g in zip(fast, grads)]
        total = total + loss_fn(dict(zip(names, fast)), XQ[t], YQ[t])
    expected = torch.autograd.grad(total / XS.shape[0], theta)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6)
